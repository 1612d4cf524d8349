"""Tuning a whole work list (collect.py) on every GPU at hand, and sweeps over the same engines.

    dr-kernel tune-many work.jsonl [--address ray://head:10001] [--budget 50]

The head (this process) reads the work list, keeps one entry per store key (a key has one
winner) and leaves out the keys whose winner its store already holds, so that a run stopped
part-way goes on where it stopped and a second run measures nothing. The rest are handed to the
engine's measuring workers (distributed.py). A worker imports the entry's kernel, rebuilds its
arguments (collect.rebuild_arguments: random data of the recorded shapes and strides, or what the
user's --inputs hook returns) and tunes the key with the kernel's own machinery (the session
@optimize runs), into a store of its own that lives only for that entry; it returns every
measurement and the winner, and the head writes them to its store as each result arrives. An
entry whose worker died is tuned again from the start by another, so a result is written once.

sweep_many() does the same for `dr-kernel sweep`: the configs not yet recorded are cut into
chunks, each recorded by a worker with run_sweep(), and the head appends the rows to the table.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import collect
from .distributed import make_engine

SOURCE = "tune-many"


def _known(value: Any) -> bool:
    # The store's rows spell an unknown field as NaN, -1 or "": left out when they are written again.
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return value is not None and value != "" and value != -1


def _resolve(reference: str | None):
    if not reference:
        return None
    import importlib

    module, _, name = reference.partition(":")
    if not name:
        raise ValueError(f"--inputs {reference!r}: write MODULE:FUNCTION")
    return getattr(importlib.import_module(module), name)


# ----- the worker's side ----------------------------------------------------------------------------

def tune_entry(payload: Mapping[str, Any]) -> dict:
    """Tunes one work-list entry in this worker and returns its measurements and winner (nothing
    is written here but a temporary store); a failure is returned as {"error": why}."""
    entry = payload["entry"]
    started = time.perf_counter()
    try:
        return _tune_entry(entry, payload, started)
    except Exception as error:  # noqa: BLE001 -- the head reports it and goes on with the others.
        return {"id": entry["id"], "error": f"{type(error).__name__}: {error}"[:2000],
                "wall_s": time.perf_counter() - started}


def _tune_entry(entry: Mapping[str, Any], payload: Mapping[str, Any], started: float) -> dict:
    from .measure import visible_devices
    from .store import open_store

    kernel = collect.load_kernel(entry["kernel"])
    gpu = visible_devices() != ["cpu"]
    if entry["device"] != collect.INTERPRETER and not gpu:
        raise ValueError(f"collected on {entry['device']}, and this worker has no GPU")
    device = "cuda" if gpu and entry["device"] != collect.INTERPRETER else "cpu"
    args, kwargs = collect.rebuild_arguments(entry, device, payload.get("seed", 0), _resolve(payload.get("inputs")))
    with tempfile.TemporaryDirectory(prefix="dr_kernel-entry-") as folder:
        saved = kernel._store, kernel.max_evals, dict(kernel._store_keys)
        local = kernel._store = open_store(Path(folder) / "results.db")
        if payload.get("budget"):
            kernel.max_evals = payload["budget"]
        notes = len(kernel.notes)
        try:
            key = kernel.key_of({**dict(zip(kernel.arg_names, args, strict=False)), **kwargs})
            kernel._choose(tuple(args), kwargs, key)
            counted = kernel._store_keys.get(key)
        finally:
            kernel._store, kernel.max_evals, kernel._store_keys = saved
        if counted is None:
            return {"id": entry["id"], "error": "nothing to tune for this key (one config)"}
        rows = [(p, c, {k: v for k, v in m.items() if _known(v)}) for p in local.problems() for c, m in local.rows(p)]
        winners = [w for w in local.hottest_winners(1 << 30) if w["key"] == counted[1]]
    from .tuner import _SHARED_POOL

    winner = {k: winners[0][k] for k in ("config", "ms", "evaluations", "label", "budget")} if winners else None
    return {"id": entry["id"], "store_key": counted[1], "winner": winner, "rows": rows,
            "notes": kernel.notes[notes:], "wall_s": time.perf_counter() - started,
            "compiled_by": type(_SHARED_POOL[0]).__name__ if _SHARED_POOL else None}


def sweep_chunk(payload: Mapping[str, Any]) -> dict:
    """Records a chunk of one problem's configs with run_sweep() into a temporary table and
    returns its rows (the reference row too when asked) and the device they were measured on."""
    from .kernels import get
    from .measure import MeasureSettings
    from .session import device_name
    from .sweep import run_sweep

    kernel = get(payload["kernel"])
    with tempfile.TemporaryDirectory(prefix="dr_kernel-sweep-") as folder:
        out = Path(folder) / "rows.jsonl"
        run_sweep(kernel, payload["shape"], payload["dtype"], out, configs=payload["configs"],
                  interpret=payload["interpret"], compile_timeout_s=payload["timeout"],
                  settings=MeasureSettings.exact(reps=payload["reps"]),
                  reference=payload["reference"])
        rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return {"rows": rows, "device": device_name(payload["interpret"])}


# ----- the head's side ------------------------------------------------------------------------------

@dataclass
class TuneManyReport:
    """One tune-many run: entries in the work list, distinct keys, keys already stored (left
    out), keys tuned now, failures (label → why), measurements written, the engine's report."""

    entries: int = 0
    keys: int = 0
    stored_before: int = 0
    tuned: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    rows: int = 0
    wall_s: float = 0.0
    engine: Any = None
    moved: list[str] = field(default_factory=list)  # Keys the workers stored under another key (another device).
    left: list[str] = field(default_factory=list)  # Keys not started before max_seconds ran out.


def plan(entries: list[dict], store) -> tuple[list[dict], int]:
    """The entries to tune (one per store key, in the work list's order, without a stored winner)
    and how many keys the store already holds."""
    first: dict[str, dict] = {}
    for entry in entries:
        first.setdefault(entry["store_key"], entry)
    todo = [e for e in first.values() if store.get_winner(e["store_key"]) is None]
    return todo, len(first) - len(todo)


def worker_env(roots: list[str], interpret: bool, switch: str | None = None) -> dict[str, str]:
    """The environment of every worker: the interpreter on or off, collect mode off, the drop-in
    switch as the program had it (`switch`: "1", "widen" or None), the kernels' import roots, and
    the settings of this process that tuning reads."""
    path = [*dict.fromkeys(r for r in roots if r), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {"TRITON_INTERPRET": "1" if interpret else "0", collect.ENV: "", "DR_KERNEL_AUTOTUNE": switch or "0",
           "PYTHONPATH": os.pathsep.join(path)}
    for name in ("DR_KERNEL_VERBOSE", "DR_KERNEL_FRESH_WORKERS", "DR_KERNEL_COMPILE_FORK", "TRITON_CACHE_DIR",
                 "TRITON_HOME"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def tune_many(work: str | os.PathLike, *, db: str | os.PathLike | None = None, address: str | None = None,
              backend: str = "auto", measurers: int | None = None, budget: int | None = None, seed: int = 0,
              inputs: str | None = None, on_result: Callable[[dict, Any], None] | None = None,
              engine: Any = None, max_seconds: float | None = None) -> TuneManyReport:
    """Tunes every entry of the work list `work` whose key the store `db` has no winner for, and
    writes each result to that store as it arrives. `budget` overrides the kernels' max_evals;
    `inputs` is "module:function", the hook that rebuilds arguments random data cannot stand for.
    `on_result(result, engine)` sees each result after it is stored. `engine` is one from
    distributed.make_engine to use (and leave open); by default one is made and closed.
    `max_seconds` (a GPU reservation's window) stops handing out entries that many seconds after
    the start; those started finish, the others are report.left, for the next run to tune."""
    from .store import open_store

    started = time.perf_counter()
    entries = collect.read_work(work)
    devices = {e["device"] for e in entries}
    if len(devices) > 1:
        raise ValueError(f"{work} holds entries collected on {', '.join(sorted(devices))}; tune one device's at a time")
    if budget is not None and budget < 1:
        raise ValueError(f"budget={budget}: give at least 1 evaluation")
    if max_seconds is not None and not max_seconds > 0:
        raise ValueError(f"max_seconds={max_seconds}: give a positive number of seconds")
    _resolve(inputs)  # A hook that cannot be imported here is refused before any worker starts.
    store = open_store(db)
    todo, stored = plan(entries, store)
    report = TuneManyReport(entries=len(entries), keys=len(todo) + stored, stored_before=stored)
    by_id = {e["id"]: e for e in todo}
    if not todo:
        report.wall_s = time.perf_counter() - started
        return report
    interpret = devices == {collect.INTERPRETER}
    own = engine is None
    if own:
        roots = [e["kernel"].get("root") for e in todo]
        switch = max((e["kernel"].get("switch") or "" for e in todo), key=lambda s: ("", "1", "widen").index(s))
        engine = make_engine(address, backend, measurers, worker_env(roots, interpret, switch or None))
    done: set[str] = set()

    def arrived(item_id: str, result: dict) -> None:
        entry = by_id[item_id]
        if item_id in done:
            return  # A second result for an entry (a worker thought lost came back): written once only.
        done.add(item_id)
        if result.get("error") or not result.get("winner"):
            report.failed[entry["label"]] = result.get("error") or "no config ran correctly"
        else:
            for problem, config, measurement in result["rows"]:
                store.add(problem, config, measurement, SOURCE)
            w = result["winner"]
            store.put_winner(result["store_key"], w["config"], w["ms"], w["evaluations"], w["label"], w["budget"] or 0)
            report.rows += len(result["rows"])
            report.tuned.append(entry["label"])
            if result["store_key"] != entry["store_key"]:
                report.moved.append(entry["label"])
        if on_result is not None:
            on_result({**result, "label": entry["label"]}, engine)

    items = [(e["id"], "dr_kernel.tune_many:tune_entry", {"entry": e, "budget": budget, "seed": seed,
                                                           "inputs": inputs}) for e in todo]
    # The engines count on time.monotonic(); the window counts from this call's start.
    deadline = None if max_seconds is None else time.monotonic() + max_seconds - (time.perf_counter() - started)
    try:
        report.engine = engine.run(items, arrived, deadline=deadline)
        report.left = [by_id[i]["label"] for i in report.engine.left]
    finally:
        if own:
            engine.close()
        report.wall_s = time.perf_counter() - started
    return report


def sweep_many(kernel, shape: Mapping[str, Any], dtype: str, out: Path, *, configs: list[dict] | None = None,
               limit: int | None = None, interpret: bool = False, compile_timeout_s: float = 300.0, reps: int = 20,
               store=None, address: str | None = None, backend: str = "auto", measurers: int | None = None,
               chunk: int | None = None, progress: Callable[[Any], None] | None = None):
    """run_sweep()'s recording of one problem, its configs cut into chunks measured by the
    engine's workers; the head appends each chunk's rows to `out` (and the store) as it arrives,
    so an interrupted sweep keeps every chunk that came back, and the next run skips them."""
    from .session import builtin_problem
    from .sweep import SweepResult, _Appender, _key, read_recorded

    shape = kernel.check_shape(shape)
    configs = [kernel.check_config(c) for c in (configs if configs is not None else kernel.configs())]
    configs = configs[:limit] if limit is not None else configs
    recorded = read_recorded(out, kernel.family, shape, dtype)
    todo = [c for c in configs if _key(c) not in recorded.configs]
    result = SweepResult(total=len(configs), skipped=len(configs) - len(todo))
    if not todo and recorded.reference:
        return result
    engine = make_engine(address, backend, measurers, worker_env([], interpret))
    size = chunk or max(1, min(16, math.ceil(len(todo) / (4 * engine_workers(engine)))))
    pieces = [todo[i:i + size] for i in range(0, len(todo), size)] or [[]]
    base = {"kernel": kernel.name, "shape": dict(shape), "dtype": dtype, "interpret": interpret,
            "timeout": compile_timeout_s, "reps": reps}
    items = [(str(i), "dr_kernel.tune_many:sweep_chunk", {**base, "configs": p, "reference": i == 0
                                                           and not recorded.reference}) for i, p in enumerate(pieces)]
    appender = _Appender(out)
    started, offset = time.perf_counter(), recorded.last_t

    def arrived(item_id: str, chunk_result: dict) -> None:
        if chunk_result.get("error"):
            result.statuses["failed chunk"] = result.statuses.get("failed chunk", 0) + len(pieces[int(item_id)])
            return
        problem = builtin_problem(kernel, shape, dtype, chunk_result["device"])
        for row in chunk_result["rows"]:
            if row["type"] == "measure":
                if _key(row["config"]) in recorded.configs:
                    continue  # Already in the table (a chunk that came back twice).
                recorded.configs.add(_key(row["config"]))
                row["t"] = round(offset + time.perf_counter() - started, 3)
                result.statuses[row["status"]] = result.statuses.get(row["status"], 0) + 1
                result.copied += "same_binary_as" in row
                if store is not None:
                    store.add(problem, row["config"], {k: v for k, v in row.items() if k not in (
                        "type", "family", "shape", "dtype", "config", "t", "same_binary_as")}, "sweep")
            elif row["type"] == "space":
                if recorded.space:
                    continue
                recorded.space = True
            elif recorded.reference:
                continue
            else:
                recorded.reference = True
                result.reference_ms = row.get("ms")
            appender.write(row)
        if progress is not None:
            progress(result)

    try:
        engine.run(items, arrived)
    finally:
        appender.close()
        engine.close()
        result.wall_s = time.perf_counter() - started
    return result


def engine_workers(engine: Any) -> int:
    """How many measuring workers an engine has."""
    return len(getattr(engine, "actors", None) or getattr(engine, "devices", None) or [1])
