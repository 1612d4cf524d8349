"""Operators with torch's semantics, each problem served by what measured fastest on this GPU: a
built-in Triton kernel at its tuned config, or torch's own operator.

    from dr_kernel import ops

    c = ops.matmul(a, b)                          # torch.matmul
    y = ops.softmax(x, dim=-1)                    # torch.softmax
    y = ops.rms_norm(x, (x.shape[-1],), w, eps)   # torch.nn.functional.rms_norm
    o = ops.attention(q, k, v, is_causal=True)    # torch.nn.functional.scaled_dot_product_attention
    y, h = ops.add_rms_norm(x, r, (x.shape[-1],), w, eps)  # h = x + r; rms_norm(h, ...), fused or not
    y = ops.linear(x, w, b, activation="gelu")     # F.gelu(F.linear(x, w, b)), fused or not
    p = ops.masked_softmax(s, mask, scale=0.125)    # torch.softmax(s * 0.125 + mask, -1), fused or not

The first call on a new problem (operator, sizes, dtype, GPU) tunes the built-in kernel for it (the
agent, `stop="auto"`, in a measuring process, as `dr-kernel tune` does), then races the call
through the winner against the call through torch's operator, in this process, on the caller's
tensors, in alternating rounds timed two ways: alone on the GPU (L2 flushed, the host's launch
hidden) and call after call (where a small problem's time is the host's). The Triton kernel serves
the problem only when it is faster by `margin` on both counts: torch is one more variant of the
search. For a chain (add_rms_norm, linear with an activation, masked_softmax) the variants are the
fused kernel and torch's operators apart.
With `configure(tolerance=t)` matmul also offers fp8: its operands quantised to e4m3 (a scale per
row of A and per column of B) and multiplied by the fp8_matmul kernel, raced only when its result
on the first call's inputs is within relative error t of the fp32 result.
Matmul operands whose rows are not a multiple of 8 elements are served padded with zeros to
multiples of 16 (the problem tuned is the padded one; the copies are part of the race). The
choice goes to the results store (DR_KERNEL_DB or the user's cache): the next process takes it
without measuring anything. `decisions()` lists this process's choices. docs/ops.md has more.

Calls the built-in kernels do not cover go to torch unchanged, with torch's own errors: other
dtypes (matmul, linear and attention take fp16 and bf16; softmax, rms_norm and add_rms_norm also fp32),
inputs that need gradients, layouts other than row-major (a transposed weight, a strided view),
matmul and attention operands that do not start on a 16-byte boundary (the Hopper kernels copy
them through tensor descriptors, which need it), masks, dropout, key and value lengths other than
the query's, softmax along another dimension. A tuning that fails (no config ran correctly, the
GPU went away) is reported once as a warning and the problem goes to torch for the rest of the
process; nothing is raised into the caller's program.

Under Triton's interpreter (TRITON_INTERPRET=1, CPU tensors) the same flow runs on the CPU with
wall-clock times, where torch wins; `configure(variants=("triton",))` keeps the Triton kernels
(tests), `configure(variants=("torch",))` turns the tuning off.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import statistics
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from .direct_launch import DirectLaunch
from .kernels.fp8_matmul import quantise_columns, quantise_rows
from .kernels.linear_act import ACTIVATIONS, apply_activation
from .kernels.matmul import row_alignment

# "fp8": matmul's operands quantised to e4m3 with a scale per row of A and per column of B, multiplied
# by the fp8_matmul kernel; offered only where the settings' `tolerance` allows a lower precision.
VARIANTS = ("triton", "torch", "fp8")


@dataclasses.dataclass
class OpsSettings:
    """How dr_kernel.ops tunes and decides (`configure()` changes them for the process)."""

    max_evals: int = 50           # Evaluations of one problem's tuning (the agent may stop sooner).
    stop: str = "auto"            # "auto": stop once more measurements are unlikely to pay; "budget".
    # The Triton kernel serves a problem only when its time is below (1 - margin) x torch's.
    margin: float = 0.01
    variants: tuple[str, ...] = VARIANTS
    rounds: int = 5               # Alternating rounds of the race between the winner and torch...
    reps: int = 10                # ...of this many timed launches each.
    db: str | None = None         # The results store (None: DR_KERNEL_DB or the user's cache).
    isolate: bool = True          # Measure in a measuring process (a crashing config cannot kill the caller).
    # The relative error (L2 norm of the difference over the fp32 result's) a lower-precision variant
    # may have on a problem's first call; None: only the inputs' own precision.
    tolerance: float | None = None

    def __post_init__(self) -> None:
        unknown = [v for v in self.variants if v not in VARIANTS]
        if unknown or not self.variants:
            raise ValueError(f"dr_kernel.ops: variants={self.variants!r}: give some of 'triton', 'torch' and 'fp8'")
        if self.tolerance is not None and (isinstance(self.tolerance, bool) or not 0 < self.tolerance < 1):
            raise ValueError(f"dr_kernel.ops: tolerance={self.tolerance!r}: give a relative error above 0 and "
                             "below 1 (e.g. 0.05), or None for the inputs' own precision only")
        if not isinstance(self.max_evals, int) or isinstance(self.max_evals, bool) or self.max_evals < 1:
            raise ValueError(f"dr_kernel.ops: max_evals={self.max_evals!r}: give a whole number of at least 1")
        if self.stop not in ("auto", "budget"):
            raise ValueError(f"dr_kernel.ops: stop={self.stop!r}: give 'auto' or 'budget'")
        if not 0 <= self.margin < 1:
            raise ValueError(f"dr_kernel.ops: margin={self.margin!r}: give a fraction from 0 to below 1")
        for name in ("rounds", "reps"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"dr_kernel.ops: {name}={value!r}: give a whole number of at least 1")


settings = OpsSettings()
_lock = threading.RLock()
_choices: dict[tuple, Choice] = {}  # (op, problem, dtype, device) -> its choice.
_served: dict[tuple, Choice] = {}  # A call's (op, sizes, dtypes, device, flags) -> the choice serving it.
_stores: dict[str, Any] = {}


def configure(**changes: Any) -> OpsSettings:
    """Changes the settings for the rest of the process (and forgets this process's choices, so
    that they are made again under the new settings); returns the settings now in force."""
    global settings
    names = [f.name for f in dataclasses.fields(OpsSettings)]
    unknown = [k for k in changes if k not in names]
    if unknown:
        raise ValueError(f"dr_kernel.ops.configure: no setting {', '.join(unknown)}; "
                         f"the settings are {', '.join(names)}")
    with _lock:
        settings = dataclasses.replace(settings, **changes)
        _choices.clear()
        _served.clear()
    return settings


@dataclasses.dataclass
class Choice:
    """What serves one problem: `variant` "triton" (the built-in `kernel` at `config`), "fp8" (matmul's
    operands in e4m3, `kernel` fp8_matmul at `config`, within the settings' tolerance) or "torch".
    `triton_ms`, `fp8_ms` and `torch_ms` are the race's GPU times, the `_call_ms` ones its times per
    call made back to back (None when not raced), `fp8_error` the fp8 variant's relative error on
    the first call's inputs; `source` says where the choice came from: "tuned" in this process,
    "store" from an earlier one, or why torch serves it without a race ("variants", a failed
    tuning)."""

    op: str
    kernel: str
    shape: dict
    dtype: str
    device: str
    variant: str
    config: dict | None = None
    padded: dict | None = None  # The problem the kernel serves this one as, its operands padded with zeros.
    triton_ms: float | None = None
    torch_ms: float | None = None
    triton_call_ms: float | None = None
    torch_call_ms: float | None = None
    # The lower-precision variant's race times and its relative error on the first call's inputs.
    fp8_ms: float | None = None
    fp8_call_ms: float | None = None
    fp8_error: float | None = None
    evaluations: int = 0
    source: str = "tuned"

    _launcher: Any = dataclasses.field(default=None, init=False, repr=False, compare=False)

    def launch(self, inputs: dict) -> None:
        """Launches the chosen Triton kernel on a call's tensors (the built-in's launch convention)."""
        if self._launcher is None:
            from . import kernels

            kernel = kernels.get(self.kernel)
            # One problem per choice: the function its first inputs pose is the one for all, and
            # on a GPU every call after the first goes straight to its binary (direct_launch.py).
            fn = kernel.fn_for(self.config, kernel.problem_of(inputs))
            if inputs[kernel.output_name].is_cuda:
                fn = DirectLaunch(fn)
            launch, config = kernel._launch, self.config
            self._launcher = lambda inputs: launch(fn, inputs, config)
        self._launcher(inputs)


_TIMES = ("triton_ms", "torch_ms", "triton_call_ms", "torch_call_ms", "fp8_ms", "fp8_call_ms", "fp8_error")


def decisions() -> list[Choice]:
    """The choices this process has made or loaded, in the order they were first needed."""
    with _lock:
        return list(_choices.values())


# ----- the operators ---------------------------------------------------------------------------------
# Each operator looks its call up by (sizes, dtype, device, flags) first: a call already decided
# costs a few microseconds more than torch's own (benchmarks/ops_bench.py --dispatch).

def matmul(a, b):
    """torch.matmul(a, b). The Triton kernel serves row-major fp16/bf16 operands with `b` 2-D
    (`a` may have batch dimensions, which fold into its rows)."""
    if (type(a) is _Tensor and type(b) is _Tensor and a.dtype in _HALF and b.dtype == a.dtype and b.dim() == 2
            and a.dim() >= 2 and a.is_contiguous() and b.is_contiguous() and not _needs_grad(a, b)
            and a.device == b.device and _starts_aligned(a, b)):
        device = a.device
        index = ("matmul", a.shape, b.shape, a.dtype, device)
        choice = _served.get(index)
        if choice is None and _runnable(device) and a.shape[-1] == b.shape[0] and a.numel() > 0 and b.numel() > 0:
            K, N = b.shape
            shape = {"M": a.numel() // K, "N": N, "K": K}
            # Rows of A or B whose length is not a multiple of 8 elements cannot be loaded 16 bytes
            # at a time (multiples of 8 can: the built-in then launches the variant told their
            # alignment). The kernel serves such a problem padded with zeros to multiples of 16
            # (the copies are part of the call, and of its race): 4095³ is then faster than cuBLAS.
            aligned = row_alignment(N, K) >= 8
            padded = shape if aligned else {"M": shape["M"], "N": -(-N // 16) * 16, "K": -(-K // 16) * 16}
            lower = None
            if settings.tolerance is not None and "fp8" in settings.variants and K % 16 == 0 and _has_fp8(device):
                lower = _Lower("fp8", "fp8_matmul", shape, lambda c: _matmul_fp8(c, a, b),
                               lambda: torch.matmul(a.float(), b.float()))
            choice = _choose(index, "matmul", "matmul", shape, a.dtype, device,
                             lambda c: _matmul_triton(c, a, b), lambda: torch.matmul(a, b),
                             tuned_shape=padded if padded != shape else None, lower=lower)
        if choice is not None and choice.variant == "triton":
            return _matmul_triton(choice, a, b)
        if choice is not None and choice.variant == "fp8":
            return _matmul_fp8(choice, a, b)
    return torch.matmul(a, b)


def _has_fp8(device) -> bool:
    """e4m3 tensor cores (compute capability 8.9 and later), or the interpreter."""
    return device.type == "cpu" or torch.cuda.get_device_capability(device) >= (8, 9)


def _matmul_fp8(choice: Choice, a, b):
    K, N = b.shape
    a2 = a.view(-1, K)
    a8, a_scale = quantise_rows(a2)
    b8, b_scale = quantise_columns(b)  # Bᵀ (N×K), K-contiguous: the fp8 kernel's operand layout.
    c = torch.empty((a2.shape[0], N), device=a.device, dtype=a.dtype)
    choice.launch({"a": a8, "b": b8, "a_scale": a_scale, "b_scale": b_scale, "c": c})
    return c.view(*a.shape[:-1], N)


def _matmul_triton(choice: Choice, a, b):
    K, N = b.shape
    a2 = a.view(-1, K)
    if choice.padded is None:
        c = torch.empty((a2.shape[0], N), device=a.device, dtype=a.dtype)
        choice.launch({"a": a2, "b": b, "c": c})
        return c.view(*a.shape[:-1], N)
    Kp, Np = choice.padded["K"], choice.padded["N"]
    if Kp != K:
        a2 = F.pad(a2, (0, Kp - K))
    c = torch.empty((a2.shape[0], Np), device=a.device, dtype=a.dtype)
    choice.launch({"a": a2, "b": F.pad(b, (0, Np - N, 0, Kp - K)), "c": c})
    if Np != N:
        c = c[:, :N].contiguous()
    return c.view(*a.shape[:-1], N)


def softmax(x, dim: int = -1, dtype=None):
    """torch.softmax(x, dim, dtype). The Triton kernel serves the last dimension of a row-major
    fp16/bf16/fp32 tensor, with no dtype conversion."""
    if type(x) is _Tensor and _torch_serves(("softmax", x.shape, x.dtype, x.device)):
        return torch.softmax(x, dim, dtype=dtype)
    if dtype is None and type(x) is _Tensor and _rows_ok(x) and (dim == -1 or dim == x.dim() - 1):
        choice = _row_choice("softmax", "softmax", x, lambda c: _softmax_triton(c, x), lambda: torch.softmax(x, -1))
        if choice is not None and choice.variant == "triton":
            return _softmax_triton(choice, x)
    return torch.softmax(x, dim, dtype=dtype)


def _softmax_triton(choice: Choice, x):
    x2 = x.view(-1, x.shape[-1])
    y = torch.empty_like(x2)
    choice.launch({"x": x2, "y": y})
    return y.view(x.shape)


def rms_norm(x, normalized_shape: Sequence[int], weight=None, eps: float | None = None):
    """torch.nn.functional.rms_norm(x, normalized_shape, weight, eps). The Triton kernel serves a
    row-major fp16/bf16/fp32 `x` normalised over its last dimension with a weight of its dtype."""
    if type(x) is _Tensor and _torch_serves(("rms_norm", x.shape, x.dtype, x.device)):
        return F.rms_norm(x, normalized_shape, weight, eps)
    if (type(x) is _Tensor and type(weight) is _Tensor and _rows_ok(x) and weight.dtype == x.dtype
            and weight.dim() == 1 and weight.shape[0] == x.shape[-1] and weight.is_contiguous()
            and not _needs_grad(weight) and weight.device == x.device
            and tuple(normalized_shape if isinstance(normalized_shape, Sequence) else (normalized_shape,))
            == (x.shape[-1],)):
        eps = float(torch.finfo(x.dtype).eps if eps is None else eps)
        choice = _row_choice("rms_norm", "rmsnorm", x, lambda c: _rms_norm_triton(c, x, weight, eps),
                             lambda: F.rms_norm(x, normalized_shape, weight, eps))
        if choice is not None and choice.variant == "triton":
            return _rms_norm_triton(choice, x, weight, eps)
    return F.rms_norm(x, normalized_shape, weight, eps)


def masked_softmax(x, mask=None, scale: float = 1.0):
    """torch.softmax(x * scale + mask, dim=-1): the chain attention scores take outside a fused
    attention kernel (an additive mask: 0 to keep, -inf to mask out). Served by the fused kernel
    (masked_softmax: x and the mask read, y written, one launch) or by torch's operators apart, as
    the race finds faster. The fused kernel serves a row-major fp16/bf16/fp32 `x` with no mask or
    a row-major mask of x's dtype and device whose shape, less leading dimensions of 1, is that of
    x's last dimensions (a (queries, keys) mask under any batch and heads); other calls run
    torch's chain."""
    scale = float(scale)
    if type(x) is _Tensor:
        index = ("masked_softmax", x.shape, x.dtype, x.device, getattr(mask, "shape", None))
        if _torch_serves(index):
            return _masked_softmax_torch(x, mask, scale)
    if type(x) is _Tensor and _rows_ok(x) and x.numel() > 0:
        cols = x.shape[-1]
        mask2 = None
        if mask is not None:
            kept = mask
            while type(kept) is _Tensor and kept.dim() > 1 and kept.shape[0] == 1:
                kept = kept[0]
            if not (type(kept) is _Tensor and kept.dtype == x.dtype and kept.device == x.device
                    and kept.is_contiguous() and not _needs_grad(kept) and 1 <= kept.dim() <= x.dim()
                    and kept.shape == x.shape[x.dim() - kept.dim():]):
                return _masked_softmax_torch(x, mask, scale)
            mask2 = kept.view(-1, cols)
        choice = None
        if _runnable(x.device):
            rows = x.numel() // cols
            shape = {"rows": rows, "cols": cols, "mask_rows": 0 if mask2 is None else mask2.shape[0]}
            choice = _served.get(index) or _choose(
                index, "masked_softmax", "masked_softmax", shape, x.dtype, x.device,
                lambda c: _masked_softmax_fused(c, x, mask2, scale), lambda: _masked_softmax_torch(x, mask, scale))
        if choice is not None and choice.variant == "triton":
            return _masked_softmax_fused(choice, x, mask2, scale)
    return _masked_softmax_torch(x, mask, scale)


def _masked_softmax_torch(x, mask, scale: float):
    return torch.softmax(x * scale if mask is None else x * scale + mask, -1)


def _masked_softmax_fused(choice: Choice, x, mask2, scale: float):
    x2 = x.view(-1, x.shape[-1])
    y = torch.empty_like(x2)
    choice.launch({"x": x2, "mask": mask2, "scale": scale, "y": y})
    return y.view(x.shape)


def _rms_norm_triton(choice: Choice, x, weight, eps: float):
    x2 = x.view(-1, x.shape[-1])
    y = torch.empty_like(x2)
    choice.launch({"x": x2, "w": weight, "y": y, "eps": eps})
    return y.view(x.shape)


def add_rms_norm(x, residual, normalized_shape: Sequence[int], weight=None, eps: float | None = None):
    """h = x + residual, then torch.nn.functional.rms_norm(h, normalized_shape, weight, eps): returns
    (y, h), the chain a transformer block runs before its attention and its MLP. Served by the
    fused kernel (add_rmsnorm: x and residual read once, h and y written in one pass, one launch)
    or by torch's two operators apart, as the race finds faster: fusion is one more choice, not a
    rule. The fused kernel serves row-major fp16/bf16/fp32 `x` and `residual` of one shape and
    dtype, normalised over their last dimension with a weight of that dtype; other calls run the
    add apart from this module's rms_norm."""
    if type(x) is _Tensor and _torch_serves(("add_rms_norm", x.shape, x.dtype, x.device)):
        return _add_rms_norm_torch(x, residual, normalized_shape, weight, eps)
    if (type(x) is _Tensor and type(residual) is _Tensor and type(weight) is _Tensor and _rows_ok(x)
            and residual.shape == x.shape and residual.dtype == x.dtype and residual.is_contiguous()
            and residual.device == x.device and not _needs_grad(residual, weight) and weight.dtype == x.dtype
            and weight.dim() == 1 and weight.shape[0] == x.shape[-1] and weight.is_contiguous()
            and weight.device == x.device
            and tuple(normalized_shape if isinstance(normalized_shape, Sequence) else (normalized_shape,))
            == (x.shape[-1],)):
        eps_value = float(torch.finfo(x.dtype).eps if eps is None else eps)
        choice = _row_choice("add_rms_norm", "add_rmsnorm", x,
                             lambda c: _add_rms_norm_fused(c, x, residual, weight, eps_value),
                             lambda: _add_rms_norm_torch(x, residual, normalized_shape, weight, eps))
        if choice is not None:
            if choice.variant == "triton":
                return _add_rms_norm_fused(choice, x, residual, weight, eps_value)
            # Torch's chain is what the race timed (and what the torch variant promises).
            return _add_rms_norm_torch(x, residual, normalized_shape, weight, eps)
    h = x + residual
    return rms_norm(h, normalized_shape, weight, eps), h


def _add_rms_norm_torch(x, residual, normalized_shape, weight, eps):
    h = x + residual
    return F.rms_norm(h, normalized_shape, weight, eps), h


def _add_rms_norm_fused(choice: Choice, x, residual, weight, eps: float):
    # Few tensor operations around the launch (no views of 2-D operands, one unbind): a small
    # problem's call is the host's time.
    flat = x.dim() == 2
    x2, r2 = (x, residual) if flat else (x.view(-1, x.shape[-1]), residual.view(-1, x.shape[-1]))
    out = torch.empty((2, *x2.shape), device=x.device, dtype=x.dtype)
    choice.launch({"x": x2, "r": r2, "w": weight, "out": out, "eps": eps})
    y, h = out.unbind(0)
    return (y, h) if flat else (y.view(x.shape), h.view(x.shape))


# The kernel's activation codes by ops.linear's names (None for "none").
_ACTIVATIONS = {(None if name == "none" else name): code for code, name in ACTIVATIONS.items()}


def linear(x, weight, bias=None, activation: str | None = None):
    """torch.nn.functional.linear(x, weight, bias), then `activation`: None, "gelu" (F.gelu, erf)
    or "silu" (F.silu) — an MLP's projection and its activation. Served by the fused kernel
    (linear_act: the bias and the activation applied to the accumulator before its one store) or
    by torch's operators, as the race finds faster. The kernel serves row-major fp16/bf16 `x` (any
    batch dimensions), a contiguous `weight` (N×K, as nn.Linear keeps it) and a bias of their dtype."""
    if activation not in _ACTIVATIONS:
        raise ValueError(f"dr_kernel.ops.linear: activation={activation!r}: give None, 'gelu' or 'silu'")
    act = _ACTIVATIONS[activation]
    if (type(x) is _Tensor and type(weight) is _Tensor and type(bias) is _Tensor and x.dtype in _HALF
            and weight.dtype == x.dtype == bias.dtype and x.dim() >= 1 and weight.dim() == 2 and bias.dim() == 1
            and x.shape[-1] == weight.shape[1] and bias.shape[0] == weight.shape[0] and x.is_contiguous()
            and weight.is_contiguous() and bias.is_contiguous() and not _needs_grad(x, weight, bias)
            and x.device == weight.device == bias.device):
        device = x.device
        index = ("linear", x.shape, weight.shape, x.dtype, device, act)
        choice = _served.get(index)
        if choice is None and _runnable(device) and x.numel() > 0 and weight.numel() > 0:
            N, K = weight.shape
            choice = _choose(index, "linear", "linear_act", {"M": x.numel() // K, "N": N, "K": K, "ACT": act},
                             x.dtype, device, lambda c: _linear_triton(c, x, weight, bias, act),
                             lambda: _linear_torch(x, weight, bias, act))
        if choice is not None and choice.variant == "triton":
            return _linear_triton(choice, x, weight, bias, act)
    return _linear_torch(x, weight, bias, act)


def _linear_torch(x, weight, bias, act: int):
    return apply_activation(act, F.linear(x, weight, bias))


def _linear_triton(choice: Choice, x, weight, bias, act: int):
    N, K = weight.shape
    y = torch.empty((*x.shape[:-1], N), device=x.device, dtype=x.dtype)
    choice.launch({"x": x.view(-1, K), "w": weight, "bias": bias, "y": y.view(-1, N), "act": act})
    return y


def attention(q, k, v, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
              enable_gqa: bool = False):
    """torch.nn.functional.scaled_dot_product_attention. The Triton kernel serves contiguous
    fp16/bf16 (Z, H, N, D) query, key and value of one shape, D a power of two from 16 to 256, with
    no mask, no dropout and no grouped heads."""
    if (attn_mask is None and dropout_p == 0.0 and not enable_gqa and type(q) is _Tensor and type(k) is _Tensor
            and type(v) is _Tensor and q.dim() == 4 and q.dtype in _HALF and q.shape == k.shape == v.shape
            and q.dtype == k.dtype == v.dtype and q.is_contiguous() and k.is_contiguous() and v.is_contiguous()
            and not _needs_grad(q, k, v) and q.device == k.device == v.device and _starts_aligned(q, k, v)):
        device = q.device
        causal = bool(is_causal)
        sm_scale = 1.0 / math.sqrt(q.shape[3]) if scale is None else float(scale)
        index = ("attention", q.shape, q.dtype, device, causal)
        choice = _served.get(index)
        if choice is None and _runnable(device) and q.shape[3] in (16, 32, 64, 128, 256) and q.numel() > 0:
            Z, H, N, D = q.shape
            choice = _choose(index, "attention", "attention",
                             {"Z": Z, "H": H, "N_CTX": N, "HEAD_DIM": D, "CAUSAL": causal}, q.dtype, device,
                             lambda c: _attention_triton(c, q, k, v, causal, sm_scale),
                             lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale))
        if choice is not None and choice.variant == "triton":
            return _attention_triton(choice, q, k, v, causal, sm_scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                                          scale=scale, enable_gqa=enable_gqa)


def _attention_triton(choice: Choice, q, k, v, causal: bool, sm_scale: float):
    o = torch.empty_like(q)
    choice.launch({"q": q, "k": k, "v": v, "o": o, "causal": causal, "sm_scale": sm_scale})
    return o


# ----- which calls the kernels cover -----------------------------------------------------------------

_Tensor = torch.Tensor  # Subclasses (DTensor, FakeTensor, ...) have their own dispatch: torch serves them.
_HALF = (torch.float16, torch.bfloat16)
_ROWS = (torch.float16, torch.bfloat16, torch.float32)


def _needs_grad(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _starts_aligned(*tensors) -> bool:
    """Whether every tensor starts on a 16-byte boundary, as the tensor-descriptor copies of the
    TMA kernels (matmul's and attention's TMA > 0) need: a view that starts a few elements into
    its storage would fault there, so it goes to torch whatever the problem's stored choice."""
    return all(t.data_ptr() % 16 == 0 for t in tensors)


def _runnable(device) -> bool:
    """On a GPU, or on the CPU under Triton's interpreter."""
    return device.type == "cuda" or (device.type == "cpu" and bool(os.environ.get("TRITON_INTERPRET")))


def _rows_ok(x) -> bool:
    """A tensor whose dimensions fold into contiguous rows of its last one without a copy, of a
    dtype the row kernels take."""
    return x.dtype in _ROWS and x.dim() >= 1 and x.is_contiguous() and not _needs_grad(x)


def _torch_serves(index: tuple) -> bool:
    """Whether torch serves the problem of a call's `index` already: then the call is torch's
    operator (or chain) with no more checks, so that a torch-served call costs a dictionary look-up
    more than torch's own, not the checks the Triton path needs (on the CPU 18.5 µs against 9.6 for
    a small masked softmax before this short cut)."""
    choice = _served.get(index)
    return choice is not None and choice.variant == "torch"


def _row_choice(op: str, kernel_name: str, x, triton_call, torch_call) -> Choice | None:
    device = x.device
    index = (op, x.shape, x.dtype, device)
    choice = _served.get(index)
    if choice is None and _runnable(device) and x.numel() > 0:
        choice = _choose(index, op, kernel_name, {"rows": x.numel() // x.shape[-1], "cols": x.shape[-1]}, x.dtype,
                         device, triton_call, torch_call)
    return choice


# ----- choosing ------------------------------------------------------------------------------------------

@dataclasses.dataclass
class _Lower:
    """A variant of lower precision than the inputs' (`name`): the built-in `kernel` tuned on `shape`,
    `call(choice)` the operator through it, `reference()` the call's result in fp32."""

    name: str
    kernel: str
    shape: dict
    call: Callable[[Choice], Any]
    reference: Callable[[], Any]


def _choose(index: tuple, op: str, kernel_name: str, shape: dict, torch_dtype, device,
            triton_call: Callable[[Choice], Any], torch_call: Callable[[], Any], tuned_shape: dict | None = None,
            lower: _Lower | None = None) -> Choice:
    """The choice for a problem (made, or read from the store, once per problem and process),
    filed under the call's `index` for the next call. `triton_call(choice)` and `torch_call()` make
    this call through either variant, for the race; `tuned_shape` is the problem the kernel is
    tuned on and launched for when it is not `shape` (the call pads its operands to it); `lower` a
    variant of lower precision the settings' tolerance allows."""
    from .kernels.base import dtype_name

    dtype = dtype_name(torch_dtype)
    problem = (op, tuple(shape.items()), dtype, str(device))
    with _lock:
        choice = _choices.get(problem)
        if choice is None:
            choice = _decide(op, kernel_name, shape, dtype, device, triton_call, torch_call, tuned_shape, lower)
            _choices[problem] = choice
        _served[index] = choice
    return choice


def _device_label(device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu (Triton interpreter)"


def store_key(op: str, kernel, shape: dict, dtype: str, device: str, tuned_shape: dict | None = None,
              lower: str | None = None) -> str:
    """The results store's key of a choice: operator, the built-in kernel's source, Triton's
    version, the device, the problem (and the padded one the kernel serves it as), the settings
    that decide (variants and margin; where a lower precision `lower` may be chosen, its name and
    the tolerance)."""
    import hashlib
    import inspect
    import sys

    import triton

    # The kernel's whole module: its variants' kernels (split-K) and launch code are part of it.
    module = sys.modules[getattr(kernel.fn, "fn", kernel.fn).__module__]
    source = hashlib.sha256(inspect.getsource(module).encode()).hexdigest()[:16]
    rules = {"variants": sorted(v for v in settings.variants if v != "fp8"), "margin": settings.margin}
    if lower:  # Only keys that may choose a lower precision name it and the tolerance it was held to.
        rules.update(lower=lower, tolerance=settings.tolerance)
    decide = json.dumps(rules, sort_keys=True)
    padded = f" padded {json.dumps(tuned_shape, sort_keys=True)}" if tuned_shape else ""
    from .hot import OPS_KEY_PREFIX

    return (f"{OPS_KEY_PREFIX}{op}|{kernel.name} {source}|triton {triton.__version__}|{device}|{dtype}|"
            f"{json.dumps(shape, sort_keys=True)}{padded}|{decide}")


def _store():
    from .store import default_db_path, open_store

    path = str(settings.db or default_db_path())
    if path not in _stores:
        _stores[path] = open_store(path)
    return _stores[path]


def _decide(op: str, kernel_name: str, shape: dict, dtype: str, device, triton_call, torch_call,
            tuned_shape: dict | None, lower: _Lower | None = None) -> Choice:
    from . import kernels

    kernel = kernels.get(kernel_name)
    label = _device_label(device)
    base = {"op": op, "kernel": kernel_name, "shape": dict(shape), "dtype": dtype, "device": label,
            "padded": dict(tuned_shape) if tuned_shape else None}
    if "triton" not in settings.variants and lower is None:
        return Choice(**base, variant="torch", source="variants")
    key = store_key(op, kernel, shape, dtype, label, tuned_shape, lower.name if lower else None)
    try:
        store = _store()
        stored = store.get_winner(key)
    except Exception as e:  # noqa: BLE001 -- an unreadable store costs a tuning, not the caller's program.
        warnings.warn(f"dr_kernel.ops: the results store cannot be read ({e}); tuning {op} {shape} anew",
                      stacklevel=4)
        store, stored = None, None
    if stored is not None:
        config, ms, evaluations = stored
        config = dict(config)
        variant = str(config.pop("variant", "torch"))
        times = {k: config.pop(k, None) for k in _TIMES}
        if variant == "fp8":
            base["kernel"] = lower.kernel if lower else "fp8_matmul"
        return Choice(**base, variant=variant, config=config if variant != "torch" else None,
                      evaluations=int(evaluations), source="store", **times)
    try:
        choice = _tune_and_race(kernel, tuned_shape or shape, dtype, device, base, store, triton_call, torch_call,
                                lower)
    except Exception as e:  # noqa: BLE001 -- never raised into the caller: torch serves the problem.
        warnings.warn(f"dr_kernel.ops: {op} on {dtype} {shape}: the Triton kernel could not be tuned "
                      f"({type(e).__name__}: {e}); torch serves this problem for the rest of the process",
                      stacklevel=4)
        return Choice(**base, variant="torch", source=f"tuning failed: {type(e).__name__}")
    if store is not None:
        record = {"variant": choice.variant, **(choice.config or {})}
        record.update({k: getattr(choice, k) for k in _TIMES if getattr(choice, k) is not None})
        ms = getattr(choice, f"{choice.variant}_ms")
        try:
            store.put_winner(key, record, math.nan if ms is None else ms, choice.evaluations,
                             f"dr_kernel.ops {op}", settings.max_evals)
        except Exception as e:  # noqa: BLE001 -- the choice stands for this process either way.
            warnings.warn(f"dr_kernel.ops: the choice for {op} {shape} could not be stored ({e}); the next "
                          "process makes it again", stacklevel=4)
    return choice


def _tune_and_race(kernel, shape: dict, dtype: str, device, base: dict, store, triton_call, torch_call,
                   lower: _Lower | None = None) -> Choice:
    from . import kernels as builtins
    from .session import tune_builtin
    from .tuner import AUTO_STOP, shared_compile_pool

    interpret = device.type == "cpu"

    def tune(tuned, problem):
        result = tune_builtin(tuned, problem, dtype, strategy="ppo", max_evals=settings.max_evals,
                              options=dict(AUTO_STOP) if settings.stop == "auto" else {}, interpret=interpret,
                              store=store, source="ops", isolate=settings.isolate,
                              compile_pool=None if interpret else shared_compile_pool(120.0))
        if result.best_config is None:
            statuses = ", ".join(f"{n} {s}" for s, n in result.statuses().items()) or "nothing measured"
            raise RuntimeError(f"no config of the kernel ran correctly ({statuses})")
        return result

    # The candidates to torch: the built-in kernel, and a lower precision where one is offered and
    # its result on this call's inputs is within the tolerance of the fp32 result.
    candidates: dict[str, tuple[Choice, Callable[[Choice], Any]]] = {}
    tuned_ms: dict[str, float] = {}
    evaluations, checked = 0, {}
    if "triton" in settings.variants:
        result = tune(kernel, shape)
        evaluations += result.evaluations
        candidates["triton"] = (Choice(**base, variant="triton", config=dict(result.best_config)), triton_call)
        tuned_ms["triton"] = result.best_ms
    if lower is not None:
        try:
            result = tune(builtins.get(lower.kernel), lower.shape)
        except Exception as e:  # noqa: BLE001 -- the inputs' own precision still serves the problem.
            if not candidates:
                raise
            warnings.warn(f"dr_kernel.ops: {base['op']} on {dtype} {base['shape']}: the {lower.name} variant "
                          f"could not be tuned ({type(e).__name__}: {e}); it is left out", stacklevel=5)
        else:
            evaluations += result.evaluations
            candidate = Choice(**{**base, "kernel": lower.kernel}, variant=lower.name, config=dict(result.best_config))
            expected = lower.reference()
            got = lower.call(candidate).float()
            error = ((got - expected).norm() / expected.norm().clamp_min(1e-30)).item()
            checked[f"{lower.name}_error"] = error
            if error <= settings.tolerance:  # A NaN is never within it.
                candidates[lower.name] = (candidate, lower.call)
                tuned_ms[lower.name] = result.best_ms
    if not candidates:
        raise RuntimeError(f"no variant is within the tolerance {settings.tolerance} "
                           f"({', '.join(f'{k} {v:.3g}' for k, v in checked.items())})")
    if "torch" not in settings.variants and len(candidates) == 1:
        (name, (choice, _)), = candidates.items()
        return dataclasses.replace(choice, evaluations=evaluations, **{f"{name}_ms": tuned_ms[name]}, **checked)
    calls = {name: (lambda call=call, choice=choice: call(choice)) for name, (choice, call) in candidates.items()}
    if "torch" in settings.variants:
        calls["torch"] = torch_call
    times = race(calls, device)
    # A kernel must beat torch on both counts: alone on the GPU, and call after call (where a small
    # problem's time is the host's: Python, the launch); of those that do, the fastest alone serves.
    winners = [name for name in candidates if "torch" not in calls or all(
        times[f"{name}_{k}"] < (1.0 - settings.margin) * times[f"torch_{k}"] for k in ("ms", "call_ms"))]
    if not winners:
        return Choice(**base, variant="torch", evaluations=evaluations, **times, **checked)
    best = min(winners, key=lambda name: times[f"{name}_ms"])
    return dataclasses.replace(candidates[best][0], evaluations=evaluations, **times, **checked)


def race(calls: dict[str, Callable[[], Any]], device) -> dict[str, float]:
    """Times each of `calls` (a call through each variant, on the caller's tensors) in this
    process in alternating rounds, two ways: `NAME_ms`, the median GPU time of one call after an L2
    flush, with the host's launch hidden (measure._Timer); `NAME_call_ms`, the best over the rounds
    of the time per call of calls made back to back (the larger of the host's and the GPU's)."""
    from .measure import MeasureSettings, _Timer

    device = torch.device(device)
    cuda = device.type == "cuda"
    timer = _Timer(str(device), MeasureSettings.flush_bytes)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    flushed: dict[str, list[float]] = {name: [] for name in calls}
    per_call: dict[str, list[float]] = {name: [] for name in calls}
    with torch.cuda.device(device) if cuda else contextlib.nullcontext():
        for call in calls.values():
            call()  # Loads the binary (and picks torch's library kernel) outside the timing.
        sync()
        for _ in range(settings.rounds):
            for name, call in calls.items():
                flushed[name] += [timer.time_ms(call) for _ in range(settings.reps)]
                sync()
                start = time.perf_counter()
                for _ in range(settings.reps):
                    call()
                sync()
                per_call[name].append((time.perf_counter() - start) * 1e3 / settings.reps)
    out = {}
    for name in calls:
        out[f"{name}_ms"] = statistics.median(flushed[name])
        out[f"{name}_call_ms"] = min(per_call[name])
    return out
