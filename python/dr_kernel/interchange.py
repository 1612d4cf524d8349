"""Kernel Tuner cache files in and out of the results store, so that tables either tool recorded
serve both (`dr-kernel db import/export --format kernel_tuner`).

A Kernel Tuner cache file holds one kernel on one problem size and device: a header
(`device_name`, `kernel_name`, `problem_size`, `tune_params_keys`, `tune_params`, `objective`) and
`cache`, one entry per config keyed by its values joined with commas, with the parameters, `time`
in milliseconds (or the name of a failure: CompilationFailedConfig, RuntimeFailedConfig,
InvalidConfig) and bookkeeping times. Kernel Tuner appends entries while it tunes and closes the
file at the end, so an unfinished file lacks its closing braces; both are read.

Export writes one file per problem (a store's problem is a family, shape, dtype and device); the
exact problem is kept under a `dr_kernel` key Kernel Tuner ignores, so that an export imports
back to the same problem. A file from Kernel Tuner itself becomes the problem (kernel_name, its
problem_size as n0, n1, ..., device_name).
"""

from __future__ import annotations

import datetime
import json
import math
import re
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

# Our statuses as Kernel Tuner names failures, and back.
_TO_KT = {"compile_error": "CompilationFailedConfig", "compile_timeout": "CompilationFailedConfig",
          "out_of_resources": "InvalidConfig"}
_FROM_KT = {"CompilationFailedConfig": "compile_error", "InvalidConfig": "out_of_resources",
            "RuntimeFailedConfig": "launch_error", "ErrorConfig": "crashed"}
_BOOKKEEPING = ("time", "times", "compile_time", "verification_time", "benchmark_time", "strategy_time",
                "framework_time", "timestamp")


class CacheFileError(ValueError):
    """A file that is not a Kernel Tuner cache file: names it and what is wrong."""


def _file_name(problem: dict) -> str:
    shape = "_".join(f"{k}{v}" for k, v in problem["shape"].items())
    text = "_".join(p for p in (problem["family"], shape, problem.get("dtype") or "", problem.get("device") or "") if p)
    return re.sub(r"[^A-Za-z0-9_.=-]+", "-", text)[:180] + ".json"


def export_kernel_tuner(store, folder: Path | str) -> list[Path]:
    """Writes one Kernel Tuner cache file per problem of the store into `folder`; returns the files."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for problem in store.problems():
        rows = store.rows(problem)
        if not rows:
            continue
        keys: list[str] = []
        for config, _ in rows:
            keys += [k for k in config if k not in keys]
        by_config: dict[str, list[tuple[dict, dict]]] = defaultdict(list)
        for config, m in rows:
            by_config[",".join(str(config.get(k)) for k in keys)].append((config, m))
        cache = {}
        for key, measured in by_config.items():
            config = measured[0][0]
            ok = [m["ms"] for _, m in measured if m["status"] == "ok" and m["ms"] is not None]
            last = measured[-1][1]
            entry: dict[str, Any] = {k: config.get(k) for k in keys}
            if ok:
                entry.update(time=statistics.median(ok), times=ok)
            else:
                entry.update(time=_TO_KT.get(last["status"], "RuntimeFailedConfig"), times=[])
            compile_s = next((m.get("compile_s") for _, m in measured if m.get("compile_s") is not None), None)
            entry.update(compile_time=compile_s * 1e3 if compile_s is not None and math.isfinite(compile_s) else 0,
                         verification_time=0, benchmark_time=sum(ok), strategy_time=0, framework_time=0)
            cache[key] = entry
        values = {k: sorted({c.get(k) for c, _ in rows if c.get(k) is not None}, key=_order) for k in keys}
        header = {"device_name": problem.get("device") or "", "kernel_name": problem["family"],
                  "problem_size": list(problem["shape"].values()), "tune_params_keys": keys,
                  "tune_params": values, "objective": "time", "cache": cache,
                  "dr_kernel": {"problem": problem,
                                "exported": datetime.datetime.now().isoformat(timespec="seconds")}}
        path = folder / _file_name(problem)
        path.write_text(json.dumps(header, indent=1) + "\n")
        written.append(path)
    return written


def _order(value: Any) -> tuple:
    return (0, value, "") if isinstance(value, (int, float)) and not isinstance(value, bool) else (1, 0, str(value))


def read_kernel_tuner(path: Path | str) -> tuple[dict, list[tuple[dict, dict]]]:
    """A Kernel Tuner cache file as (problem, [(config, measurement), ...]); CacheFileError if it is not one."""
    path = Path(path)
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as error:
        raise CacheFileError(f"{path}: cannot be read ({error})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        # Kernel Tuner appends `"key": {...},` while tuning and closes the file at the end.
        try:
            data = json.loads(text.rstrip(",") + "}\n}")
        except json.JSONDecodeError as error:
            raise CacheFileError(f"{path}: not a Kernel Tuner cache file (not JSON, even closed: {error})") from None
    needed = ("kernel_name", "tune_params_keys", "cache")
    if not isinstance(data, dict) or any(k not in data for k in needed) or not isinstance(data["cache"], dict):
        raise CacheFileError(f"{path}: not a Kernel Tuner cache file (it needs {', '.join(needed)})")
    keys = list(data["tune_params_keys"])
    ours = data.get("dr_kernel", {}).get("problem") if isinstance(data.get("dr_kernel"), dict) else None
    if ours is not None:
        problem = {"family": ours["family"], "shape": ours["shape"], "dtype": ours.get("dtype", ""),
                   "device": ours.get("device", "")}
    else:
        size = data.get("problem_size")
        sizes = size if isinstance(size, list) else [size] if size is not None else []
        problem = {"family": str(data["kernel_name"]), "shape": {f"n{i}": v for i, v in enumerate(sizes)},
                   "dtype": "", "device": str(data.get("device_name") or "")}
    rows = []
    for key, entry in data["cache"].items():
        if not isinstance(entry, dict) or any(k not in entry for k in keys):
            raise CacheFileError(f"{path}: cache entry {key!r} lacks some of the tune_params_keys {keys}")
        config = {k: entry[k] for k in keys}
        time = entry.get("time")
        compile_ms = entry.get("compile_time")
        compile_s = compile_ms / 1e3 if isinstance(compile_ms, (int, float)) and compile_ms > 0 else None
        if isinstance(time, (int, float)) and not isinstance(time, bool) and math.isfinite(time) and time > 0:
            times = [t for t in entry.get("times") or [] if isinstance(t, (int, float)) and t > 0] or [time]
            for t in times:  # Each timing a repeat of the config, as the store keeps repeats.
                rows.append((config, {"status": "ok", "ms": float(t), "compile_s": compile_s}))
        else:
            status = _FROM_KT.get(str(time), "crashed")
            rows.append((config, {"status": status, "compile_s": compile_s,
                                  "error": f"Kernel Tuner: {time}"}))
    return problem, rows


def import_kernel_tuner(store, paths: list[Path | str], source: str = "kernel_tuner") -> int:
    """Adds the rows of Kernel Tuner cache files to the store, as `db import` adds recorded tables
    (one row per config, repeats as the median; a file imported before adds nothing); returns how
    many rows were added. Every file is read and checked before anything is written."""
    import tempfile

    from . import _core

    read = [read_kernel_tuner(p) for p in paths]
    with tempfile.TemporaryDirectory() as scratch:
        table = Path(scratch) / "kernel_tuner.jsonl"
        with table.open("w") as out:
            for problem, rows in read:
                for config, m in rows:
                    line = {"type": "measure", "family": problem["family"], "shape": problem["shape"],
                            "config": config, **{k: v for k, v in m.items() if v is not None}}
                    if problem["dtype"]:
                        line["dtype"] = problem["dtype"]
                    if problem["device"]:
                        line["device"] = problem["device"]
                    out.write(json.dumps(line) + "\n")
        return store.import_tables(_core.read_tables([str(table)]), source)
