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

A long-running process (a server, a notebook) may instead re-tune its hot keys itself, between its
launches, with `retune_in_background()` (or DR_KERNEL_RETUNE_BACKGROUND=1): a thread of its own
picks the keys this process launched most, has the next launch of each leave a copy of its
arguments, and re-tunes the key on that copy, timing only while the GPU is idle (BackgroundRetune).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from .checking import is_tensor

RETUNE_ENV = "DR_KERNEL_RETUNE"
BACKGROUND_ENV = "DR_KERNEL_RETUNE_BACKGROUND"
FLUSH_EVERY_S = 60.0  # A long run's counts reach the store at least this often (checked every 4096 launches).

_lock = threading.Lock()
_counts: collections.Counter = collections.Counter()  # (store file, store key) -> launches not yet stored.
_since_check = 0
_launches = 0  # Every counted launch of this process: a background re-tune times only while it stands still.
_flushed: collections.Counter = collections.Counter()  # (store file, store key) -> launches flushed by this process.
_last_flush = time.monotonic()
_retuned: set[str] = set()  # Keys re-tuned in this process: once each.


def count(db: str, store_key: str) -> None:
    """One launch of the winner stored under `store_key` in the store file `db` (the tuners call
    it on every launch of a tuned key)."""
    global _since_check, _launches
    _counts[(db, store_key)] += 1
    _since_check += 1
    _launches += 1
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
        _flushed.update(pending)
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


# ----- re-tuning in the background of a long-running process -----------------------------------

# While a background re-tune runs, the tunings of the process take turns, on the program's threads
# and in the background alike: they share the compile stage's workers and the store. A tuning on a
# program's thread (a key's first call) that waits makes the re-tune give way once the batch it is
# timing is done.
_tuning = threading.RLock()
_waiting_lock = threading.Lock()
_foreground_waiting = 0
# (store file, store key) -> (weak reference to the tuner that launches its winner, its key there).
_owners: dict[tuple[str, str], tuple[Any, tuple]] = {}
_background: BackgroundRetune | None = None
_background_env_read = False


class GiveWay(Exception):
    """Raised in a background re-tune's measuring when it must stop before its end: a tuning of
    the program waits for its turn, or the re-tune was stopped. The stored winner stands."""


@contextlib.contextmanager
def foreground_tuning():
    """Held by a tuning on a thread of the program: it waits for a background re-tune to give way
    (without one, the program's tunings run as they always did, threads beside threads)."""
    global _foreground_waiting
    if _background is None:
        yield
        return
    with _waiting_lock:
        _foreground_waiting += 1
    try:
        _tuning.acquire()
    finally:
        with _waiting_lock:
            _foreground_waiting -= 1
    try:
        yield
    finally:
        _tuning.release()


def register(counted: tuple[str, str], tuner: Any, key: tuple) -> None:
    """Says which tuner launches the winner that `counted` (store file, store key) names, under
    which of its keys (the tuners call it when they take or tune a winner)."""
    _owners[counted] = (weakref.ref(tuner), key)
    if not _background_env_read:
        _start_from_env()


def _start_from_env() -> None:
    global _background_env_read
    _background_env_read = True
    text = os.environ.get(BACKGROUND_ENV, "").strip()
    if not text or text == "0":
        return
    try:
        options = {} if text == "1" else json.loads(text)
        if not isinstance(options, dict):
            raise ValueError("not an object")
        retune_in_background(**options)
    except (ValueError, TypeError) as error:
        warnings.warn(f"dr_kernel: {BACKGROUND_ENV}={text[:200]!r} cannot start a background re-tune ({error}); give "
                      '1, or a JSON object of retune_in_background\'s arguments such as {"top": 3, '
                      '"min_launches": 1000}', stacklevel=3)


class ArgumentCopy:
    """The arguments of one launch of a key, copied on the program's thread when a background
    re-tune asks for them (tensors cloned where they are, so the re-tune never touches the
    program's own); `error` says why there is none."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.args: tuple = ()
        self.kwargs: dict = {}
        self.error: str | None = None
        self.ready = threading.Event()
        self._event = None  # A CUDA event recorded after the clones, when any tensor is on a GPU.

    def take(self, args: tuple, kwargs: dict) -> None:
        """Copies a launch's arguments (on the launching thread; never raises into the launch)."""
        try:
            tensors = [v for v in (*args, *kwargs.values()) if is_tensor(v)]
            size = sum(t.numel() * t.element_size() for t in tensors)
            if size > self.max_bytes:
                self.error = (f"its arguments take {_size(size)}, over max_copy_bytes ({_size(self.max_bytes)}): "
                              "raise it, or re-tune in a run of the program of its own (`dr-kernel retune`)")
                return
            self.args = tuple(v.detach().clone() if is_tensor(v) else v for v in args)
            self.kwargs = {k: (v.detach().clone() if is_tensor(v) else v) for k, v in kwargs.items()}
            if any(t.is_cuda for t in tensors):
                import torch

                self._event = torch.cuda.Event()
                self._event.record()
        except Exception as error:  # noqa: BLE001 -- the program's launch goes on whatever the copy met.
            self.error = f"its arguments could not be copied: {type(error).__name__}: {error}"
        finally:
            self.ready.set()

    def wait(self) -> None:
        """Waits (on the re-tuning thread) until the clones are done on the GPU."""
        if self._event is not None:
            self._event.synchronize()


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


class BackgroundRetune:
    """Re-tunes the `top` keys this process launches most, each once, from a thread of its own
    (see retune_in_background). `results` holds one dict per key handled, as `retune` returns
    them, with `reason` where the key was not re-tuned."""

    def __init__(self, top: int, budget: int | None, min_launches: int, idle_s: float, every_s: float,
                 max_utilization: float, max_copy_bytes: int):
        self.top, self.budget, self.min_launches = top, budget, min_launches
        self.idle_s, self.every_s = idle_s, every_s
        self.max_utilization, self.max_copy_bytes = max_utilization, max_copy_bytes
        self.results: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.disturbed = 0  # Batches timed again because the program launched while they were timed.
        self._handled: set[tuple[str, str]] = set()
        # (store file, store key) -> (the copy asked for, the stored winner, the re-tune's budget).
        self._copies: dict[tuple[str, str], tuple[ArgumentCopy, Any, int]] = {}
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dr_kernel background retune", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float | None = None) -> None:
        """Stops the thread: a re-tune under way gives way after the batch it is timing (its
        stored winner stands)."""
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def wait(self, count: int | None = None, timeout: float | None = None) -> bool:
        """Waits until `count` keys (default: top) are handled, or the thread has ended; returns
        whether that many are. Once every key is handled the thread ends at once: this waits for
        that too, so that `running` is False after it."""
        want = self.top if count is None else count
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            self._changed.wait_for(lambda: len(self.results) >= want or not self.running, timeout)
            done = len(self.results) >= want
        if len(self.results) >= self.top and threading.current_thread() is not self._thread:
            self._thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return done

    # -- the thread --

    def _run(self) -> None:
        while not self._stop.wait(min(self.every_s, 0.25) if self._copies else self.every_s):
            try:
                self._round()
            except Exception as error:  # noqa: BLE001 -- a background thread must never end the program.
                self._note(f"a round of the background re-tune failed: {type(error).__name__}: {error}")
            if len(self._handled) >= self.top:
                break
        with self._changed:
            self._changed.notify_all()

    def _round(self) -> None:
        for counted, launches in _process_totals().most_common():
            if len(self._handled) >= self.top or self._stop.is_set():
                return
            if counted in self._handled or counted[1].startswith(OPS_KEY_PREFIX) or launches < self.min_launches:
                continue
            owner = _owners.get(counted)
            tuner = owner[0]() if owner is not None else None
            if tuner is None:
                continue
            waiting = self._copies.get(counted)
            if waiting is None:
                self._ask(counted, tuner, owner[1], launches)
            elif waiting[0].ready.is_set():
                self._retune(counted, tuner, owner[1], launches)

    def _ask(self, counted: tuple[str, str], tuner: Any, key: tuple, launches: int) -> None:
        stored = tuner.store().get_winner(counted[1])
        if stored is None:
            return
        budget = self.budget or max(100, 4 * int(stored[2]))
        if int(stored[2]) >= budget:
            self._handled_as(counted, tuner, key, launches, budget, stored, None,
                             f"tuned with {stored[2]} evaluations already, the budget is {budget}")
            return
        copy = ArgumentCopy(self.max_copy_bytes)
        self._copies[counted] = (copy, stored, budget)
        tuner.request_copy(key, copy)  # Taken by the key's next launch.

    def _retune(self, counted: tuple[str, str], tuner: Any, key: tuple, launches: int) -> None:
        copy, stored, budget = self._copies[counted]
        if copy.error is not None:
            del self._copies[counted]
            self._handled_as(counted, tuner, key, launches, budget, stored, None, copy.error)
            return
        copy.wait()
        try:
            with _tuning:
                config = tuner.retune_copy(key, counted[1], copy, budget, stored[0], self._gated)
        except GiveWay:
            return  # The copy stays: tried again in a later round.
        except Exception as error:  # noqa: BLE001 -- reported in results; the program goes on.
            del self._copies[counted]
            self._handled_as(counted, tuner, key, launches, budget, stored, None, f"{type(error).__name__}: {error}")
            return
        del self._copies[counted]
        self._handled_as(counted, tuner, key, launches, budget, stored, config, None)

    def _handled_as(self, counted, tuner, key, launches, budget, stored, config, reason) -> None:
        after = tuner.store().get_winner(counted[1]) if config is not None else None
        before = {"config": dict(stored[0]), "ms": stored[1], "evaluations": stored[2]}
        now = {"config": dict(after[0]), "ms": after[1], "evaluations": after[2]} if after else before
        result = {"key": counted[1], "label": f"{tuner.__name__} {key}", "launches": launches, "budget": budget,
                  "before": before, "after": now, "retuned": config is not None,
                  "replaced": config is not None and dict(config) != before["config"]}
        if reason is not None:
            result["reason"] = reason
        with self._changed:
            self._handled.add(counted)
            self.results.append(result)
            self._changed.notify_all()

    def _gated(self, device: str, measure: Callable[[], Any]) -> Any:
        """Times one batch (`measure`) only once the GPU is idle: no launch of a tuned kernel in
        this process for idle_s, the work queued on the device's default stream done and, where
        NVML answers, the device's utilisation at most max_utilization percent. A batch during
        which the program launched is timed again."""
        for _ in range(4):
            self._wait_idle(device)
            before = _launches
            result = measure()
            if _launches == before:
                return result
            self.disturbed += 1
        self._note("a batch was disturbed by the program's launches four times in a row; its last timing is kept")
        return result

    def _wait_idle(self, device: str) -> None:
        while True:
            if self._stop.is_set() or _foreground_waiting:
                raise GiveWay()
            before = _launches
            if self._stop.wait(self.idle_s):
                raise GiveWay()
            if _launches == before and self._quiet(device):
                return

    def _quiet(self, device: str) -> bool:
        if not device.startswith("cuda"):
            return True
        import torch

        # Launches return before their kernels run: what the program queued must be done too.
        if not torch.cuda.default_stream(torch.device(device)).query():
            return False
        if self.max_utilization >= 100:
            return True
        try:
            return torch.cuda.utilization(device) <= self.max_utilization
        except Exception as error:  # noqa: BLE001 -- pynvml missing, or NVML unavailable in a container.
            self._note(f"the GPU's utilisation cannot be read ({type(error).__name__}: {error}); idle means no "
                       "launch of a tuned kernel in this process for idle_s")
            self.max_utilization = 100.0
            return True

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)
            warnings.warn(f"dr_kernel: {text}", stacklevel=2)


def _process_totals() -> collections.Counter:
    """This process's launches per (store file, store key), flushed and pending."""
    for _ in range(8):
        try:
            with _lock:
                return _flushed + collections.Counter(dict(_counts))
        except RuntimeError:  # The program's thread added a key while it was copied.
            time.sleep(0.001)
    return collections.Counter(_flushed)


def retune_in_background(top: int = 3, budget: int | None = None, min_launches: int = 1000, idle_s: float = 0.5,
                         every_s: float = 30.0, max_utilization: float = 5.0,
                         max_copy_bytes: int = 1 << 30) -> BackgroundRetune:
    """Re-tunes, from a thread of this process, the `top` stored keys it has launched most (at
    least `min_launches` times each), each once, with `budget` evaluations (default: the most of
    100 and four times what its tuning spent): the key's next launch leaves a copy of its
    arguments, the key is tuned again on the copy with the stored winner measured first, and a
    faster winner replaces it in the store and in this process at once. Configs are timed only
    while the GPU is idle (see BackgroundRetune._gated), so a busy program delays a re-tune and
    never disturbs its timings; a first call's tuning of another key makes it give way. Checks
    every `every_s` seconds. The copy costs the arguments' memory on their device for the
    duration (at most `max_copy_bytes`). Returns the running re-tune (one per process)."""
    global _background
    for name, value in (("top", top), ("min_launches", min_launches), ("max_copy_bytes", max_copy_bytes)):
        if not isinstance(value, int) or value < (1 if name == "top" else 0):
            raise ValueError(f"retune_in_background: {name}={value!r}; give a whole number"
                             + (" of at least 1" if name == "top" else " of at least 0"))
    if budget is not None and (not isinstance(budget, int) or budget < 1):
        raise ValueError(f"retune_in_background: budget={budget!r}; give a whole number of evaluations, at least 1")
    for name, value in (("idle_s", idle_s), ("every_s", every_s), ("max_utilization", max_utilization)):
        if not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"retune_in_background: {name}={value!r}; give a number of at least 0")
    if _background is not None and _background.running:
        return _background
    _background = BackgroundRetune(top, budget, min_launches, float(idle_s), float(every_s), float(max_utilization),
                                   max_copy_bytes)
    # Registered now, after the tuners' own exit handlers (the compile pool's): it runs before them.
    atexit.register(_background.stop, timeout=10)
    return _background
