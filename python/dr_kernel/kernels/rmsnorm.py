"""RMSNorm forward: y = x / sqrt(mean(x²) + eps) · w, row by row.

One program normalises one row in two passes over chunks of BLOCK columns: the first accumulates
the sum of squares in fp32 lanes, the second scales each element and multiplies it by the weight.
Chunking lets one BLOCK serve rows of any width, so BLOCK is a tuning parameter (wide blocks keep
the whole row in registers, narrow ones leave room for more programs per SM) rather than a
function of the problem. Inputs, weight and output share one element type: fp16, bf16 or fp32;
all arithmetic is done in fp32.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .base import BuiltinKernel, Pointer, geometric

EPS = 1e-6


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, n_cols, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * stride
    y_row = y_ptr + row * stride
    squares = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + offs, mask=offs < n_cols, other=0.0).to(tl.float32)
        squares += x * x
    rstd = tl.rsqrt(tl.sum(squares, 0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + offs, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def _arguments(shape, dtype, config):
    return {"x_ptr": Pointer(dtype), "w_ptr": Pointer(dtype), "y_ptr": Pointer(dtype),
            "n_cols": shape["cols"], "stride": shape["cols"], "eps": EPS, **config}


def _make_inputs(shape, dtype, device, seed):
    import torch

    generator = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn((shape["rows"], shape["cols"]), generator=generator, device=device, dtype=dtype)
    w = torch.randn((shape["cols"],), generator=generator, device=device, dtype=dtype)
    return {"x": x, "w": w, "y": torch.empty_like(x), "eps": EPS}


def _launch(fn, inputs, config):
    x, w, y = inputs["x"], inputs["w"], inputs["y"]
    # The kernel uses one row stride for input and output and reads the weight contiguously.
    assert x.stride() == y.stride() and x.stride(1) == 1 and w.stride(0) == 1, \
        "rmsnorm input and output must be row-major with the same strides"
    return fn[(x.shape[0],)](x, w, y, x.shape[1], x.stride(0), inputs["eps"], **config)


def _reference(inputs):
    import torch

    x = inputs["x"].float()
    rstd = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + inputs["eps"])
    return (x * rstd * inputs["w"].float()).to(inputs["y"].dtype)



def _framework(inputs):
    import torch

    x = inputs["x"]
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), inputs["w"], inputs["eps"])


KERNEL = BuiltinKernel(
    name="rmsnorm",
    family="rmsnorm",
    fn=rmsnorm_kernel,
    description="RMSNorm forward, row-wise, two passes over chunks of BLOCK",
    space={
        "BLOCK": geometric(256, 16384),
        "num_warps": [1, 2, 4, 8, 16, 32],
        "num_stages": [1, 2, 3, 4],
    },
    constraints=[],
    shape_keys=("rows", "cols"),
    shapes=[{"rows": 4096, "cols": 4096}, {"rows": 16384, "cols": 8192}],
    arguments=_arguments,
    _make_inputs=_make_inputs,
    _launch=_launch,
    _reference=_reference,
    reference_name="torch.nn.functional.rms_norm",
    _framework=_framework,
    output_name="y",
    # Per element: the square and its sum in the first pass, the two products in the second.
    _flops=lambda s: 4 * s["rows"] * s["cols"],
    # x read and y written once, the weight read once (it stays in L2 for the other rows).
    _bytes=lambda s, size: (2 * s["rows"] * s["cols"] + s["cols"]) * size,
)
