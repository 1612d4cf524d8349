"""Kernels that a program launches at many keys, for the collect and tune-many tests
(tests/test_tune_many.py): in a module, so that the workers tuning them can import them.

scale_kernel is @optimize'd; strided_add_kernel is a plain @triton.autotune kernel, which the drop-in
switch (`dr-kernel collect` turns it on) hands to dr_kernel; gather_kernel reads an index tensor, which
must stay within the table when its arguments are rebuilt.
"""

import os

import torch
import triton
import triton.language as tl
from dr_kernel import optimize
from dr_kernel.kernels import rmsnorm

SIZES = [96, 160, 200, 256, 333, 400, 512, 640, 700, 1000]


@optimize(max_evals=3, key=["n"], space={"BLOCK": [32, 64, 128], "num_warps": [1, 2]}, strategy="random")
@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.autotune(configs=[triton.Config({"BLOCK": 32}, num_warps=1), triton.Config({"BLOCK": 64}, num_warps=1),
                          triton.Config({"BLOCK": 128}, num_warps=2)], key=["n"])
@triton.jit
def strided_add_kernel(x_ptr, y_ptr, out_ptr, n, stride_x, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs * stride_x, mask=mask)
    tl.store(out_ptr + offs, x + tl.load(y_ptr + offs, mask=mask), mask=mask)


@optimize(max_evals=2, key=["n"], space={"BLOCK": [32, 64], "num_warps": [1]}, isolate=False)
@triton.jit
def gather_kernel(table_ptr, index_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    index = tl.load(index_ptr + offs, mask=mask, other=0)
    tl.store(out_ptr + offs, tl.load(table_ptr + index, mask=mask), mask=mask)


# A kernel wrapped away from its @triton.jit function (which lives in dr_kernel.kernels.rmsnorm).
wrapped_rmsnorm = optimize(max_evals=2, key=["n_cols"], space={"BLOCK": [64, 128]})(rmsnorm.KERNEL.fn)


def launch_all(scale_sizes=SIZES, add_sizes=SIZES[:6], gather_sizes=SIZES[:4]) -> None:
    """Launches each kernel once per size, and checks the results (twice for the first size: one
    entry per distinct launch)."""
    generator = torch.Generator().manual_seed(0)
    for n in [scale_sizes[0], *scale_sizes]:
        x = torch.randn(n, generator=generator)
        y = torch.empty_like(x)
        scale_kernel[lambda meta, n=n: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
        assert torch.equal(y, 2 * x)
    for n in add_sizes:
        x = torch.randn(2 * n, generator=generator)[::2]  # A strided view: its layout is recorded.
        y = torch.randn(n, generator=generator)
        out = torch.empty(n)
        strided_add_kernel[lambda meta, n=n: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n, x.stride(0))
        assert torch.allclose(out, x + y)
    table = torch.randn(50, generator=generator)
    for n in gather_sizes:
        index = torch.randint(0, 50, (n,), generator=generator)
        out = torch.empty(n)
        gather_kernel[lambda meta, n=n: (triton.cdiv(n, meta["BLOCK"]),)](table, index, out, n)
        assert torch.equal(out, table[index])


def evaluations() -> int:
    """Configs measured in this process, over the three kernels."""
    return scale_kernel.evaluations + gather_kernel.evaluations + getattr(strided_add_kernel, "evaluations", 0)


def valid_inputs(name, arguments, device):
    """tune-many's --inputs hook: gather_kernel's indices made valid by construction (each call is
    logged to $MANY_HOOK_LOG, for the test to see that the workers called it)."""
    log = os.environ.get("MANY_HOOK_LOG")
    if log:
        with open(log, "a") as handle:
            handle.write(f"{name}\n")
    if name == "gather_kernel":
        return {"index_ptr": torch.arange(arguments["n"], device=device) % arguments["table_ptr"].numel()}
    return None
