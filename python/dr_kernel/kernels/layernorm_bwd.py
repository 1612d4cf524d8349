"""LayerNorm backward: dx, and the weight and bias gradients as partial sums over blocks of rows.

The kernel follows the backward of Triton's layer-norm tutorial and of Liger-Kernel: each program
takes ROWS_PER_PROGRAM consecutive rows, holds one whole row in registers (BLOCK_N is the row width
rounded up to a power of two, fixed by the problem), writes dx for each of its rows and accumulates
dy·x̂ and dy in fp32 lanes; at the end it writes its partial dw and db (one fp32 row each) without
atomics, and the launch sums the partials over programs. ROWS_PER_PROGRAM trades parallelism (one
row per program: as many programs as rows) against the traffic of the partial sums (which is
rows / ROWS_PER_PROGRAM rows of fp32 written and read again).

The saved statistics (mean, rstd) are inputs, as the forward pass leaves them. The launch writes
one tensor, `grads`, of rows + 2 rows: dx in the first rows, then dw and db in the input's type,
so that one comparison against the reference checks all three gradients.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .base import BuiltinKernel, Pointer, cdiv

EPS = 1e-5
# The widest row one program takes: with 32 warps that is already 64 elements per thread of each of
# x, dy, w, x̂ and the two sums (which spill); wider rows need a kernel that splits them.
MAX_COLS = 65536


def row_block(cols: int) -> int:
    """Returns BLOCK_N for rows of `cols` elements (the next power of two), or raises ValueError."""
    if not 0 < cols <= MAX_COLS:
        raise ValueError(f"layernorm_bwd keeps a whole row in registers: cols must be between 1 and {MAX_COLS}, "
                         f"not {cols}.")
    return triton.next_power_of_2(cols)


@triton.jit
def layernorm_bwd_kernel(x_ptr, w_ptr, dy_ptr, mean_ptr, rstd_ptr, dx_ptr, dwdb_ptr, n_rows, n_cols, stride,
                         ROWS_PER_PROGRAM: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    db = tl.zeros([BLOCK_N], dtype=tl.float32)
    row_start = pid * ROWS_PER_PROGRAM
    row_end = tl.minimum(row_start + ROWS_PER_PROGRAM, n_rows)
    # Row pointers start in 64-bit arithmetic and advance by one row per step.
    first = row_start.to(tl.int64) * stride
    x_row, dy_row, dx_row = x_ptr + first, dy_ptr + first, dx_ptr + first
    for row in range(row_start, row_end):
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_row + cols, mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(mean_ptr + row)
        rstd = tl.load(rstd_ptr + row)
        xhat = tl.where(mask, (x - mean) * rstd, 0.0)
        wdy = w * dy
        c1 = tl.sum(xhat * wdy, axis=0) / n_cols
        c2 = tl.sum(wdy, axis=0) / n_cols
        dx = (wdy - (xhat * c1 + c2)) * rstd
        tl.store(dx_row + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        dw += dy * xhat
        db += dy
        x_row += stride
        dy_row += stride
        dx_row += stride
    partial = dwdb_ptr + pid.to(tl.int64) * 2 * n_cols
    tl.store(partial + cols, dw, mask=mask)
    tl.store(partial + n_cols + cols, db, mask=mask)


def _arguments(shape, dtype, config):
    rows, cols = shape["rows"], shape["cols"]
    return {"x_ptr": Pointer(dtype), "w_ptr": Pointer(dtype), "dy_ptr": Pointer(dtype), "mean_ptr": Pointer("fp32"),
            "rstd_ptr": Pointer("fp32"), "dx_ptr": Pointer(dtype), "dwdb_ptr": Pointer("fp32"), "n_rows": rows,
            "n_cols": cols, "stride": cols, "BLOCK_N": row_block(cols), **config}


def _make_inputs(shape, dtype, device, seed):
    import torch

    generator = torch.Generator(device=device).manual_seed(seed)
    rows, cols = shape["rows"], shape["cols"]
    row_block(cols)
    x = torch.randn((rows, cols), generator=generator, device=device, dtype=dtype) + 0.5
    w = torch.randn((cols,), generator=generator, device=device, dtype=dtype)
    dy = torch.randn((rows, cols), generator=generator, device=device, dtype=dtype)
    # The statistics the forward pass saves, from the same rounded x the backward reads.
    xf = x.float()
    mean = xf.mean(dim=1)
    rstd = torch.rsqrt(xf.var(dim=1, unbiased=False) + EPS)
    # PyTorch's own saved statistics, in the layout and type its backward takes (which differ
    # between devices), for the framework's timing only.
    _, saved_mean, saved_rstd = torch.ops.aten.native_layer_norm(x, (cols,), w, torch.zeros_like(w), EPS)
    return {"x": x, "w": w, "dy": dy, "mean": mean, "rstd": rstd, "eps": EPS,
            "saved": (saved_mean, saved_rstd),
            "grads": torch.empty((rows + 2, cols), device=device, dtype=dtype)}


def _launch(fn, inputs, config):
    import torch

    x, grads = inputs["x"], inputs["grads"]
    rows, cols = x.shape
    assert x.stride() == inputs["dy"].stride() == grads.stride() and x.stride(1) == 1, \
        "layernorm_bwd tensors must be row-major with the same strides"
    programs = cdiv(rows, config["ROWS_PER_PROGRAM"])
    partial = torch.empty((programs, 2, cols), device=x.device, dtype=torch.float32)
    fn[(programs,)](x, inputs["w"], inputs["dy"], inputs["mean"], inputs["rstd"], grads, partial, rows, cols,
                    x.stride(0), BLOCK_N=row_block(cols), **config)
    grads[rows:].copy_(partial.sum(dim=0))
    return grads


def _reference(inputs):
    import torch

    x = inputs["x"].float().requires_grad_(True)
    w = inputs["w"].float().requires_grad_(True)
    b = torch.zeros_like(w, requires_grad=True)
    y = torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, inputs["eps"])
    y.backward(inputs["dy"].float())
    return torch.cat([x.grad, w.grad[None], b.grad[None]]).to(inputs["grads"].dtype)


def _framework(inputs):
    # PyTorch's fused LayerNorm backward (the kernel autograd runs), on the saved statistics.
    import torch

    x, w = inputs["x"], inputs["w"]
    mean, rstd = inputs["saved"]
    return torch.ops.aten.native_layer_norm_backward(inputs["dy"], x, (x.shape[-1],), mean, rstd, w,
                                                     torch.zeros_like(w), [True, True, True])


KERNEL = BuiltinKernel(
    name="layernorm_bwd",
    family="layernorm_bwd",
    fn=layernorm_bwd_kernel,
    description="LayerNorm backward: dx per row, dw and db as per-program partial sums over ROWS_PER_PROGRAM rows",
    space={
        "ROWS_PER_PROGRAM": [1, 2, 4, 8, 16, 32, 64, 128, 256],
        # A whole row lives in registers (x, dy, w, x̂ and the two sums): fewer than 4 warps spill
        # on every recorded width, so the space starts at 4.
        "num_warps": [4, 8, 16, 32],
    },
    constraints=[],
    shape_keys=("rows", "cols"),
    shapes=[{"rows": 8192, "cols": 4096}, {"rows": 3001, "cols": 5120}, {"rows": 16384, "cols": 2048}],
    arguments=_arguments,
    _make_inputs=_make_inputs,
    _launch=_launch,
    _reference=_reference,
    reference_name="aten.native_layer_norm_backward",
    _framework=_framework,
    output_name="grads",
    # Per element: x̂ (2), w·dy (1), the two row sums (3), dx (4), the dw and db sums (3).
    _flops=lambda s: 13 * s["rows"] * s["cols"],
    # x and dy read, dx written, w read, dw and db written; the fp32 partials are not counted
    # (their amount depends on the config, which is what the tuning decides).
    _bytes=lambda s, size: (3 * s["rows"] * s["cols"] + 3 * s["cols"]) * size + 8 * s["rows"],
)
