"""dr_kernel's own arithmetic on the arguments of a kernel it tunes: copying and comparing them.

Some libraries replace PyTorch's CUDA operators with Triton kernels of their own (FlagGems'
``use_gems()`` registers ~400 of them on the CUDA dispatch key). Inside such a context every torch
operator dr_kernel applies while it tunes (copying the arguments, comparing a config's outputs with
the reference's) runs the library's implementation instead: each compiles kernels of its own on
first use (43 extra compiles in one FlagGems layer-norm call on the H200), some fail on inputs the
library did not expect (its ``all`` divides by zero on an empty selection), and some are autotuned
in turn. The kernels here do what checking needs on flat, contiguous memory, whatever torch's
dispatch table holds; tensor creation, views and reading a scalar back (``empty``, ``set_``,
``view``, ``item``) are the only torch operators used, and no library replaces those.

checking.py uses them for CUDA tensors and keeps PyTorch's operators elsewhere (the CPU, Triton's
interpreter), where nothing replaces them; tests run these kernels in the interpreter against
those operators.
"""

from __future__ import annotations

import math
from typing import Any

import triton
import triton.language as tl

_COPY_BLOCK = 16384
_COMPARE_BLOCK = 2048
_REDUCE_BLOCK = 1024
_SLOTS = 8  # Per-program partial results: defined, nan mismatches, other mismatches, sum (a-b)^2, sum b^2.

_INT_OF_SIZE = {1: tl.int8, 2: tl.int16, 4: tl.int32, 8: tl.int64}


@triton.jit(do_not_specialize=["n"])
def _copy(dst, src, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(dst + offsets, tl.load(src + offsets, mask=mask), mask=mask)


@triton.jit(do_not_specialize=["n"])
def _flip(data, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(data + offsets, tl.load(data + offsets, mask=mask) ^ 0xFF, mask=mask)


@triton.jit(do_not_specialize=["n"])
def _compare(out, ref, pristine, partials, n, BITS: tl.constexpr, FLOAT: tl.constexpr, WIDE: tl.constexpr,
             BLOCK: tl.constexpr):
    # Over the elements `ref` changed from `pristine` (bit for bit): how many there are, how many
    # `out` disagrees with on NaN, on anything else exactly (infinities; every bit for integers),
    # and the squared L2 norms of out - ref and of ref over the finite ones.
    program = tl.program_id(0)
    offsets = program.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(out + offsets, mask=mask)
    b = tl.load(ref + offsets, mask=mask)
    p = tl.load(pristine + offsets, mask=mask)
    defined = mask & (b.to(BITS, bitcast=True) != p.to(BITS, bitcast=True))
    base = partials + program.to(tl.int64) * 8
    tl.store(base + 0, tl.sum(defined.to(tl.float64), axis=0))
    if FLOAT:
        if WIDE:  # float64 as it is; narrower floats by way of float32, which every one converts to.
            x = a.to(tl.float64)
            y = b.to(tl.float64)
        else:
            x = a.to(tl.float32).to(tl.float64)
            y = b.to(tl.float32).to(tl.float64)
        nan_x = x != x
        nan_y = y != y
        # x - x is 0 for a finite x and NaN for an infinite (or NaN) one.
        infinite = (((x - x) != 0.0) | ((y - y) != 0.0)) & ~nan_x & ~nan_y
        finite = ~nan_x & ~nan_y & ~infinite
        tl.store(base + 1, tl.sum((defined & (nan_x != nan_y)).to(tl.float64), axis=0))
        tl.store(base + 2, tl.sum((defined & infinite & (x != y)).to(tl.float64), axis=0))
        d = tl.where(defined & finite, x - y, 0.0)
        r = tl.where(defined & finite, y, 0.0)
        tl.store(base + 3, tl.sum(d * d, axis=0))
        tl.store(base + 4, tl.sum(r * r, axis=0))
    else:
        tl.store(base + 1, 0.0)
        tl.store(base + 2, tl.sum((defined & (a.to(BITS, bitcast=True) != b.to(BITS, bitcast=True))).to(tl.float64),
                                  axis=0))
        tl.store(base + 3, 0.0)
        tl.store(base + 4, 0.0)


@triton.jit(do_not_specialize=["programs"])
def _reduce(partials, programs, total, SLOTS: tl.constexpr, BLOCK: tl.constexpr):
    # One program adds up every program's partial results, in a fixed order (the same verdict
    # on every run).
    rows = tl.arange(0, BLOCK)
    columns = tl.arange(0, SLOTS)
    acc = tl.zeros((BLOCK, SLOTS), dtype=tl.float64)
    for start in range(0, programs, BLOCK):
        index = start + rows
        mask = (index < programs)[:, None] & (columns < 5)[None, :]
        acc += tl.load(partials + index.to(tl.int64)[:, None] * 8 + columns[None, :], mask=mask, other=0.0)
    tl.store(total + columns, tl.sum(acc, axis=0))


def supported(tensor: Any) -> bool:
    """Whether these kernels can take `tensor`: contiguous, of a real dtype Triton knows."""
    return tensor.is_contiguous() and not tensor.is_complex() and tensor.element_size() in _INT_OF_SIZE


def copy_bytes(dst: Any, src: Any) -> None:
    """Copies `src`'s bytes over `dst`'s (two uint8 tensors of one size on one device)."""
    n = dst.numel()
    if n:
        _copy[(triton.cdiv(n, _COPY_BLOCK),)](dst, src, n, BLOCK=_COPY_BLOCK)


def flip_bytes(data: Any) -> None:
    """Inverts every bit of `data` (a uint8 tensor) in place: each element then differs from what
    it held, whatever a launch writes over it."""
    n = data.numel()
    if n:
        _flip[(triton.cdiv(n, _COPY_BLOCK),)](data, n, BLOCK=_COPY_BLOCK)


def compare(out: Any, ref: Any, pristine: Any) -> tuple[float, float, float, float, float]:
    """(defined, NaN mismatches, other mismatches, ||out - ref||², ||ref||²) over the elements
    `ref` changed from `pristine`; three contiguous tensors of one shape and dtype."""
    import torch

    n = ref.numel()
    if n == 0:
        return 0.0, 0.0, 0.0, 0.0, 0.0
    programs = triton.cdiv(n, _COMPARE_BLOCK)
    partials = torch.empty((programs, _SLOTS), dtype=torch.float64, device=ref.device)
    total = torch.empty(_SLOTS, dtype=torch.float64, device=ref.device)
    bits = _INT_OF_SIZE[ref.element_size()]
    floating = ref.dtype.is_floating_point
    if ref.dtype == torch.bool:  # Triton's int1 does not bitcast; the same bytes as uint8 do.
        out, ref, pristine = out.view(torch.uint8), ref.view(torch.uint8), pristine.view(torch.uint8)
    _compare[(programs,)](out, ref, pristine, partials, n, BITS=bits, FLOAT=floating, WIDE=ref.element_size() == 8,
                          BLOCK=_COMPARE_BLOCK)
    _reduce[(1,)](partials, programs, total, SLOTS=_SLOTS, BLOCK=_REDUCE_BLOCK)
    return tuple(total[:5].tolist())  # One wait for the GPU, not five.


def relative_difference(out: Any, ref: Any, pristine: Any) -> float:
    """checking.difference() computed by these kernels."""
    defined, nans, others, diff2, ref2 = compare(out, ref, pristine)
    if defined == 0:
        return 0.0
    if nans or others:
        return math.inf
    return math.sqrt(diff2) / math.sqrt(ref2) if ref2 > 0 else math.sqrt(diff2)


def any_changed(after: Any, before: Any) -> bool:
    """Whether any element of `after` differs from `before` bit for bit."""
    return compare(after, after, before)[0] > 0


def warm_up_sources(device: Any, dtypes: set) -> list:
    """The LaunchSources of the launches checking will make on `device` for outputs of `dtypes`,
    for a compile pool to compile ahead (those this process has compiled already left out)."""
    import torch

    from .launch import launch_source

    def tiny(dtype):
        return torch.empty(16, dtype=dtype, device=device)

    launches = [(_copy, {"dst": tiny(torch.uint8), "src": tiny(torch.uint8), "n": 16, "BLOCK": _COPY_BLOCK}),
                (_reduce, {"partials": tiny(torch.float64), "programs": 2, "total": tiny(torch.float64),
                           "SLOTS": _SLOTS, "BLOCK": _REDUCE_BLOCK})]
    for dtype in dtypes:
        probe = tiny(dtype)
        if not supported(probe):
            continue
        if dtype == torch.bool:
            probe = probe.view(torch.uint8)
        launches.append((_compare, {"out": probe, "ref": probe, "pristine": probe, "partials": tiny(torch.float64),
                                    "n": 16, "BITS": _INT_OF_SIZE[probe.element_size()],
                                    "FLOAT": probe.dtype.is_floating_point, "WIDE": probe.element_size() == 8,
                                    "BLOCK": _COMPARE_BLOCK}))
    sources = []
    for kernel, arguments in launches:
        try:
            source = launch_source(kernel, arguments)
        except Exception:  # noqa: BLE001 -- not compiled ahead; the first check compiles it.
            source = None
        if source is not None:
            sources.append(source)
    return sources
