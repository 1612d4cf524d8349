"""A pool of worker processes that compiles and analyses many configurations at once.

Compiling a Triton kernel is single-threaded Python, LLVM and ptxas, so the only way to use
several cores is several processes. Some configurations make ptxas run for minutes (register
spills of very large tiles); a tuner cannot wait for them. Each configuration therefore gets a
deadline: when it passes, the worker running it is killed together with the ptxas it started,
the configuration is reported invalid ("compile timed out after N s") and a fresh worker takes
its place. Results of other configurations are never lost, and a worker that crashes costs only
the configuration it was running.

The pool does not use concurrent.futures or multiprocessing.Pool because neither can kill the
one worker that is stuck: the first can only cancel tasks that have not started, the second
only terminate the whole pool. Here every worker is a spawned process with its own pipe, so the
parent knows which configuration each one runs and since when.

What the workers run is a parameter (`task`), so that tests and other callers can inject their
own; by default it is analyse_request(), which compiles one CompileRequest with analysis.analyse().
"""

from __future__ import annotations

import collections
import importlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from .analysis import H200, DeviceLimits, StaticReport, analyse
from .kernels import BuiltinKernel, get


@dataclass(frozen=True)
class CompileRequest:
    """One configuration of one problem to compile: the unit of work of the pool.

    `kernel` is a built-in kernel's name, or a tuple (fn, signature, constexprs) or
    (fn, signature, constexprs, attrs) for any @triton.jit function; a function travels to the
    workers as a "module:qualname" reference, so it must be defined at the top level of a module.
    """

    kernel: Any
    config: dict[str, Any]
    shape: dict[str, Any] | None = None
    dtype: str = "fp16"
    device: DeviceLimits = field(default=H200)

    @property
    def kernel_name(self) -> str:
        if isinstance(self.kernel, str):
            return self.kernel
        if isinstance(self.kernel, BuiltinKernel):
            return self.kernel.name
        fn = self.kernel[0]
        if isinstance(fn, str):
            return fn.rsplit(":", 1)[-1]
        return getattr(getattr(fn, "fn", fn), "__name__", "?")


def function_reference(fn: Any) -> str:
    """Returns the "module:qualname" by which a worker process can import a @triton.jit function."""
    python = getattr(fn, "fn", fn)
    module, qualname = getattr(python, "__module__", None), getattr(python, "__qualname__", "")
    if module is None or "<locals>" in qualname:
        raise ValueError(f"kernel function {qualname or fn!r} is not defined at the top level of a module, "
                         "so a compile worker cannot import it; define it at module level.")
    return f"{module}:{qualname}"


def resolve_function(reference: str) -> Any:
    """Returns the object a "module:qualname" reference names."""
    module, _, qualname = reference.partition(":")
    target = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def _portable(request: CompileRequest) -> CompileRequest:
    # Built-in kernels cross by name and other functions by reference: @triton.jit functions hold
    # caches that do not pickle, and the worker can import the very same objects.
    kernel = request.kernel
    if isinstance(kernel, BuiltinKernel):
        return replace(request, kernel=kernel.name)
    if isinstance(kernel, tuple) and not isinstance(kernel[0], str):
        return replace(request, kernel=(function_reference(kernel[0]), *kernel[1:]))
    return request


def analyse_request(request: CompileRequest) -> StaticReport:
    """Compiles one request with analysis.analyse(); the pool's default task."""
    kernel = request.kernel
    if isinstance(kernel, str):
        kernel = get(kernel)
    elif isinstance(kernel, tuple) and isinstance(kernel[0], str):
        kernel = (resolve_function(kernel[0]), *kernel[1:])
    return analyse(kernel, request.shape, request.dtype, request.config, request.device)


def failed_report(request: CompileRequest, reason: str, compile_s: float | None = None) -> StaticReport:
    """Returns the report of a configuration whose compile did not come back."""
    return StaticReport(kernel=request.kernel_name, config=dict(request.config),
                        shape=dict(request.shape) if request.shape else None, dtype=request.dtype,
                        valid=False, reason=reason, compile_s=compile_s)


def group_by_binary(reports: Iterable[StaticReport]) -> dict[str, list[int]]:
    """Returns, for each distinct compiled binary among the valid reports, the positions of the
    reports that share it: configurations in one group need to be measured only once."""
    groups: dict[str, list[int]] = collections.defaultdict(list)
    for index, report in enumerate(reports):
        if report.valid and report.binary_hash:
            groups[report.binary_hash].append(index)
    return dict(groups)


# ----- the worker side ---------------------------------------------------------------------------

def _worker_main(connection, task: Callable[[Any], Any]) -> None:
    # A process group of its own lets the parent kill this worker and the ptxas it is running
    # with one signal; killing only the worker would leave ptxas running for minutes.
    if hasattr(os, "setsid"):
        os.setsid()
    # The task and its module (triton included) were imported while unpickling the arguments, so
    # "ready" means ready to compile: start-up time never counts against a configuration.
    connection.send(("ready", None, None))
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        index, request = message
        try:
            outcome = ("done", index, task(request))
        except Exception as error:  # noqa: BLE001 - reported to the parent, which decides.
            outcome = ("error", index, f"{type(error).__name__}: {error}")
        connection.send(outcome)


# ----- the parent side ---------------------------------------------------------------------------

class _Worker:
    """The parent's handle on one worker: its process, its pipe and what it is doing."""

    def __init__(self, context, task: Callable[[Any], Any]) -> None:
        self.connection, child = context.Pipe(duplex=True)
        self.process = context.Process(target=_worker_main, args=(child, task), daemon=True)
        self.process.start()
        child.close()
        self.started = time.monotonic()
        self.ready = False
        self.index: int | None = None  # The request it is compiling, if any.
        self.deadline = float("inf")
        self.assigned_at = 0.0
        self.done = 0

    def assign(self, index: int, request: Any, timeout_s: float) -> None:
        self.connection.send((index, request))
        self.index, self.assigned_at = index, time.monotonic()
        self.deadline = self.assigned_at + timeout_s

    def kill(self) -> None:
        pid = self.process.pid
        try:
            if hasattr(os, "killpg") and os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
            else:
                self.process.kill()
        except (ProcessLookupError, PermissionError):
            pass
        self.process.join(timeout=10)
        self.connection.close()

    def stop(self) -> None:
        try:
            self.connection.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.kill()
        else:
            self.connection.close()


class CompilePool:
    """Runs `task` (by default analyse_request) on many requests in `workers` processes, each
    request within `timeout_s` seconds of compile time.

    Use it as a context manager, or call close(); map() returns results in request order, run()
    yields (position, result) as results arrive. A request whose task overran its deadline, raised,
    or whose worker died yields failed_report() with the reason. Workers are replaced as needed and
    may be recycled after `max_tasks_per_worker` tasks (Triton and LLVM keep memory per compile).
    """

    def __init__(self, workers: int | None = None, timeout_s: float = 120.0,
                 task: Callable[[Any], Any] = analyse_request, max_tasks_per_worker: int | None = None,
                 startup_timeout_s: float = 120.0) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s={timeout_s} is not positive; give the seconds one compile may take.")
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.timeout_s = timeout_s
        self.task = task
        self.max_tasks_per_worker = max_tasks_per_worker
        self.startup_timeout_s = startup_timeout_s
        self._context = multiprocessing.get_context("spawn")
        self._pool: list[_Worker] = []
        self._failed_starts = 0

    # The pool's workers outlive one map() call, so that later batches skip their start-up.
    def __enter__(self) -> CompilePool:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stops every worker, killing those still compiling."""
        for worker in self._pool:
            if worker.index is None:
                worker.stop()
            else:
                worker.kill()
        self._pool.clear()

    def map(self, requests: Iterable[Any]) -> list[Any]:
        """Returns the results of all requests, in the order of the requests."""
        requests = list(requests)
        results: list[Any] = [None] * len(requests)
        for index, result in self.run(requests):
            results[index] = result
        return results

    def run(self, requests: Iterable[Any]) -> Iterator[tuple[int, Any]]:
        """Yields (position, result) for every request as soon as its result is known."""
        requests = [_portable(r) if isinstance(r, CompileRequest) else r for r in requests]
        waiting = collections.deque(range(len(requests)))
        outstanding = len(requests)
        while outstanding:
            self._top_up(min(self.workers, outstanding))
            for worker in self._pool:
                if worker.ready and worker.index is None and waiting:
                    index = waiting.popleft()
                    worker.assign(index, requests[index], self.timeout_s)
            for index, result in self._collect(requests):
                outstanding -= 1
                yield index, result

    def _top_up(self, wanted: int) -> None:
        # Replaces dead workers and starts new ones while fewer than `wanted` are alive.
        while len(self._pool) < wanted:
            self._pool.append(_Worker(self._context, self.task))

    def _failure(self, request: Any, reason: str, compile_s: float | None) -> Any:
        if isinstance(request, CompileRequest):
            return failed_report(request, reason, compile_s)
        return StaticReport(kernel="?", config={}, valid=False, reason=reason, compile_s=compile_s)

    def _retire(self, worker: _Worker, kill: bool) -> None:
        self._pool.remove(worker)
        worker.kill() if kill else worker.stop()

    def _collect(self, requests: list[Any]) -> Iterator[tuple[int, Any]]:
        # Waits until some worker answers, dies or overruns its deadline, and yields what finished.
        now = time.monotonic()
        deadlines = [w.deadline for w in self._pool if w.index is not None]
        deadlines += [w.started + self.startup_timeout_s for w in self._pool if not w.ready]
        wait_s = max(0.0, min(deadlines, default=now + 1.0) - now)
        objects = [w.connection for w in self._pool] + [w.process.sentinel for w in self._pool]
        fired = set(multiprocessing.connection.wait(objects, timeout=wait_s))

        for worker in list(self._pool):
            message = None
            if worker.connection in fired:
                try:
                    message = worker.connection.recv()
                except (EOFError, OSError):
                    message = None
            if message is not None:
                yield from self._handle(worker, message, requests)
            elif worker.connection in fired or worker.process.sentinel in fired:
                yield from self._bury(worker, requests)
            elif worker.index is not None and time.monotonic() >= worker.deadline:
                self._retire(worker, kill=True)
                reason = f"compile timed out after {self.timeout_s:g} s"
                yield worker.index, self._failure(requests[worker.index], reason, self.timeout_s)
            elif not worker.ready and time.monotonic() >= worker.started + self.startup_timeout_s:
                self._retire(worker, kill=True)
                self._note_failed_start(f"did not start within {self.startup_timeout_s:g} s")

    def _handle(self, worker: _Worker, message: tuple, requests: list[Any]) -> Iterator[tuple[int, Any]]:
        # Takes one message a worker sent: that it is ready, or the outcome of its request.
        kind, index, payload = message
        if kind == "ready":
            worker.ready, self._failed_starts = True, 0
            return
        elapsed = time.monotonic() - worker.assigned_at
        worker.index, worker.deadline, worker.done = None, float("inf"), worker.done + 1
        if kind == "done":
            yield index, payload
        else:
            yield index, self._failure(requests[index], f"compile worker raised {payload}", elapsed)
        if self.max_tasks_per_worker and worker.done >= self.max_tasks_per_worker:
            self._retire(worker, kill=False)

    def _bury(self, worker: _Worker, requests: list[Any]) -> Iterator[tuple[int, Any]]:
        # The worker exited or closed its pipe without answering: it crashed (ptxas or LLVM can
        # take the process down) or was killed from outside. Only its own request is lost.
        worker.process.join(timeout=5)
        code = worker.process.exitcode
        self._retire(worker, kill=True)
        if worker.index is not None:
            reason, elapsed = f"compile worker died (exit code {code})", time.monotonic() - worker.assigned_at
            yield worker.index, self._failure(requests[worker.index], reason, elapsed)
        else:
            self._note_failed_start(f"exited with code {code} before it was ready")

    def _note_failed_start(self, what: str) -> None:
        # A worker that cannot even start (a broken install, an unimportable task) will not start
        # the next time either; give up after a few tries instead of looping forever.
        self._failed_starts += 1
        if self._failed_starts >= 3:
            self.close()
            raise RuntimeError(f"compile workers keep failing to start (the last one {what}); check that "
                               "`import triton` works, that the task is importable at module level and that "
                               "the calling script guards its entry point with `if __name__ == '__main__':`.")
