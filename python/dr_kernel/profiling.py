"""Hardware counters of configs of a kernel, read by Nsight Compute (`ncu`).

`profile(kernel, shape, dtype, config)` runs this module as a program under `ncu`: the program
builds the kernel's inputs on the GPU, launches the config `WARMUP` times (compiles, caches
warm) and once more, and ncu reads the counters of that last launch only. ncu replays the
launch once per group of counters, saving and restoring the memory it writes, so the kernel's
results are not disturbed. `--clock-control none` leaves the GPU's clocks as they are (ncu
would otherwise lock them to base clocks, and the counters would describe a slower GPU than
the one timed).

What is read (`METRICS`, `STALLS`): achieved and theoretical occupancy, L2 hit rate, DRAM and
SM throughput as % of peak, the kernel's duration, and the stall reasons: for each reason the
average number of warps stalled on it per issued instruction (ncu's WarpStateStats section).
`profile_many` reads many configs of built-in kernels in one ncu process, `profile_job` those of
any kernel a measuring process can launch (@optimize's, with `profile=True`).
`parse_csv` reads ncu's `--page raw --csv` output; tests use a report recorded on the H200
(tests/data/ncu_matmul_h200.csv).
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

WARMUP = 2

# Friendly name → ncu metric.
METRICS = {
    "duration_ns": "gpu__time_duration.sum",
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "theoretical_occupancy_pct": "sm__maximum_warps_per_active_cycle_pct",
    "l2_hit_rate_pct": "lts__t_sector_hit_rate.pct",
    "dram_throughput_pct": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm_throughput_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "registers_per_thread": "launch__registers_per_thread",
}
# The rates shown to people (format_counters, the HTML report), in %.
RATES = (("achieved_occupancy_pct", "achieved occupancy"), ("l2_hit_rate_pct", "L2 hit rate"),
         ("dram_throughput_pct", "DRAM throughput"), ("sm_throughput_pct", "SM throughput"))
# ("selected", a warp issuing, is not a stall: ncu reports it as 1 per issue.)
STALLS = ("long_scoreboard", "short_scoreboard", "barrier", "membar", "mio_throttle", "lg_throttle",
          "math_pipe_throttle", "tex_throttle", "wait", "not_selected", "no_instruction",
          "branch_resolving", "dispatch_stall", "drain", "imc_miss", "sleeping")


def stall_metric(reason: str) -> str:
    return f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"


class ProfileError(RuntimeError):
    """ncu is missing, cannot read the counters, or its report holds no launch of the kernel."""


def find_ncu(ncu: str | None = None) -> str:
    """The ncu executable: `ncu`, $DR_KERNEL_NCU, ncu on PATH, or Nsight Compute's usual places."""
    candidates = [ncu, os.environ.get("DR_KERNEL_NCU"), shutil.which("ncu"), "/usr/local/cuda/bin/ncu"]
    candidates += sorted((os.path.join("/opt/nvidia/nsight-compute", d, "ncu")
                          for d in (os.listdir("/opt/nvidia/nsight-compute")
                                    if os.path.isdir("/opt/nvidia/nsight-compute") else ())), reverse=True)
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise ProfileError("reading counters (--profile, profile=True) needs Nsight Compute's ncu, which is not on "
                       "PATH: install Nsight Compute (it comes with the CUDA toolkit) or set DR_KERNEL_NCU to the "
                       "ncu executable")


def _number(text: str) -> Any:
    cleaned = text.strip().replace(",", "")
    try:
        return float(cleaned)
    except ValueError:
        return text.strip() or None


def parse_csv(text: str) -> list[dict[str, Any]]:
    """The launches of an `ncu --csv --page raw` report, each {column: value} with numbers as floats.

    The report is a header line (`"ID","Process ID",...,"Kernel Name",...` then metric names), a
    line of units, and one line per profiled launch; ncu's own messages (`==PROF==` lines) and
    the program's output may come before it."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        raise ProfileError("the ncu report holds no table of launches (did ncu profile any kernel?)")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, body = rows[0], rows[1:]
    if body and not body[0][0].strip().isdigit():  # The units line.
        body = body[1:]
    return [{name: (_number(value) if name not in ("Kernel Name", "Process Name", "Host Name", "Device")
                    else value) for name, value in zip(header, row, strict=False)}
            for row in body if row and row[0].strip().isdigit()]


def counters(launch: Mapping[str, Any]) -> dict[str, Any]:
    """The friendly counters of one parsed launch: METRICS' names, and `stalls` (reason → warps
    stalled per issued instruction) for the reasons ncu reported."""
    out: dict[str, Any] = {"kernel": launch.get("Kernel Name")}
    for name, metric in METRICS.items():
        value = launch.get(metric)
        if isinstance(value, float):
            out[name] = value
    stalls = {reason: launch[stall_metric(reason)] for reason in STALLS
              if isinstance(launch.get(stall_metric(reason)), float)}
    if stalls:
        out["stalls"] = dict(sorted(stalls.items(), key=lambda kv: -kv[1]))
    return out


def stored_counters(c: Mapping[str, Any]) -> dict[str, float]:
    """The counters as the results store keeps them with a measurement: one number per name,
    the stall reasons as `stall_REASON` (the kernel's name is the problem's already)."""
    out = {name: float(c[name]) for name in METRICS if isinstance(c.get(name), (int, float))}
    out.update({f"stall_{reason}": float(v) for reason, v in c.get("stalls", {}).items()})
    return out


def read_stored_counters(c: Mapping[str, Any]) -> dict[str, Any]:
    """stored_counters() back into counters()'s form (for format_counters)."""
    out: dict[str, Any] = {k: v for k, v in c.items() if not k.startswith("stall_")}
    stalls = {k[len("stall_"):]: v for k, v in c.items() if k.startswith("stall_")}
    if stalls:
        out["stalls"] = dict(sorted(stalls.items(), key=lambda kv: -kv[1]))
    return out


def format_counters(c: Mapping[str, Any]) -> str:
    """One line for people: the four rates and the top three stall reasons."""
    if "error" in c:
        return f"counters: not read: {c['error']}"
    parts = [f"{label} {c[name]:.0f} %" for name, label in RATES if name in c]
    stalls = list(c.get("stalls", {}).items())[:3]
    text = "counters (ncu): " + ", ".join(parts)
    if stalls:
        text += "; warps stalled per issue on " + ", ".join(f"{r.replace('_', ' ')} {v:.2f}" for r, v in stalls)
    return text


def profile(kernel: str, shape: Mapping[str, int], dtype: str, config: Mapping[str, Any], *,
            ncu: str | None = None, timeout_s: float = 300.0, keep_report: str | None = None) -> dict[str, Any]:
    """Counters of `config` of the built-in `kernel` on the visible GPU (see the module's doc)."""
    from .kernels import get

    builtin = get(kernel)
    fn = builtin.fn_for(dict(config), builtin.check_shape(shape))
    name = getattr(fn, "__name__", None) or getattr(getattr(fn, "fn", None), "__name__", kernel)
    metrics = [*METRICS.values(), *(stall_metric(r) for r in STALLS)]
    target = json.dumps({"kernel": kernel, "shape": dict(shape), "dtype": dtype, "config": dict(config)})
    with tempfile.TemporaryDirectory(prefix="dr_kernel_ncu_") as folder:
        log = os.path.join(folder, "report.csv")
        command = [find_ncu(ncu), "--csv", "--page", "raw", "--clock-control", "none", "--metrics", ",".join(metrics),
                   "--kernel-name", f"regex:^{name}$", "--launch-skip", str(WARMUP), "--launch-count", "1",
                   "--target-processes", "all", "--log-file", log, sys.executable, "-m", "dr_kernel.profiling", target]
        try:
            run = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                                 env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        except subprocess.TimeoutExpired:
            raise ProfileError(f"ncu did not finish profiling {kernel} {dict(config)} in {timeout_s:g} s") from None
        text = Path(log).read_text() if os.path.exists(log) else ""
        if keep_report:
            with open(keep_report, "w") as f:
                f.write(text)
    if run.returncode != 0 and "ERR_NVGPUCTRPERM" in text + run.stderr:
        raise ProfileError("ncu may not read the GPU's counters here (ERR_NVGPUCTRPERM): run as root or allow "
                           "profiling (NVreg_RestrictProfilingToAdminUsers=0)")
    try:
        launches = [launch for launch in parse_csv(text) if launch.get("Kernel Name", "").startswith(name)]
    except ProfileError:
        launches = []
    if not launches:
        tail = (text + run.stderr + run.stdout)[-1500:]
        raise ProfileError(f"ncu profiled no launch of {name} (exit code {run.returncode}):\n{tail}")
    return counters(launches[-1])


def probe_config(configs: Sequence[Mapping[str, Any]], quantile: float = 0.5) -> dict[str, Any]:
    """The probe of a problem: the config of `configs` nearest to the `quantile` position of every
    parameter's sorted values (the middle of the space by default), measured in positions along
    each parameter, ties to the earlier config. It depends on the space alone, never on a
    measurement, so a session can profile it before anything is timed; its counters describe the
    problem (bound by memory or by arithmetic, how well L2 serves it) rather than the best config."""
    if not configs:
        raise ValueError("a probe needs at least one config to choose from")
    names = sorted({name for config in configs for name in config})
    positions = {}
    for name in names:
        values = sorted({config[name] for config in configs if name in config}, key=lambda v: (str(type(v)), v))
        positions[name] = {value: i for i, value in enumerate(values)}
    target = {name: quantile * (len(positions[name]) - 1) for name in names}

    def distance(config: Mapping[str, Any]) -> float:
        return sum(abs(positions[name][config[name]] - target[name]) if name in config else len(positions[name])
                   for name in names)
    return dict(min(configs, key=distance))


def profile_many(specs: Sequence[Mapping[str, Any]], *, ncu: str | None = None, timeout_s: float = 600.0,
                 keep_report: str | None = None) -> list[dict[str, Any]]:
    """Counters of many configs of built-in kernels (each spec: kernel, shape, dtype, config) in one
    ncu process: the program compiles and warms each spec up outside ncu's profiling range
    (`--profile-from-start off`) and launches it once inside; ncu reads that launch. Far cheaper
    than one profile() per config, which pays ncu's and the program's start for each. A spec that
    fails in the program (out of resources, ...) gets {"error": ...}; so does every spec when ncu
    reads nothing."""
    from .kernels import get

    names = []
    for spec in specs:
        builtin = get(spec["kernel"])
        fn = builtin.fn_for(dict(spec["config"]), builtin.check_shape(spec["shape"]))
        names.append(getattr(fn, "__name__", None) or getattr(getattr(fn, "fn", None), "__name__", spec["kernel"]))

    def write_plan(plan: str) -> None:
        with open(plan, "w") as f:
            json.dump([dict(spec) for spec in specs], f)
    return _profile_batch("--many", write_plan, names, ncu=ncu, timeout_s=timeout_s, keep_report=keep_report)


def profile_job(job, configs: Sequence[Mapping[str, Any]], kernel_name: str, *, device: str = "cuda:0",
                ncu: str | None = None, timeout_s: float = 600.0, keep_report: str | None = None
                ) -> list[dict[str, Any]]:
    """Counters of configs of any kernel that a measuring process can launch: `job` is the
    measure.Job of a tuning (the kernel of @optimize or of a switched-over triton.autotune, its
    arguments, hooks and checks), sent to the program as it is sent to a measuring process. The
    program sets the job up on `device` (the one GPU it sees, as a measuring process does) and,
    per config, warms it up and launches it once inside ncu's profiling range, each launch with
    the job's restores and hooks around it (outside the range). `kernel_name` is the kernel's name
    in ncu's report. Raises ProfileError when the job cannot travel (a hook defined in a notebook)."""
    import pickle

    from .measure import _worker_env

    target = "cuda:0" if device.startswith("cuda:") else device
    try:
        payload = pickle.dumps((job, target, [dict(c) for c in configs]))
    except (pickle.PicklingError, TypeError, AttributeError) as error:
        raise ProfileError(f"the kernel's launch cannot be sent to ncu's process ({error}): its arguments or "
                           "hooks exist only in this process") from None

    def write_plan(plan: str) -> None:
        with open(plan, "wb") as f:
            f.write(payload)
    return _profile_batch("--job", write_plan, [kernel_name] * len(configs), ncu=ncu, timeout_s=timeout_s,
                          keep_report=keep_report, env=_worker_env(device))


def _profile_batch(mode: str, write_plan, names: Sequence[str], *, ncu: str | None, timeout_s: float,
                   keep_report: str | None, env: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Runs this module's program `mode` (--many, --job) under ncu on the plan `write_plan(path)`
    writes, and matches the report's launches to the plan's configs (their kernels' `names`)."""
    metrics = [*METRICS.values(), *(stall_metric(r) for r in STALLS)]
    with tempfile.TemporaryDirectory(prefix="dr_kernel_ncu_") as folder:
        log, plan, done = (os.path.join(folder, n) for n in ("report.csv", "plan", "done.json"))
        write_plan(plan)
        command = [find_ncu(ncu), "--csv", "--page", "raw", "--clock-control", "none", "--metrics", ",".join(metrics),
                   "--profile-from-start", "off", "--target-processes", "all", "--log-file", log,
                   sys.executable, "-m", "dr_kernel.profiling", mode, plan, done]
        try:
            run = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                                 env={**(env or os.environ), "PYTHONPATH": os.pathsep.join(sys.path)})
            failure = ""
        except subprocess.TimeoutExpired:
            run, failure = None, f"ncu did not finish profiling {len(names)} configs in {timeout_s:g} s"
        text = Path(log).read_text() if os.path.exists(log) else ""
        outcomes = json.loads(Path(done).read_text()) if os.path.exists(done) else []
        if keep_report:
            with open(keep_report, "w") as f:
                f.write(text)
    if run is not None and run.returncode != 0 and "ERR_NVGPUCTRPERM" in text + run.stderr:
        raise ProfileError("ncu may not read the GPU's counters here (ERR_NVGPUCTRPERM): run as root or allow "
                           "profiling (NVreg_RestrictProfilingToAdminUsers=0)")
    try:
        launches = parse_csv(text)
    except ProfileError:
        launches = []
    if not failure and run is not None and not outcomes:
        failure = f"the profiled program ended before its first config (exit code {run.returncode})"
    tail = (text + (run.stderr if run is not None else ""))[-1500:]
    return match_launches(launches, names, outcomes, failure=failure + (f":\n{tail}" if failure and tail else ""),
                          tail=tail)


def match_launches(launches: Sequence[Mapping[str, Any]], names: Sequence[str], outcomes: Sequence[str], *,
                   failure: str = "", tail: str = "") -> list[dict[str, Any]]:
    """The counters of each spec of profile_many() from the report's launches: the program launched
    each spec whose outcome is "ok" once inside the profiling range, in spec order, so the next
    launch of the spec's kernel (`names`) is its own; other kernels of a spec (a reduction after a
    split) come between and are passed over. Specs the program did not reach get `failure`. (A spec
    whose launch ran but whose synchronisation then failed leaves a launch for the next spec of the
    same kernel; such an error, an illegal address, fails every later spec of the process too.)"""
    results: list[dict[str, Any]] = [{"error": failure or "the program did not reach this config"} for _ in names]
    next_launch = 0
    for index, outcome in enumerate(outcomes):
        if outcome != "ok":
            results[index] = {"error": outcome}
            continue
        while next_launch < len(launches) and not str(launches[next_launch].get("Kernel Name", "")).startswith(
                names[index]):
            next_launch += 1
        if next_launch == len(launches):
            results[index] = {"error": f"ncu's report holds no launch of {names[index]} for this config:\n{tail}"}
            break
        results[index] = counters(launches[next_launch])
        next_launch += 1
    return results


def _target(spec: Mapping[str, Any]) -> None:
    """The profiled program: WARMUP + 1 launches of one config."""
    import torch

    from .kernels import get

    kernel = get(spec["kernel"])
    inputs = kernel.make_inputs(spec["shape"], spec["dtype"], "cuda")
    for _ in range(WARMUP + 1):
        kernel.launch(inputs, spec["config"])
    torch.cuda.synchronize()


def _target_many(plan: str, done: str) -> None:
    """The program of profile_many(): per spec, warm-up launches outside ncu's range, one inside;
    `done` lists each spec's outcome ("ok" or the error), rewritten after every spec."""
    import torch

    from .kernels import get

    specs = json.loads(Path(plan).read_text())
    outcomes: list[str] = []
    for spec in specs:
        try:
            kernel = get(spec["kernel"])
            inputs = kernel.make_inputs(spec["shape"], spec["dtype"], "cuda")
            for _ in range(WARMUP):
                kernel.launch(inputs, spec["config"])
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
            try:
                kernel.launch(inputs, spec["config"])
                torch.cuda.synchronize()
            finally:
                torch.cuda.profiler.stop()
            outcomes.append("ok")
        except Exception as error:  # noqa: BLE001 - one config's failure is that config's outcome.
            outcomes.append(f"{type(error).__name__}: {str(error)[:300]}")
        inputs = None
        with open(done, "w") as f:
            json.dump(outcomes, f)


def _target_job(plan: str, done: str) -> None:
    """The program of profile_job(): the job set up once, then per config WARMUP launches and one
    inside ncu's range (only on a GPU; on the CPU, in Triton's interpreter, the same launches run
    without a range); `done` lists each config's outcome, rewritten after every config."""
    import pickle

    import torch

    with open(plan, "rb") as f:
        job, device, configs = pickle.load(f)
    cuda = device.startswith("cuda")
    state = job.setup(device)
    outcomes: list[str] = []
    for config in configs:
        try:
            for _ in range(WARMUP):
                job.before_launch(state, config)
                job.launch(state, config)
                job.after_launch(state, config)
            job.before_launch(state, config)  # Restores and hooks run outside the profiled range.
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.profiler.start()
            try:
                job.launch(state, config)
                if cuda:
                    torch.cuda.synchronize()
            finally:
                if cuda:
                    torch.cuda.profiler.stop()
            job.after_launch(state, config)
            outcomes.append("ok")
        except Exception as error:  # noqa: BLE001 - one config's failure is that config's outcome.
            outcomes.append(f"{type(error).__name__}: {str(error)[:300]}")
        with open(done, "w") as f:
            json.dump(outcomes, f)


if __name__ == "__main__":
    if sys.argv[1] == "--many":
        _target_many(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "--job":
        _target_job(sys.argv[2], sys.argv[3])
    else:
        _target(json.loads(sys.argv[1]))
