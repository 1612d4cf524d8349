"""Where tune-many and sweep run their work: measuring actors on Ray, or local worker processes.

    engine = make_engine(address=None, backend="auto", measurers=None, env={...})
    report = engine.run(items, on_result)   # items: (id, "module:function", payload)
    engine.close()

On Ray (a cluster's address, or none: Ray started in this process) one measuring actor runs per
GPU of the cluster, or `measurers` of them spread over the nodes of a cluster without GPUs. An
actor runs one item at a time, and the compiles of its tuning sessions go to the cluster's CPU
workers as Ray tasks (RayCompilePool), placed on the actor's node while it has a free CPU, so that
the node's Triton cache holds the binary the actor then launches. The head (this process) hands
out the items and gives each result to `on_result` as it arrives: only the head writes (the
store, a table), so no file system need be shared. An item whose actor died (killed, out of
memory, its node lost) goes to another actor, at most `attempts` times; Ray restarts a dead actor
where a GPU is free, and it is given work again once it answers.

Without Ray the same runs on a pool of processes of this machine, one per GPU (or `measurers`),
each compiling in a CompilePool of its own share of the cores. Ray is optional: this module
imports it only when it is used.
"""

from __future__ import annotations

import collections
import importlib
import logging
import os
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .compile_pool import CompilePool, CompileRequest, RequestQueue, failed_report

Item = tuple[str, str, dict]  # (id, "module:function" run by a worker, its payload)
BACKENDS = ("auto", "ray", "pool")


def ray_available() -> bool:
    """Whether Ray can be imported (it is an optional dependency)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class RunReport:
    """What an engine did: its kind, its measuring workers, the items handed out again after a
    worker died (`requeued`), those given up (`failed`: id → reason), where results came from, and
    the items not started before the run's deadline (`left`)."""

    backend: str
    workers: int
    requeued: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    hosts: collections.Counter = field(default_factory=collections.Counter)
    left: list[str] = field(default_factory=list)  # Items not handed out before the run's deadline.


def make_engine(address: str | None = None, backend: str = "auto", measurers: int | None = None,
                env: Mapping[str, str] | None = None, attempts: int = 3):
    """A RayEngine when Ray is asked for (backend "ray", or an address) or, with backend "auto",
    installed; else a PoolEngine. `env` is set in every worker before it imports a kernel."""
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r}: give one of {', '.join(BACKENDS)}")
    if measurers is not None and measurers < 1:
        raise ValueError(f"measurers={measurers}: give at least 1 measuring worker")
    if backend == "pool" and address:
        raise ValueError("a cluster address needs Ray: leave out --backend pool")
    if backend == "ray" or address or (backend == "auto" and ray_available()):
        if not ray_available():
            raise ValueError("Ray is not installed: pip install 'ray>=2.40', or run on this machine with "
                             "--backend pool")
        return RayEngine(address, measurers, dict(env or {}), attempts)
    return PoolEngine(measurers, dict(env or {}), attempts)


def call(function: str, payload: dict) -> Any:
    """Runs the worker function a "module:function" reference names."""
    module, _, name = function.partition(":")
    return getattr(importlib.import_module(module), name)(payload)


def _take_path(env: Mapping[str, str]) -> None:
    os.environ.update(env)
    for p in reversed(env.get("PYTHONPATH", "").split(os.pathsep)):
        if p and p not in sys.path:
            sys.path.insert(0, p)


def _host() -> str:
    import socket

    return socket.gethostname()


# ----- Ray ------------------------------------------------------------------------------------------

class MeasureWorker:
    """The measuring actor's class (one per GPU): runs items one at a time; its compiles go to Ray
    tasks when `compile_env` is given (the environment those tasks start with)."""

    def __init__(self, env: Mapping[str, str], compile_env: Mapping[str, str] | None) -> None:
        import ray

        from . import compile_pool

        _take_path(env)
        self.node = ray.get_runtime_context().get_node_id()
        if compile_env is not None:
            node, task_env = self.node, dict(compile_env)

            def pool(workers=None, timeout_s=120.0, fork=False):  # As many compiles in flight as the node has CPUs.
                return RayCompilePool(None, timeout_s, node_id=node, env=task_env)

            compile_pool.use_pool_factory(pool)

    def run(self, function: str, payload: dict) -> Any:
        return call(function, payload)

    def where(self) -> str:
        return f"{_host()}/{self.node[:8]}"


def _compile_task(request: CompileRequest):
    from .compile_pool import analyse_request

    return analyse_request(request)


class RayCompilePool(RequestQueue):
    """CompilePool's interface (submit, poll, prioritise, cancel, run, close) over Ray tasks of
    one CPU each: at most `workers` in flight (default: the CPUs of `node_id`'s node), urgent
    requests first, guesses on all but one of them; a task past its deadline is cancelled (its
    worker killed) and reported as timed out, a task that failed as a compile error."""

    def __init__(self, workers: int | None = None, timeout_s: float = 120.0, fork: bool = False, *,
                 node_id: str | None = None, env: Mapping[str, str] | None = None) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.timeout_s = timeout_s
        if workers is None:
            cpus = [n.get("Resources", {}).get("CPU", 0) for n in ray.nodes() if n.get("NodeID") == node_id]
            workers = int(cpus[0]) if cpus else os.cpu_count()
        self.workers = max(1, workers or 1)
        placement = NodeAffinitySchedulingStrategy(node_id, soft=True) if node_id else "DEFAULT"
        self._task = ray.remote(_compile_task).options(num_cpus=1, max_retries=0, scheduling_strategy=placement,
                                                       runtime_env={"env_vars": dict(env or {})})
        self._init_queue()
        self._running: dict[Any, tuple[int, float, float, bool]] = {}  # ref → (ticket, started, limit, guess)

    def __enter__(self) -> RayCompilePool:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    @property
    def pending(self) -> int:
        return len(self._requests)

    def _dispatch(self) -> None:
        guessing = sum(1 for *_, guess in self._running.values() if guess)
        while len(self._running) < self.workers:
            if self._urgent:
                ticket, guess = self._urgent.popleft(), False
            elif self._speculative and guessing < max(1, self.workers - 1):
                ticket, guess = self._speculative.popleft(), True
                guessing += 1
            else:
                return
            ref = self._task.remote(self._requests[ticket])
            self._running[ref] = (ticket, time.monotonic(), self._limits.pop(ticket, self.timeout_s), guess)

    def _shorten_running(self, ticket: int, timeout_s: float) -> None:
        for ref, (running, started, limit, guess) in self._running.items():
            if running == ticket and timeout_s < limit:
                self._running[ref] = (running, started, timeout_s, guess)

    def poll(self, timeout: float | None = None) -> list[tuple[int, Any]]:
        import ray

        self._dispatch()
        if not self._running:
            return []
        now = time.monotonic()
        wait_s = max(0.0, min(started + limit for _, started, limit, _ in self._running.values()) - now)
        if timeout is not None:
            wait_s = min(wait_s, max(0.0, timeout))
        refs = list(self._running)
        ready, _ = ray.wait(refs, num_returns=1, timeout=wait_s)
        if ready:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        done = []
        for ref in ready:
            ticket, started, _, _ = self._running.pop(ref)
            request = self._requests.pop(ticket)
            try:
                done.append((ticket, ray.get(ref)))
            except Exception as error:  # noqa: BLE001 -- the compile task died or raised: this config fails.
                reason = f"compile task failed ({type(error).__name__}: {str(error).splitlines()[0][:300]})"
                done.append((ticket, self._failure(request, reason, time.monotonic() - started)))
        now = time.monotonic()
        for ref, (ticket, started, limit, _) in list(self._running.items()):
            if now >= started + limit:
                ray.cancel(ref, force=True)
                del self._running[ref]
                done.append((ticket, self._failure(self._requests.pop(ticket), f"compile timed out after {limit:g} s",
                                                   limit)))
        self._dispatch()
        return done

    @staticmethod
    def _failure(request: Any, reason: str, seconds: float):
        from .analysis import StaticReport

        if isinstance(request, CompileRequest):
            return failed_report(request, reason, seconds)
        return StaticReport(kernel="?", config={}, valid=False, reason=reason, compile_s=seconds)

    def run(self, requests: Sequence[Any]):
        position = {self.submit(r): i for i, r in enumerate(requests)}
        while position:
            for ticket, report in self.poll(None):
                if ticket in position:
                    yield position.pop(ticket), report

    def map(self, requests: Sequence[Any]) -> list[Any]:
        out: list[Any] = [None] * len(requests)
        for i, report in self.run(requests):
            out[i] = report
        return out

    def close(self) -> None:
        import ray

        for ref in self._running:
            ray.cancel(ref, force=True)
        self._running.clear()
        self._requests.clear()
        self._urgent.clear()
        self._speculative.clear()


# Pings a measuring actor that died under an item may fail before it counts as gone for good.
PINGS = 10


class RayEngine:
    """Measuring actors on a Ray cluster; see the module's docstring."""

    kind = "ray"

    def __init__(self, address: str | None, measurers: int | None, env: dict, attempts: int = 3) -> None:
        import ray

        self.started = not ray.is_initialized()
        if self.started:
            ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
        resources = ray.cluster_resources()
        gpus = int(resources.get("GPU", 0))
        nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
        count = min(gpus, measurers or gpus) if gpus else (measurers or max(1, nodes))
        compile_env = {**env, "TRITON_INTERPRET": "0"}  # Compiles never interpret (compile_pool.py).
        options = {"num_cpus": 0, "max_restarts": 3, "max_task_retries": 0, "runtime_env": {"env_vars": env}}
        options.update({"num_gpus": 1} if gpus else {"scheduling_strategy": "SPREAD"})
        actor = ray.remote(MeasureWorker)
        self.prefix = f"dr_kernel-measure-{uuid.uuid4().hex[:6]}"
        self.actors = [actor.options(name=f"{self.prefix}-{i}", **options).remote(env, compile_env)
                       for i in range(count)]
        self.attempts = attempts
        self._busy: dict[Any, tuple[int, Item, int]] = {}

    def run(self, items: Sequence[Item], on_result: Callable[[str, Any], None], stall_s: float = 600.0,
            deadline: float | None = None) -> RunReport:
        """Hands the items out, one per free actor, until every one has a result; past `deadline`
        (time.monotonic()) no new item starts: those still queued are left in report.left."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        report = self.report = RunReport("ray", len(self.actors))  # Readable while it runs (tests).
        queue = collections.deque((item, 1) for item in items)
        free = collections.deque(range(len(self.actors)))
        busy = self._busy = {}  # ref → (actor's index, item, attempt)
        pings: dict[Any, int] = {}  # Actors that died under an item: used again once they answer.
        missed: dict[int, int] = {}  # Pings each of them failed.
        where: dict[int, str] = {}
        quiet_since = time.monotonic()
        while queue or busy:
            if queue and deadline is not None and time.monotonic() > deadline:
                report.left.extend(item[0] for item, _ in queue)
                queue.clear()
                if not busy:
                    break
            while queue and free:
                index = free.popleft()
                item, attempt = queue.popleft()
                busy[self.actors[index].run.remote(item[1], item[2])] = (index, item, attempt)
            if not busy and queue and (not pings or time.monotonic() - quiet_since > stall_s):
                raise RuntimeError(f"no measuring worker is left, or none has answered for {stall_s:g} s "
                                   f"({len(queue)} items left); what was measured is stored: run the same command "
                                   "again to go on")
            ready, _ = ray.wait([*busy, *pings], num_returns=1, timeout=1.0)
            for ref in ready:
                quiet_since = time.monotonic()
                if ref in pings:
                    index = pings.pop(ref)
                    try:
                        where[index] = ray.get(ref)
                        free.append(index)
                    except (RayActorError, GetTimeoutError):
                        # A call can fail while Ray restarts the actor (slowly on a loaded machine):
                        # asked again a few times before it counts as gone for good (out of
                        # restarts), when the others take its share.
                        missed[index] = missed.get(index, 0) + 1
                        if missed[index] < PINGS:
                            time.sleep(0.5)
                            pings[self.actors[index].where.remote()] = index
                    continue
                index, item, attempt = busy.pop(ref)
                try:
                    result = ray.get(ref)
                except RayTaskError as error:  # The function raised: the item's own failure, not the actor's.
                    free.append(index)
                    report.failed[item[0]] = str(error.cause if error.cause is not None else error)[:2000]
                    on_result(item[0], {"error": report.failed[item[0]]})
                    continue
                except RayActorError as error:
                    pings[self.actors[index].where.remote()] = index
                    if attempt < self.attempts:
                        report.requeued += 1
                        queue.appendleft((item, attempt + 1))
                    else:
                        report.failed[item[0]] = f"its measuring worker died {attempt} times ({error})"[:2000]
                        on_result(item[0], {"error": report.failed[item[0]]})
                    continue
                free.append(index)
                if index not in where:
                    where[index] = ray.get(self.actors[index].where.remote())
                report.hosts[where[index]] += 1
                on_result(item[0], result)
        return report

    def busy_actors(self) -> list:
        """The actors running an item now (for tests that kill one mid-run)."""
        return [self.actors[index] for index, _, _ in self._busy.values()]

    def close(self) -> None:
        import ray

        for actor in self.actors:
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001,S110 -- an actor already gone.
                pass
        self.actors = []
        if self.started:
            ray.shutdown()


# ----- a local process pool -------------------------------------------------------------------------

def _child_main(fd: int) -> None:
    """A pool worker: a fresh interpreter (not a multiprocessing spawn, which would import the
    caller's main script again) that runs the items it is sent, one at a time."""
    from multiprocessing.connection import Connection

    from . import compile_pool

    connection = Connection(fd)
    env, compile_workers = connection.recv()
    _take_path(env)

    def pool(workers=None, timeout_s=120.0, fork=False):  # Its share of this machine's cores.
        return CompilePool(workers=compile_workers, timeout_s=timeout_s, fork=fork)

    compile_pool.use_pool_factory(pool)
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        function, payload = message
        try:
            outcome = ("done", call(function, payload))
        except Exception as error:  # noqa: BLE001 -- the item's own failure, told to the head.
            outcome = ("error", f"{type(error).__name__}: {error}"[:2000])
        connection.send(outcome)


class _Child:
    """One pool worker process, its pipe and the item it runs."""

    def __init__(self, env: dict, compile_workers: int) -> None:
        import socket
        import subprocess
        from multiprocessing.connection import Connection

        from .spawning import START_LOCK

        with START_LOCK:  # No fork of another thread may copy this socket half made (spawning.py).
            parent, child = socket.socketpair()
            command = f"from dr_kernel.distributed import _child_main; _child_main({child.fileno()})"
            self.process = subprocess.Popen([sys.executable, "-c", command], pass_fds=(child.fileno(),),
                                            env={**os.environ, **env}, start_new_session=True)
            child.close()
        self.connection = Connection(parent.detach())
        self.connection.send((env, compile_workers))
        self.item: tuple[Item, int] | None = None

    def kill(self) -> None:
        import signal

        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # With the compile and measuring processes it started.
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()
        self.connection.close()

    def stop(self) -> None:
        import subprocess

        try:
            self.connection.send(None)
            self.process.wait(30)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()
            return
        self.connection.close()


class PoolEngine:
    """One worker process per GPU of this machine (or `measurers` on the CPU), each fed one item at
    a time; a worker that dies is replaced and only its own item is handed out again."""

    kind = "pool"

    def __init__(self, measurers: int | None, env: dict, attempts: int = 3) -> None:
        from .measure import visible_devices

        gpus = [d for d in visible_devices() if d != "cpu"]
        self.devices = gpus[:measurers] if gpus else ["cpu"] * (measurers or max(1, (os.cpu_count() or 2) // 2))
        self.env, self.attempts = env, attempts
        self.compile_workers = max(1, (os.cpu_count() or 2) // len(self.devices))
        self.children: list[_Child | None] = [None] * len(self.devices)

    def _child(self, index: int) -> _Child:
        if self.children[index] is None:
            device = self.devices[index]
            env = {**self.env, **({"CUDA_VISIBLE_DEVICES": device.split(":")[1]} if device.startswith("cuda:") else {})}
            self.children[index] = _Child(env, self.compile_workers)
        return self.children[index]

    def run(self, items: Sequence[Item], on_result: Callable[[str, Any], None],
            deadline: float | None = None) -> RunReport:
        """As RayEngine.run: past `deadline` (time.monotonic()) no new item starts."""
        from multiprocessing.connection import wait

        report = RunReport("pool", len(self.devices))
        queue = collections.deque((item, 1) for item in items)
        host = _host()
        while queue or any(c is not None and c.item is not None for c in self.children):
            if queue and deadline is not None and time.monotonic() > deadline:
                report.left.extend(item[0] for item, _ in queue)
                queue.clear()
                continue
            for index in range(len(self.devices)):
                child = self._child(index)
                if child.item is None and queue:
                    child.item = queue.popleft()
                    child.connection.send((child.item[0][1], child.item[0][2]))
            busy = {c.connection: i for i, c in enumerate(self.children) if c is not None and c.item is not None}
            for connection in wait(list(busy), timeout=1.0):
                index = busy[connection]
                child = self.children[index]
                (item, attempt), child.item = child.item, None
                try:
                    kind, result = connection.recv()
                except (EOFError, OSError):  # It died under this item: a new worker takes its place.
                    child.kill()
                    self.children[index] = None
                    if attempt < self.attempts:
                        report.requeued += 1
                        queue.appendleft((item, attempt + 1))
                    else:
                        report.failed[item[0]] = f"its worker process died {attempt} times"
                        on_result(item[0], {"error": report.failed[item[0]]})
                    continue
                if kind == "error":
                    report.failed[item[0]] = result
                    on_result(item[0], {"error": result})
                    continue
                report.hosts[host] += 1
                on_result(item[0], result)
        return report

    def close(self) -> None:
        """Stops the workers: at once those still running an item (an interrupted run), the others
        in their own time (their measuring and compile processes stop with them)."""
        for index, child in enumerate(self.children):
            if child is not None:
                child.kill() if child.item is not None else child.stop()
            self.children[index] = None
