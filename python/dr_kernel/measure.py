"""Measuring configs: validation, then timing, in worker processes that may crash.

A config that corrupts the GPU context (an illegal address, a trap) kills the process it runs in, so
configs run in child processes, one per visible GPU. The parent only sends configs and reads
results; when a child dies or hangs, the config it was on is recorded as ``crashed``, the child is
restarted and the batch goes on. Nothing measured before the crash is lost.

Each config is launched once and checked against the reference, as its Job decides: a built-in
kernel's outputs are poisoned first and compared with the framework operator; a user's kernel
(tuner.KernelJob) runs on a copy of the call's arguments and is compared with the user's reference
or the list's first config. Only a correct config is timed: an L2 flush before every launch, CUDA
events around it, a fixed number of launches, and an early stop once the config is clearly slower
than the best so far.
"""

from __future__ import annotations

import atexit
import math
import os
import pickle
import queue
import socket
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from .checking import classify
from .spawning import START_LOCK

# CUDA errors after which a process's context fails every later call (CUDA's "sticky" errors):
# a measuring process that met one is restarted, and the config that caused it is crashed.
STICKY_CUDA_ERRORS = ("illegal memory access", "illegal address", "unspecified launch failure", "illegal instruction",
                      "misaligned address", "device-side assert", "invalid program counter", "hardware stack error",
                      "uncorrectable ecc", "launch timed out", "cudaerrorlaunchfailure")


def ruins_context(error: str) -> bool:
    lowered = error.lower()
    return any(text in lowered for text in STICKY_CUDA_ERRORS)


@dataclass
class MeasureSettings:
    reps: int = 20              # Timed launches of a config that is not stopped early.
    min_reps: int = 3           # Launches before an early stop may be decided.
    # Stop timing once the median so far exceeds this x the best: with launches within a few per
    # cent of each other, a config 30 % slower after three of them will not win.
    stop_factor: float = 1.3
    # Stop timing once the timed launches add up to this many milliseconds: for a kernel of
    # milliseconds, 20 launches would cost a tenth of a second of the first call and say little
    # more than 10 do. Sweeps, whose tables must be exact for every config, lift it (`exact()`).
    budget_ms: float = 50.0
    # Stop timing once the launches timed so far lie within this fraction of each other (the
    # slowest over the fastest, less one): their median is then known to about half of it, and a
    # 3 ms GEMM needs three launches, not 50 ms of them. Timer noise keeps microsecond kernels from
    # settling, so they are timed as before. Sweeps and other exact timings set 0.
    settle: float = 0.02
    flush_bytes: int = 256 << 20  # L2 flush buffer (the H200's L2 is 60 MB).
    max_relerr: float = 2e-2    # Relative L2 error a correct config stays under.
    timeout_s: float = 120.0    # A config whose launch and timing take longer is killed.
    # After the search, the best `confirm` configs within `confirm_within` of the best are timed
    # up to `confirm_rounds` more times each, in turns, and the lowest median wins (0 or 1: no
    # re-timing; session.confirm_winner stops timing a candidate its rounds put out of reach).
    confirm: int = 3
    confirm_rounds: int = 3
    confirm_within: float = 0.10

    @classmethod
    def exact(cls, **fields: Any) -> MeasureSettings:
        """Settings that time every config in full (`reps` launches): what a recorded table needs."""
        return cls(**{"budget_ms": math.inf, "settle": 0.0, **fields})

    def __post_init__(self) -> None:
        # With no timed launch a config has no time: every one would be stored as crashed.
        if isinstance(self.reps, bool) or not isinstance(self.reps, int) or self.reps < 1:
            raise ValueError(f"MeasureSettings(reps={self.reps!r}): give at least 1 timed launch per config")


class Job:
    """What a measuring worker runs: built once per worker (inputs on its device), then launched
    with many configs. Subclasses must pickle (they travel to a spawned process)."""

    def setup(self, device: str) -> Any:
        """Builds the inputs on `device` and returns the state the other methods receive."""
        raise NotImplementedError

    def launch(self, state: Any, config: dict) -> None:
        raise NotImplementedError

    def outputs(self, state: Any) -> list:
        """The tensors a launch writes: poisoned before validation, compared after it."""
        raise NotImplementedError

    def expected(self, state: Any) -> list | None:
        """The correct values of outputs(), or None to take the first valid config's."""
        return None

    def before_launch(self, state: Any, config: dict) -> None:
        """Restores inputs a launch modifies in place (triton.autotune's restore_value and
        reset_to_zero) and runs the hooks that go before a launch."""

    def after_launch(self, state: Any, config: dict) -> None:
        """Runs the hooks that go after a launch."""

    def checked_launch(self, state: Any, config: dict) -> list:
        """Launches `config` once for checking and returns its outputs. By default the outputs
        are poisoned first, so that an element the launch does not write cannot pass."""
        outs = self.outputs(state)
        for t in outs:
            _poison(t)
        self.before_launch(state, config)
        self.launch(state, config)
        self.after_launch(state, config)
        return outs

    def check(self, state: Any, outs: list, reference: list | None, settings: MeasureSettings
              ) -> tuple[float, str | None]:
        """Returns (relative error, None) when `outs` are correct, else (error, why not)."""
        if reference is not None:
            if len(reference) != len(outs):
                return math.inf, (f"the reference gives {len(reference)} tensors for the {len(outs)} the kernel "
                                  "writes; return one per output, in the order of `outputs`")
            relerr = max(relative_error(o, r) for o, r in zip(outs, reference, strict=True))
        elif any(not _finite(o) for o in outs if o.dtype.is_floating_point):
            relerr = math.inf  # The first valid config becomes the reference: it must write every element.
        else:
            relerr = 0.0
        if not relerr < settings.max_relerr:
            return relerr, f"relative error {relerr:.3g} is over {settings.max_relerr}"
        return relerr, None

    def annotate(self, state: Any, outs: list, reference: list | None) -> dict:
        """Fields to add to the measurement of a checked launch (none by default)."""
        return {}

    def keep(self, outs: list) -> list:
        """A copy of correct outputs, to serve as the reference for later configs."""
        return [o.clone() for o in outs]


def relative_error(out, ref) -> float:
    """‖out − ref‖ / ‖ref‖ in fp32; NaN or inf anywhere gives inf."""
    diff = (out.float() - ref.float()).norm().item()
    scale = ref.float().norm().item()
    if not math.isfinite(diff):
        return math.inf
    return diff / scale if scale > 0 else diff


def _finite(tensor) -> bool:
    import torch

    return bool(torch.isfinite(tensor.float()).all())


def _poison(tensor) -> None:
    if tensor.dtype.is_floating_point:
        tensor.fill_(float("nan"))
    else:
        tensor.fill_(-1)


class _Timer:
    """Times one launch: CUDA events after an L2 flush on a GPU, the wall clock elsewhere (the
    interpreter on a CPU, where the figures only order configs for tests).

    On a GPU the start event is queued behind a short GPU-side wait, longer than the host takes to
    queue the launch, so that the time between the events is the kernel's and not the host's
    launch latency (Python, a busy core, a compile pool running ptxas beside the timing process).
    A timing whose launch took the host longer than the wait is taken again."""

    MAX_LEAD_MS = 5.0

    def __init__(self, device: str, flush_bytes: int):
        import torch

        self.cuda = device.startswith("cuda")
        self.torch = torch
        self.flush = torch.empty(flush_bytes, dtype=torch.int8, device=device) if self.cuda else None
        self.sleep = getattr(torch.cuda, "_sleep", None) if self.cuda else None
        self.cycles_per_ms: float | None = None
        self.lead_ms = 0.05  # How far ahead of the host the GPU is kept; grows with the launches' host time.

    def _wait_cycles(self) -> int:
        torch = self.torch
        if self.cycles_per_ms is None:
            probe = 1_000_000
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.sleep(probe)  # The first call loads the sleeping kernel; the second is timed.
            start.record()
            self.sleep(probe)
            end.record()
            end.synchronize()
            self.cycles_per_ms = probe / max(start.elapsed_time(end), 1e-3)
        return int(self.cycles_per_ms * self.lead_ms)

    def time_ms(self, run: Callable[[], None]) -> float:
        if not self.cuda:
            start = time.perf_counter()
            run()
            return (time.perf_counter() - start) * 1e3
        torch = self.torch
        for _attempt in range(3):
            self.flush.zero_()
            if self.sleep is not None:
                self.sleep(self._wait_cycles())
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            queued = time.perf_counter()
            run()
            host_ms = (time.perf_counter() - queued) * 1e3
            end.record()
            end.synchronize()
            if self.sleep is None or host_ms < self.lead_ms:
                break
            self.lead_ms = min(self.MAX_LEAD_MS, 2 * host_ms)  # The GPU may have idled: wait longer, time again.
        return start.elapsed_time(end)


def timed_enough(times: Sequence[float], best_ms: float, settings: MeasureSettings) -> bool:
    """Whether more launches of a config would not change a decision: after `min_reps`, once its
    median is clearly slower than the best so far, its launches add up to the budget, or they agree
    within `settle` of each other."""
    if len(times) < settings.min_reps:
        return False
    fastest = min(times)
    return (statistics.median(times) > settings.stop_factor * best_ms or sum(times) >= settings.budget_ms
            or (settings.settle > 0 and fastest > 0 and max(times) <= fastest * (1.0 + settings.settle)))


def measure_config(job: Job, state: Any, config: dict, reference: list | None, best_ms: float,
                   settings: MeasureSettings, timer: _Timer) -> tuple[dict, list | None]:
    """Validates and times one config in this process. Returns the measurement (recorded-table
    fields) and the outputs when they were correct (the reference for later configs when the job
    has none)."""
    import torch

    start = time.perf_counter()
    try:
        outs = job.checked_launch(state, config)
        if timer.cuda:
            torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 -- classified: the config's failure, or a launch error.
        return classify(e), None
    load_s = time.perf_counter() - start
    if not outs:
        return {"status": "wrong", "load_s": load_s, "error": "the launch wrote no tensor"}, None

    relerr, problem = job.check(state, outs, reference, settings)
    extra = job.annotate(state, outs, reference)
    if problem is not None:
        return {"status": "wrong", "relerr": relerr, "load_s": load_s, "error": problem, **extra}, None
    kept = job.keep(outs) if reference is None else None

    times: list[float] = []
    try:
        for _ in range(settings.reps):
            job.before_launch(state, config)
            times.append(timer.time_ms(lambda: job.launch(state, config)))
            job.after_launch(state, config)
            if timed_enough(times, best_ms, settings):
                break
    except Exception as e:  # noqa: BLE001 -- as for the checked launch.
        return classify(e), None
    times.sort()
    q = statistics.quantiles(times, n=5, method="inclusive") if len(times) > 1 else [times[0]] * 4
    return {"status": "ok", "ms": statistics.median(times), "ms_p20": q[0], "ms_p80": q[3],
            "relerr": relerr, "load_s": load_s, "reps": len(times), **extra}, kept


def in_process(job: Job, state: Any, settings: MeasureSettings, device: str, do_bench: Callable | None = None
               ) -> Callable[[list[dict], float], list[tuple[dict, float]]]:
    """MeasurePool.measure's contract, measured in this process (as triton.autotune measures):
    no worker to start, and a config that crashes the GPU context ends the process. `state` is
    `job.setup(device)`'s; `do_bench` (triton.autotune's) times a config that checked correct."""
    timer = _Timer(device, settings.flush_bytes)
    reference = [job.expected(state)]

    def bench(config: dict, best_ms: float) -> dict:
        # The user's benchmarker (triton.autotune's do_bench=): check once, then let it time.
        result, outs = measure_config(job, state, config, reference[0], best_ms,
                                      MeasureSettings(reps=1, min_reps=1, max_relerr=settings.max_relerr), timer)
        if result["status"] != "ok":
            return result, outs

        def kernel_call():
            job.before_launch(state, config)
            job.launch(state, config)
            job.after_launch(state, config)

        try:
            times = do_bench(kernel_call, quantiles=(0.5, 0.2, 0.8))
        except Exception as error:  # noqa: BLE001 -- classified as a launch would be.
            return classify(error), None
        times = list(times) if isinstance(times, (list, tuple)) else [times] * 3
        result.update({"ms": float(times[0]), "ms_p20": float(times[1]), "ms_p80": float(times[2])})
        return result, outs

    def measure(configs: list[dict], best_ms: float) -> list[tuple[dict, float]]:
        out = []
        for config in configs:
            start = time.perf_counter()
            if do_bench is not None:
                result, outs = bench(config, best_ms)
            else:
                result, outs = measure_config(job, state, config, reference[0], best_ms, settings, timer)
            checked = not isinstance(state, dict) or state.get("checked", True)  # A KernelJob may time unchecked.
            if reference[0] is None and outs is not None and checked:
                reference[0] = outs
            if ruins_context(str(result.get("error", ""))):
                raise ContextLost(f"config {config} failed with an error that leaves this process's CUDA context "
                                  f"unusable ({str(result['error'])[:300]}); measured in this process, the tuning "
                                  "cannot go on: measure in isolation (isolate=True, the kernel in a module) so that "
                                  "such a config costs only its measuring process")
            if result["status"] == "ok":
                best_ms = min(best_ms, result["ms"])
            out.append((result, time.perf_counter() - start))
        return out

    return measure


class ContextLost(RuntimeError):
    """A config measured in the tuning process broke its CUDA context (an illegal address)."""


def _child_entry(fd: int, spare_idle_s: float = 0.0) -> None:
    """Entry point of a measuring process: each job arrives as (job, device, settings, environment,
    import path); after one is done ("park") the process waits for the next, so that a program
    tuning many keys starts a measuring process (an interpreter, torch, CUDA: seconds) once, not
    once per key. A spare (`prestart`) imports torch and Triton before any job, creates its CUDA
    context and makes a first Triton launch (`first_launch.warm`), and leaves if no job comes within
    `spare_idle_s`."""
    conn = Connection(fd)
    if spare_idle_s > 0:
        import torch  # noqa: F401 -- 4-5 s on the H200 machine: most of a measuring process's start.
        import triton  # noqa: F401

        from .first_launch import warm

        warm()  # The CUDA context and Triton's first launch: 0.6-0.8 s of the first measurement (H200).
        try:
            if not conn.poll(spare_idle_s):
                return
        except (EOFError, OSError):
            return
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):  # The tuning process is gone.
            return
        message = pickle.loads(data)
        if isinstance(message, tuple) and message[:1] == ("stop",):  # Parked, then not needed.
            return
        job, device, settings, environment, path = message
        # A spare started before the program set its Triton cache folder (say) works as one
        # started now: the environment and import path are the tuning process's of this job.
        os.environ.clear()
        os.environ.update(environment)
        sys.path[:] = list(dict.fromkeys([*path, *sys.path]))
        if not _worker_main(conn, job, device, settings):
            return


def _worker_main(conn, job: Job, device: str, settings: MeasureSettings) -> bool:
    """Body of a measuring process for one job: set up once, then answer ("measure", config,
    best_ms) messages. Returns True when parked (ready for another job), False when told to stop."""
    try:
        state = job.setup(device)
        timer = _Timer(device, settings.flush_bytes)
        reference = job.expected(state)
    except Exception as error:  # noqa: BLE001 -- reported to the parent, which raises it there.
        conn.send(("unavailable" if isinstance(error, JobUnavailable) else "setup_error", traceback.format_exc()))
        return False
    conn.send(("ready", None))
    while True:
        message = conn.recv()
        if message[0] == "stop":
            return False
        if message[0] == "park":
            del state, reference, timer
            _release_memory(device)
            conn.send(("parked", None))
            return True
        _, config, best_ms = message
        start = time.perf_counter()
        result, outs = measure_config(job, state, config, reference, best_ms, settings, timer)
        if reference is None and outs is not None:
            reference = outs
        conn.send(("result", (result, time.perf_counter() - start)))


def _release_memory(device: str) -> None:
    """Gives a parked worker's tensors back (the next job brings its own)."""
    import gc

    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


# Measuring processes between jobs, by device: a pool that closes parks its live workers here and
# the next pool on that device takes them instead of starting new ones; `prestart` puts a spare
# here before any pool. DR_KERNEL_FRESH_WORKERS=1 starts every pool's workers anew (benchmarks
# that must not carry a process's warm state over). Entries: (process, connection, environment it
# started with, whether it is a spare that has run no job).
_PARKED: dict[str, list[tuple[Any, Any, dict, bool]]] = {}
_PARKED_LOCK = threading.Lock()
SPARE_IDLE_S = 600.0  # A spare no pool took within this many seconds leaves.
# What a spare's start depends on: the rest of the environment, and the import path, are the
# job's (_child_entry): a path the program adds later is put ahead of the spare's own.
_START_ENV = ("CUDA_VISIBLE_DEVICES", "TRITON_INTERPRET", "LD_LIBRARY_PATH", "PYTHONHOME")


def _reuse_workers() -> bool:
    return os.environ.get("DR_KERNEL_FRESH_WORKERS") != "1"


def _worker_env(device: str) -> dict[str, str]:
    """The environment a measuring process for `device` starts with: this process's, its import
    path, and the one GPU it may see."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env["DR_KERNEL_WORKER"] = "1"  # No agent to load (dr_kernel/__init__.py).
    if device.startswith("cuda:"):
        env["CUDA_VISIBLE_DEVICES"] = device.split(":")[1]
    return env


def _start_env(env: dict) -> dict:
    return {k: env.get(k) for k in _START_ENV}


def _take_parked(device: str) -> tuple[Any, Any, dict] | None:
    """A parked process for `device` started with the environment a new one would get now (the
    same Triton cache folder, interpreter switch and import path), or None. A spare, which has
    imported torch and Triton and nothing else, need only match what its start depended on."""
    env = _worker_env(device)
    with _PARKED_LOCK:
        workers = _PARKED.get(device, [])
        for i, (process, conn, started_with, spare) in enumerate(workers):
            fits = _start_env(started_with) == _start_env(env) if spare else started_with == env
            if process.poll() is None and fits:
                del workers[i]
                return process, conn, env if spare else started_with
    return None


def _park(device: str, process: Any, conn: Any, env: dict) -> None:
    """Keeps a process for the next pool on `device`: one per device (pools on a device run one
    at a time), the newest, whose environment is the likeliest to match the next pool's."""
    with _PARKED_LOCK:
        replaced = _PARKED.get(device, [])
        _PARKED[device] = [(process, conn, env, False)]
    _stop(replaced)


def _stop_parked() -> None:
    with _PARKED_LOCK:
        parked = [w for workers in _PARKED.values() for w in workers]
        _PARKED.clear()
    _stop(parked)


def _popen_worker(env: dict, spare_idle_s: float = 0.0) -> tuple[Any, Any]:
    """A measuring process: a fresh interpreter rather than multiprocessing's spawn, which re-runs
    the user's main script in the child (for a script without a __main__ guard: tuning again)."""
    with START_LOCK:  # No compile worker is forked while Popen runs (spawning.py).
        parent, child = socket.socketpair()
        process = subprocess.Popen(
            [sys.executable, "-c",
             f"from dr_kernel.measure import _child_entry; _child_entry({child.fileno()}, {spare_idle_s!r})"],
            pass_fds=(child.fileno(),), env=env)
        child.close()
    return process, Connection(parent.detach())


def prestart(device: str | None = None, idle_s: float = SPARE_IDLE_S) -> bool:
    """Starts a spare measuring process for `device` (the first visible GPU by default), unless a
    live one is parked there: it imports torch and Triton (4-5 s on the H200 machine, most of a
    measuring process's start) while the program goes on, creates its CUDA context and makes a
    first Triton launch of one element (0.6-0.8 s more of that start, which the first measurement
    paid before), and the first measuring pool on that device takes it. It holds its CUDA context
    (GPU memory, its size not measured here) until then, and leaves after `idle_s` seconds unused.
    @optimize calls it at decoration for kernels measured in isolation; DR_KERNEL_PRESTART=0
    turns that off. Returns whether a spare was started."""
    if not _reuse_workers():
        return False
    device = device or visible_devices()[0]
    with _PARKED_LOCK:
        if any(process.poll() is None for process, *_ in _PARKED.get(device, [])):
            return False
    env = _worker_env(device)
    process, conn = _popen_worker(env, idle_s)
    with _PARKED_LOCK:
        taken = any(p.poll() is None for p, *_ in _PARKED.get(device, []))
        if not taken:
            _PARKED[device] = [(process, conn, env, True)]
    if taken:  # A pool parked its worker meanwhile: that one is warmer.
        _stop([(process, conn, env, True)])
    return not taken


def _stop(workers: list[tuple[Any, Any, dict, bool]]) -> None:
    for process, conn, *_ in workers:
        if process.poll() is None:
            try:
                conn.send(("stop",))
                process.wait(5)
            except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                process.kill()
        conn.close()


atexit.register(_stop_parked)


class WorkerError(RuntimeError):
    """A measuring worker could not set up its job (a bad kernel or arguments): tuning cannot go on."""


class JobUnavailable(Exception):
    """Raised by a Job's setup where a measuring process cannot have the job at all (its kernel's
    module does not import there), as opposed to a job that fails: it may run in the tuning process."""


class WorkerUnavailable(WorkerError):
    """A measuring worker could not have the job (JobUnavailable in its setup)."""


class _SetupDied(WorkerError):
    """The measuring process died while setting up, without a Python error to blame."""


@dataclass
class _Worker:
    device: str
    process: Any = None
    conn: Any = None
    restarts: int = 0
    starting: threading.Thread | None = None  # start()'s thread, until a measurement joins it.
    start_error: BaseException | None = None
    # A launch failed in a way that may leave the GPU context broken: the process is not reused.
    tainted: bool = False
    env: dict | None = None  # The environment its process started with.


@dataclass
class MeasurePool:
    """Measuring processes, one per device, fed from one queue of configs.

    ``devices`` are torch device strings as seen inside a worker: each GPU worker is started with
    CUDA_VISIBLE_DEVICES naming its one GPU, so it always uses "cuda:0".
    """

    job: Job
    devices: Sequence[str] = ("cpu",)
    settings: MeasureSettings = field(default_factory=MeasureSettings)
    _workers: list = field(default_factory=list, init=False)

    def __post_init__(self):
        self._workers = [_Worker(device=d) for d in self.devices]

    def _start(self, worker: _Worker) -> None:
        worker.tainted = False  # A new process for this worker, parked or fresh.
        parked = _take_parked(worker.device) if _reuse_workers() else None
        if parked is not None:
            worker.process, worker.conn, worker.env = parked
            try:
                self._send_job(worker)
                return
            except WorkerError:
                pass  # It could not take this job (a module on a path it lacks): a fresh one may.
        # A process that dies while setting up (killed from outside: the OOM killer, a signal)
        # gets one more, as a process that dies measuring does; a second death is the job's.
        for attempt in range(2):
            self._spawn(worker)
            try:
                self._send_job(worker)
                return
            except _SetupDied:
                if attempt:
                    raise
                worker.restarts += 1

    def _spawn(self, worker: _Worker) -> None:
        worker.env = _worker_env(worker.device)
        worker.process, worker.conn = _popen_worker(worker.env)

    def _send_job(self, worker: _Worker) -> None:
        # A GPU worker sees only its own GPU (CUDA_VISIBLE_DEVICES), as cuda:0.
        device = "cuda:0" if worker.device.startswith("cuda:") else worker.device
        # Plain pickle, not the connection's: torch registers reductions there that share tensors
        # through multiprocessing's resource sharer, which a fresh interpreter is not part of.
        try:
            message = (self.job, device, self.settings, worker.env, [p for p in sys.path if p])
            worker.conn.send_bytes(pickle.dumps(message))
        except (BrokenPipeError, OSError) as error:
            self._kill(worker)
            raise WorkerError(f"the measuring worker on {worker.device} is gone ({error})") from None
        kind, payload = self._receive(worker, self.settings.timeout_s + 120)
        if kind != "ready":
            self._kill(worker)
            error = {"died": _SetupDied, "unavailable": WorkerUnavailable}.get(kind, WorkerError)
            raise error(f"the measuring worker on {worker.device} could not set up the kernel:\n{payload}")

    def start(self) -> None:
        """Starts every measuring process not running yet, in the background, and returns at once:
        a worker's set-up (a fresh interpreter, CUDA, the inputs and their reference) then overlaps
        the session's first compiles instead of following them. A start that fails is reported
        by the first measurement on that worker, as a start made there would be."""
        for worker in self._workers:
            if worker.process is None and worker.starting is None:
                worker.starting = threading.Thread(target=self._start_in_background, args=(worker,),
                                                   name=f"dr_kernel measure start {worker.device}", daemon=True)
                worker.starting.start()

    def _start_in_background(self, worker: _Worker) -> None:
        try:
            self._start(worker)
        except BaseException as error:  # noqa: BLE001 -- raised by the measurement that waits for it.
            worker.start_error = error

    def _join_start(self, worker: _Worker) -> None:
        if worker.starting is not None:
            worker.starting.join()
            worker.starting = None
        if worker.start_error is not None:
            error, worker.start_error = worker.start_error, None
            raise error

    def _receive(self, worker: _Worker, timeout: float):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if worker.conn.poll(0.05):
                try:
                    return worker.conn.recv()
                except EOFError:  # The process closed its end: it is dying or dead.
                    try:
                        code = worker.process.wait(10)
                    except subprocess.TimeoutExpired:
                        code = "unknown"
                    return ("died", f"exit code {code}")
            if worker.process.poll() is not None:
                if worker.conn.poll(0):  # It answered, then died: take the answer.
                    try:
                        return worker.conn.recv()
                    except EOFError:
                        pass
                return ("died", f"exit code {worker.process.returncode}")
        return ("hung", f"no answer within {timeout:.0f} s")

    def _kill(self, worker: _Worker) -> None:
        if worker.process is not None:
            if worker.process.poll() is None:
                worker.process.kill()
            worker.process.wait(10)
        if worker.conn is not None:
            worker.conn.close()
        worker.process = worker.conn = None

    def _measure_one(self, worker: _Worker, config: dict, best_ms: float) -> tuple[dict, float]:
        self._join_start(worker)
        if worker.process is None:
            self._start(worker)
        start = time.perf_counter()
        worker.conn.send(("measure", config, best_ms))
        kind, payload = self._receive(worker, self.settings.timeout_s)
        if kind == "result":
            error = str(payload[0].get("error", ""))
            if ruins_context(error):
                # Found on the H200: after an illegal address every later launch in the process
                # fails with the same error, so the config is to blame and the process is spent.
                self._kill(worker)
                worker.restarts += 1
                return {**payload[0], "status": "crashed",
                        "error": f"{error} (such an error leaves its CUDA context unusable: the measuring process "
                                 "was restarted)"}, payload[1]
            if payload[0].get("status") in ("launch_error", "crashed") or "CUDA" in error:
                worker.tainted = True
            return payload
        # The process died (a crash in the kernel) or hung: this config is to blame. Restart lazily.
        self._kill(worker)
        worker.restarts += 1
        return {"status": "crashed", "error": f"the measuring process {kind} ({payload})"}, time.perf_counter() - start

    def measure(self, configs: Sequence[dict], best_ms: float = math.inf) -> list[tuple[dict, float]]:
        """Measures configs across the workers; returns (measurement, seconds) per config, in order."""
        results: list = [None] * len(configs)
        todo: queue.Queue = queue.Queue()
        for i in range(len(configs)):
            todo.put(i)
        errors: list[BaseException] = []

        def drain(worker: _Worker):
            while not errors:
                try:
                    i = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    results[i] = self._measure_one(worker, configs[i], best_ms)
                except BaseException as e:  # noqa: BLE001 -- re-raised in the caller's thread.
                    errors.append(e)

        threads = [threading.Thread(target=drain, args=(w,)) for w in self._workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return results

    @property
    def restarts(self) -> int:
        return sum(w.restarts for w in self._workers)

    def close(self) -> None:
        for w in self._workers:
            # A start still under way was not needed (nothing was measured on it): stop it.
            deadline = time.monotonic() + 30
            while w.starting is not None and w.starting.is_alive() and time.monotonic() < deadline:
                if w.process is not None and w.process.poll() is None:
                    w.process.kill()
                w.starting.join(0.1)
            try:
                self._join_start(w)
            except BaseException:  # noqa: BLE001 -- a worker that never started has nothing to stop.
                pass
            if w.process is not None and w.process.poll() is None and _reuse_workers() and not w.tainted:
                try:
                    w.conn.send(("park",))
                    if self._receive(w, 10)[0] == "parked":
                        _park(w.device, w.process, w.conn, w.env)
                        w.process = w.conn = None  # The next pool on this device takes it.
                        continue
                except (BrokenPipeError, OSError):
                    pass
            if w.process is not None and w.process.poll() is None:
                try:
                    w.conn.send(("stop",))
                    w.process.wait(5)
                except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                    pass
            self._kill(w)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def visible_devices() -> list[str]:
    """One device string per visible GPU, or ["cpu"] when there is none (the interpreter)."""
    try:
        import torch

        n = torch.cuda.device_count()
    except Exception:  # noqa: BLE001 -- no usable torch CUDA means no GPU.
        n = 0
    if n == 0:
        return ["cpu"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [s.strip() for s in visible.split(",")] if visible else [str(i) for i in range(n)]
    return [f"cuda:{i}" for i in ids[:n]]


@dataclass
class BuiltinJob(Job):
    """A built-in kernel on one problem: inputs drawn from `seed`, checked against its framework
    reference. Holds only names and numbers, so it pickles without Triton objects; on a CPU device
    the kernel runs in Triton's interpreter (set before the kernels are first imported)."""

    kernel: str
    shape: dict
    dtype: str = "fp16"
    seed: int = 0

    def setup(self, device: str) -> Any:
        if device == "cpu":
            os.environ["TRITON_INTERPRET"] = "1"
        from . import kernels

        builtin = kernels.get(self.kernel)
        inputs = builtin.make_inputs(self.shape, self.dtype, device, self.seed)
        return builtin, inputs

    def launch(self, state: Any, config: dict) -> None:
        builtin, inputs = state
        builtin.launch(inputs, config)

    def outputs(self, state: Any) -> list:
        builtin, inputs = state
        return [builtin.output(inputs)]

    def expected(self, state: Any) -> list | None:
        builtin, inputs = state
        return [builtin.reference(inputs)]


def time_framework(kernel, shape: dict, dtype: str, device: str, reps: int = 20, flush_bytes: int = 256 << 20,
                   seed: int = 0) -> float:
    """Returns the median milliseconds of the framework's own operator for a built-in kernel's
    problem (torch.matmul, torch.softmax, scaled_dot_product_attention, rms_norm), timed as configs
    are: an L2 flush and CUDA events around each launch on a GPU, the wall clock on the CPU."""
    import torch

    inputs = kernel.make_inputs(shape, dtype, device, seed)
    timer = _Timer(device, flush_bytes)
    kernel.framework(inputs)  # The first call selects and loads the library's kernel.
    if timer.cuda:
        torch.cuda.synchronize()
    times = [timer.time_ms(lambda: kernel.framework(inputs)) for _ in range(max(1, reps))]
    return statistics.median(times)
