"""Row-wise softmax with an online maximum and sum over chunks of BLOCK columns.

The kernel is the one data/h200/softmax.jsonl was recorded with; its code for fp16 is unchanged
except that the result is cast to the output pointer's element type instead of always to fp16.
One program handles one row in two passes: the first keeps a running maximum and a running sum
of exponentials per lane, the second writes exp(x - max) / sum. A BLOCK wider than the row is
allowed and simply masked, which is why the recorded space reaches 32768 for 4096 columns.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .base import BuiltinKernel, Pointer, geometric


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * stride
    y_row = y_ptr + row * stride
    m = tl.full([BLOCK], -1.0e30, tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + offs, mask=offs < n_cols, other=-1.0e30).to(tl.float32)
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
    mx = tl.max(m, 0)
    tot = tl.sum(s * tl.exp(m - mx), 0)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + offs, mask=offs < n_cols, other=0.0).to(tl.float32)
        tl.store(y_row + offs, (tl.exp(x - mx) / tot).to(y_ptr.dtype.element_ty), mask=offs < n_cols)


def _arguments(shape, dtype, config):
    # Rows are contiguous, so the row stride equals the number of columns.
    return {"x_ptr": Pointer(dtype), "y_ptr": Pointer(dtype), "n_cols": shape["cols"],
            "stride": shape["cols"], **config}


def _make_inputs(shape, dtype, device, seed):
    import torch

    generator = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn((shape["rows"], shape["cols"]), generator=generator, device=device, dtype=dtype)
    return {"x": x, "y": torch.empty_like(x)}


def _launch(fn, inputs, config):
    x, y = inputs["x"], inputs["y"]
    # The kernel uses one stride for both tensors, so they must share their layout.
    assert x.stride() == y.stride(), "softmax input and output must have the same strides"
    return fn[(x.shape[0],)](x, y, x.shape[1], x.stride(0), **config)


def _reference(inputs):
    import torch

    return torch.softmax(inputs["x"].float(), dim=-1).to(inputs["y"].dtype)



def _torch():
    import torch

    return torch


KERNEL = BuiltinKernel(
    name="softmax",
    family="softmax",
    fn=softmax_kernel,
    description="row softmax, online max/sum over chunks of BLOCK",
    space={
        "BLOCK": geometric(256, 32768),
        "num_warps": [1, 2, 4, 8, 16, 32],
        "num_stages": [1, 2, 3, 4],
    },
    constraints=[],
    shape_keys=("rows", "cols"),
    shapes=[{"rows": 4096, "cols": 4096}],
    arguments=_arguments,
    _make_inputs=_make_inputs,
    _launch=_launch,
    _reference=_reference,
    reference_name="torch.softmax",
    _framework=lambda inputs: _torch().softmax(inputs["x"], dim=-1),
    output_name="y",
    # Five operations per element, as the recorded tables count them: the maximum, the exponential
    # and the sum of the first pass, the exponential and the division of the second.
    _flops=lambda s: 5 * s["rows"] * s["cols"],
    _bytes=lambda s, size: 2 * s["rows"] * s["cols"] * size,
)
