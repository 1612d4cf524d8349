"""Exhaustive recordings: every config of a built-in kernel's space on one problem, in the recorded
tables' format (see data/README.md, or the bundled tables in dr_kernel/data).

Rows are appended and flushed one at a time, as they are measured, so an interrupted sweep keeps
everything it measured; run the same command again and it skips the configs already in the file.
Compiling runs in a pool of processes ahead of measuring; configs the static analysis refuses are
recorded without launching (as out_of_resources, compile_error or compile_timeout, with the
reason), and configs that compile to the binary of a config already measured get a copy of its
result (with "same_binary_as" naming that config) instead of a second measurement.
"""

from __future__ import annotations

import json
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .analysis import H200, DeviceLimits
from .compile_pool import CompileRequest, make_pool
from .session import builtin_problem, compile_workers, device_name, measurable, refusal, static_fields

# Field order of a measure row, as in the recorded tables.
_MEASURE_FIELDS = ("compile_s", "load_s", "n_regs", "n_spills", "shared", "status", "relerr", "ms", "ms_p20",
                   "ms_p80", "error", "same_binary_as", "t")


def _key(config: Mapping[str, Any]) -> str:
    return json.dumps(dict(sorted(config.items())))


def _finite(value: Any) -> bool:
    return not (isinstance(value, float) and not math.isfinite(value))


def _head(kind: str, family: str, shape: Mapping[str, Any], dtype: str) -> dict[str, Any]:
    row: dict[str, Any] = {"type": kind, "family": family, "shape": dict(shape)}
    if dtype != "fp16":
        row["dtype"] = dtype
    return row


def measure_row(family: str, shape: Mapping[str, Any], dtype: str, config: Mapping[str, Any],
                measurement: Mapping[str, Any], t: float) -> dict[str, Any]:
    """Returns one measure row: the recorded tables' fields in their order, unknown ones left out
    (NaN, inf and None are not JSON the table reader accepts)."""
    row = _head("measure", family, shape, dtype)
    row["config"] = dict(config)
    values = {**measurement, "t": round(t, 3)}
    for name in _MEASURE_FIELDS:
        value = values.get(name)
        if value is not None and _finite(value) and value != "":
            row[name] = value
    return row


def reference_row(kernel, shape: Mapping[str, Any], dtype: str, ms: float, device: str) -> dict[str, Any]:
    """Returns the reference row of a problem: the framework operator's time, the problem's FLOPs
    and minimum bytes, the device and the versions of the software that measured it."""
    import torch
    import triton

    row = _head("reference", kernel.family, shape, dtype)
    row.update({"ref": kernel.reference_name, "ms": ms, "flops": kernel.flops(shape),
                "bytes": kernel.bytes(shape, dtype), "device": device, "triton": triton.__version__,
                "torch": torch.__version__, "cuda": torch.version.cuda or ""})
    return row


def space_row(kernel, shape: Mapping[str, Any], dtype: str) -> dict[str, Any] | None:
    """Returns the space row of a problem: the constraints of the space the sweep enumerates, so
    that a replay of the table leaves the configs that break one out of the problem, as a tuning
    session of the kernel does, instead of counting them as rows the recording lacks. None when
    the space has no constraints."""
    if not kernel.constraints:
        return None
    return {**_head("space", kernel.family, shape, dtype), "constraints": list(kernel.constraints)}


@dataclass
class Recorded:
    """What a recording file already holds for one problem."""

    configs: set[str] = field(default_factory=set)
    reference: bool = False
    space: bool = False
    last_t: float = 0.0


def read_recorded(path: Path, family: str, shape: Mapping[str, Any], dtype: str) -> Recorded:
    """Returns the configs (and whether the reference row) of one problem already in `path`.

    A last line cut off by an interruption is removed, so that appending continues the file with
    whole rows; any other line that is not JSON is an error naming the line.
    """
    found = Recorded()
    if not path.exists():
        return found
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        try:
            json.loads(data[cut:])
            data += b"\n"
        except ValueError:
            data = data[:cut]
        with open(path, "wb") as handle:
            handle.write(data)
    shape, wanted_dtype = dict(shape), dtype
    for number, line in enumerate(data.decode().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as error:
            raise ValueError(f"{path}:{number}: not valid JSON ({error}); fix or delete this line") from None
        if row.get("family") != family or row.get("shape") != shape or row.get("dtype", "fp16") != wanted_dtype:
            continue
        if row.get("type") == "reference":
            found.reference = True
        elif row.get("type") == "space":
            found.space = True
        elif row.get("type") == "measure":
            found.configs.add(_key(row["config"]))
            if isinstance(row.get("t"), (int, float)):
                found.last_t = max(found.last_t, float(row["t"]))
    return found


class _Appender:
    """Appends JSON rows to a file, one flushed line at a time, from any thread."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = open(path, "a")
        self.lock = threading.Lock()
        self.rows = 0

    def write(self, row: dict) -> None:
        line = json.dumps(row, separators=(",", ":"))
        with self.lock:
            self.handle.write(line + "\n")
            self.handle.flush()
            os.fsync(self.handle.fileno())
            self.rows += 1

    def close(self) -> None:
        self.handle.close()


@dataclass
class SweepResult:
    """Counts of one sweep run: configs in the space, skipped (already recorded), and the new rows
    by status; `copied` rows took the result of an identical binary."""

    total: int = 0
    skipped: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    copied: int = 0
    reference_ms: float | None = None
    wall_s: float = 0.0

    @property
    def recorded(self) -> int:
        return sum(self.statuses.values())


def run_sweep(kernel, shape: Mapping[str, Any], dtype: str, out: Path, *, configs: Iterable[dict] | None = None,
              limit: int | None = None, interpret: bool = False, compile_timeout_s: float = 300.0,
              workers: int | None = None, settings=None, store=None, limits: DeviceLimits | None = None,
              progress: Callable[[SweepResult], None] | None = None, reference: bool = True) -> SweepResult:
    """Records every config of `configs` (default: the kernel's space, in its order; the first
    `limit` of them when given) on one problem into `out`, skipping those already there, and the
    framework's time as the reference row unless `out` has it or `reference` is False (a chunk
    of a sweep spread over several workers, tune_many.sweep_many, one of which times it)."""
    from .analysis import device_limits
    from .measure import MeasureSettings, time_framework, visible_devices

    shape = kernel.check_shape(shape)
    configs = [kernel.check_config(c) for c in (configs if configs is not None else kernel.configs())]
    if limit is not None:
        configs = configs[:limit]
    devices = ["cpu"] if interpret else visible_devices()
    if devices == ["cpu"] and not interpret:
        raise RuntimeError("measuring needs a GPU and none is visible")
    limits = limits or (H200 if interpret else device_limits(0))
    device = device_name(interpret)
    problem = builtin_problem(kernel, shape, dtype, device)
    settings = settings or MeasureSettings.exact()  # Every config timed in full.

    recorded = read_recorded(out, kernel.family, shape, dtype)
    todo = [c for c in configs if _key(c) not in recorded.configs]
    result = SweepResult(total=len(configs), skipped=len(configs) - len(todo))
    appender = _Appender(out)
    started = time.perf_counter()
    offset = recorded.last_t

    def clock() -> float:
        return offset + time.perf_counter() - started

    lock = threading.Lock()

    def record(config: dict, measurement: dict, copied: bool = False) -> None:
        appender.write(measure_row(kernel.family, shape, dtype, config, measurement, clock()))
        if store is not None:
            store.add(problem, config, {k: v for k, v in measurement.items()
                                        if _finite(v) and not isinstance(v, dict)}, "sweep")
        with lock:
            status = measurement["status"]
            result.statuses[status] = result.statuses.get(status, 0) + 1
            result.copied += copied
            if progress is not None:
                progress(result)

    try:
        if reference and not recorded.reference:
            result.reference_ms = time_framework(kernel, shape, dtype, "cpu" if interpret else "cuda:0",
                                                 reps=settings.reps, flush_bytes=settings.flush_bytes)
            appender.write(reference_row(kernel, shape, dtype, result.reference_ms, device))
        if reference and not recorded.space and (row := space_row(kernel, shape, dtype)) is not None:
            appender.write(row)
        if todo:
            _record_all(kernel, shape, dtype, todo, record, limits, devices, settings, compile_timeout_s, workers)
    finally:
        appender.close()
        result.wall_s = time.perf_counter() - started
    return result


def _record_all(kernel, shape, dtype, todo, record, limits, devices, settings, compile_timeout_s, workers) -> None:
    # The main thread streams compile results; a second thread measures what compiled and fits,
    # up to one config per device at a time, while later configs compile.
    from .measure import BuiltinJob, MeasurePool

    pending: queue.Queue = queue.Queue()
    failure: list[BaseException] = []
    by_binary: dict[str, tuple[dict, dict]] = {}

    def measurer(pool: MeasurePool) -> None:
        stop = False
        while not stop and not failure:
            items = [pending.get()]
            while len(items) < len(devices):
                try:
                    items.append(pending.get_nowait())
                except queue.Empty:
                    break
            if None in items:
                stop = True
                items = [i for i in items if i is not None]
            try:
                leaders, followers = [], []
                for config, report in items:
                    same = report.valid and (report.binary_hash in by_binary or any(
                        r.valid and r.binary_hash == report.binary_hash for _, r in leaders))
                    if same:
                        followers.append((config, report))
                    else:
                        leaders.append((config, report))
                if leaders:
                    # Every config is timed in full (no early stop against the best): a recording
                    # is the ground truth others replay.
                    measured = pool.measure([c for c, _ in leaders], math.inf)
                    for (config, report), (m, _) in zip(leaders, measured, strict=True):
                        m = {**m, **static_fields(report)}
                        if report.valid and report.binary_hash:
                            by_binary[report.binary_hash] = (config, m)
                        record(config, m)
                for config, report in followers:
                    leader, m = by_binary[report.binary_hash]
                    copy = {k: v for k, v in m.items() if k not in ("compile_s", "load_s")}
                    record(config, {**copy, **static_fields(report), "same_binary_as": leader}, copied=True)
            except BaseException as error:  # noqa: BLE001 -- re-raised in the main thread.
                failure.append(error)

    pool = MeasurePool(BuiltinJob(kernel.name, dict(shape), dtype), devices, settings)
    thread = threading.Thread(target=measurer, args=(pool,), daemon=True)
    thread.start()
    try:
        with make_pool(workers=workers or compile_workers(len(devices)), timeout_s=compile_timeout_s) as compiler:
            requests = [CompileRequest(kernel.name, c, dict(shape), dtype, limits) for c in todo]
            for index, report in compiler.run(requests):
                if failure:
                    break
                if measurable(report):
                    pending.put((todo[index], report))
                else:
                    record(todo[index], refusal(report))
        pending.put(None)
        while thread.is_alive() and not failure:
            thread.join(0.2)
    finally:
        failure.append(RuntimeError("the sweep stopped"))  # Tells the measuring thread to stop early.
        pending.put(None)
        thread.join(settings.timeout_s + 30)
        pool.close()
    real = failure[:-1]
    if real:
        raise real[0]
