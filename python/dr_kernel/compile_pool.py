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
only terminate the whole pool. Here every worker is a process of its own with its own socket, so
the parent knows which configuration each one runs and since when.

What the workers run is a parameter (`task`), so that tests and other callers can inject their
own; by default it is analyse_request(), which compiles one CompileRequest with analysis.analyse().
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import inspect
import multiprocessing.connection
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .analysis import H200, DeviceLimits, LauncherSource, LaunchSource, StaticReport, analyse, build_launcher
from .kernels import BuiltinKernel, get
from .spawning import START_LOCK


@dataclass(frozen=True)
class CompileRequest:
    """One configuration of one problem to compile: the unit of work of the pool.

    `kernel` is a built-in kernel's name, a tuple (fn, signature, constexprs) or
    (fn, signature, constexprs, attrs) for any @triton.jit function, a LaunchSource (a launch
    described exactly, see launch.py) or a LauncherSource (only the C launcher of a signature);
    a function travels to the workers as a "module:qualname" reference, so it must be defined at
    the top level of a module.
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
        if isinstance(self.kernel, LauncherSource):
            return "launcher"
        fn = self.kernel.fn if isinstance(self.kernel, LaunchSource) else self.kernel[0]
        if isinstance(fn, str):
            return fn.rsplit(":", 1)[-1]
        if not isinstance(fn, str) and _is_reference(fn):
            return fn.name  # A Shipped source.
        return getattr(getattr(fn, "fn", fn), "__name__", "?")


def function_reference(fn: Any) -> Any:
    """Returns the "module:qualname" by which a worker process can import a @triton.jit function,
    or, for one of __main__ (a script's, a notebook's), its source (shipping.Shipped)."""
    python = getattr(fn, "fn", fn)
    module, qualname = getattr(python, "__module__", None), getattr(python, "__qualname__", "")
    if module == "__main__" and "<locals>" not in qualname:
        from .shipping import reference

        return reference(jit_function(fn))  # Raises Unshippable (a ValueError) saying why not.
    if module is None or "<locals>" in qualname:
        raise ValueError(f"kernel function {qualname or fn!r} is not defined at the top level of a module, "
                         "so a compile worker cannot import it; define it at module level.")
    return f"{module}:{qualname}"


def _is_reference(fn: Any) -> bool:
    from .shipping import Shipped

    return isinstance(fn, (str, Shipped))


def resolve_function(reference: Any) -> Any:
    """Returns the @triton.jit function a "module:qualname" reference (or a Shipped source) names.
    The name may be bound to a wrapper around it (triton.autotune, triton.heuristics, dr_kernel's
    decorators, in any stacking): each wrapper keeps what it wraps in `.fn`, which is followed down
    to the kernel, without this module knowing the wrappers."""
    if not isinstance(reference, str):
        from .shipping import resolve

        return resolve(reference)
    module, _, qualname = reference.partition(":")
    target = owner = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    if inspect.isfunction(target):
        # The name is the plain function (`kernel = triton.jit(_kernel)` binds another name): the
        # kernel is whichever module attribute wraps exactly this function.
        for value in vars(owner).values():
            with contextlib.suppress(TypeError):
                if jit_function(value).fn is target:
                    return jit_function(value)
    return jit_function(target)


def jit_function(kernel: Any) -> Any:
    """The @triton.jit function (JITFunction, or InterpretedFunction under TRITON_INTERPRET=1)
    under any stack of wrappers that keep what they wrap in `.fn`."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    while not isinstance(kernel, (JITFunction, InterpretedFunction)):
        inner = getattr(kernel, "fn", None)
        if inner is None:
            raise TypeError(f"{kernel!r} is not a @triton.jit function nor a decorator wrapping one")
        kernel = inner
    return kernel


def _portable(request: CompileRequest) -> CompileRequest:
    # Built-in kernels cross by name and other functions by reference: @triton.jit functions hold
    # caches that do not pickle, and the worker can import the very same objects.
    kernel = request.kernel
    if isinstance(kernel, BuiltinKernel):
        return replace(request, kernel=kernel.name)
    if isinstance(kernel, LaunchSource) and not _is_reference(kernel.fn):
        return replace(request, kernel=replace(kernel, fn=function_reference(kernel.fn)))
    if isinstance(kernel, tuple) and not _is_reference(kernel[0]):
        return replace(request, kernel=(function_reference(kernel[0]), *kernel[1:]))
    return request


def analyse_request(request: CompileRequest) -> StaticReport:
    """Compiles one request with analysis.analyse(); the pool's default task."""
    kernel = request.kernel
    if isinstance(kernel, LauncherSource):
        return build_launcher(kernel)
    if isinstance(kernel, str):
        kernel = get(kernel)
    elif isinstance(kernel, LaunchSource) and _is_reference(kernel.fn):
        kernel = replace(kernel, fn=resolve_function(kernel.fn))
    elif isinstance(kernel, tuple) and _is_reference(kernel[0]):
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

def _child_entry(fd: int) -> None:
    """Entry point of a compile worker: a fresh interpreter whose first message is the task."""
    connection = multiprocessing.connection.Connection(fd)
    # Unpickling the task imports its module (triton included), so "ready" below means ready to
    # compile: start-up time never counts against a configuration.
    task = pickle.loads(connection.recv_bytes())
    _worker_main(connection, task)


def _worker_main(connection, task: Callable[[Any], Any]) -> None:
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

class _Forked:
    """A forked worker process, with the part of subprocess.Popen's interface the pool uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
                break
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"compile worker {self.pid}", timeout)
            time.sleep(0.01)
        return self.returncode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)


def _fork(child: socket.socket, task: Callable[[Any], Any], scratch: str) -> _Forked:
    """Starts a worker as a fork of this process: it has every module the caller imported (Triton,
    torch, the library whose kernels it compiles), so it is ready in milliseconds where a fresh
    interpreter takes seconds. The child only compiles: it never touches the GPU (a CUDA context
    does not survive a fork), and leaves with os._exit so that no inherited exit handler runs."""
    pid = os.fork()
    if pid:
        child.close()
        return _Forked(pid)
    code = 0
    try:
        os.setsid()  # As start_new_session: the parent kills the worker and its ptxas together.
        os.environ["TMPDIR"] = tempfile.tempdir = scratch  # See _Worker.scratch.
        _worker_main(multiprocessing.connection.Connection(child.detach()), task)
    except BaseException:  # noqa: BLE001 -- the parent sees the worker die and reports it.
        code = 1
    finally:
        os._exit(code)


def fork_workers() -> bool:
    """Whether compile workers are forked: on Linux, unless kernels run in Triton's interpreter
    (whose own @jit helpers cannot be compiled, so workers must import Triton afresh) or
    DR_KERNEL_COMPILE_FORK=0."""
    return (sys.platform.startswith("linux") and not os.environ.get("TRITON_INTERPRET")
            and os.environ.get("DR_KERNEL_COMPILE_FORK", "1") != "0")


_WARMING: list[threading.Thread] = []
_WARMING_LOCK = threading.Lock()


def warm_compiler() -> None:
    """Does once, in this process, what the first compile of every fresh process does: hash
    Triton's own files and library for its cache keys (0.3 s), import the code generator and ask
    ptxas its version. Forked workers inherit the result, so none of them pays it again, and
    sixteen of them do not hash the same 400 MB at once. Best effort: a part that fails is left to
    the workers."""
    with contextlib.suppress(Exception):
        from triton.runtime.cache import triton_key

        triton_key()
    with contextlib.suppress(Exception):
        import triton.compiler.code_generator  # noqa: F401
        from triton.backends.nvidia.compiler import get_ptxas_version

        get_ptxas_version()


def start_warming() -> None:
    """Starts warm_compiler() in a background thread, once per process, when workers will be
    forked: it runs while the program goes on importing and building its model."""
    if not fork_workers():
        return
    with _WARMING_LOCK:
        if not _WARMING:
            thread = threading.Thread(target=warm_compiler, name="dr_kernel-warm-compiler", daemon=True)
            thread.start()
            _WARMING.append(thread)


def wait_warmed() -> None:
    """Waits for start_warming()'s thread: a fork while it imports would leave the child holding
    a lock that no thread of the child will release."""
    with _WARMING_LOCK:
        threads = list(_WARMING)
    for thread in threads:
        thread.join()


class _Worker:
    """The parent's handle on one worker: its process, its pipe and what it is doing.

    A worker is a fresh interpreter (`python -c`), not a multiprocessing spawn: spawn re-runs the
    caller's main script in the child, which for a user's script without a __main__ guard would
    tune again (and fail). It runs in a session of its own, so that the parent can kill it and
    the ptxas it is running with one signal; killing only the worker would leave ptxas running.
    """

    def __init__(self, task: Callable[[Any], Any], fork: bool = False) -> None:
        with START_LOCK:  # No other thread starts a child while this one's socket is half made (spawning.py).
            self._start(task, fork)
        self._init_state()

    def _start(self, task: Callable[[Any], Any], fork: bool) -> None:
        # The worker's temporary files (Triton's and ptxas's, the analyser's cubins) go to a folder
        # of its own, which the parent removes when the worker ends: a worker killed at a compile
        # deadline cannot clean up after itself.
        self.scratch = tempfile.mkdtemp(prefix="dr_kernel_worker_")
        parent, child = socket.socketpair()
        if fork:
            self.process = _fork(child, task, self.scratch)
            self.connection = multiprocessing.connection.Connection(parent.detach())
            return
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        env["DR_KERNEL_WORKER"] = "1"  # No agent to load (dr_kernel/__init__.py).
        env["TMPDIR"] = self.scratch
        # Workers compile; they never interpret. Under TRITON_INTERPRET=1 triton.language's own
        # @jit helpers are interpreter functions, and compiling a kernel that calls them fails.
        env.pop("TRITON_INTERPRET", None)
        command = f"from dr_kernel.compile_pool import _child_entry; _child_entry({child.fileno()})"
        self.process = subprocess.Popen([sys.executable, "-c", command], pass_fds=(child.fileno(),), env=env,
                                        start_new_session=True)
        child.close()
        self.connection = multiprocessing.connection.Connection(parent.detach())
        # Plain pickle by reference: the task is a module-level function the child imports.
        self.connection.send_bytes(pickle.dumps(task))

    def _init_state(self) -> None:
        self.started = time.monotonic()
        self.ready = False
        self.index: int | None = None  # The ticket of the request it is compiling, if any.
        self.speculative = False
        self.deadline = self.limit_s = float("inf")
        self.assigned_at = 0.0
        self.done = 0

    def assign(self, index: int, request: Any, timeout_s: float, speculative: bool = False) -> None:
        self.connection.send((index, request))
        self.index, self.assigned_at, self.speculative = index, time.monotonic(), speculative
        self.limit_s, self.deadline = timeout_s, self.assigned_at + timeout_s

    def exitcode(self, wait_s: float) -> int | None:
        try:
            return self.process.wait(wait_s)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, AttributeError):
            with contextlib.suppress(OSError):
                self.process.kill()
        self.exitcode(10)
        self.connection.close()
        self._remove_scratch()

    def stop(self) -> None:
        try:
            self.connection.send(None)
        except (BrokenPipeError, OSError):
            pass
        if self.exitcode(5) is None:
            self.kill()
        else:
            self.connection.close()
            self._remove_scratch()

    def _remove_scratch(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)


class RequestQueue:
    """The requests a pool has not started, by ticket: urgent ones first, speculative ones (the
    strategy's guesses) when a worker is idle. CompilePool and distributed.RayCompilePool
    dispatch from it."""

    def _init_queue(self) -> None:
        self._requests: dict[int, Any] = {}  # Submitted and not yet answered, by ticket.
        self._urgent: collections.deque[int] = collections.deque()
        self._speculative: collections.deque[int] = collections.deque()
        self._limits: dict[int, float] = {}  # Deadlines of requests that have their own, until they start.
        self._next_ticket = 0

    def submit(self, request: Any, speculative: bool = False, timeout_s: float | None = None) -> int:
        """Queues one request and returns its ticket; poll() later returns (ticket, result).
        `timeout_s` overrides the pool's deadline for this request."""
        ticket = self._next_ticket
        self._next_ticket += 1
        if timeout_s is not None:
            self._limits[ticket] = timeout_s
        self._requests[ticket] = _portable(request) if isinstance(request, CompileRequest) else request
        (self._speculative if speculative else self._urgent).append(ticket)
        return ticket

    def prioritise(self, ticket: int) -> None:
        """Makes a queued speculative request urgent (it is needed now after all)."""
        if ticket in self._speculative:
            self._speculative.remove(ticket)
            self._urgent.append(ticket)

    def promote(self, tickets: Sequence[int]) -> None:
        """Moves queued speculative requests to the front of the guesses, in the given order: the
        newest guesses (the neighbours of the config just proposed) are the likeliest to be asked
        for next, the oldest the least."""
        queued = [t for t in tickets if t in self._speculative]
        for ticket in queued:
            self._speculative.remove(ticket)
        self._speculative.extendleft(reversed(queued))

    def shorten(self, ticket: int, timeout_s: float) -> None:
        """Lowers one request's deadline to `timeout_s` seconds of compile time (from its start,
        whether it has started or not); a later deadline than it has is ignored."""
        if ticket in self._requests and ticket not in self._urgent and ticket not in self._speculative:
            self._shorten_running(ticket, timeout_s)
        elif ticket in self._requests:
            self._limits[ticket] = min(self._limits.get(ticket, self.timeout_s), timeout_s)

    def _shorten_running(self, ticket: int, timeout_s: float) -> None:
        raise NotImplementedError

    def cancel(self, ticket: int) -> bool:
        """Drops a request that has not started; returns False when it is running or answered."""
        for queue in (self._speculative, self._urgent):
            if ticket in queue:
                queue.remove(ticket)
                del self._requests[ticket]
                self._limits.pop(ticket, None)
                return True
        return False


class CompilePool(RequestQueue):
    """Runs `task` (by default analyse_request) on many requests in `workers` processes, each
    request within `timeout_s` seconds of compile time.

    Use it as a context manager, or call close(); map() returns results in request order, run()
    yields (position, result) as results arrive. A request whose task overran its deadline, raised,
    or whose worker died yields failed_report() with the reason. Workers are replaced as needed and
    may be recycled after `max_tasks_per_worker` tasks (Triton and LLVM keep memory per compile).

    submit() and poll() are the same machinery one request at a time, for callers that compile
    ahead of need: a tuning session asks for the configs it must measure now (urgent) and queues
    the configs it may ask for next (speculative). Urgent requests always start first, and
    speculative ones never occupy every worker, so that an urgent request waits at most for a
    worker to start, not for a queue of guesses.
    """

    def __init__(self, workers: int | None = None, timeout_s: float = 120.0,
                 task: Callable[[Any], Any] = analyse_request, max_tasks_per_worker: int | None = None,
                 startup_timeout_s: float = 120.0, fork: bool = False) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s={timeout_s} is not positive; give the seconds one compile may take.")
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.timeout_s = timeout_s
        self.task = task
        self.max_tasks_per_worker = max_tasks_per_worker
        self.startup_timeout_s = startup_timeout_s
        self.fork = fork  # Workers forked from this process (see fork_workers()) rather than started afresh.
        self._pool: list[_Worker] = []
        self._failed_starts = 0
        self._init_queue()
        self._unclaimed: list[tuple[int, Any]] = []  # Answers run() received for others' tickets.

    # The pool's workers outlive one map() call, so that later batches skip their start-up.
    def __enter__(self) -> CompilePool:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stops every worker, killing those still compiling; requests not answered are dropped."""
        for worker in self._pool:
            if worker.index is None:
                worker.stop()
            else:
                worker.kill()
        self._pool.clear()
        self._requests.clear()
        self._urgent.clear()
        self._speculative.clear()
        self._unclaimed.clear()
        self._limits.clear()

    def map(self, requests: Iterable[Any]) -> list[Any]:
        """Returns the results of all requests, in the order of the requests."""
        requests = list(requests)
        results: list[Any] = [None] * len(requests)
        for index, result in self.run(requests):
            results[index] = result
        return results

    def run(self, requests: Iterable[Any]) -> Iterator[tuple[int, Any]]:
        """Yields (position, result) for every request as soon as its result is known."""
        position = {self.submit(r): i for i, r in enumerate(requests)}
        left = len(position)
        while left:
            for ticket, result in self._poll_workers(None):
                if ticket in position:
                    left -= 1
                    yield position[ticket], result
                else:
                    self._unclaimed.append((ticket, result))

    # ----- one request at a time -------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Requests submitted and not yet answered (queued or compiling)."""
        return len(self._requests)

    def poll(self, timeout: float | None = None) -> list[tuple[int, Any]]:
        """Starts queued requests on free workers, waits at most `timeout` seconds (None: until
        something happens) and returns the (ticket, result) pairs that finished."""
        if self._unclaimed:
            done, self._unclaimed = self._unclaimed, []
            return done
        if not self._requests:
            return []
        return self._poll_workers(timeout)

    def _poll_workers(self, timeout: float | None) -> list[tuple[int, Any]]:
        queued = len(self._urgent) + len(self._speculative)
        running = sum(1 for w in self._pool if w.index is not None)
        self._top_up(min(self.workers, queued + running))
        self._dispatch()
        done = list(self._collect(self._requests, timeout))
        for ticket, _ in done:
            self._requests.pop(ticket, None)
        return done

    def _dispatch(self) -> None:
        # Urgent requests first; guesses may use every worker but one, so that an urgent request
        # finds a free worker as soon as the current compiles allow.
        guessing = sum(1 for w in self._pool if w.index is not None and w.speculative)
        for worker in self._pool:
            if not (worker.ready and worker.index is None):
                continue
            if self._urgent:
                ticket, speculative = self._urgent.popleft(), False
            elif self._speculative and guessing < max(1, self.workers - 1):
                ticket, speculative = self._speculative.popleft(), True
                guessing += 1
            else:
                return
            worker.assign(ticket, self._requests[ticket], self._limits.pop(ticket, self.timeout_s), speculative)

    def _top_up(self, wanted: int) -> None:
        # Replaces dead workers and starts new ones while fewer than `wanted` are alive.
        if self.fork and len(self._pool) < wanted:
            wait_warmed()
        while len(self._pool) < wanted:
            self._pool.append(_Worker(self.task, fork=self.fork))

    def _failure(self, request: Any, reason: str, compile_s: float | None) -> Any:
        if isinstance(request, CompileRequest):
            return failed_report(request, reason, compile_s)
        return StaticReport(kernel="?", config={}, valid=False, reason=reason, compile_s=compile_s)

    def _shorten_running(self, ticket: int, timeout_s: float) -> None:
        for worker in self._pool:
            if worker.index == ticket and timeout_s < worker.limit_s:
                worker.limit_s, worker.deadline = timeout_s, worker.assigned_at + timeout_s

    def _retire(self, worker: _Worker, kill: bool) -> None:
        self._pool.remove(worker)
        worker.kill() if kill else worker.stop()

    def _collect(self, requests: Mapping[int, Any], timeout: float | None) -> Iterator[tuple[int, Any]]:
        # Waits until some worker answers, dies or overruns its deadline (or `timeout` passes),
        # and yields what finished. A worker that dies closes its end of the socket, which wakes
        # the wait as an end-of-file.
        now = time.monotonic()
        deadlines = [w.deadline for w in self._pool if w.index is not None]
        deadlines += [w.started + self.startup_timeout_s for w in self._pool if not w.ready]
        wait_s = max(0.0, min(deadlines, default=now + 1.0) - now)
        if timeout is not None:
            wait_s = min(wait_s, max(0.0, timeout))
        fired = set(multiprocessing.connection.wait([w.connection for w in self._pool], timeout=wait_s))

        for worker in list(self._pool):
            message = None
            if worker.connection in fired:
                try:
                    message = worker.connection.recv()
                except (EOFError, OSError):
                    message = None
            if message is not None:
                yield from self._handle(worker, message, requests)
            elif worker.connection in fired:
                yield from self._bury(worker, requests)
            elif worker.index is not None and time.monotonic() >= worker.deadline:
                self._retire(worker, kill=True)
                reason = f"compile timed out after {worker.limit_s:g} s"
                yield worker.index, self._failure(requests[worker.index], reason, worker.limit_s)
            elif not worker.ready and time.monotonic() >= worker.started + self.startup_timeout_s:
                self._retire(worker, kill=True)
                self._note_failed_start(f"did not start within {self.startup_timeout_s:g} s")

    def _handle(self, worker: _Worker, message: tuple, requests: Mapping[int, Any]) -> Iterator[tuple[int, Any]]:
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

    def _bury(self, worker: _Worker, requests: Mapping[int, Any]) -> Iterator[tuple[int, Any]]:
        # The worker exited or closed its pipe without answering: it crashed (ptxas or LLVM can
        # take the process down) or was killed from outside. Only its own request is lost.
        code = worker.exitcode(5)
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
                               "`import triton` works and that the task is importable at module level.")


# ----- where a process's compiles run --------------------------------------------------------------

# A process may send its compiles elsewhere than to a pool of its own: a tune-many worker on Ray
# sends them as tasks to the cluster's CPU workers (distributed.py). Tuning sessions and sweeps
# take their pool from make_pool(), which builds a CompilePool unless a factory was installed.
_FACTORY: list[Callable[..., Any]] = []


def use_pool_factory(factory: Callable[..., Any] | None) -> None:
    """Makes make_pool() call `factory(workers=, timeout_s=, fork=)` from now on (None: CompilePool
    again). The factory's pools must have CompilePool's submit/poll/cancel/prioritise/promote/run/close."""
    _FACTORY[:] = [factory] if factory is not None else []


def make_pool(workers: int | None = None, timeout_s: float = 120.0, fork: bool = False) -> Any:
    """A compile pool for a session or a sweep: a CompilePool, or what use_pool_factory() installed."""
    if _FACTORY:
        return _FACTORY[0](workers=workers, timeout_s=timeout_s, fork=fork)
    return CompilePool(workers=workers, timeout_s=timeout_s, fork=fork)
