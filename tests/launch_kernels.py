"""Compiled (never interpreted) kernels for tests/test_launch.py, whatever TRITON_INTERPRET says
when this module is imported: each is a JITFunction made explicitly, and a compile worker imports
this module to find them."""

from __future__ import annotations

import triton
import triton.language as tl
from triton.runtime.jit import JITFunction


def _scale_shift(x_ptr, y_ptr, n, shift, scale, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    if EVEN:
        x = x + 1
    tl.store(y_ptr + offsets, x * scale + shift, mask=mask)


# A library's stacking: heuristics above a kernel that leaves one integer unspecialised.
scale_shift_jit = JITFunction(_scale_shift, do_not_specialize=["shift"])
scale_shift = triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})(scale_shift_jit)


def _copy_rows(in_desc, out_desc, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    offset = tl.program_id(0) * BLOCK_M
    out_desc.store([offset, 0], in_desc.load([offset, 0]))


# A kernel over TMA descriptors whose block shape each config's pre_hook sets, as Liger-Kernel's
# fused MLP does: kernels/base.py's rules cannot describe its arguments, the JIT can.
copy_rows = JITFunction(_copy_rows)


def set_block_shape(nargs):
    for name in ("in_desc", "out_desc"):
        nargs[name].block_shape = [nargs["BLOCK_M"], nargs["BLOCK_N"]]
