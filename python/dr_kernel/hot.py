"""Hot kernels re-tuned later: launches counted per stored winner, and `retune`.

Every launch of a tuned key (@optimize, dr_kernel.autotune, the drop-in) adds one to a counter in
this process; the counts go to the store (`winners.launches`) when the process exits, and every
minute of a long run, so that the store knows which keys a program spends its launches on, summed
over every process that used it. A key tuned with a small budget on a first call (stop="auto", a
long list searched in half its length) may be worth more evaluations once it is known to be hot:

    dr-kernel retune --top 5                      # the hottest keys, their counts and budgets
    dr-kernel retune --top 5 -- python train.py   # re-tune them in a run of the program

A re-tune runs the user's program in a process of its own with DR_KERNEL_RETUNE naming the keys
and their budgets: when the program reaches such a key, the stored winner is not taken; the key is
tuned again with the larger budget and the whole budget used, the stored winner measured first in
the same session, and the usual re-timing of the best configs decides. The stored winner is
replaced only when another config re-measures faster; the next process picks up whichever stands.
Real arguments are what makes this work for any kernel: no inputs need to be invented.
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from typing import Any

RETUNE_ENV = "DR_KERNEL_RETUNE"
FLUSH_EVERY_S = 60.0  # A long run's counts reach the store at least this often (checked every 4096 launches).

_lock = threading.Lock()
_counts: collections.Counter = collections.Counter()  # (store file, store key) -> launches not yet stored.
_since_check = 0
_last_flush = time.monotonic()
_retuned: set[str] = set()  # Keys re-tuned in this process: once each.


def count(db: str, store_key: str) -> None:
    """One launch of the winner stored under `store_key` in the store file `db` (the tuners call
    it on every launch of a tuned key)."""
    global _since_check
    _counts[(db, store_key)] += 1
    _since_check += 1
    if _since_check >= 4096:
        _since_check = 0
        if time.monotonic() - _last_flush >= FLUSH_EVERY_S:
            flush_launch_counts()


def flush_launch_counts() -> int:
    """Adds the launches counted since the last flush to their stores; returns how many keys were
    counted. A store that cannot be written keeps its counts for the next flush, with a warning:
    counting never stops the program."""
    global _counts, _last_flush
    from .store import open_store

    with _lock:
        pending, _counts = _counts, collections.Counter()  # Launches from now on count anew.
        _last_flush = time.monotonic()
    by_db: dict[str, list[tuple[str, int]]] = collections.defaultdict(list)
    for (db, key), n in pending.items():
        by_db[db].append((key, n))
    counted = 0
    for db, counts in by_db.items():
        if not os.path.exists(db):
            continue  # The store that held these winners is gone (a test's temporary folder): nothing to count.
        try:
            counted += open_store(db).add_launches(counts)
        except (OSError, ValueError) as error:
            with _lock:
                for key, n in counts:
                    _counts[(db, key)] += n
            warnings.warn(f"dr_kernel: the launch counts could not be stored ({error}); they are kept for the "
                          "next try", stacklevel=2)
    return counted


atexit.register(flush_launch_counts)  # Nothing counted: nothing opened, nothing written.


def retune_budget(store_key: str) -> int | None:
    """The budget to re-tune `store_key` with when this process runs under `retune` and the key is
    one it names (once per process), else None."""
    text = os.environ.get(RETUNE_ENV)
    if not text or store_key in _retuned:
        return None
    try:
        request = json.loads(text)
        budget = request["keys"].get(store_key)
    except (ValueError, KeyError, AttributeError, TypeError):
        warnings.warn(f"dr_kernel: {RETUNE_ENV}={text[:200]!r} is not what `dr-kernel retune` writes; nothing is "
                      "re-tuned", stacklevel=2)
        os.environ.pop(RETUNE_ENV, None)
        return None
    if budget is None:
        return None
    _retuned.add(store_key)
    return int(budget)


# dr_kernel.ops keeps its choices among the winners (keys "ops.<operator>|..."); they are made by
# a race against torch, not by a program's launches, and a re-tune cannot reach them.
OPS_KEY_PREFIX = "ops."


def hottest(top: int, db: str | None = None) -> list[dict]:
    """The `top` stored winners launched most, with their counts, budgets and labels
    (dr_kernel.ops' choices left out)."""
    from .store import open_store

    flush_launch_counts()
    store = open_store(db)
    asked = max(top, 1)
    while True:
        winners = store.hottest_winners(asked)
        kept = [w for w in winners if not w["key"].startswith(OPS_KEY_PREFIX)]
        if len(kept) >= top or len(winners) < asked:
            return kept[:top]
        asked *= 4


def default_budget(winner: dict) -> int:
    """A re-tune's budget when none is given: the most of 100, four times the evaluations the key's
    tuning spent, and twice the budget it was allowed."""
    return max(100, 4 * int(winner.get("evaluations") or 0), int(winner.get("budget") or 0) * 2)


def retune(command: Sequence[str], top: int = 5, budget: int | None = None, db: str | None = None,
           timeout: float | None = None) -> list[dict[str, Any]]:
    """Re-tunes the `top` hottest stored keys by running `command` (the program that launches
    them, e.g. ``[sys.executable, "train.py"]``) in a process of its own, and returns one dict per
    key: its label, launches, the budget, the winner before and after, whether it was re-tuned
    (False when the program did not reach the key) and whether it was replaced (False too when the
    stored winner re-measured fastest)."""
    from .store import default_db_path, open_store

    if not command:
        raise ValueError("retune needs the command that launches the kernels, e.g. ['python', 'train.py']")
    if top < 1:
        raise ValueError(f"top={top}: give at least 1")
    if budget is not None and budget < 1:
        raise ValueError(f"budget={budget}: give at least 1 evaluation")
    path = str(db or default_db_path())
    before = hottest(top, path)
    if not before:
        return []
    keys = {w["key"]: budget or default_budget(w) for w in before}
    env = dict(os.environ, **{RETUNE_ENV: json.dumps({"keys": keys}), "DR_KERNEL_DB": path})
    done = subprocess.run(list(command), env=env, timeout=timeout)
    after = {w["key"]: w for w in open_store(path).hottest_winners(1 << 30)}
    out = []
    for w in before:
        now = after.get(w["key"], w)
        out.append({"key": w["key"], "label": w["label"], "launches": w["launches"], "budget": keys[w["key"]],
                    "before": {k: w[k] for k in ("config", "ms", "evaluations")},
                    "after": {k: now[k] for k in ("config", "ms", "evaluations")},
                    "retuned": now["created"] != w["created"], "replaced": now["config"] != w["config"]})
    if done.returncode != 0:
        print(f"dr_kernel retune: the command exited with status {done.returncode}; what it re-tuned before "
              "that is stored", file=sys.stderr)
    return out
