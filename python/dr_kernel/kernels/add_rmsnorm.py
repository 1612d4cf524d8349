"""Residual add fused with RMSNorm: h = x + r, y = h / sqrt(mean(h²) + eps) · w, row by row.

The chain a transformer block runs before its attention and its MLP (the residual stream h goes
on to the next block, y into the layer). Separately it is two kernels that move five rows per row
of the problem (x and r read, h written; h read, y written); fused, four (x and r read, h and y
written), and one launch fewer. The add rounds h to the tensors' element type before the norm
reads it, as torch's add then rms_norm do, so the fused result is the separate chain's.

One program takes one row. When BLOCK covers the row (WHOLE_ROW, derived from BLOCK and the width,
not searched) h stays in registers between the sum of squares and the scaling; otherwise the first
pass writes h in chunks of BLOCK while summing its squares and the second reads it back. Both
results go to one (2, rows, cols) tensor: y in its first half, h in its second, so that a launch
has one output to check.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .base import BuiltinKernel, Pointer
from .rmsnorm import EPS
from .rmsnorm import KERNEL as RMSNORM


@triton.jit
def add_rmsnorm_kernel(x_ptr, r_ptr, w_ptr, out_ptr, n_rows, n_cols, stride, eps, BLOCK: tl.constexpr,
                       WHOLE_ROW: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * stride
    r_row = r_ptr + row * stride
    y_row = out_ptr + row * stride
    h_row = out_ptr + (n_rows + row).to(tl.int64) * stride
    if WHOLE_ROW:
        offs = tl.arange(0, BLOCK)
        mask = offs < n_cols
        h = (tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
             + tl.load(r_row + offs, mask=mask, other=0.0).to(tl.float32)).to(out_ptr.dtype.element_ty)
        tl.store(h_row + offs, h, mask=mask)
        hf = h.to(tl.float32)
        rstd = tl.rsqrt(tl.sum(hf * hf, 0) / n_cols + eps)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + offs, (hf * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)
    else:
        squares = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_cols, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < n_cols
            h = (tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
                 + tl.load(r_row + offs, mask=mask, other=0.0).to(tl.float32)).to(out_ptr.dtype.element_ty)
            tl.store(h_row + offs, h, mask=mask)
            hf = h.to(tl.float32)
            squares += hf * hf
        rstd = tl.rsqrt(tl.sum(squares, 0) / n_cols + eps)
        for start in range(0, n_cols, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < n_cols
            # The same offsets in the same layout as the store above: each thread reads back what
            # it wrote itself.
            hf = tl.load(h_row + offs, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + offs, (hf * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


def _arguments(shape, dtype, config):
    rows, cols = shape["rows"], shape["cols"]
    return {"x_ptr": Pointer(dtype), "r_ptr": Pointer(dtype), "w_ptr": Pointer(dtype), "out_ptr": Pointer(dtype),
            "n_rows": rows, "n_cols": cols, "stride": cols, "eps": EPS, "WHOLE_ROW": config["BLOCK"] >= cols,
            **config}


def _make_inputs(shape, dtype, device, seed):
    import torch

    generator = torch.Generator(device=device).manual_seed(seed)
    rows, cols = shape["rows"], shape["cols"]
    x = torch.randn((rows, cols), generator=generator, device=device, dtype=dtype)
    r = torch.randn((rows, cols), generator=generator, device=device, dtype=dtype)
    w = torch.randn((cols,), generator=generator, device=device, dtype=dtype)
    return {"x": x, "r": r, "w": w, "out": torch.empty((2, rows, cols), device=device, dtype=dtype), "eps": EPS}


def _launch(fn, inputs, config):
    x, r, w, out = inputs["x"], inputs["r"], inputs["w"], inputs["out"]
    rows, cols = x.shape
    # One row stride for x, r and both halves of the output; the weight read contiguously.
    assert x.stride() == r.stride() == out.stride()[1:] and out.stride(0) == rows * x.stride(0) \
        and x.stride(1) == 1 and w.stride(0) == 1, \
        "add_rmsnorm tensors must be row-major with the same strides, the output (2, rows, cols)"
    return fn[(rows,)](x, r, w, out, rows, cols, x.stride(0), inputs["eps"], WHOLE_ROW=config["BLOCK"] >= cols,
                       **config)


def _reference(inputs):
    import torch

    dtype = inputs["out"].dtype
    h = (inputs["x"].float() + inputs["r"].float()).to(dtype)
    hf = h.float()
    rstd = torch.rsqrt(hf.pow(2).mean(dim=-1, keepdim=True) + inputs["eps"])
    return torch.stack([(hf * rstd * inputs["w"].float()).to(dtype), h])


def _framework(inputs):
    import torch

    h = inputs["x"] + inputs["r"]
    return torch.nn.functional.rms_norm(h, (h.shape[-1],), inputs["w"], inputs["eps"]), h


KERNEL = BuiltinKernel(
    name="add_rmsnorm",
    family="add_rmsnorm",
    fn=add_rmsnorm_kernel,
    description="residual add fused with RMSNorm, row-wise: h = x + r and y = rmsnorm(h)·w in one kernel",
    # RMSNorm's space and problems: the same rows in the same blocks, one more input and output.
    space={name: list(values) for name, values in RMSNORM.space.items()},
    constraints=list(RMSNORM.constraints),
    shape_keys=RMSNORM.shape_keys,
    shapes=[dict(shape) for shape in RMSNORM.shapes],
    arguments=_arguments,
    _make_inputs=_make_inputs,
    _launch=_launch,
    _reference=_reference,
    reference_name="torch add, then torch.nn.functional.rms_norm",
    _framework=_framework,
    output_name="out",
    # Per element: the add, the square and its sum, the two products.
    _flops=lambda s: 5 * s["rows"] * s["cols"],
    # x and r read, h and y written once each, the weight read once (it stays in L2).
    _bytes=lambda s, size: (4 * s["rows"] * s["cols"] + s["cols"]) * size,
)
