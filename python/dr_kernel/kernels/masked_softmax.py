"""Scale, additive mask and softmax fused: y = softmax(x · scale + mask) over each row.

The chain attention scores take outside a fused attention kernel (a custom mask, a model that
materialises its scores): apart it is a multiply, an add and a softmax, three kernels that move
seven rows per row of the problem (x read and written scaled, that read with the mask and
written, that read and the result written); fused, one launch reads x and the mask once (twice
when the row is wider than a block) and writes y once. The mask is additive, of the scores'
dtype, and may repeat over the rows: row r uses mask row r mod mask_rows (a (queries, keys) mask
under any number of batches and heads: scores viewed as rows of keys, the mask's rows repeat with
the query count), and -inf in it masks an element out (a row masked out entirely is NaN, as torch's
softmax makes it). mask_rows = 0 in the shape means no mask.

One program takes one row. When BLOCK covers the row (WHOLE_ROW, derived from BLOCK and the width,
not searched) z = x · scale + mask stays in registers: x and the mask are read once, y written
once. Otherwise the passes are softmax.py's: a running maximum and sum of exponentials per lane
over chunks of BLOCK columns, then exp(z - max) / sum written, z recomputed from x and the mask
(cheaper than writing it).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .base import BuiltinKernel, Pointer
from .softmax import KERNEL as SOFTMAX

# The scale the tuning problems use: 1/sqrt(64), attention's for heads of 64 (any value times the same).
SCALE = 0.125


@triton.jit
def _chunk_scores(x_row, mask_row, offs, n_cols, scale, HAS_MASK: tl.constexpr):
    # z = x · scale + mask in fp32 over one chunk of a row; lanes past its end hold -1e30.
    inside = offs < n_cols
    z = tl.load(x_row + offs, mask=inside, other=0.0).to(tl.float32) * scale
    if HAS_MASK:
        z += tl.load(mask_row + offs, mask=inside, other=0.0).to(tl.float32)
    return tl.where(inside, z, -1.0e30)


@triton.jit
def masked_softmax_kernel(x_ptr, mask_ptr, y_ptr, n_cols, stride, mask_rows, mask_stride, scale,
                          BLOCK: tl.constexpr, HAS_MASK: tl.constexpr, WHOLE_ROW: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row.to(tl.int64) * stride
    y_row = y_ptr + row.to(tl.int64) * stride
    mask_row = mask_ptr + (row % mask_rows).to(tl.int64) * mask_stride  # Read only with HAS_MASK.
    if WHOLE_ROW:
        offs = tl.arange(0, BLOCK)
        z = _chunk_scores(x_row, mask_row, offs, n_cols, scale, HAS_MASK)
        e = tl.exp(z - tl.max(z, 0))
        tl.store(y_row + offs, (e / tl.sum(e, 0)).to(y_ptr.dtype.element_ty), mask=offs < n_cols)
    else:
        m = tl.full([BLOCK], -1.0e30, tl.float32)
        s = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_cols, BLOCK):
            z = _chunk_scores(x_row, mask_row, start + tl.arange(0, BLOCK), n_cols, scale, HAS_MASK)
            m_new = tl.maximum(m, z)
            s = s * tl.exp(m - m_new) + tl.exp(z - m_new)
            m = m_new
        mx = tl.max(m, 0)
        tot = tl.sum(s * tl.exp(m - mx), 0)
        for start in range(0, n_cols, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            z = _chunk_scores(x_row, mask_row, offs, n_cols, scale, HAS_MASK)
            tl.store(y_row + offs, (tl.exp(z - mx) / tot).to(y_ptr.dtype.element_ty), mask=offs < n_cols)

def _arguments(shape, dtype, config):
    cols = shape["cols"]
    return {"x_ptr": Pointer(dtype), "mask_ptr": Pointer(dtype), "y_ptr": Pointer(dtype), "n_cols": cols,
            "stride": cols, "mask_rows": max(1, shape["mask_rows"]), "mask_stride": cols, "scale": SCALE,
            "HAS_MASK": shape["mask_rows"] > 0, "WHOLE_ROW": config["BLOCK"] >= cols, **config}


def causal_mask(rows: int, cols: int, dtype, device):
    """An additive (rows, cols) mask: 0 where column <= row + cols - rows (keys up to the query's
    position, the queries being the last `rows` of the keys), -inf elsewhere."""
    import torch

    keep = torch.ones((rows, cols), dtype=torch.bool, device=device).tril(diagonal=cols - rows)
    return torch.zeros((rows, cols), dtype=dtype, device=device).masked_fill(~keep, float("-inf"))


def _make_inputs(shape, dtype, device, seed):
    import torch

    rows, cols, mask_rows = shape["rows"], shape["cols"], shape["mask_rows"]
    if mask_rows < 0 or (mask_rows and rows % mask_rows):
        raise ValueError(f"masked_softmax shape {shape}: mask_rows must be 0 (no mask) or divide rows ({rows})")
    generator = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn((rows, cols), generator=generator, device=device, dtype=dtype) * 4
    mask = causal_mask(max(1, mask_rows), cols, dtype, device) if mask_rows else None
    return {"x": x, "mask": mask, "scale": SCALE, "y": torch.empty_like(x)}


def _launch(fn, inputs, config):
    x, mask, y = inputs["x"], inputs["mask"], inputs["y"]
    rows, cols = x.shape
    assert x.stride() == y.stride() and x.stride(1) == 1, "masked_softmax input and output must be row-major alike"
    if mask is not None:
        assert mask.dim() == 2 and mask.shape[1] == cols and rows % mask.shape[0] == 0 and mask.stride(1) == 1, \
            "masked_softmax takes a row-major (mask rows, cols) mask whose rows divide the input's"
    # Without a mask, its arguments are x's (never read), as the offline compile describes them.
    return fn[(rows,)](x, x if mask is None else mask, y, cols, x.stride(0), 1 if mask is None else mask.shape[0],
                       x.stride(0) if mask is None else mask.stride(0), inputs["scale"], HAS_MASK=mask is not None,
                       WHOLE_ROW=config["BLOCK"] >= cols, **config)


def _plus_mask(scores, mask):
    # The (mask rows, cols) mask added to every block of mask rows of the (rows, cols) scores.
    return scores if mask is None else (scores.view(-1, *mask.shape) + mask).view(scores.shape)


def _reference(inputs):
    import torch

    mask = inputs["mask"]
    scores = _plus_mask(inputs["x"].float() * inputs["scale"], None if mask is None else mask.float())
    return torch.softmax(scores, dim=-1).to(inputs["y"].dtype)


def _framework(inputs):
    # Torch's chain apart, in the inputs' dtype: scale, add the mask, softmax.
    import torch

    return torch.softmax(_plus_mask(inputs["x"] * inputs["scale"], inputs["mask"]), dim=-1)


KERNEL = BuiltinKernel(
    name="masked_softmax",
    family="masked_softmax",
    fn=masked_softmax_kernel,
    description="scale, additive mask and row softmax fused: softmax(x·scale + mask), online max/sum over BLOCK",
    # Softmax's space: the same rows in the same chunks, one more input.
    space={name: list(values) for name, values in SOFTMAX.space.items()},
    constraints=list(SOFTMAX.constraints),
    shape_keys=("rows", "cols", "mask_rows"),
    # Attention scores of 32 heads over 2048 and 4096 keys, causal (a (queries, keys) mask under
    # every head), and a row width no power of two without a mask.
    shapes=[{"rows": 32 * 2048, "cols": 2048, "mask_rows": 2048}, {"rows": 32 * 1024, "cols": 4096, "mask_rows": 1024},
            {"rows": 8192, "cols": 3000, "mask_rows": 0}],
    arguments=_arguments,
    _make_inputs=_make_inputs,
    _launch=_launch,
    _reference=_reference,
    reference_name="torch x * scale + mask, then torch.softmax",
    _framework=_framework,
    output_name="y",
    # Per element: the scale and the mask's add, then softmax's five (softmax.py).
    _flops=lambda s: 7 * s["rows"] * s["cols"],
    # x read and y written; the mask read once (its rows stay in L2 across the rows that repeat them).
    _bytes=lambda s, size: (2 * s["rows"] * s["cols"] + s["mask_rows"] * s["cols"]) * size,
)
