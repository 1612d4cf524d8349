"""LayerNorm forward: y = (x - mean) / sqrt(var + eps) · w + b, row by row.

The kernel is the fused forward of Triton's layer-norm tutorial, as libraries ship it: one program
per row, three passes over chunks of BLOCK_SIZE columns (the mean, the variance around it, then the
normalised output), and the row's mean and reciprocal standard deviation stored for the backward
pass (layernorm_bwd takes them). Chunking lets one BLOCK_SIZE serve rows of any width; wide chunks
keep more of the row in flight per program, narrow ones leave registers for more programs per SM.
Statistics are computed in fp32 whatever the element type.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .base import BuiltinKernel, Pointer

EPS = 1e-5


@triton.jit
def layernorm_fwd_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, n_cols, stride, eps,
                         BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row.to(tl.int64) * stride
    y_row = y_ptr + row.to(tl.int64) * stride
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        acc += tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / n_cols
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        x = tl.where(cols < n_cols, x - mean, 0.0)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def _arguments(shape, dtype, config):
    return {"x_ptr": Pointer(dtype), "w_ptr": Pointer(dtype), "b_ptr": Pointer(dtype), "y_ptr": Pointer(dtype),
            "mean_ptr": Pointer("fp32"), "rstd_ptr": Pointer("fp32"), "n_cols": shape["cols"],
            "stride": shape["cols"], "eps": EPS, **config}


def _make_inputs(shape, dtype, device, seed):
    import torch

    generator = torch.Generator(device=device).manual_seed(seed)
    rows, cols = shape["rows"], shape["cols"]
    # An offset mean, as activations have: a kernel that skipped the mean would not match.
    x = torch.randn((rows, cols), generator=generator, device=device, dtype=dtype) + 0.5
    w = torch.randn((cols,), generator=generator, device=device, dtype=dtype)
    b = torch.randn((cols,), generator=generator, device=device, dtype=dtype)
    return {"x": x, "w": w, "b": b, "y": torch.empty_like(x), "eps": EPS,
            "mean": torch.empty((rows,), device=device, dtype=torch.float32),
            "rstd": torch.empty((rows,), device=device, dtype=torch.float32)}


def _launch(fn, inputs, config):
    x, y = inputs["x"], inputs["y"]
    assert x.stride() == y.stride() and x.stride(1) == 1, \
        "layernorm input and output must be row-major with the same strides"
    return fn[(x.shape[0],)](x, inputs["w"], inputs["b"], y, inputs["mean"], inputs["rstd"], x.shape[1],
                             x.stride(0), inputs["eps"], **config)


def _reference(inputs):
    import torch

    x = inputs["x"].float()
    y = torch.nn.functional.layer_norm(x, (x.shape[-1],), inputs["w"].float(), inputs["b"].float(), inputs["eps"])
    return y.to(inputs["y"].dtype)


def _framework(inputs):
    import torch

    x = inputs["x"]
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), inputs["w"], inputs["b"], inputs["eps"])


KERNEL = BuiltinKernel(
    name="layernorm",
    family="layernorm",
    fn=layernorm_fwd_kernel,
    description="LayerNorm forward, row-wise, three passes over chunks of BLOCK_SIZE, mean and rstd saved",
    space={
        "BLOCK_SIZE": [512, 1024, 2048, 4096, 8192, 16384],
        "num_warps": [1, 2, 4, 8, 16, 32],
    },
    # Between 4 and 64 elements per thread and chunk: fewer leaves lanes idle or replicated, more
    # spills (ptxas then runs for tens of seconds, as the softmax recordings show for 256 and up).
    constraints=["BLOCK_SIZE >= 4 * 32 * num_warps", "BLOCK_SIZE <= 64 * 32 * num_warps"],
    shape_keys=("rows", "cols"),
    shapes=[{"rows": 8192, "cols": 4096}, {"rows": 2048, "cols": 12288}, {"rows": 3001, "cols": 5120}],
    arguments=_arguments,
    _make_inputs=_make_inputs,
    _launch=_launch,
    _reference=_reference,
    reference_name="torch.nn.functional.layer_norm",
    _framework=_framework,
    output_name="y",
    # Per element: the sum for the mean; the difference, square and sum for the variance; the
    # difference, two products and the sum of the output.
    _flops=lambda s: 8 * s["rows"] * s["cols"],
    # x read and y written once, weight and bias read once, mean and rstd (fp32) written.
    _bytes=lambda s, size: (2 * s["rows"] * s["cols"] + 2 * s["cols"]) * size + 8 * s["rows"],
)
