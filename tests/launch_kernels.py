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
