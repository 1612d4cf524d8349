"""Inclusive cumulative sum along rows: y[i, j] = x[i, 0] + … + x[i, j].

The row-wise scan LLM code runs for top-p sampling (a cumulative sum of sorted probabilities over
the vocabulary) and for chunked linear-attention and state-space models. Each program scans
BLOCK_ROWS rows at once, chunk by chunk of BLOCK_COLS columns: tl.cumsum scans a chunk within the
program, and a per-row carry (the sum of the chunks before) is added to it. Many rows per program
suit short rows; long rows want wide chunks. Sums are kept in fp32 and each result rounded once.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .base import BuiltinKernel, Pointer, cdiv


@triton.jit
def cumsum_kernel(x_ptr, y_ptr, n_rows, n_cols, stride, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_mask = rows[:, None] < n_rows
    offsets = rows.to(tl.int64)[:, None] * stride
    carry = tl.zeros([BLOCK_ROWS], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_COLS):
        cols = start + tl.arange(0, BLOCK_COLS)
        mask = row_mask & (cols[None, :] < n_cols)
        x = tl.load(x_ptr + offsets + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        y = tl.cumsum(x, axis=1) + carry[:, None]
        tl.store(y_ptr + offsets + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
        carry += tl.sum(x, axis=1)


def _arguments(shape, dtype, config):
    return {"x_ptr": Pointer(dtype), "y_ptr": Pointer(dtype), "n_rows": shape["rows"], "n_cols": shape["cols"],
            "stride": shape["cols"], **config}


def _make_inputs(shape, dtype, device, seed):
    import torch

    generator = torch.Generator(device=device).manual_seed(seed)
    # Offset from zero so that the sums grow along the row, as they do for probabilities: a
    # kernel that lost the carry between chunks would be far off.
    x = torch.randn((shape["rows"], shape["cols"]), generator=generator, device=device, dtype=dtype) + 0.25
    return {"x": x, "y": torch.empty_like(x)}


def _launch(fn, inputs, config):
    x, y = inputs["x"], inputs["y"]
    assert x.stride() == y.stride() and x.stride(1) == 1, "cumsum input and output must be row-major alike"
    return fn[(cdiv(x.shape[0], config["BLOCK_ROWS"]),)](x, y, x.shape[0], x.shape[1], x.stride(0), **config)


def _reference(inputs):
    import torch

    return torch.cumsum(inputs["x"].float(), dim=-1).to(inputs["y"].dtype)


def _framework(inputs):
    import torch

    return torch.cumsum(inputs["x"], dim=-1)


KERNEL = BuiltinKernel(
    name="cumsum",
    family="cumsum",
    fn=cumsum_kernel,
    description="inclusive scan along rows, BLOCK_ROWS rows per program in chunks of BLOCK_COLS",
    space={
        "BLOCK_ROWS": [1, 2, 4, 8, 16, 32],
        "BLOCK_COLS": [256, 512, 1024, 2048, 4096],
        "num_warps": [1, 2, 4, 8, 16],
    },
    # Between 2 and 32 elements per thread and chunk: a scan keeps its input, its result and the
    # scan's shuffles live.
    constraints=["BLOCK_ROWS * BLOCK_COLS >= 2 * 32 * num_warps", "BLOCK_ROWS * BLOCK_COLS <= 32 * 32 * num_warps"],
    shape_keys=("rows", "cols"),
    # Top-p sampling over Llama 3's vocabulary for a batch of 256; a scan over 4096 features of
    # 8k tokens; an odd batch over Llama 2's vocabulary.
    shapes=[{"rows": 256, "cols": 128256}, {"rows": 8192, "cols": 4096}, {"rows": 1001, "cols": 32000}],
    arguments=_arguments,
    _make_inputs=_make_inputs,
    _launch=_launch,
    _reference=_reference,
    reference_name="torch.cumsum",
    _framework=_framework,
    output_name="y",
    # One addition per element for the scan and one for the carry.
    _flops=lambda s: 2 * s["rows"] * s["cols"],
    _bytes=lambda s, size: 2 * s["rows"] * s["cols"] * size,
)
