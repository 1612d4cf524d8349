"""``@optimize``: tune a @triton.jit kernel on its first call for each key, then reuse the winner.

    from dr_kernel import optimize

    @optimize(max_evals=100, key=["M", "N", "K"], space={"BLOCK_M": [64, 128, 256], ...})
    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, ..., BLOCK_M: tl.constexpr, ...): ...

    matmul_kernel[grid](a, b, c, M, N, K, ...)

It stands where ``@triton.autotune(configs, key)`` stands, and takes the same ``reset_to_zero`` and
``restore_value``. Winners are kept in the results store (``DR_KERNEL_DB``, or the per-user cache)
under the kernel's source hash, the Triton version, the device and the key values, so later calls
and later processes launch them without tuning.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import math
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .measure import Job, MeasurePool, MeasureSettings, visible_devices
from .space import make_space, split_config, to_triton_config


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "data_ptr") and hasattr(value, "dtype")


@dataclass
class KernelJob(Job):
    """A user's kernel on the user's arguments, rebuilt in a measuring process.

    The kernel travels by reference (module and name): it must be importable, which kernels defined
    in a script's __main__ or a notebook are not; the decorator then measures in its own process.
    Tensor arguments travel as CPU copies and are moved to the worker's device.
    """

    module: str
    name: str
    args: dict
    outputs_names: list | None = None
    reference: Callable | None = None
    reset_to_zero: list = field(default_factory=list)
    restore_value: list = field(default_factory=list)
    fn: Any = None  # Set instead of module/name when measuring in this process.

    def setup(self, device: str) -> Any:
        fn = self.fn
        if fn is None:
            obj = importlib.import_module(self.module)
            for part in self.name.split("."):
                obj = getattr(obj, part)
            fn = getattr(obj, "fn", obj) if isinstance(obj, Optimized) else obj
        args = {k: (v.to(device) if _is_tensor(v) else v) for k, v in self.args.items()}
        pristine = {k: v.clone() for k, v in args.items() if _is_tensor(v)}
        state = {"fn": fn, "args": args, "pristine": pristine, "outputs": self.outputs_names, "expected": None}
        if self.reference is not None:
            result = self.reference(**args)
            state["expected"] = list(result) if isinstance(result, (tuple, list)) else [result]
        return state

    def before_launch(self, state: Any) -> None:
        args = state["args"]
        for name in self.restore_value:
            args[name].copy_(state["pristine"][name])
        for name in self.reset_to_zero:
            args[name].zero_()

    def launch(self, state: Any, config: dict) -> None:
        config = dict(config)
        grid = config.pop("__grid__")
        state["fn"][grid](**state["args"], **config)
        if state["outputs"] is None:
            # The first launch tells which tensors the kernel writes: those that changed. Inputs
            # are put back so that every later launch starts from the same data.
            changed = [k for k, v in state["pristine"].items() if not _same(v, state["args"][k])]
            if changed:
                state["outputs"] = changed
                for k, v in state["pristine"].items():
                    if k not in changed:
                        state["args"][k].copy_(v)

    def outputs(self, state: Any) -> list:
        names = state["outputs"] or []
        return [state["args"][n] for n in names]

    def expected(self, state: Any) -> list | None:
        return state["expected"]


def _same(a, b) -> bool:
    """Bitwise equality, so that NaN garbage in an unwritten torch.empty output counts as unchanged."""
    import torch

    return bool(torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)))


class Optimized:
    """A @triton.jit kernel that tunes itself per key. Launch it like the kernel: ``k[grid](...)``."""

    def __init__(self, fn, *, max_evals: int, key: Sequence[str], space: Mapping | None, configs: Sequence | None,
                 constraints: Sequence[str], strategy: str, max_seconds: float, seed: int,
                 reset_to_zero: Sequence[str] | None, restore_value: Sequence[str] | None,
                 reference: Callable | None, outputs: Sequence[str] | None, db: str | None,
                 settings: MeasureSettings | None, isolate: bool | None, static_checks: bool = True,
                 compile_timeout: float = 120.0):
        self.fn = fn
        self.arg_names = list(inspect.signature(getattr(fn, "fn", fn)).parameters)
        missing = [k for k in key if k not in self.arg_names]
        if missing:
            raise ValueError(f"key names {missing} are not arguments of {self.__name__}; "
                             f"choose from {self.arg_names}")
        self.space = make_space(space=space, configs=configs, constraints=constraints)
        unknown = [n for n in self.space.names if n not in self.arg_names and n not in ("num_warps", "num_stages",
                                                                                        "num_ctas", "maxnreg")]
        if unknown:
            raise ValueError(f"space parameters {unknown} are neither constexpr arguments of {self.__name__} "
                             "nor launch options (num_warps, num_stages, num_ctas, maxnreg)")
        self.key = list(key)
        self.max_evals, self.max_seconds, self.seed, self.strategy = max_evals, max_seconds, seed, strategy
        self.reset_to_zero = list(reset_to_zero or [])
        self.restore_value = list(restore_value or [])
        self.reference, self.outputs = reference, list(outputs) if outputs else None
        self.db, self.settings, self.isolate = db, settings or MeasureSettings(), isolate
        self.cache: dict[tuple, dict] = {}
        self.best_config = None
        self.evaluations = 0
        self.history: list = []
        self._static_key: str | None = None
        self._store = None
        self.static_checks, self.compile_timeout = static_checks, compile_timeout
        self._static_warned = False
        self.last_session = None

    @property
    def __name__(self) -> str:
        return getattr(getattr(self.fn, "fn", self.fn), "__name__", "kernel")

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    # ----- keys and the store ----------------------------------------------------------------------

    def _key(self, nargs: dict) -> tuple:
        key = [nargs[k] for k in self.key]
        key += [str(v.dtype) for v in nargs.values() if _is_tensor(v)]
        return tuple(key)

    def _cache_key(self, key: tuple, device: str) -> str:
        import triton

        if self._static_key is None:
            # Triton's own hash of the source and its dependencies when compiled; the interpreter's
            # function has none, so hash the source text (stable across processes, unlike hash()).
            source_hash = getattr(self.fn, "cache_key", None) or hashlib.sha256(
                inspect.getsource(getattr(self.fn, "fn", self.fn)).encode()).hexdigest()
            self._static_key = f"{self.__name__}|{source_hash}|triton {triton.__version__}"
        return f"{self._static_key}|{device}|{key}"

    def store(self):
        if self._store is None:
            from .store import open_store

            self._store = open_store(self.db)
        return self._store

    # ----- launching -----------------------------------------------------------------------------

    def run(self, *args, grid, **kwargs):
        nargs = dict(zip(self.arg_names, args, strict=False), **kwargs)  # Later arguments may come as kwargs.
        key = self._key(nargs)
        config = self.cache.get(key)
        if config is None:
            device = _device_name(nargs)
            cache_key = self._cache_key(key, device)
            stored = self.store().get_winner(cache_key)
            if stored is not None:
                config = stored[0]
            else:
                config = self._tune(nargs, grid, key, device, cache_key)
            self.cache[key] = config
            self.best_config = to_triton_config(config)
        meta, launch = split_config(config)
        return self.fn.run(*args, grid=grid, warmup=False, **kwargs, **meta, **launch)

    # ----- tuning --------------------------------------------------------------------------------

    def _job(self, nargs: dict, isolate: bool) -> Job:
        fn = getattr(self.fn, "fn", self.fn)
        module = getattr(fn, "__module__", "__main__")
        cpu_args = {k: (v.detach().cpu() if isolate and _is_tensor(v) else v) for k, v in nargs.items()}
        job = KernelJob(module=module, name=self._module_name(), args=cpu_args, outputs_names=self.outputs,
                        reference=self.reference, reset_to_zero=self.reset_to_zero, restore_value=self.restore_value)
        if not isolate:
            job.fn = self.fn
        return job

    def _module_name(self) -> str:
        module = sys.modules.get(getattr(getattr(self.fn, "fn", self.fn), "__module__", ""), None)
        for name, value in vars(module).items() if module else ():
            if value is self or value is self.fn:
                return name
        return self.__name__

    def _isolated(self) -> bool:
        if self.isolate is not None:
            return self.isolate
        module = getattr(getattr(self.fn, "fn", self.fn), "__module__", "__main__")
        if module == "__main__" or module not in sys.modules or not getattr(sys.modules[module], "__file__", None):
            warnings.warn(f"{self.__name__} is defined in __main__ or a notebook, which a measuring process cannot "
                          "import: its configs are measured in this process, so a config that crashes the GPU "
                          "context ends it. Define the kernel in a module to measure in isolation.", stacklevel=4)
            return False
        return True

    def _static_stage(self, nargs: dict):
        """Returns a StaticStage that compiles this kernel's configs for the device of `nargs`, or
        None (with one warning per kernel) when the kernel or its arguments cannot be described
        to the compiler: then every config is measured, as without static checks."""
        from .analysis import H200, device_limits
        from .compile_pool import CompilePool, CompileRequest, function_reference
        from .kernels.base import Pointer, specialise
        from .session import StaticStage, compile_workers

        if not self.static_checks:
            return None
        try:
            reference = function_reference(self.fn)
            if reference.startswith("__main__:"):
                raise ValueError("it is defined in __main__, which a compile worker cannot import")
            arguments = {}
            for name in self.arg_names:
                if name in nargs:
                    arguments[name] = _placeholder(nargs[name], Pointer)
                elif name in self.space.names:
                    arguments[name] = None  # A tuned constexpr: each config gives its value.
            signature, constexprs, attrs = specialise(self.fn, arguments)
        except Exception as error:  # noqa: BLE001 -- any failure to describe only turns the checks off.
            if not self._static_warned:
                self._static_warned = True
                warnings.warn(f"{self.__name__}: configs are not checked against the device's limits before "
                              f"measuring ({error}); every config is measured.", stacklevel=5)
            return None
        tensor = next((v for v in nargs.values() if _is_tensor(v)), None)
        cuda = tensor is not None and str(tensor.device).startswith("cuda")
        limits = device_limits(tensor.device) if cuda else H200
        kernel = (reference, signature, constexprs, attrs)

        def describe(config: dict) -> CompileRequest:
            return CompileRequest(kernel, dict(config), None, "", limits)

        workers = compile_workers(len(visible_devices()))
        return StaticStage(CompilePool(workers=workers, timeout_s=self.compile_timeout), describe)

    def _tune(self, nargs: dict, grid, key: tuple, device: str, cache_key: str) -> dict:
        from .session import run_session

        isolate = self._isolated()
        devices = visible_devices()
        job = self._job(nargs, isolate)
        problem = {"family": self.__name__, "shape": {k: nargs[k] for k in self.key}, "device": device,
                   "dtype": next((str(v.dtype).replace("torch.", "") for v in nargs.values() if _is_tensor(v)), "")}
        store = self.store()
        started = time.perf_counter()

        def grid_of(config: dict) -> tuple:
            g = grid({**nargs, **config}) if callable(grid) else grid
            return tuple(g) if isinstance(g, (tuple, list)) else (g,)

        if isolate:
            pool = MeasurePool(job, devices, self.settings)
            measure_configs = pool.measure
        else:
            pool = None
            state = job.setup(devices[0] if devices[0] != "cpu" else _tensor_device(nargs))
            measure_configs = _in_process(job, state, self.settings, devices[0])

        def measure(batch: list[dict], best_ms: float) -> list[tuple[dict, float]]:
            return measure_configs([{**c, "__grid__": grid_of(c)} for c in batch], best_ms)

        stage = self._static_stage(nargs)
        try:
            session = run_session(problem, self.space, measure, static=stage, strategy=self.strategy,
                                  max_evals=self.max_evals, max_seconds=self.max_seconds, seed=self.seed,
                                  store=store, source="optimize", trust_compile_errors=False, launch_key=grid_of,
                                  parallel=len(devices) if isolate else 1,
                                  confirm=self.settings.confirm, confirm_rounds=self.settings.confirm_rounds,
                                  confirm_within=self.settings.confirm_within)
        finally:
            if stage is not None:
                stage.close()
            if pool is not None:
                pool.close()
        history = session.history
        self.evaluations += len(history)
        self.history.extend(history)
        self.last_session = session
        if session.best_config is None:
            raise RuntimeError(f"tuning {self.__name__} for key {key}: none of the {len(history)} configs measured "
                               "ran correctly; check the kernel, its reference and the space")
        store.put_winner(cache_key, session.best_config, session.best_ms, len(history))
        self.tuning_s = time.perf_counter() - started
        return session.best_config


def _placeholder(value: Any, pointer: type) -> Any:
    """What stands for an argument when the kernel is compiled without launching it: a Pointer
    with Triton's name of a tensor's element type, the value itself otherwise."""
    if not _is_tensor(value):
        return value
    from triton._utils import canonicalize_dtype

    return pointer(canonicalize_dtype(value.dtype), value.data_ptr() % 16 == 0)


def _in_process(job: Job, state: Any, settings: MeasureSettings, device: str):
    from .measure import _Timer, measure_config

    timer = _Timer(device, settings.flush_bytes)
    reference = [job.expected(state)]

    def measure(configs: list[dict], best_ms: float) -> list[tuple[dict, float]]:
        out = []
        for config in configs:
            start = time.perf_counter()
            result, outs = measure_config(job, state, config, reference[0], best_ms, settings, timer)
            if reference[0] is None and outs is not None:
                reference[0] = outs
            if result["status"] == "ok":
                best_ms = min(best_ms, result["ms"])
            out.append((result, time.perf_counter() - start))
        return out

    return measure


def _tensor_device(nargs: dict) -> str:
    return next((str(v.device) for v in nargs.values() if _is_tensor(v)), "cpu")


def _device_name(nargs: dict) -> str:
    device = _tensor_device(nargs)
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    return "cpu (Triton interpreter)"


def optimize(max_evals: int = 100, key: Sequence[str] = (), space: Mapping | None = None,
             configs: Sequence | None = None, constraints: Sequence[str] = (), strategy: str = "ppo",
             max_seconds: float = math.inf, seed: int = 0, reset_to_zero: Sequence[str] | None = None,
             restore_value: Sequence[str] | None = None, reference: Callable | None = None,
             outputs: Sequence[str] | None = None, db: str | None = None,
             settings: MeasureSettings | None = None, isolate: bool | None = None, static_checks: bool = True,
             compile_timeout: float = 120.0):
    """Decorates a @triton.jit kernel so that its first call per key tunes it.

    ``space`` (a dict of value lists) or ``configs`` (a list of triton.Config) is the search space;
    ``constraints`` are Python expressions over its names. ``max_evals`` and ``max_seconds`` bound
    one tuning. ``reference(**args)`` returns the correct outputs (in the order of ``outputs``, the
    names of the tensors the kernel writes); without it the first config that runs is the reference.
    ``isolate`` forces measuring in worker processes (True) or in this process (False).

    Before measuring, each config is compiled for the device in a pool of processes (at most
    ``compile_timeout`` seconds each): configs over the device's limits (shared memory, threads,
    registers) or whose compile times out are refused without launching, and configs that compile
    to the same binary are measured once. ``static_checks=False`` measures every config instead.

    When the search ends, the best configs within 10 % of the best (3 by default) are timed three
    more times each and the lowest median wins; ``settings=MeasureSettings(confirm=0)`` keeps the
    fastest first measurement instead. With several GPUs visible, one measuring process runs per
    GPU and the strategy proposes one config per GPU each round.
    """

    def decorator(fn):
        return Optimized(fn, max_evals=max_evals, key=key, space=space, configs=configs, constraints=constraints,
                         strategy=strategy, max_seconds=max_seconds, seed=seed, reset_to_zero=reset_to_zero,
                         restore_value=restore_value, reference=reference, outputs=outputs, db=db,
                         settings=settings, isolate=isolate, static_checks=static_checks,
                         compile_timeout=compile_timeout)

    return decorator
