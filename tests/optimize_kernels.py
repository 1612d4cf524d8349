"""A kernel tuned by the decorator tests, in a module so that measuring processes can import it.

scale_kernel writes y = 2 * x. Its space holds configs that are slow (small blocks), wrong (STRIDE=2
skips every other element) and fatal (WILD=1 loads from an address far outside any allocation,
which kills the process running it, as an illegal address kills a CUDA context).
"""

import torch
import triton
import triton.language as tl
from dr_kernel import optimize

SPACE = {"BLOCK": [32, 64, 128, 256], "STRIDE": [1, 2], "WILD": [0, 1], "num_warps": [1, 2]}


@optimize(max_evals=12, key=["n"], space=SPACE, strategy="random", seed=3, isolate=True)
@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, STRIDE: tl.constexpr, WILD: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK // STRIDE) * STRIDE
    mask = offs < n
    if WILD:
        x = tl.load(x_ptr + offs + (1 << 44))
    else:
        x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, 2 * x, mask=mask)


def run(n: int, seed: int = 0):
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed))
    y = torch.empty_like(x)
    scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
    return x, y


@optimize(max_evals=0, key=["n"], space={"BLOCK": [32, 64, 128, 256], "num_warps": [1, 2, 4]})
@triton.jit
def predicted_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask), mask=mask)


# A reference given as a lambda, which cannot travel to a measuring process: it is called in the
# tuning process and its outputs travel instead. STRIDE=2 skips every other element (wrong).
@optimize(max_evals=4, key=["n"], space={"BLOCK": [32, 64], "STRIDE": [1, 2]}, strategy="exhaustive", isolate=True,
          reference=lambda x_ptr, **_: [2 * x_ptr], outputs=["y_ptr"])
@triton.jit
def lambda_checked_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, STRIDE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK // STRIDE) * STRIDE
    mask = offs < n
    tl.store(y_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask), mask=mask)


# A precision choice: LOW=1 keeps the product to 1/64 (as a cheaper format would), a relative error
# of about 0.5 %: beyond fp32's rounding, within a tolerance of 1 %.
def _precision_choices(tolerance):
    @optimize(max_evals=2, key=["n"], configs=[triton.Config({"BLOCK": 64, "LOW": low}) for low in (0, 1)],
              isolate=False, tolerance=tolerance)
    @triton.jit
    def precision_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, LOW: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        y = 2 * tl.load(x_ptr + offs, mask=mask)
        if LOW:
            y = (y * 64.0).to(tl.int32).to(tl.float32) / 64.0
        tl.store(y_ptr + offs, y, mask=mask)

    return precision_kernel


precision_exact, precision_loose = _precision_choices(None), _precision_choices(0.01)


# profile=True: after tuning, ncu's counters of the winner (tests/test_profiling.py gives it a
# stand-in ncu that runs the real profiled program in the interpreter).
@optimize(max_evals=2, key=["n"], space={"BLOCK": [32, 64]}, strategy="exhaustive", isolate=True, profile=True)
@triton.jit
def profiled_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask), mask=mask)


# Measured in the tuning process, profiled when DR_KERNEL_PROFILE=1: ncu's program gets the job a
# measuring process would have got.
@optimize(max_evals=2, key=["n"], space={"BLOCK": [32, 64]}, strategy="exhaustive", isolate=False)
@triton.jit
def profiled_here_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask), mask=mask)
