"""A linear layer with its bias and activation in the epilogue: Y = act(X·Wᵀ + b).

The chain an MLP runs (torch: `F.gelu(F.linear(x, w, b))` or `F.silu(...)`): X (M×K) row-major,
W as nn.Linear keeps it (N×K, so B = Wᵀ is read with its K dimension contiguous), the bias (N) and
the activation applied to the fp32 accumulator before the one store, instead of cuBLAS's product
(with the bias in its epilogue) written out, read back and written again by the activation. ACT
is part of the problem, not a tuning choice: 0 none, 1 GELU (erf, torch's default), 2 SiLU.

The tiles, their order and the K loop are matmul's variants' (`_grouped_tile`, `_tile_sum`), and
the space is matmul's without its variants, less the configs whose accumulator spills.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .base import BuiltinKernel, Pointer, cdiv
from .matmul import ACCUMULATOR_RULE, _grouped_tile, _tile_sum
from .matmul import KERNEL as MATMUL

ACTIVATIONS = {0: "none", 1: "gelu", 2: "silu"}


@triton.jit
def linear_act_kernel(x_ptr, w_ptr, bias_ptr, y_ptr, M, N, K, sxm, swn, sym,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                      ACT: tl.constexpr):
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    # B[k, n] = W[n, k]: unit stride along K, swn along N.
    acc = _tile_sum(x_ptr, w_ptr, pid_m, pid_n, M, N, K, sxm, 1, 1, swn, 0, tl.cdiv(K, BLOCK_K),
                    BLOCK_M, BLOCK_N, BLOCK_K)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc += tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    if ACT == 1:
        acc = 0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476))
    elif ACT == 2:
        acc = acc / (1.0 + tl.exp(-acc))
    y_ptrs = y_ptr + offs_m[:, None] * sym + offs_n[None, :]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def _activation(shape) -> int:
    act = shape["ACT"]
    if isinstance(act, bool) or act not in ACTIVATIONS:
        raise ValueError(f"linear_act shape {shape}: ACT must be 0 (none), 1 (gelu) or 2 (silu), not {act!r}")
    return act


def _arguments(shape, dtype, config):
    M, N, K = shape["M"], shape["N"], shape["K"]
    return {"x_ptr": Pointer(dtype), "w_ptr": Pointer(dtype), "bias_ptr": Pointer(dtype), "y_ptr": Pointer(dtype),
            "M": M, "N": N, "K": K, "sxm": K, "swn": K, "sym": N, "ACT": _activation(shape), **config}


def _make_inputs(shape, dtype, device, seed):
    import torch

    generator = torch.Generator(device=device).manual_seed(seed)
    M, N, K = shape["M"], shape["N"], shape["K"]
    x = torch.randn((M, K), generator=generator, device=device, dtype=dtype)
    # A layer's weights as nn.Linear draws them (bound 1/sqrt(K)): outputs of order one, where
    # GELU and SiLU are far from linear.
    w = ((torch.rand((N, K), generator=generator, device=device) * 2 - 1) * K ** -0.5).to(dtype)
    bias = ((torch.rand(N, generator=generator, device=device) * 2 - 1) * K ** -0.5).to(dtype)
    return {"x": x, "w": w, "bias": bias, "y": torch.empty((M, N), device=device, dtype=dtype),
            "act": _activation(shape)}


def _launch(fn, inputs, config):
    x, w, bias, y = inputs["x"], inputs["w"], inputs["bias"], inputs["y"]
    M, K = x.shape
    N = w.shape[0]
    assert x.stride(1) == 1 and w.stride(1) == 1 and y.stride(1) == 1 and bias.stride(0) == 1, \
        "linear_act takes rows of X, W (N×K) and Y that are contiguous"
    grid = (cdiv(M, config["BLOCK_M"]) * cdiv(N, config["BLOCK_N"]),)
    return fn[grid](x, w, bias, y, M, N, K, x.stride(0), w.stride(0), y.stride(0), ACT=inputs["act"], **config)


def apply_activation(act: int, z):
    """torch's activation `act` (ACTIVATIONS) on `z`."""
    import torch.nn.functional as F

    return F.gelu(z) if act == 1 else F.silu(z) if act == 2 else z


def _reference(inputs):
    import torch.nn.functional as F

    z = F.linear(inputs["x"].float(), inputs["w"].float(), inputs["bias"].float())
    return apply_activation(inputs["act"], z).to(inputs["y"].dtype)


def _framework(inputs):
    import torch.nn.functional as F

    return apply_activation(inputs["act"], F.linear(inputs["x"], inputs["w"], inputs["bias"]))


KERNEL = BuiltinKernel(
    name="linear_act",
    family="linear_act",
    fn=linear_act_kernel,
    description="Y = act(X·Wᵀ + b): a linear layer with its bias and GELU/SiLU in the epilogue",
    space={k: list(v) for k, v in MATMUL.space.items() if k not in ("SPLIT_K", "TMA")},
    constraints=[ACCUMULATOR_RULE],
    shape_keys=("M", "N", "K", "ACT"),
    # An MLP's up projection with SiLU over 4k tokens (Llama-sized), and a GELU one (GPT-sized).
    shapes=[{"M": 4096, "N": 11008, "K": 4096, "ACT": 2}, {"M": 8192, "N": 4096, "K": 1024, "ACT": 1}],
    arguments=_arguments,
    _make_inputs=_make_inputs,
    _launch=_launch,
    _reference=_reference,
    reference_name="torch.nn.functional.linear, then gelu or silu",
    _framework=_framework,
    tensor_cores=True,
    output_name="y",
    _flops=lambda s: 2 * s["M"] * s["N"] * s["K"],
    # X and W read, Y written, the bias read once.
    _bytes=lambda s, size: (s["M"] * s["K"] + s["N"] * s["K"] + s["M"] * s["N"] + s["N"]) * size,
)
