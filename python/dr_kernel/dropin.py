"""``dr_kernel.autotune``: triton.autotune's exact signature, on dr_kernel's machinery.

    @dr_kernel.autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=4), ...], key=["n"])
    @triton.jit
    def kernel(x_ptr, n, BLOCK: tl.constexpr): ...

Everything triton.autotune takes is honoured as Triton 3.6 honours it: ``prune_configs_by``
(``early_config_prune``, ``perf_model``, ``top_k``), ``reset_to_zero``, ``restore_value``,
``pre_hook``, ``post_hook``, ``Config.pre_hook``, ``do_bench`` (and the deprecated ``warmup``,
``rep``, ``use_cuda_graph``, translated into one as Triton translates them), stacking with
``@triton.heuristics`` in either order, ``kernel.best_config``, ``kernel.cache``. ``cache_results``
is accepted and always in effect: every winner goes to the results store.

What differs is how the list is tuned (tuner.py): its configs compile in parallel in a process
pool, measuring launches run on a copy of the arguments and are checked against the list's first
config, lists longer than 32 configs are searched rather than measured whole, and ``widen=True``
also searches past the list (the product of the values it uses, one step beyond each end).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence

from .tuner import TunedKernel


class Autotuner(TunedKernel):
    """A kernel decorated with dr_kernel.autotune. When it was put in place of triton.autotune by
    install(), `fallback` builds the library's own triton Autotuner, which takes over the kernel
    (with one warning) if dr_kernel fails on it: dr_kernel never raises where Triton would not."""

    fallback: Callable[[], object] | None = None
    # The name switch.py lists the kernel under, and what the fallback is, for the warning.
    switch_name: str | None = None
    fallback_name = "triton.autotune"
    _stock = None

    def run(self, *args, **kwargs):
        if self._stock is None and self.fallback is None:
            return super().run(*args, **kwargs)
        if self._stock is None:
            try:
                return super().run(*args, **kwargs)
            except Exception as error:  # noqa: BLE001 -- the library's own autotune decides instead.
                import traceback

                # The innermost frames say where dr_kernel failed; the warning keeps the last one.
                frames = traceback.extract_tb(error.__traceback__)[-6:]
                where = " < ".join(f"{f.filename}:{f.lineno} in {f.name}" for f in reversed(frames))
                self._hand_back(f"{type(error).__name__}: {error} (at {where})")
        try:
            return self._stock.run(*args, **kwargs)
        finally:
            # Wrappers (FlagGems' LibEntry) read the config of the launch from this object.
            self.best_config = getattr(self._stock, "best_config", None)

    def _hand_back(self, reason: str) -> None:
        from . import switch

        name = self.switch_name or f"{getattr(self.base_fn, '__module__', '?')}.{self.__name__}"
        warnings.warn(f"dr_kernel: {name} is tuned by {self.fallback_name} from now on "
                      f"({' '.join(reason.split())[:500]})", stacklevel=4)
        switch.note_kept(name, reason)
        self._stock = self.fallback()


def autotune(configs, key, prune_configs_by=None, reset_to_zero=None, restore_value=None, pre_hook=None,
             post_hook=None, warmup=None, rep=None, use_cuda_graph=False, do_bench=None, cache_results=False, *,
             widen: bool = False, max_evals: int | None = None, strategy: str = "ppo", seed: int = 0,
             db: str | None = None, max_seconds: float = math.inf, stop: str = "auto", isolate: bool | None = False,
             defer: bool = False):
    """Decorator with triton.autotune's signature (Triton 3.6) that tunes with dr_kernel.

    Beyond Triton's arguments: ``widen`` searches past the list when every config can be checked
    against its first; ``max_evals`` caps the configs measured per key (default: the whole list
    up to 32 configs, else half of it, at least 32); ``strategy``, ``seed``, ``db`` (the results
    store), ``max_seconds`` and ``stop`` as for @optimize (``stop`` matters for lists searched
    rather than measured whole). ``isolate``: False (the default) measures in this process, as
    triton.autotune does (no measuring process to start: the first call is shorter, and a config
    that crashes the GPU context ends the program); None measures in a measuring process where the
    kernel can travel there (imported, or sent as its source) and has no hooks, else here; True
    always there (an error where it cannot go). ``defer=True``: a key's first call launches the
    list's first config at once while the list compiles in the background, and the key is tuned
    on its first later call that finds the list compiled (see @optimize).
    """
    bench = _do_bench(do_bench, warmup, rep, use_cuda_graph)

    def decorator(fn):
        return Autotuner(fn, key=list(key), configs=_configs(configs), prune_configs_by=prune_configs_by,
                         reset_to_zero=reset_to_zero, restore_value=restore_value, pre_hook=pre_hook,
                         post_hook=post_hook, do_bench=bench, widen=widen, max_evals=max_evals, strategy=strategy,
                         seed=seed, db=db, max_seconds=max_seconds, isolate=isolate, first_config_is_reference=True,
                         source="autotune", stop=stop, defer=defer)

    return decorator


def _configs(configs: Sequence | None) -> list:
    # triton.autotune's default for an empty list: one config of Triton's launch defaults.
    if configs:
        return list(configs)
    import triton

    return [triton.Config({}, num_warps=4, num_stages=3, num_ctas=1)]


def _do_bench(do_bench: Callable | None, warmup, rep, use_cuda_graph: bool) -> Callable | None:
    """The benchmarker triton.autotune would use, when the caller chose one (dr_kernel's own timer
    otherwise: an L2 flush and CUDA events per launch, stopping early when clearly slower)."""
    if warmup is None and rep is None and not use_cuda_graph:
        return do_bench
    warnings.warn("warmup, rep, and use_cuda_graph parameters are deprecated. See "
                  "https://github.com/triton-lang/triton/pull/4496 for details.", DeprecationWarning, stacklevel=3)
    import triton.testing

    if use_cuda_graph:
        return lambda fn, quantiles: triton.testing.do_bench_cudagraph(fn, rep=rep if rep is not None else 100,
                                                                       quantiles=quantiles)
    return lambda fn, quantiles: triton.testing.do_bench(fn, warmup=warmup if warmup is not None else 25,
                                                         rep=rep if rep is not None else 100, quantiles=quantiles)


def stock_options(options: Mapping) -> dict:
    """triton.autotune's own keyword arguments out of a call's (dr_kernel's extras dropped)."""
    own = ("prune_configs_by", "reset_to_zero", "restore_value", "pre_hook", "post_hook", "warmup", "rep",
           "use_cuda_graph", "do_bench", "cache_results")
    return {k: v for k, v in options.items() if k in own}
