"""``@optimize``: tune a @triton.jit kernel on its first call for each key, then reuse the winner.

    from dr_kernel import optimize

    @optimize(max_evals=100, key=["M", "N", "K"], space={"BLOCK_M": [64, 128, 256], ...})
    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, ..., BLOCK_M: tl.constexpr, ...): ...

    matmul_kernel[grid](a, b, c, M, N, K, ...)

It stands where ``@triton.autotune(configs, key)`` stands, and takes the same ``reset_to_zero``,
``restore_value``, ``pre_hook``, ``post_hook`` and ``prune_configs_by``. Winners are kept in the
results store (``DR_KERNEL_DB``, or the per-user cache) under the kernel's source hash, the Triton
version, the device, the key values and the space searched, so later calls and later processes
launch them without tuning. The machinery is tuner.TunedKernel, which ``dr_kernel.autotune`` (the
drop-in with triton.autotune's exact signature) shares.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from .measure import MeasureSettings
from .tuner import TunedKernel

Optimized = TunedKernel  # The name earlier releases gave the decorated kernel.


def optimize(max_evals: int = 100, key: Sequence[str] = (), space: Mapping | None = None,
             configs: Sequence | None = None, constraints: Sequence[str] = (), strategy: str = "ppo",
             max_seconds: float = math.inf, seed: int = 0, reset_to_zero: Sequence[str] | None = None,
             restore_value: Sequence[str] | None = None, reference: Callable | None = None,
             outputs: Sequence[str] | None = None, db: str | None = None,
             settings: MeasureSettings | None = None, isolate: bool | None = None, static_checks: bool = True,
             compile_timeout: float = 120.0, pre_hook: Callable | None = None, post_hook: Callable | None = None,
             prune_configs_by: Mapping | None = None, stop: str = "auto", verbose: bool | None = None,
             tolerance: float | None = None, profile: bool | None = None, defer: bool = False):
    """Decorates a @triton.jit kernel so that its first call per key tunes it.

    ``space`` (a dict of value lists) or ``configs`` (a list of triton.Config) is the search space;
    ``constraints`` are Python expressions over its names. ``max_evals`` and ``max_seconds`` bound
    one tuning; with ``stop="auto"`` (the default) the agent ends a tuning earlier once another
    measurement is unlikely to pay (when even the most promising untried config has below a 20 %
    chance of being 5 % faster, by beliefs it trusts, and none of the best config's one-step
    neighbours is faster; or once the best has gained under 2 % in 24 measurements),
    ``stop="budget"`` uses the whole budget.
    ``defer=True`` keeps the tuning off a key's first call: that call launches the cost model's
    predicted config (with ``configs=``, the first listed) at once while the likeliest configs
    compile in the background, and the key is tuned on its first later call that finds them
    compiled (the GPU then measures as it would have on the first call). A key called only once is
    never tuned. ``dr_kernel.pending_tunings()`` lists the keys still waiting.
    ``max_evals=0`` measures nothing: each key launches the config the cost model predicts fastest
    (zero wait; on kernel families it has not seen, 1.28x the best in the median).
    ``reference(**args)`` returns the correct outputs (in the order of ``outputs``, the names of
    the tensors the kernel writes); without it the first of ``configs`` that runs is the
    reference, or with ``space=`` the configs' results are put to a vote: the first config that
    runs judges the others while the search goes on, and if more configs agree on another result
    than on its, the search runs again judged by that majority (a tie raises an error naming the
    configs, asking for ``reference=``). Every measuring launch runs on a
    copy of the arguments: the caller's tensors are written only by the winner's launch.
    ``isolate`` forces measuring in worker processes (True) or in this process (False); kernels
    with hooks are measured in this process.

    ``tolerance`` is the relative error (L2 norm of the difference over the reference's) a config's
    outputs may have against the reference: by default the outputs' dtype's rounding against another
    config, and 2 % against a ``reference`` you give. Looser, a space may hold precision choices
    (fp8 operands, fp16 accumulation, an approximate exp): a config beyond the tolerance is judged
    wrong and never chosen; give an fp32 ``reference`` to hold every config to the exact result.
    Winners and measurements are stored per tolerance.

    Before measuring, each config is compiled for the device in a pool of processes (at most
    ``compile_timeout`` seconds each): configs over the device's limits (shared memory, threads,
    registers) or whose compile times out are refused without launching, and configs that compile
    to the same binary are measured once. ``static_checks=False`` measures every config instead.

    When the search ends, the best configs within 10 % of the best (3 by default) are timed three
    more times each and the lowest median wins; ``settings=MeasureSettings(confirm=0)`` keeps the
    fastest first measurement instead. With several GPUs visible, one measuring process runs per
    GPU and the strategy proposes one config per GPU each round.

    ``verbose=True`` shows each tuning's progress on stderr (configs measured, best time so far,
    time left; a bar on a terminal, a line every few seconds elsewhere); ``None`` (the default)
    shows it when the environment variable DR_KERNEL_VERBOSE is set to 1.

    ``profile=True`` reads Nsight Compute's counters of each tuning's winner (achieved occupancy,
    L2 hit rate, DRAM and SM throughput, stall reasons; ``ncu`` must be installed and allowed to
    read the GPU's counters): ncu runs a process of its own that launches the winner as a
    measuring process does, a few seconds per key. They are kept in ``kernel.counters[key]`` and
    stored with the winner's measurement; without them the tuning stands and a warning says why
    (a kernel defined where no other process can load it, hooks that cannot travel). ``None``
    (the default) profiles when the environment variable DR_KERNEL_PROFILE is set to 1, which
    also reaches the kernels of libraries switched over from triton.autotune.
    """

    def decorator(fn):
        return TunedKernel(fn, max_evals=max_evals, key=key, space=space, configs=configs, constraints=constraints,
                           strategy=strategy, max_seconds=max_seconds, seed=seed, reset_to_zero=reset_to_zero,
                           restore_value=restore_value, pre_hook=pre_hook, post_hook=post_hook,
                           prune_configs_by=prune_configs_by, reference=reference, outputs=outputs, db=db,
                           settings=settings, isolate=isolate, static_checks=static_checks,
                           compile_timeout=compile_timeout, first_config_is_reference=configs is not None,
                           stop=stop, verbose=verbose, tolerance=tolerance, profile=profile, defer=defer)

    return decorator
