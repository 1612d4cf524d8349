"""The machinery behind both decorators: key → stored winner or a tuning session → launch.

Two doors lead here. ``@optimize`` (decorator.py) takes dr_kernel's richer signature;
``dr_kernel.autotune`` (dropin.py) takes exactly ``triton.autotune``'s, for code we did not
write. Both build a TunedKernel, which behaves as Triton's autotuner does where a caller can see
it: it is a KernelInterface (``kernel[grid](...)``), it stacks with ``@triton.heuristics`` above
or below, it reads ``arg_names`` from what it wraps, its key is the key arguments' values plus the
dtype of every tensor argument, ``best_config`` is the triton.Config of the last launch, and the
hooks (``reset_to_zero``, ``restore_value``, ``pre_hook``, ``post_hook``, ``Config.pre_hook``) run
around every measured launch and before the real one as Triton runs them.

Where it differs, on purpose: every measuring launch runs on a scratch copy of the arguments
(checking.py), so the caller's tensors are written once, by the winner; each config is checked
against a reference before it is timed; configs compile in a process pool shared by every kernel
of the process before they are measured; the search may measure fewer configs than the list
holds; and winners persist in the results store.
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import hashlib
import inspect
import json
import math
import os
import pickle
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from triton.runtime.autotuner import Autotuner as TritonAutotuner

from . import collect, hot
from .checking import (
    changed,
    difference,
    is_tensor,
    majority,
    overruns,
    poison,
    reads_chosen_config,
    restore,
    same_elements_written,
    scratch_copies,
    signature,
    snapshot,
    tensor_of,
    tolerance,
    written,
)
from .measure import (
    Job,
    JobUnavailable,
    MeasurePool,
    MeasureSettings,
    WorkerUnavailable,
    in_process,
    relative_error,
    visible_devices,
)
from .progress import Progress, verbose_from_env
from .space import LAUNCH_OPTIONS, complete_options, config_dict, config_key, launchable, make_space, split_config
from .versions import check_triton

check_triton()  # Once per process, where a decorator or the switch first needs Triton.

# Keyword arguments Triton's launch path passes down that are not kernel arguments.
_LAUNCH_KWARGS = ("grid", "warmup")


def _picklable(value: Any) -> bool:
    """Whether `value` can travel to a measuring process: a function of __main__ (a script's, a
    notebook's) pickles by reference to a module the measuring process does not have."""
    if getattr(value, "__module__", None) == "__main__":
        return False
    try:
        pickle.dumps(value)
        return True
    except (pickle.PicklingError, AttributeError, TypeError):
        return False


class LaunchError(RuntimeError):
    """A launch raised an error that is not a config's failure (triton.autotune would raise it)."""


@dataclass
class KernelJob(Job):
    """A user's kernel on the arguments of one call, measured on a scratch copy of them.

    In this process (`fn` set) the arguments are the caller's tensors, which are only read: the
    copy is made in setup() and reset from them before every checking launch. In a measuring
    process (`module`/`name` set) the arguments arrive as CPU copies and are moved to its device.

    The reference is `reference(**args)` when given, else the result of `reference_config`
    (the first of the library's listed configs that runs), else the first config that runs. It is launched twice:
    when two launches of the same config disagree, the kernel is not deterministic enough to
    check, and configs are timed unchecked (`checked` false) as triton.autotune times them.
    """

    module: str = ""
    name: str = ""
    args: dict = field(default_factory=dict)
    kwargs: dict = field(default_factory=dict)  # Passed to every launch: grid, heuristics' values, ...
    outputs_names: list | None = None
    reference: Callable | None = None
    # A reference that cannot travel to a measuring process (a lambda, a closure) is called in the
    # tuning process instead, and its outputs travel as CPU tensors.
    reference_outputs: list | None = None
    reference_configs: list = field(default_factory=list)  # The first of these that runs is the reference.
    reset_to_zero: list = field(default_factory=list)
    restore_value: list = field(default_factory=list)
    pre_hook: Callable | None = None
    post_hook: Callable | None = None
    config_hooks: dict = field(default_factory=dict)  # Config key → the triton.Config's pre_hook.
    shared_config_hook: Callable | None = None  # For configs beyond the list, when every listed one has it.
    check_results: bool = True
    # The relative error allowed against another config's outputs (None: the dtype's rounding).
    allowed_error: float | None = None
    # With no reference at all, the first config that runs becomes it; it must then write every
    # element of what it writes (probed on poisoned outputs), or a partial writer would be the judge.
    probe_first: bool = False
    # With no reference but the first config that runs, each checked launch also returns a
    # signature of its outputs, and whether it left elements the reference wrote unwritten, so
    # that the configs' results can be put to a vote (tuner.py, TunedKernel._tune).
    vote: bool = False
    fn: Any = None
    # The library reads the chosen config back to interpret the outputs (checking.py,
    # reads_chosen_config): an output a config writes other elements of than the reference does is
    # sized by the config's tiles, and is not compared.
    config_shaped: bool = False
    # A kernel no measuring process can import (a notebook's, a script's): its source (shipping.py).
    shipped: dict | None = None

    # ----- setup --------------------------------------------------------------------------------

    def _kernel(self) -> Any:
        """The kernel to launch in a measuring process: rebuilt from its source, or imported (the
        tuner's own wrapper dropped, the ones below it kept)."""
        if self.shipped is not None:
            from .shipping import load

            return load(self.shipped)
        import importlib

        from triton.runtime.autotuner import Autotuner as TritonAutotuner

        fn = importlib.import_module(self.module)
        for part in self.name.split("."):
            fn = getattr(fn, part)
        # Below the tuner: @triton.heuristics may sit above it, and in this process a module
        # decorated with triton.autotune has Triton's autotuner where the tuning process had
        # dr_kernel's drop-in (the switch is not installed here).
        wrapper = fn
        for _ in range(8):
            if isinstance(wrapper, (TunedKernel, TritonAutotuner)):
                return wrapper.fn
            wrapper = getattr(wrapper, "fn", None)
        return fn

    def setup(self, device: str) -> Any:
        fn = self.fn
        if fn is None:  # In a measuring process: the kernel by name or by source, the arguments moved here.
            try:
                fn = self._kernel()
            except Exception as error:  # noqa: BLE001 -- its module does not import here: say so.
                raise JobUnavailable(f"the kernel's module does not import in a measuring process: "
                                     f"{type(error).__name__}: {error}") from error
            pristine = {k: (v.to(device) if is_tensor(v) else v) for k, v in self.args.items()}
        else:
            pristine = dict(self.args)
        guards: list = []
        state = {"fn": fn, "pristine": pristine, "scratch": scratch_copies(pristine, guards), "guards": guards,
                 "outputs": self.outputs_names,
                 "expected": None, "checked": self.check_results, "note": None}
        if self.reference is not None or self.reference_outputs is not None:  # The user's reference.
            if self.reference is not None:
                result = self.reference(**pristine)
                state["expected"] = list(result) if isinstance(result, (tuple, list)) else [result]
            else:  # Computed by the tuning process (the function could not travel here).
                state["expected"] = [t.to(device) if is_tensor(t) else t for t in self.reference_outputs]
            state["outputs"] = state["outputs"] or written_outputs(state)
        elif self.reference_configs and self.check_results:
            self._reference_from_configs(state)
        return state

    def _reference_from_configs(self, state: dict) -> None:
        from .checking import classify

        for config in self.reference_configs:
            try:
                first = self.checked_launch(state, config)
                names = state["outputs"]
                second = self.checked_launch(state, config)
                break
            except Exception as error:  # noqa: BLE001 -- a failing config is no reference; a user's error is.
                if classify(error)["status"] == "launch_error":
                    raise LaunchError(f"the launch with config {config} raised {type(error).__name__}: "
                                      f"{error}") from error
                state["outputs"] = self.outputs_names
        else:
            return  # No listed config runs: the first config that does in the session is the reference.
        if not names:
            state["checked"] = False
            state["note"] = "the reference config wrote no argument"
            return
        worst = max((difference(b, a, self._baseline(state, n)) / max(tolerance(a.dtype), 1e-12)
                     for n, a, b in zip(names, first, second, strict=True)), default=0.0)
        if worst > 1.0:
            state["checked"] = False
            state["note"] = ("two launches of the reference config gave different results, so results cannot "
                             "be compared across configs")
            return
        state["expected"] = first

    # ----- launching ----------------------------------------------------------------------------

    def _full(self, state: dict, config: dict) -> dict:
        return {**state["scratch"], **self.kwargs, **launchable(config)}

    def before_launch(self, state: Any, config: dict) -> None:
        hook = self.config_hooks.get(config_key(config), self.shared_config_hook)
        full = self._full(state, config)
        if hook is not None:
            hook(full)
        if self.pre_hook is not None:
            self.pre_hook(full)
        else:
            restore(state["scratch"], state["pristine"], self.restore_value)
            for name in self.reset_to_zero:
                if state["scratch"][name] is not None:  # An optional output the call leaves out (None).
                    state["scratch"][name].zero_()

    def after_launch(self, state: Any, config: dict) -> None:
        if self.post_hook is not None:
            self.post_hook(self._full(state, config), exception=None)

    def launch(self, state: Any, config: dict) -> None:
        config = dict(config)
        kwargs = dict(self.kwargs)
        grid = config.pop("__grid__", None)
        if grid is not None:
            kwargs["grid"] = grid
        kwargs.setdefault("warmup", False)
        state["fn"].run(**state["scratch"], **kwargs, **launchable(config))

    def _restore(self, state: dict) -> None:
        restore(state["scratch"], state["pristine"])
        for name in state.get("poisoned", ()):
            poison(tensor_of(state["scratch"][name]))

    def _baseline(self, state: dict, name: str) -> Any:
        """What an output holds before a checked launch: the caller's values, or their inverted
        bits where the caller's already held what the kernel writes (_outputs_already_written)."""
        return state.get("baselines", {}).get(name, tensor_of(state["pristine"][name]))

    def _outputs_already_written(self, state: dict, config: dict) -> list[str]:
        """The launch changed no tensor: it writes none, or its outputs already held what it writes
        (a buffer reused for the same result: a deferred tuning's later call, a loop's output).
        Each floating-point argument is inverted bit for bit in turn before a launch: those the
        launch writes over are the outputs, and from now on every checked launch starts them
        inverted, so that configs are compared on what they write. Integer arguments are left
        alone (inverted indices would send the kernel outside its memory)."""
        found = []
        for name, value in state["scratch"].items():
            tensor = tensor_of(value)
            if tensor is None or not tensor.dtype.is_floating_point or name in self.restore_value \
                    or name in self.reset_to_zero:
                continue
            restore(state["scratch"], state["pristine"])
            self.before_launch(state, config)
            if not poison(tensor):
                continue
            inverted = snapshot(tensor)
            self.launch(state, config)
            self.after_launch(state, config)
            if written({name: tensor}, {name: inverted}):  # (By dr_kernel's own kernels where torch's are replaced.)
                found.append(name)
                state.setdefault("baselines", {})[name] = inverted
        state["poisoned"] = found
        if found:  # Again, from inverted outputs: what the caller's launch leaves in them.
            self._restore(state)
            self.before_launch(state, config)
            self.launch(state, config)
            self.after_launch(state, config)
        return found

    def checked_launch(self, state: Any, config: dict) -> list:
        self._restore(state)
        self.before_launch(state, config)
        try:
            self.launch(state, config)
        except Exception as error:
            if self.post_hook is not None:
                self.post_hook(self._full(state, config), exception=error)
            raise
        self.after_launch(state, config)
        if state["outputs"] is None:
            state["outputs"] = written_outputs(state) or self._outputs_already_written(state, config)
        state["last_config"] = config
        return [snapshot(tensor_of(state["scratch"][n])) for n in state["outputs"] or ()]

    def _writes_everything(self, state: dict) -> bool:
        """Whether the last config launched writes every element of its outputs: launched again
        with its outputs poisoned (NaN), none may stay NaN. Outputs it also reads (restore_value,
        reset_to_zero) are not poisoned."""
        import torch

        config = state["last_config"]
        self._restore(state)
        self.before_launch(state, config)
        poisoned = [n for n in state["outputs"] if n not in self.restore_value and n not in self.reset_to_zero
                    and tensor_of(state["scratch"][n]).dtype.is_floating_point]
        for n in poisoned:
            tensor_of(state["scratch"][n]).fill_(float("nan"))
        self.launch(state, config)
        self.after_launch(state, config)
        return all(not bool(torch.isnan(tensor_of(state["scratch"][n])).any()) for n in poisoned)

    def outputs(self, state: Any) -> list:
        return [tensor_of(state["scratch"][n]) for n in state["outputs"] or ()]

    def expected(self, state: Any) -> list | None:
        return state["expected"]

    def check(self, state: Any, outs: list, reference: list | None, settings: MeasureSettings
              ) -> tuple[float, str | None]:
        overrun = overruns(state.get("guards", ()))
        if overrun:  # Never chosen, whatever its outputs: it writes memory that is not its arguments'.
            names, n = overrun[0]
            return math.inf, (f"it writes past the end of {', '.join(names)} ({n} of the guard bytes after "
                              "its memory changed)")
        if reference is None and self.probe_first and state["checked"] and state["expected"] is None:
            if not self._writes_everything(state):
                names = ", ".join(state["outputs"])
                state["outputs"] = self.outputs_names  # The next config that runs tries again.
                return math.inf, (f"it leaves elements of {names} unwritten, so it cannot be the reference for "
                                  "the other configs; give reference= (or configs=, whose first is the reference)")
        if reference is None or not state["checked"]:
            return 0.0, None
        if len(reference) != len(outs):
            return math.inf, (f"the reference gives {len(reference)} tensors for the {len(outs)} the kernel "
                              "writes; return one per output, in the order of `outputs`")
        worst, relerr, why = 0.0, 0.0, None
        for name, out, ref in zip(state["outputs"], outs, reference, strict=True):
            if self.reference is not None or self.reference_outputs is not None:  # A user's: relative L2.
                err = relative_error(out, ref)
                limit = settings.max_relerr
            elif self.config_shaped and not same_elements_written(out, ref, self._baseline(state, name)):
                continue  # Laid out by the config's tiles, read back by the library as the config says.
            else:  # Another config: the rounding of the output's dtype.
                err = difference(out, ref, self._baseline(state, name))
                limit = tolerance(out.dtype) if self.allowed_error is None else self.allowed_error
            ratio = err / limit if limit > 0 else (0.0 if err == 0 else math.inf)
            if ratio > worst:
                worst, relerr = ratio, err
                why = f"{name} differs from the reference by {err:.3g} (relative L2; at most {limit:g} is rounding)"
        return relerr, (why if worst > 1.0 else None)

    def keep(self, outs: list) -> list:
        return outs  # Already copies.

    def annotate(self, state: Any, outs: list, reference: list | None) -> dict:
        if not (self.vote and state["checked"]) or not outs:
            return {}
        partial = False
        if reference is not None and len(reference) == len(outs):
            pristine = [self._baseline(state, n) for n in state["outputs"]]
            partial = any(bool((changed(r, p) & ~changed(o, p)).any()) for o, r, p in zip(outs, reference, pristine,
                                                                                         strict=True))
        return {"signature": signature(outs), "partial": partial}


def written_outputs(state: dict) -> list[str]:
    return written(state["scratch"], state["pristine"])


# Lists of up to this many configs are measured whole; longer ones are searched (TunedKernel._budget).
WHOLE_LIST = 32

# stop="auto": the ppo strategy ends a session once even the most promising untried config has
# less than a 20 % chance of being 5 % faster than the best, by beliefs it trusts (a threshold
# chosen in replay on families the agent had not seen: benchmarks/agent.md, "Adaptive stopping";
# trust at least ppo's stop_trust, 0.2: "Trust before stopping"),
# and the best config's one-step neighbours are measured and none is faster (stop_local: without
# it, on shapes the agent had not seen, 5 of 32 replayed sessions ended over 1.05x the best, up to
# 1.65x, and on the H200 5 of 12 ended 10-27 % short; "A local optimum before stopping"), nor the
# neighbours of a config within 1 % of it (stop_near: on the H200 an attention session stopped
# 11 % short beside a 0.02 % tie whose neighbour was the best; in replay on unseen shapes the worst
# session went from 1.053x to 1.039x the best for 14 % more evaluations, "Ties before stopping").
# It also ends once the best has gained less than 2 % over the last 24 measurements, the checks
# before stopping included (stop_patience:
# in replay on unseen families 41 % fewer evaluations, worst session 1.001x -> 1.020x the best over
# three training seeds; with a GPU session's refits 7 % fewer, the longest sessions 35-46 % fewer,
# worst unchanged; "Patience").
# stop="budget" uses the whole budget.
AUTO_STOP = {"stop": 0.2, "stop_gain": 0.05, "stop_local": 1, "stop_near": 0.01, "stop_patience": 24,
             "stop_patience_gain": 0.02}
STOP_RULES = ("auto", "budget")


# ----- deferred tuning (defer=True) ---------------------------------------------------------------------

# The kernels with keys whose tuning is deferred and has not run yet.
_DEFERRING: weakref.WeakSet = weakref.WeakSet()


@dataclass
class _Deferred:
    """A key whose tuning waits for its configs' compiles: its static stage, what the tuning will
    need and the interim launch (TunedKernel._prepare)."""

    stage: Any
    store_key: str
    device: str
    candidates: list
    started: float
    ready: tuple | None = None


def _described_later(config: dict):
    raise RuntimeError(f"config {config} is described to the compiler when its deferred tuning runs")


def pending_tunings() -> list[tuple[str, tuple]]:
    """(kernel name, key) of every deferred tuning not run yet: each runs on the first call of its
    key that finds its configs compiled."""
    return [(kernel.__name__, key) for kernel in list(_DEFERRING) for key in kernel.pending()]


# ----- the compile pool every tuned kernel of the process shares ------------------------------------

_POOL_LOCK = threading.Lock()
_SHARED_POOL: list = []


def shared_compile_pool(timeout_s: float):
    """One CompilePool for the whole process: its workers start once (importing Triton and the
    user's modules costs seconds) and serve every kernel and key."""
    from .compile_pool import fork_workers, make_pool
    from .session import compile_workers

    with _POOL_LOCK:
        if not _SHARED_POOL or _SHARED_POOL[0].timeout_s != timeout_s:
            if _SHARED_POOL:
                _SHARED_POOL.pop().close()
            _SHARED_POOL.append(make_pool(workers=compile_workers(len(visible_devices())), timeout_s=timeout_s,
                                          fork=fork_workers()))
        return _SHARED_POOL[0]


_PRESTARTED: list = []


def _prestart_measuring() -> None:
    """Starts a spare measuring process (measure.prestart) once per process, from a thread, when a
    GPU is there to measure on: not under Triton's interpreter (tests, CPU runs), not before the
    program has imported torch (finding the GPU would import it here), not in collect mode (which
    tunes nothing), not with DR_KERNEL_PRESTART=0."""
    if (_PRESTARTED or os.environ.get("DR_KERNEL_PRESTART", "1") == "0" or os.environ.get("TRITON_INTERPRET")
            or "torch" not in sys.modules or collect.ACTIVE):
        return
    _PRESTARTED.append(True)

    def start() -> None:
        from . import measure

        try:
            device = measure.visible_devices()[0]
            if device != "cpu":
                measure.prestart(device)
        except Exception:  # noqa: BLE001 -- a spare is an optimisation: the first pool starts its own.
            pass

    threading.Thread(target=start, name="dr_kernel prestart", daemon=True).start()


@atexit.register
def _close_shared_pool() -> None:
    while _SHARED_POOL:
        _SHARED_POOL.pop().close()


# ----- the kernel ------------------------------------------------------------------------------------

def stop_options(stop: str, strategy: str) -> dict:
    """The strategy options a stop rule stands for (only the agent stops early)."""
    return dict(AUTO_STOP) if stop == "auto" and strategy == "ppo" else {}


def _check_limits(name: str, max_evals: Any, max_seconds: Any, strategy: Any, seed: Any, stop: Any = "auto") -> None:
    """Raises ValueError, at decoration, for a budget, strategy or seed the first call would trip on."""
    from . import _core

    def whole(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if max_evals is not None and not (whole(max_evals) and max_evals >= 0):
        raise ValueError(f"{name}: max_evals={max_evals!r}: give how many configs to measure per key, a whole "
                         "number (0: measure none, launch the cost model's predicted best)")
    if isinstance(max_seconds, bool) or not isinstance(max_seconds, (int, float)) or not max_seconds > 0:
        raise ValueError(f"{name}: max_seconds={max_seconds!r}: give a positive number of tuning seconds per key "
                         "(math.inf: no limit)")
    available = [s[0] for s in _core.strategies()]
    if strategy not in available:
        raise ValueError(f"{name}: unknown strategy={strategy!r}; the available strategies are: "
                         f"{', '.join(available)}")
    if not (whole(seed) and 0 <= seed < 2**63):
        raise ValueError(f"{name}: seed={seed!r}: give a whole number from 0 to 2**63 - 1")
    if stop not in STOP_RULES:
        raise ValueError(f"{name}: stop={stop!r}: give 'auto' (end a search once more measurements are unlikely "
                         "to pay) or 'budget' (use the whole budget)")


def _source_hash(fn) -> str:
    """A hash of a kernel's Python source; of its code object when the source is not on disk (a
    kernel defined in `python -c`, an exec'd string or a notebook cell that is gone)."""
    try:
        text = inspect.getsource(fn)
    except (OSError, TypeError):
        code = fn.__code__
        text = repr((code.co_code, code.co_consts, code.co_names, code.co_varnames))
    return hashlib.sha256(text.encode()).hexdigest()


class TunedKernel(TritonAutotuner):
    """A kernel that picks its config per key: from this object's cache, from the results store,
    or by tuning on the first call. Launch it like the kernel it wraps: ``k[grid](...)``.

    It is a triton Autotuner to the code around it (wrappers such as FlagGems' LibEntry walk a
    kernel's `.fn` chain and accept only Autotuner and Heuristics), with the attributes Triton's
    has; Triton's constructor and benchmarking are not used."""

    def __init__(self, fn, *, key: Sequence[str], space: Mapping | None = None, configs: Sequence | None = None,
                 constraints: Sequence[str] = (), strategy: str = "ppo", max_evals: int | None = 100,
                 max_seconds: float = math.inf, seed: int = 0, reset_to_zero: Sequence[str] | None = None,
                 restore_value: Sequence[str] | None = None, pre_hook: Callable | None = None,
                 post_hook: Callable | None = None, prune_configs_by: Mapping | None = None,
                 reference: Callable | None = None, outputs: Sequence[str] | None = None, db: str | None = None,
                 settings: MeasureSettings | None = None, isolate: bool | None = None, static_checks: bool = True,
                 compile_timeout: float = 120.0, do_bench: Callable | None = None, widen: bool = False,
                 first_config_is_reference: bool = False, source: str = "optimize", stop: str = "auto",
                 verbose: bool | None = None, tolerance: float | None = None, profile: bool | None = None,
                 defer: bool = False):
        self.fn = fn
        self.base_fn = fn
        while not inspect.isfunction(self.base_fn):
            self.base_fn = self.base_fn.fn
        self.arg_names = list(getattr(fn, "arg_names", None) or inspect.signature(self.base_fn).parameters)
        self._arg_set = frozenset(self.arg_names)
        missing = [k for k in key if k not in self.arg_names]
        if missing:
            raise ValueError(f"key names {missing} are not arguments of {self.__name__}; "
                             f"choose from {self.arg_names}")
        _check_limits(self.__name__, max_evals, max_seconds, strategy, seed, stop)
        self.stop = stop
        # defer=True: a key's first call launches the list's first config (the cost model's pick in
        # a space) at once while the configs compile in the pool; the key is tuned on a later call,
        # the first to find them compiled (_Deferred).
        self.defer = bool(defer)
        self._deferred: dict[tuple, _Deferred] = {}
        self.keys = self.key = list(key)
        self.listed: list | None = list(configs) if configs is not None else None
        self.configs = self.listed or []  # triton.autotune's attribute.
        self.space_dict = dict(space) if space is not None else None
        self.constraints = list(constraints)
        self.space = make_space(space=space, configs=configs, constraints=constraints)  # Checks the input now.
        unknown = [n for n in self.space.names if n not in self.arg_names and n not in LAUNCH_OPTIONS]
        if unknown:
            raise ValueError(f"space parameters {unknown} are neither constexpr arguments of {self.__name__} "
                             "nor launch options (num_warps, num_stages, num_ctas, maxnreg)")
        self.max_evals, self.max_seconds, self.seed, self.strategy = max_evals, max_seconds, seed, strategy
        self.reset_to_zero = list(reset_to_zero or [])
        self.restore_value = list(restore_value or [])
        self.pre_hook, self.post_hook = pre_hook, post_hook
        self.prune_configs_by = dict(prune_configs_by or {})
        self.reference, self.outputs = reference, list(outputs) if outputs else None
        self.db, self.settings, self.isolate = db, settings or MeasureSettings(), isolate
        # Why a measuring process could not set this kernel up, once one could not (isolate=None
        # then measures it in this process); None before.
        self._measured_here: str | None = None
        if tolerance is not None:
            if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 < tolerance < 1:
                raise ValueError(f"{self.__name__}: tolerance={tolerance!r}: give a relative error above 0 and below 1 "
                                 "(e.g. 0.01), or None for the outputs' own rounding")
            self.settings = dataclasses.replace(self.settings, max_relerr=float(tolerance))
        # The relative error a config's outputs may have against the reference (None: against
        # another config, the outputs' dtype's rounding; against the user's reference, 2 %).
        self.tolerance = None if tolerance is None else float(tolerance)
        self.static_checks, self.compile_timeout = static_checks, compile_timeout
        self._do_bench, self.widen = do_bench, widen
        self.first_config_is_reference, self.source = first_config_is_reference, source
        self.verbose = verbose  # A progress bar per tuning; None: as DR_KERNEL_VERBOSE says.
        # profile=True (None: as DR_KERNEL_PROFILE=1 says): after each tuning, Nsight Compute's
        # counters of the winner (profiling.py), kept here per key and stored with its measurement.
        self.profile = profile if profile is not None else os.environ.get("DR_KERNEL_PROFILE") == "1"
        self.counters: dict[tuple, dict] = {}
        self.cache: dict[tuple, Any] = {}
        # Key -> (store file, its winner's key there): where its launches are counted (hot.py).
        self._store_keys: dict[tuple, tuple[str, str]] = {}
        # Key -> (config, its launch arguments, its pre_hook, its _store_keys entry): run()'s fast path.
        self._ready: dict[tuple, tuple] = {}
        # Key -> the copy of its next launch's arguments a background re-tune waits for (hot.py).
        self._copy_wanted: dict[tuple, Any] = {}
        self.best_config = None
        # The rest of triton.autotune's attributes, for code that reads them.
        self.user_defined_pre_hook, self.user_defined_post_hook = pre_hook is not None, post_hook is not None
        self.perf_model = self.prune_configs_by.get("perf_model")
        self.configs_top_k = self.prune_configs_by.get("top_k", 1.0)
        self.early_config_prune = self.prune_configs_by.get("early_config_prune")
        self.num_warmups = self.num_reps = None
        self.use_cuda_graph = False
        self.cache_results = True
        self.nargs = None
        self.bench_time = 0.0
        self.configs_timings: dict = {}
        self.evaluations = 0
        self.history: list = []
        self.notes: list[str] = []  # What a user should know about past tunings (checks off, ...).
        self.last_session = None
        self.tuning_s = 0.0
        self._static_key: str | None = None
        self._store = None
        self._static_warned = False
        self._reads_config: bool | None = None  # _config_shaped(), once known.
        # How the static stage described configs to the compiler: captured from Triton's JIT
        # ("exact": the launch then loads the binary) or by kernels/base.py's rules ("by rule").
        self.described = collections.Counter()
        # Where this kernel's tunings spent their seconds, summed over keys: describing it to the
        # compiler, waiting for the reference config's compile, setting up the measuring state,
        # the sessions themselves (their own split is in last_session.split_s) and the store.
        self.phases_s: collections.Counter = collections.Counter()
        self.compile_phases_s: list[dict] = []  # The last tuning's, one dict per compiled config.
        self.deferred_s: list[float] = []  # Per deferred tuning: seconds from its first call to its tuning.
        if static_checks:
            from .compile_pool import start_warming

            start_warming()  # The compile workers' one-time costs, paid while the program starts.
        if self._may_isolate():
            _prestart_measuring()  # A measuring process's imports, paid while the program starts.

    @property
    def __name__(self) -> str:
        return getattr(self.base_fn, "__name__", "kernel")

    def prune_configs(self, kwargs: dict) -> list:
        """triton.autotune's pruning of its list for a call (self.nargs holds the call's arguments)."""
        return [self._to_config(c) for c in self._candidates(self.nargs or {}, kwargs)]

    # ----- keys and the store ----------------------------------------------------------------------

    def key_of(self, all_args: Mapping[str, Any]) -> tuple:
        """Triton's autotuning key: the key arguments' values, then every tensor argument's dtype."""
        names = self._arg_set
        key = [all_args[k] for k in self.key if k in all_args]  # Key names are arguments (checked).
        key += [str(v.dtype) for k, v in all_args.items() if hasattr(v, "dtype") and k in names]
        return tuple(key)

    def store_key(self, key: tuple, device: str, configs: Sequence[dict]) -> str:
        """The store's key of a winner: kernel source, Triton version, device, key values and the
        configs searched (a winner in one space is no winner in another)."""
        import triton

        if self._static_key is None:
            from .compile_pool import jit_function

            jit = jit_function(self.fn)
            source_hash = getattr(jit, "cache_key", None) or _source_hash(self.base_fn)
            self._static_key = f"{self.__name__}|{source_hash}|triton {triton.__version__}"
        searched = json.dumps([sorted((k, repr(v)) for k, v in c.items()) for c in configs], sort_keys=True)
        rules = {"constraints": self.constraints, "widen": self.widen}
        if self.tolerance is not None:  # A winner within one tolerance is none for another.
            rules["tolerance"] = self.tolerance
        extra = json.dumps(rules)
        space_hash = hashlib.sha256((searched + extra).encode()).hexdigest()[:16]
        return f"{self._static_key}|{device}|{key}|space {space_hash}"

    def _family(self) -> str:
        """The family its measurements are stored under: the kernel's name, and the tolerance they
        were judged by where it is not the default (a config wrong under one is right under another)."""
        return self.__name__ if self.tolerance is None else f"{self.__name__} (tolerance {self.tolerance:g})"

    def store(self):
        if self._store is None:
            from .store import open_store

            self._store = open_store(self.db)
        return self._store

    # ----- launching -----------------------------------------------------------------------------

    def run(self, *args, **kwargs):
        # The launch of a tuned key is on every step of the user's program: what it does beyond
        # Triton's own launch (a key, two dict lookups, a count) must cost no more than
        # triton.autotune's dispatch does (benchmarks/dispatch_bench.py).
        nargs = dict(zip(self.arg_names, args, strict=False))
        self.nargs = nargs
        all_args = {**nargs, **kwargs} if kwargs else nargs
        key = self.key_of(all_args)
        chosen = self.cache.get(key)
        ready = self._ready.get(key)
        if ready is None or ready[0] is not chosen:  # A new key, or `cache` written from outside.
            ready = self._prepare(key, chosen, args, kwargs, all_args)
        if collect.ACTIVE:
            collect.record(self, args, kwargs, key)
        _, launch, pre_hook, counted = ready
        if counted is not None:
            hot.count(*counted)
        self.best_config = ready[0]
        if pre_hook is not None:
            pre_hook({**all_args, **launch})
        try:
            return self.fn.run(*args, **kwargs, **launch)
        finally:
            self.nargs = None

    def _prepare(self, key: tuple, chosen, args: tuple, kwargs: dict, all_args: dict) -> tuple:
        """The launch of `key` worked out once: its config (tuned now if it has none), the
        config's launch arguments, its pre_hook and where its launches are counted. A key whose
        tuning is deferred gets its interim launch, worked out again on each call until it is tuned."""
        if self._copy_wanted:
            wanted = self._copy_wanted.pop(key, None)
            if wanted is not None:
                wanted.take(args, kwargs)
        tuned_now = False
        if chosen is None:
            deferred = self._deferred.get(key)
            if deferred is not None:
                if not deferred.stage.settled():  # (Which also starts queued compiles on free workers.)
                    return deferred.ready
                chosen, tuned_now = self._tune_deferred(key, deferred, args, kwargs), True
            else:
                chosen, tuned_now = self._choose(args, kwargs, key, allow_defer=self.defer)
            if tuned_now is None:  # Deferred: the interim config launches, and the key stays untuned.
                launch = chosen.all_kwargs() if hasattr(chosen, "all_kwargs") else dict(chosen)
                ready = (chosen, launch, getattr(chosen, "pre_hook", None), self._store_keys.get(key))
                self._deferred[key].ready = ready
                return ready
            self.cache[key] = chosen
        launch = chosen.all_kwargs() if hasattr(chosen, "all_kwargs") else dict(chosen)
        if tuned_now:
            self._reset_before_real_launch({**all_args, **launch})
        ready = (chosen, launch, getattr(chosen, "pre_hook", None), self._store_keys.get(key))
        self._ready[key] = ready
        return ready

    def _reset_before_real_launch(self, full: dict) -> None:
        # triton.autotune resets reset_to_zero tensors after tuning, before the winner's launch.
        if self.pre_hook is not None:
            self.pre_hook(full, reset_only=True)
        else:
            for name in self.reset_to_zero:
                if full[name] is not None:
                    full[name].zero_()

    def warmup(self, *args, **kwargs):
        nargs = dict(zip(self.arg_names, args, strict=False))
        return [self.fn.warmup(*args, **kwargs, **c) for c in self._candidates(nargs, kwargs)]

    # ----- choosing a config ---------------------------------------------------------------------

    def _candidates(self, nargs: dict, kwargs: dict) -> list[dict]:
        """The configs to search for this call: the space's, or the list pruned as triton.autotune
        prunes it (early_config_prune, then perf_model's top_k)."""
        if self.listed is None:
            return []
        configs = self.listed
        prune = self.prune_configs_by.get("early_config_prune")
        if prune is not None:
            configs = list(prune(configs, nargs, **kwargs))
            if not configs:
                raise ValueError(f"{self.__name__}: early_config_prune returned no config; it must return "
                                 "at least one")
        perf_model = self.prune_configs_by.get("perf_model")
        if perf_model is not None:
            top_k = self.prune_configs_by.get("top_k", 1.0)
            if isinstance(top_k, float) and top_k <= 1.0:
                top_k = int(len(self.listed) * top_k)
            if len(configs) > top_k:
                estimate = {i: perf_model(**nargs, **kwargs, **c.all_kwargs()) for i, c in enumerate(configs)}
                configs = [configs[i] for i in sorted(estimate, key=estimate.get)[:top_k]]
        return complete_options([config_dict(c) for c in configs])

    def _to_config(self, config: dict):
        """The triton.Config a config dict stands for: the listed one itself when it is listed
        (keeping its pre_hook), else a new one."""
        import triton

        for c in self.listed or ():
            if config_key(config_dict(c)) == config_key(config):
                return c
        meta, launch = split_config(config)
        return triton.Config(meta, **launch, pre_hook=self._shared_pre_hook())

    def _shared_pre_hook(self):
        """The Config.pre_hook every listed config has (set a TMA descriptor's block shape, say),
        which a config beyond the list needs as much; None when they differ."""
        hooks = {getattr(c, "pre_hook", None) for c in self.listed or ()}
        return hooks.pop() if len(hooks) == 1 else None

    def _choose(self, args: tuple, kwargs: dict, key: tuple, allow_defer: bool = False):
        """(config, whether it was tuned now), or (config, None) when the tuning is deferred and
        the config is the interim one."""
        nargs = dict(zip(self.arg_names, args, strict=False))
        candidates = self._candidates(nargs, kwargs)
        if len(candidates) == 1 and self.listed is not None:
            return self._to_config(candidates[0]), False
        device = _device_name({**nargs, **kwargs})
        if self.max_evals == 0:
            return self._to_config(self._predicted(nargs, kwargs, candidates, device)), False
        store_key = self.store_key(key, device, candidates or [self.space_dict or {}])
        looked = time.perf_counter()
        stored = self.store().get_winner(store_key)
        self.phases_s["store"] += time.perf_counter() - looked
        self._store_keys[key] = (os.path.abspath(self.store().path), store_key)
        hot.register(self._store_keys[key], self, key)
        if collect.collecting():  # Nothing is tuned: the stored winner, else the first config, launches.
            default = stored[0] if stored is not None else (candidates or [self._first_config()])[0]
            return self._to_config(default), False
        retune = hot.retune_budget(store_key) if stored is not None else None
        if stored is not None and retune is None:
            return self._to_config(stored[0]), False
        if allow_defer and retune is None:
            wrapper = self._wrapper_above()
            if wrapper is not None:
                self._note(f"{self.__name__}: key {key} tuned on its first call, not deferred: {wrapper} wraps this "
                           "kernel, and a wrapper may keep the first launch's config without calling it again "
                           "(FlagGems' LibEntry does)")
            else:
                interim = self._defer(nargs, kwargs, key, device, store_key, candidates)
                if interim is not None:
                    return self._to_config(interim), None
        config = self._tune(nargs, kwargs, key, device, store_key, candidates,
                            retune=(retune, dict(stored[0])) if retune is not None else None)
        return self._to_config(config), True

    def _defer(self, nargs: dict, kwargs: dict, key: tuple, device: str, store_key: str,
               candidates: list[dict]) -> dict | None:
        """Starts a deferred tuning of `key`: queues its configs' compiles and returns the interim
        config, or None (tune now) when the configs cannot be described to the compiler."""
        stage = self._static_stage(nargs, kwargs, candidates=candidates)
        if stage is None:
            return None
        if candidates:
            order = candidates
        else:  # A space: the cost model's likeliest configs compile ahead, its best launches meanwhile.
            from . import _core

            order = [dict(c) for c in _core.predicted_order(self._problem(nargs, kwargs, device), self.space,
                                                            min(WHOLE_LIST, self.space.count_valid()))]
        interim = order[0]
        stage.max_guesses = max(stage.max_guesses, len(order))
        stage.queue([interim])
        self._compile_checks_ahead(stage, nargs)
        stage.guess(order[1:])
        # Describing holds this call's tensors: the tuning describes its own call's (_tune_deferred).
        stage.describe = _described_later
        self._deferred[key] = _Deferred(stage=stage, store_key=store_key, device=device, candidates=candidates,
                                        started=time.perf_counter())
        _DEFERRING.add(self)
        return interim

    def _wrapper_above(self) -> str | None:
        """The type name of an object on this call's stack that launched this kernel through its
        `.fn` (directly or through @triton.heuristics) and is not Triton's Heuristics, or None."""
        from triton.runtime.autotuner import Heuristics

        below, frame = self, sys._getframe(1)
        for _ in range(64):
            if frame is None:
                break
            caller = frame.f_locals.get("self")
            if caller is not None and caller is not below and getattr(caller, "fn", None) is below:
                if not isinstance(caller, Heuristics):
                    return type(caller).__name__
                below = caller
            frame = frame.f_back
        return None

    def _tune_deferred(self, key: tuple, deferred: _Deferred, args: tuple, kwargs: dict):
        """Tunes a deferred key on this call's arguments, its configs compiled (or compiling)."""
        nargs = dict(zip(self.arg_names, args, strict=False))
        del self._deferred[key]
        if not self._deferred:
            _DEFERRING.discard(self)
        self.deferred_s.append(time.perf_counter() - deferred.started)
        try:
            # This call's arguments describe the configs not compiled yet (widen, a space's beyond the guesses).
            describe = self._static_stage(nargs, kwargs, describer_only=True, candidates=deferred.candidates)
            if describe is not None:
                deferred.stage.describe = describe
            config = self._tune(nargs, kwargs, key, deferred.device, deferred.store_key, deferred.candidates,
                                stage=deferred.stage)
        finally:
            deferred.stage.close()
        return self._to_config(config)

    def pending(self) -> list[tuple]:
        """The keys whose deferred tuning has not run yet (defer=True)."""
        return list(self._deferred)

    def _problem(self, nargs: dict, kwargs: dict, device: str) -> dict:
        values = {**nargs, **kwargs}
        shape = {k: values[k] for k in self.key
                 if isinstance(values.get(k), (int, float)) and not isinstance(values.get(k), bool)}
        dtype = next((str(v.dtype).replace("torch.", "") for v in nargs.values() if is_tensor(v)), "")
        return {"family": self._family(), "shape": shape, "device": device, "dtype": dtype}

    def _predicted(self, nargs: dict, kwargs: dict, candidates: list[dict], device: str) -> dict:
        """Zero-wait (max_evals=0): the config the cost model predicts fastest for this call, not
        measured, not stored (a later process predicts again, in microseconds). A stored winner
        is not looked up either: max_evals=0 asks for no tuning of any kind."""
        from . import _core

        space = self.space if self.listed is None else make_space(configs=candidates)
        (config,) = _core.predicted_order(self._problem(nargs, kwargs, device), space, 1)
        self.notes.append(f"{self.__name__}: max_evals=0: launched the cost model's predicted config {config}, "
                          "unmeasured")
        return dict(config)

    # ----- tuning --------------------------------------------------------------------------------

    def _may_isolate(self) -> bool:
        """Whether this kernel's configs will be measured in another process, as far as can be
        told at decoration (its module is still being imported; `_isolated` decides later)."""
        if self.isolate is False or self.max_evals == 0:
            return False
        if self.isolate is None and (self.pre_hook or self.post_hook
                                     or any(getattr(c, "pre_hook", None) for c in self.listed or ())):
            return False
        return True  # A kernel of __main__ or a notebook travels as its source (shipping.py).

    def _isolated(self) -> bool:
        if self.isolate is None and self._measured_here is not None:
            return False  # A measuring process could not set it up (_tune).
        if self._importable():
            unshippable = None
        else:  # Defined in __main__ or a notebook: it can still travel as its source.
            unshippable = self._unshippable()
        module = getattr(self.base_fn, "__module__", "__main__")
        if self.isolate is not None:
            if self.isolate and unshippable:
                raise ValueError(f"{self.__name__}: isolate=True measures in another process, which must import the "
                                 f"kernel or be sent its source, but it is defined in {module!r} and {unshippable}; "
                                 "define it in a module of its own, or give isolate=None to measure it in this "
                                 "process")
            return self.isolate
        if self.pre_hook or self.post_hook or any(getattr(c, "pre_hook", None) for c in self.listed or ()):
            return False  # Hooks are the caller's functions: they run where the caller runs.
        if unshippable:
            warnings.warn(f"{self.__name__} is defined in {module!r}, which a measuring process cannot import, and "
                          f"cannot be sent there as source: {unshippable}. Its configs are measured in this "
                          "process, so a config that crashes the GPU context ends it. Define the kernel in a "
                          "module to measure in isolation.", stacklevel=5)
            return False
        return True

    def _importable(self) -> bool:
        module = getattr(self.base_fn, "__module__", "__main__")
        return bool(module != "__main__" and module in sys.modules and getattr(sys.modules[module], "__file__", None))

    def _unshippable(self) -> str | None:
        """Why this kernel cannot travel to a measuring process as source (shipping.py), or None."""
        from . import shipping

        if not shipping.is_jit(self.fn):
            return f"it is wrapped ({type(self.fn).__name__}) between the tuner and @triton.jit"
        hooks = [self.pre_hook, self.post_hook, *(getattr(c, "pre_hook", None) for c in self.listed or ())]
        if any(h is not None and not _picklable(h) for h in hooks):
            return "its hooks are functions of the same module, which cannot be sent there"
        return shipping.shippable_reason(self.fn)

    def resolved(self, nargs: dict, kwargs: dict, config: dict) -> dict:
        """Every argument the @triton.jit function receives for `config`: the call's, the
        config's, and those the @triton.heuristics between this object and the kernel add."""
        from triton.runtime.autotuner import Heuristics

        values = {**nargs, **{k: v for k, v in kwargs.items() if k not in _LAUNCH_KWARGS}, **launchable(config)}
        inner = self.fn
        while not _is_jit(inner):
            if isinstance(inner, Heuristics):
                for name, heuristic in inner.values.items():
                    values[name] = heuristic(dict(values))
            inner = inner.fn
        return values

    def _static_stage(self, nargs: dict, kwargs: dict | None = None, describer_only: bool = False,
                      candidates: Sequence[dict] = ()):
        """A StaticStage that compiles this kernel's configs for the call's device in the shared
        compile pool, or None (with one warning per kernel) when the kernel or its arguments
        cannot be described to the compiler: then every config is measured unvetted.
        `describer_only`: only the function that describes a config of this call to the compiler.
        `candidates`: this call's configs, the first of which the kernel is first described with
        (none: the list's first): an early_config_prune may rewrite the listed configs (GemLite's
        adds a NUM_STAGES that its listed configs lack)."""
        from .analysis import H200, LauncherSource, device_limits
        from .compile_pool import CompileRequest, function_reference, jit_function
        from .kernels.base import Pointer, specialise
        from .launch import launch_source
        from .session import StaticStage

        kwargs = kwargs or {}
        if not self.static_checks:
            return None
        tensor = next((v for v in {**nargs, **kwargs}.values() if is_tensor(v)), None)
        cuda = tensor is not None and str(tensor.device).startswith("cuda")
        limits = device_limits(tensor.device) if cuda else H200
        hooks = {config_key(config_dict(c)): c.pre_hook for c in self.listed or () if getattr(c, "pre_hook", None)}
        shared_hook = self._shared_pre_hook()
        launcher: list = [None]  # The LauncherSource built once for every config, if any.

        def exact(config: dict):
            # What the launch itself would compile (launch.py), when Triton's JIT can say.
            arguments = {**nargs, **{k: v for k, v in kwargs.items() if k not in _LAUNCH_KWARGS},
                         **launchable(config)}
            hook = hooks.get(config_key(config), shared_hook)
            descriptors = [k for k, v in arguments.items() if not is_tensor(v) and tensor_of(v) is not None]
            if hook is not None and descriptors:
                # The hook sets the block shape of a TMA descriptor, which the launch compiles
                # into the kernel: it runs on copies of the descriptors (over the same tensors).
                arguments.update({k: dataclasses.replace(arguments[k]) for k in descriptors})
                hook(arguments)
            return launch_source(self.fn, arguments)

        def by_rule(config: dict) -> CompileRequest:
            signature, constexprs, attrs = specialise(jit, self._compile_arguments(nargs, kwargs, config, Pointer))
            options = split_config(config)[1]
            return CompileRequest((reference, signature, constexprs, attrs), options, None, "", limits)

        try:
            jit = jit_function(self.fn)
            reference = function_reference(jit)  # Of __main__: its source (shipping.py), or why not.
            probe = candidates[0] if candidates else self._first_config()
            try:
                source = exact(probe)
                launcher[0] = LauncherSource.of(source) if source is not None else None
            except Exception:  # noqa: BLE001 -- then the rules must describe it.
                by_rule(probe)
        except Exception as error:  # noqa: BLE001 -- any failure to describe only turns the checks off.
            if not self._static_warned:
                self._static_warned = True
                warnings.warn(f"{self.__name__}: configs are not checked against the device's limits before "
                              f"measuring ({error}); every config is measured.", stacklevel=6)
            return None

        def describe(config: dict) -> CompileRequest:
            try:
                source = exact(config)
            except Exception:  # noqa: BLE001 -- the launch will raise it where it matters; describe by rule.
                source = None
            self.described["exact" if source is not None else "by rule"] += 1
            if source is not None:
                if launcher[0] is not None and LauncherSource.of(source) == launcher[0]:
                    source = dataclasses.replace(source, with_launcher=False)  # Built once, alongside.
                return CompileRequest(source, config, None, "", limits)
            try:
                return by_rule(config)
            except Exception as error:  # noqa: BLE001 -- the session turns the static checks off, and measures.
                raise RuntimeError(f"config {config} cannot be described to the compiler ({error})") from error

        if describer_only:
            return describe
        stage = StaticStage(shared_compile_pool(self.compile_timeout), describe, own_pool=False)
        if launcher[0] is not None:
            # The C launcher every config's launch needs, built while the configs compile rather
            # than after the first one (and waited for with it).
            stage.compile_also([CompileRequest(launcher[0], {}, None, "", limits)])
        return stage

    def _compile_checks_ahead(self, stage, nargs: dict) -> None:
        """Queues the kernels that check this call's configs (device_ops.py) in the compile pool
        ahead of the configs, so that the first check does not compile them in this process."""
        from .checking import uses_own_ops
        from .compile_pool import CompileRequest

        tensors = [tensor_of(v) for v in nargs.values() if tensor_of(v) is not None]
        if not tensors or not uses_own_ops(tensors[0]):
            return
        from .analysis import device_limits
        from .device_ops import warm_up_sources

        limits = device_limits(tensors[0].device)
        sources = warm_up_sources(tensors[0].device, {t.dtype for t in tensors})
        stage.compile_also([CompileRequest(source, {}, None, "", limits) for source in sources])

    def _first_config(self) -> dict:
        if self.listed:
            return complete_options([config_dict(c) for c in self.listed])[0]
        return dict(self.space.configs(1)[0])

    def _compile_arguments(self, nargs: dict, kwargs: dict, config: dict, pointer: type) -> dict:
        from .compile_pool import jit_function

        values = self.resolved(nargs, kwargs, {k: v for k, v in config.items() if k not in LAUNCH_OPTIONS})
        names = inspect.signature(jit_function(self.fn).fn).parameters
        return {k: _placeholder(v, pointer) for k, v in values.items() if k in names}

    def _job(self, nargs: dict, kwargs: dict, isolate: bool, reference_configs: Sequence[dict]) -> KernelJob:
        # Kernel arguments given by name are copied like positional ones; the rest pass unchanged.
        nargs = {**nargs, **{k: v for k, v in kwargs.items() if k in self.arg_names}}
        launch_kwargs = {k: v for k, v in kwargs.items() if k not in _LAUNCH_KWARGS and k not in self.arg_names}
        hooks = {config_key(config_dict(c)): c.pre_hook for c in self.listed or () if getattr(c, "pre_hook", None)}
        shared = self._shared_pre_hook()
        job = KernelJob(args=dict(nargs), kwargs=launch_kwargs, outputs_names=self.outputs, reference=self.reference,
                        reference_configs=list(reference_configs), probe_first=self.listed is None,
                        reset_to_zero=self.reset_to_zero,
                        restore_value=self.restore_value, pre_hook=self.pre_hook, post_hook=self.post_hook,
                        config_hooks=hooks, shared_config_hook=shared, allowed_error=self.tolerance,
                        config_shaped=self._config_shaped())
        if isolate:
            if self._importable():
                job.module = getattr(self.base_fn, "__module__", "__main__")
                job.name = self._module_name()
            else:
                from . import shipping

                job.shipped = shipping.ship(self.fn)
            job.args = {k: (v.detach().cpu() if is_tensor(v) else v) for k, v in nargs.items()}
            if self.reference is not None and not _picklable(self.reference):
                result = self.reference(**scratch_copies(nargs))
                result = list(result) if isinstance(result, (tuple, list)) else [result]
                job.reference, job.reference_outputs = None, [t.detach().cpu() if is_tensor(t) else t for t in result]
        else:
            job.fn = self.fn
            job.kwargs["grid"] = kwargs.get("grid")
        return job

    def _config_shaped(self) -> bool:
        """Whether the kernel's library reads its chosen config back (checking.reads_chosen_config),
        worked out at its first tuning; said once in `notes`, since it loosens the check. Only for
        a library's list: a space of the user's own is checked whole."""
        if self._reads_config is None:
            self._reads_config = self.listed is not None and reads_chosen_config(
                getattr(self.base_fn, "__module__", "__main__"), self._module_name())
            if self._reads_config:  # A note, not a warning: nothing is wrong.
                self.notes.append(f"{self.__name__}: its library reads {self._module_name()}.best_config to "
                                  "interpret its outputs, so an output that configs write different elements of "
                                  "(one per tile) is not compared between them")
        return self._reads_config

    def _module_name(self) -> str:
        module = sys.modules.get(getattr(self.base_fn, "__module__", ""), None)
        for name, value in vars(module).items() if module else ():
            if value is self or value is self.fn:
                return name
        return self.__name__

    def _budget(self, candidates: Sequence[dict]) -> tuple[str, int]:
        if self.max_evals is not None:
            return self.strategy, self.max_evals
        # A list short enough is measured whole: once its configs compile in parallel, timing
        # them all costs well under a second (a config 1.3x slower than the best is timed three
        # times). Longer lists are searched by the strategy. On the H200 the agent's search of a
        # 32-config list (Liger's MLP) spent 0.8 s refitting its cost model to save 8 timings of
        # about 0.05 s each: below that length a search does not pay.
        if len(candidates) <= WHOLE_LIST:
            return "exhaustive", len(candidates)
        return self.strategy, max(WHOLE_LIST, math.ceil(len(candidates) / 2))

    def _tune(self, nargs: dict, kwargs: dict, key: tuple, device: str, store_key: str,
              candidates: list[dict], retune: tuple[int, dict] | None = None, stage=None, gate=None) -> dict:
        """Tunes one key and stores its winner. `retune` = (budget, the stored winner): tune again
        with that budget, all of it used, the stored winner measured first (hot.py). `stage`: the
        static stage a deferred tuning queued its compiles in (else one is made here). `gate`:
        a background re-tune's, through which every batch is timed (`gate(measure)`); without
        it the tuning waits for its turn among the process's tunings (hot.foreground_tuning)."""
        def tune():
            if gate is None:
                with hot.foreground_tuning():
                    return self._tune_now(nargs, kwargs, key, device, store_key, candidates, retune, stage, None)
            return self._tune_now(nargs, kwargs, key, device, store_key, candidates, retune, stage, gate)

        try:
            return tune()
        except WorkerUnavailable as error:
            # isolate=None measures in a measuring process where the kernel can go, which imports
            # its module by name: a module that imports only in this process (a package set up by
            # the program, an __init__ that fails in a fresh process) cannot. Measured here instead,
            # as a kernel that cannot go there is, rather than handed back to Triton.
            if self.isolate is not None or self._measured_here is not None:
                raise
            lines = [line.strip() for line in str(error).splitlines() if line.strip()]
            self._measured_here = lines[-1][:300] if lines else type(error).__name__  # The traceback's error.
            warnings.warn(f"{self.__name__}: a measuring process could not set the kernel up "
                          f"({self._measured_here}), so its configs are measured in this process", stacklevel=3)
        return tune()

    def _tune_now(self, nargs: dict, kwargs: dict, key: tuple, device: str, store_key: str,
                  candidates: list[dict], retune: tuple[int, dict] | None, stage, gate) -> dict:
        from .session import run_session

        started = time.perf_counter()
        grid = kwargs.get("grid")
        isolate = self._isolated()
        devices = visible_devices()
        reference_configs = candidates if self.reference is None and self.first_config_is_reference else []
        space = self.space if self.listed is None else make_space(configs=candidates)
        problem = {"family": self._family(), "shape": {k: nargs[k] for k in self.key if k in nargs},
                   "device": device, "dtype": next((str(v.dtype).replace("torch.", "") for v in nargs.values()
                                                    if is_tensor(v)), "")}
        store = self.store()

        def grid_of(config: dict) -> tuple:
            g = grid(self.resolved(nargs, kwargs, config)) if callable(grid) else grid
            return tuple(g) if isinstance(g, (tuple, list)) else (g,)

        phase = time.perf_counter()
        if stage is None:
            stage = self._static_stage(nargs, kwargs, candidates=candidates)
            if stage is not None:
                self._compile_checks_ahead(stage, nargs)
                stage.guess(candidates)  # Every listed config compiles in parallel from now on.
                phase = self._phase("describe", phase)
        if stage is not None:
            if reference_configs:
                try:
                    stage.reports_for(reference_configs[:1])  # The reference launch then loads it from the cache.
                except RuntimeError:
                    pass  # It cannot be described: the launch compiles it, and the session measures unvetted.
            phase = self._phase("reference compile", phase)
        strategy, budget = self._budget(candidates)
        stop, first = self.stop, []
        if retune is not None:
            budget, incumbent = retune
            size = space.count_valid()
            budget = min(budget, size)
            strategy = "exhaustive" if budget == size else self.strategy
            stop, first = "budget", [incumbent] if space.is_valid(incumbent) else []
        sessions = []
        try:
            session = None
            # (checked, the configs whose first that runs is the reference); a measuring process
            # launches them on the grid this process computes, as it does every measured config.
            attempts = [(True, [{**c, "__grid__": grid_of(c)} for c in reference_configs] if isolate
                         else reference_configs)]
            for checked, references in attempts:
                job = self._job(nargs, kwargs, isolate, references)
                job.check_results = checked
                job.vote = checked and self.reference is None and not references
                votes: dict[tuple, tuple] = {}
                if isolate:
                    pool = MeasurePool(job, devices, self.settings)
                    pool.start()  # Its set-up overlaps the session's first compiles.
                    measure_configs, close = pool.measure, pool.close
                    note = None
                else:
                    # Here the configs run where the call's tensors are. devices[0] names the first GPU as a
                    # measuring process is started on it (CUDA_VISIBLE_DEVICES's id: "cuda:3" for the one GPU
                    # Ray lends a worker), which in this process may be no device at all.
                    here = _tensor_device(nargs, default=devices[0])
                    phase = time.perf_counter()
                    state = job.setup(here)
                    self._phase("setup", phase)
                    measure_configs, close = in_process(job, state, self.settings, here, self._do_bench), None
                    note = state["note"]
                if note is not None:
                    self._note(f"{self.__name__}: configs are timed unchecked for key {key}: {note}.")

                def measure(batch: list[dict], best_ms: float, isolate=isolate, measure_configs=measure_configs,
                            job=job, votes=votes):
                    if not isolate:
                        return _take_votes(batch, measure_configs(batch, best_ms), votes)
                    results = measure_configs([{**c, "__grid__": grid_of(c)} for c in batch], best_ms)
                    _take_votes(batch, results, votes)
                    if not job.reference_configs and job.reference is None:
                        # A measuring process that restarts after a crash must judge by the same reference.
                        first_ok = next((c for c, (m, _) in zip(batch, results, strict=True) if m["status"] == "ok"),
                                        None)
                        if first_ok is not None:
                            job.reference_configs = [{**first_ok, "__grid__": grid_of(first_ok)}]
                    return results

                if gate is not None:
                    def measure(batch: list[dict], best_ms: float, measure=measure):
                        return gate(lambda: measure(batch, best_ms))

                def tune(space, strategy, budget, known=None, measure=measure, first=first):
                    shown = self.verbose if self.verbose is not None else verbose_from_env()
                    # Counting the valid configs walks the space: only for a bar that is shown.
                    total = None if not shown else \
                        min(budget, space.count_valid()) if budget is not None else space.count_valid()
                    with Progress(total, f"tune {self.__name__} {key}", enabled=shown) as progress:
                        return run_session(problem, space, measure, static=stage, strategy=strategy,
                                           max_evals=budget, options=stop_options(stop, strategy), first=first,
                                           max_seconds=self.max_seconds, seed=self.seed, store=store,
                                           source=self.source, trust_compile_errors=False, launch_key=grid_of,
                                           parallel=len(devices) if isolate else 1, confirm=self.settings.confirm,
                                           confirm_rounds=self.settings.confirm_rounds,
                                           confirm_within=self.settings.confirm_within, known=known,
                                           in_process=not isolate,
                                           on_trial=lambda config, result, _s: progress.trial(result, config))

                try:
                    phase = time.perf_counter()
                    session = tune(space, strategy, budget)
                    self._phase("session", phase)
                    statuses = session.statuses()
                    if checked and statuses.get("ok", 0) == 0 and statuses.get("wrong", 0) > 0:
                        # Not one config agreed with the reference: the check, not every config, is wrong.
                        self._note(f"{self.__name__}: no config matched the reference for key {key}, so the "
                                   "check cannot be made; the configs are timed unchecked, as triton.autotune "
                                   "times them.")
                        attempts.append((False, references))
                        continue
                    vote = self._elect(votes, session, key) if job.vote else None
                    if vote is not None and len(attempts) < 3:
                        # Most configs agree on another result than the first config that ran: that one
                        # was wrong, and the configs judged by it must be measured again.
                        elected, right, wrong = vote
                        self._correct_stored(store, session, right, wrong, key)
                        attempts.append((True, [{**elected, "__grid__": grid_of(elected)} if isolate else elected]))
                        continue
                    sessions.append(session)
                    if self.widen and self.listed is not None and checked and note is None:
                        # Beyond the list: only where every config is checked against the list's first.
                        known = {config_key(c): m for c, m, _ in session.history}
                        extra = self.max_evals if self.max_evals is not None else max(8, len(candidates) // 2)
                        if stage is not None:
                            # A config beyond the list may keep ptxas busy for minutes (a tile too
                            # large), which triton.autotune never meets: each may take a few times
                            # the slowest listed config's compile, then counts as failed.
                            listed_s = [r.compile_s for r in stage.reports.values() if r.compile_s]
                            stage.timeout_s = max(10.0, 3.0 * max(listed_s, default=10.0))
                        phase = time.perf_counter()
                        sessions.append(tune(widened_space(candidates), self.strategy, len(known) + extra, known))
                        self._phase("session", phase)
                finally:
                    if close is not None:
                        close()
                break
        finally:
            if stage is not None:
                # The compile workers' seconds by part, per config, for reports (benchmarks).
                self.compile_phases_s = [dict(r.phases_s) for r in stage.reports.values() if r.phases_s]
                stage.close()
        history = [h for s in sessions for h in s.history] if sessions else session.history
        if sessions:
            session = min(sessions, key=lambda s: s.best_ms)
        self.evaluations += len(history)
        self.history.extend(history)
        self.last_session = session
        self.bench_time = time.perf_counter() - started
        self.configs_timings = {self._to_config(c): [m["ms"], m.get("ms_p20", m["ms"]), m.get("ms_p80", m["ms"])]
                                for c, m, _ in history if m["status"] == "ok"}
        errors = [(c, m) for c, m, _ in history if m["status"] == "launch_error"]
        if session.best_config is None:
            if errors:
                config, m = errors[0]
                raise LaunchError(f"{self.__name__} with config {config} raised {m.get('error')}")
            raise RuntimeError(f"tuning {self.__name__} for key {key}: none of the {len(history)} configs measured "
                               f"ran correctly ({session.statuses()}); check the kernel, its reference and the space")
        phase = time.perf_counter()
        try:
            store.put_winner(store_key, session.best_config, session.best_ms, len(history),
                             f"{self.__name__} {key}", budget)
            self._phase("store", phase)
            if retune is not None:
                kept = config_key(session.best_config) == config_key(retune[1])
                self._note(f"{self.__name__}: re-tuned key {key} with {len(history)} evaluations: "
                           + ("the stored winner re-measured fastest and stands" if kept else
                              f"{session.best_config} ({session.best_ms:.4g} ms) replaces {retune[1]}"))
        except OSError as error:  # The winner stands for this process; a later one tunes again.
            self._note(f"{self.__name__}: the winner for key {key} could not be stored ({error}); later processes "
                       "will tune this key again")
        if self.profile and gate is None:
            phase = time.perf_counter()
            self._profile_winner(job if isolate else None, nargs, kwargs, session, store, problem, key, grid_of,
                                 devices[0])
            self._phase("profile", phase)
        self.tuning_s += time.perf_counter() - started
        return session.best_config

    def _profile_winner(self, job, nargs: dict, kwargs: dict, session, store, problem: dict, key: tuple, grid_of,
                        device: str) -> None:
        """profile=True: the winner's counters, read by ncu in a process of its own that launches
        the kernel as a measuring process does (profiling.profile_job), kept in `counters[key]`
        and stored with the winner's measurement. `job` is the tuning's measuring job, or None
        when it measured in this process: then the job a measuring process would get is made
        for ncu's. Without counters (no ncu, no GPU, a kernel or hook that cannot leave this
        process) the tuning stands and a note says why."""
        from .profiling import ProfileError, profile_job, stored_counters
        from .session import _storable

        winner = session.best_config
        try:
            if job is None:
                unshippable = None if self._importable() else self._unshippable()
                if unshippable:
                    raise ProfileError(f"its launch cannot be sent to ncu's process: {unshippable}")
                job = self._job(nargs, kwargs, True, [])
            launch = {**winner, "__grid__": grid_of(winner)}
            (read,) = profile_job(job, [launch], self.base_fn.__name__, device=device)
        except ProfileError as error:
            read = {"error": str(error)}
        except Exception as error:  # noqa: BLE001 -- counters are a report: they never fail a tuning that worked.
            read = {"error": f"{type(error).__name__}: {error}"}
        if "error" in read:
            self._note(f"{self.__name__}: profile=True read no counters for key {key}: {read['error']}")
            return
        self.counters[key] = read
        measured = next((m for c, m, _ in session.history
                         if m.get("status") == "ok" and config_key(c) == config_key(winner)), None)
        if measured is None:
            return
        row = _storable(measured)
        row["counters"] = stored_counters(read)
        try:
            store.add(problem, winner, row, f"{self.source} profile")
        except (OSError, RuntimeError) as error:
            self._note(f"{self.__name__}: the counters for key {key} could not be stored ({error})")

    def _elect(self, votes: dict, session, key: tuple) -> tuple[dict, set, set] | None:
        """With no reference, the configs' results put to a vote (issue 9): None when the first
        config that ran (the reference so far) has the most configs on its side; when another
        result has more, the first config of the larger group, with the keys of the configs that
        computed that result and of those that computed another; a clear error when two results
        have as many. Configs that left elements the reference wrote unwritten, or failed, do not
        vote; a config that compiled to the binary of another votes as that one."""
        votes = dict(votes)
        for config, m, _ in session.history:
            leader = votes.get(config_key(session.copied_from.get(config_key(config), {})))
            if leader is not None and config_key(config) not in votes:
                votes[config_key(config)] = (dict(config), leader[1], leader[2], m["status"])
        voters = [(config, sig, status == "ok") for config, sig, partial, status in votes.values()
                  if not partial and status in ("ok", "wrong")]
        groups, ours = majority(voters)
        if ours < 0 or len(groups) < 2:
            return None
        if len(groups[0]) == len(groups[1]):
            def named(group):
                return ", ".join(json.dumps(c, sort_keys=True) for c, _, _ in group[:4]) + (" ..." * (len(group) > 4))

            names = " against ".join(named(g) for g in groups[:2])
            raise RuntimeError(f"tuning {self.__name__} for key {key}: with no reference, its configs disagree and no "
                               f"result has a majority ({len(groups[0])} configs each: {names}); give reference= (a "
                               "function computing the right outputs) so that the right configs can be told apart")
        if ours == 0:
            return None
        winner = groups[0][0][0]
        self._note(f"{self.__name__}: for key {key}, {len(groups[0])} configs agree on one result and "
                   f"{len(groups[ours])} (the first config that ran among them) on another; the majority's is taken "
                   f"as the reference and the configs are measured again against {json.dumps(winner, sort_keys=True)}.")
        right = {config_key(c) for c, _, _ in groups[0]}
        return winner, right, {config_key(c) for g in groups[1:] for c, _, _ in g}

    def _correct_stored(self, store, session, right: set, wrong: set, key: tuple) -> None:
        """Corrects what an out-voted session stored: it judged every config against a wrong
        result, so its `ok` rows of configs that computed another result than the majority's are
        wrong, and its `wrong` rows of configs that computed the majority's (rows without a time:
        their verdict was all they held) are withdrawn. The search judged by the majority measures
        them again."""
        def rows(keys: set) -> list[int]:
            return [i for k in keys for i in session.stored_rows.get(k, ()) if isinstance(i, int)]

        why = (f"its result differs from the one most configs computed ({len(right)} configs agree on it); "
               "it passed the check only against the first config that ran, which the other configs out-voted")
        try:
            store.rejudge(rows(wrong), rows(right), why)
        except OSError as error:
            self._note(f"{self.__name__}: the rows stored for key {key} by the search judged against the out-voted "
                       f"first config could not be corrected ({error}); the store may call right configs wrong "
                       "and the out-voted ones ok")

    def _phase(self, name: str, since: float) -> float:
        now = time.perf_counter()
        self.phases_s[name] += now - since
        return now

    def _note(self, text: str) -> None:
        self.notes.append(text)
        warnings.warn(text, stacklevel=6)

    # ----- re-tuning in the background (hot.retune_in_background) ---------------------------------

    def request_copy(self, key: tuple, copy) -> None:
        """Asks the next launch of `key` to leave a copy of its arguments in `copy` (hot.ArgumentCopy)."""
        self._copy_wanted[key] = copy
        self._ready.pop(key, None)  # The next launch takes the slow path, which makes the copy.

    def retune_copy(self, key: tuple, store_key: str, copy, budget: int, incumbent: Mapping[str, Any], gate) -> dict:
        """Tunes `key` (stored under `store_key`) again on a copy of its arguments with `budget`
        evaluations, the stored winner `incumbent` measured first, each batch timed through
        `gate(device, measure)`; the winner (the incumbent unless another config re-measures
        faster) is stored and launches from now on. Called by a background re-tune's thread,
        holding hot's tuning turn."""
        if os.environ.get("TRITON_INTERPRET") == "1" and not self._isolated():
            # The interpreter patches triton.language while a kernel runs: two at once, in two
            # threads, break each other (the program's launch would raise).
            raise RuntimeError("its configs are measured in this process, under Triton's interpreter, which cannot "
                               "run the program's launches beside the re-tune's; measure in a measuring process "
                               "(isolate=None or True), or re-tune in a run of the program (`dr-kernel retune`)")
        nargs = dict(zip(self.arg_names, copy.args, strict=False))
        kwargs = dict(copy.kwargs)
        candidates = self._candidates(nargs, kwargs)
        device = _device_name({**nargs, **kwargs})
        here = _tensor_device(nargs)
        config = self._tune(nargs, kwargs, key, device, store_key, candidates, retune=(budget, dict(incumbent)),
                            gate=lambda measure: gate(here, measure))
        self.cache[key] = self._to_config(config)
        self._ready.pop(key, None)  # The next launch takes the new winner.
        return config


def _take_votes(batch: list[dict], results: list, votes: dict) -> list:
    """Moves each measurement's signature (KernelJob.annotate) into `votes`, keyed by config: the
    session and the store see the measurement without it."""
    for config, (m, _) in zip(batch, results, strict=True):
        sig, partial = m.pop("signature", None), m.pop("partial", False)
        if sig is not None:
            votes[config_key(config)] = (dict(config), sig, partial, m["status"])
    return results


def widened_space(configs: Sequence[dict]):
    """The product of the values the configs use per parameter, each power-of-two parameter one
    step beyond its smallest and largest value; num_stages one stage either side. The listed
    configs are in it."""
    values: dict[str, list] = {}
    for c in configs:
        for k, v in c.items():
            values.setdefault(k, [])
            if v not in values[k]:
                values[k].append(v)
    space = {}
    for name, vs in values.items():
        ints = [v for v in vs if isinstance(v, int) and not isinstance(v, bool)]
        if len(ints) == len(vs) and ints:
            lo, hi = min(ints), max(ints)
            if name == "num_stages":
                extra = [max(1, lo - 1), hi + 1]
            elif all(v > 0 and v & (v - 1) == 0 for v in ints):
                extra = [lo // 2] if lo > 1 else []
                extra += [hi * 2]
                if name == "num_warps":
                    extra = [v for v in extra if 1 <= v <= 16]
            else:
                extra = []
            vs = sorted(set(ints) | set(extra))
        space[name] = vs
    return make_space(space=space)


def _is_jit(fn: Any) -> bool:
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    return isinstance(fn, (JITFunction, InterpretedFunction))


def _placeholder(value: Any, pointer: type) -> Any:
    """What stands for an argument when the kernel is compiled without launching it: a Pointer
    with Triton's name of a tensor's element type, the value itself otherwise."""
    if not is_tensor(value):
        return value
    from triton._utils import canonicalize_dtype

    return pointer(canonicalize_dtype(value.dtype), value.data_ptr() % 16 == 0)


def _tensor_device(nargs: dict, default: str = "cpu") -> str:
    return next((str(v.device) for v in nargs.values() if is_tensor(v)), default)


def _device_name(nargs: dict) -> str:
    device = _tensor_device(nargs)
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    return "cpu (Triton interpreter)"
