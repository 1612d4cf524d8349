"""Kernels decorated as libraries decorate them, with triton.autotune's own arguments, for the
drop-in's tests. Which autotune decorates them is the importer's choice: `AUTOTUNE` is read from
the module that imports this one through `autotune_kernels.configure()`, so the same source serves
stock Triton and dr_kernel.

Each kernel is a pattern seen in real libraries:
- heuristics_above: @triton.heuristics above @triton.autotune (the most common stacking);
- heuristics_below: @triton.autotune above @triton.heuristics above @triton.jit;
- tril_blocks: writes only the lower-triangular blocks of a torch.zeros output;
- atomic_sum: atomic_add of partial sums into a zeroed output (reset_to_zero);
- inplace_add: y += x in place (restore_value);
- hooked: a Config.pre_hook and an autotune pre_hook that zero a buffer;
- pruned: prune_configs_by with early_config_prune and perf_model/top_k;
- block_sums: one partial sum per block into a buffer sized for the list's smallest block, which
  its library sums as far as the chosen config's blocks go (`block_sums.best_config`, as mamba-ssm
  does): configs write different elements, none wrongly;
- recorded_sum: a library's own subclass of Triton's Autotuner, built by its own decorator (not
  triton.autotune), which launches a config the library recorded for a key (fla's config files)
  and benchmarks its list for other keys; its reset_to_zero names an optional output, None here.
"""

import triton
import triton.language as tl
from triton.runtime.autotuner import Autotuner

BLOCKS = [triton.Config({"BLOCK": b}, num_warps=w) for b in (16, 32, 64) for w in (1, 2)]
PRUNE_CALLS = []


# Above the autotuner a heuristic sees the call's arguments only (not the tuned BLOCK).
@triton.heuristics({"EVEN": lambda args: args["n"] % 64 == 0})
@triton.autotune(configs=BLOCKS, key=["n"])
@triton.jit
def heuristics_above(x_ptr, y_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        x = tl.load(x_ptr + offs)
        tl.store(y_ptr + offs, x * 3.0)
    else:
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        tl.store(y_ptr + offs, x * 3.0, mask=mask)


@triton.autotune(configs=BLOCKS, key=["n"])
@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def heuristics_below(x_ptr, y_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x + 1.0, mask=mask)


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (8, 16, 32)], key=["n"])
@triton.jit
def tril_blocks(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # One program per (row block, column block); blocks above the diagonal are left alone.
    i, j = tl.program_id(0), tl.program_id(1)
    if j <= i:
        rows = i * BLOCK + tl.arange(0, BLOCK)[:, None]
        cols = j * BLOCK + tl.arange(0, BLOCK)[None, :]
        mask = (rows < n) & (cols < n)
        x = tl.load(x_ptr + rows * n + cols, mask=mask)
        tl.store(y_ptr + rows * n + cols, x * 2.0, mask=mask)


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32, 64)], key=["n"], reset_to_zero=["out_ptr"])
@triton.jit
def atomic_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.atomic_add(out_ptr, tl.sum(x, axis=0))


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32, 64)], key=["n"], restore_value=["y_ptr"])
@triton.jit
def inplace_add(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(y_ptr + offs, mask=mask) + tl.load(x_ptr + offs, mask=mask), mask=mask)


HOOK_CALLS = {"config": 0, "autotune": 0}


def _zero_acc(nargs):
    HOOK_CALLS["config"] += 1
    nargs["acc_ptr"].zero_()


def _autotune_hook(nargs, reset_only=False):
    HOOK_CALLS["autotune"] += 1
    nargs["acc_ptr"].zero_()


@triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=_zero_acc) for b in (16, 32)], key=["n"],
                 pre_hook=_autotune_hook)
@triton.jit
def hooked(x_ptr, acc_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.atomic_add(acc_ptr + offs % 4, x, mask=offs < n)


def _early_prune(configs, named_args, **kwargs):
    PRUNE_CALLS.append(named_args["n"])
    return [c for c in configs if c.kwargs["BLOCK"] <= named_args["n"]]


def _perf_model(**kwargs):
    return -kwargs["BLOCK"]  # Predicts the largest block fastest.


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (8, 16, 32, 64, 128)], key=["n"],
                 prune_configs_by={"early_config_prune": _early_prune, "perf_model": _perf_model, "top_k": 2})
@triton.jit
def pruned(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) - 1.0, mask=mask)


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32)], key=["n"])
@triton.jit
def bad_argument(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


# The library's recorded configs (fla keeps them in JSON files per GPU), by Triton's key: the key
# arguments, then each tensor argument's dtype.
RECORDED = {(160, "torch.float32", "torch.float32"): triton.Config({"BLOCK": 64})}


class RecordedAutotuner(Autotuner):
    """Written as fla writes its CachedAutotuner: its own hooks, None-safe (Triton 3.6's reset of
    a reset_to_zero argument that is None fails), and a recorded config before any benchmarking."""

    def __init__(self, fn, arg_names, configs, key, reset_to_zero, restore_value, **kwargs):
        super().__init__(fn, arg_names, configs, key, reset_to_zero, restore_value, **kwargs)

        def pre_hook(nargs, reset_only=False):
            for name in self.reset_to_zero:
                if nargs[name] is not None:
                    nargs[name].zero_()

        self.pre_hook = pre_hook

    def run(self, *args, **kwargs):
        named = {**dict(zip(self.arg_names, args, strict=False)), **kwargs}
        key = (*(named[k] for k in self.keys), *(str(v.dtype) for v in named.values() if hasattr(v, "dtype")))
        if key in RECORDED:
            self.cache[key] = RECORDED[key]
        return super().run(*args, **kwargs)


def recorded_autotune(configs, key, reset_to_zero=None):
    return lambda fn: RecordedAutotuner(fn, fn.arg_names, configs, key, reset_to_zero, None)


@recorded_autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32, 64)], key=["n"],
                   reset_to_zero=["out_ptr", "max_ptr"])
@triton.jit
def recorded_sum(x_ptr, out_ptr, max_ptr, n, BLOCK: tl.constexpr, HAS_MAX: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.atomic_add(out_ptr, tl.sum(x, axis=0))
    if HAS_MAX:
        tl.atomic_max(max_ptr, tl.max(x, axis=0))


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32, 64)], key=["n"])
@triton.jit
def block_sums(x_ptr, partial_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(partial_ptr + tl.program_id(0), tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0))


def sum_by_blocks(x):
    import torch

    n = x.numel()
    partial = torch.empty(triton.cdiv(n, 16))  # As many as the smallest block makes.
    block_sums[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, partial, n)
    return partial[:triton.cdiv(n, block_sums.best_config.kwargs["BLOCK"])].sum()
