"""Flash-attention forward pass with an optional causal mask.

The kernel is the one data/h200/attention.jsonl was recorded with. Its fp16 code is unchanged;
the two hard-coded fp16 casts now follow the tensors instead: the probabilities are cast to V's
element type before the second product (so that both operands of tl.dot agree) and the result
to O's. Q, K, V and O are contiguous (Z, H, N_CTX, HEAD_DIM) tensors sharing one set of strides.
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

from .base import BuiltinKernel, Pointer, cdiv


# The parameter names are the recorded kernel's, O included, so the source stays the one measured.
@triton.jit
def attn_fwd_kernel(Q, K, V, O, sm_scale, s_z, s_h, s_m, H, N_CTX,  # noqa: E741
                    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    base = (off_hz // H) * s_z + (off_hz % H) * s_h
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + base + offs_m[:, None] * s_m + offs_d[None, :], mask=offs_m[:, None] < N_CTX, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    # The scores are kept in base 2 (exp2 is one instruction), so the scale carries log2(e).
    qk_scale = sm_scale * 1.44269504
    if CAUSAL:
        hi = tl.minimum((start_m + 1) * BLOCK_M, N_CTX)
    else:
        hi = N_CTX
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(K + base + cols[None, :] * s_m + offs_d[:, None], mask=cols[None, :] < N_CTX, other=0.0)
        qk = tl.dot(q, k) * qk_scale
        valid = cols[None, :] < N_CTX
        if CAUSAL:
            valid = valid & (offs_m[:, None] >= cols[None, :])
        qk = tl.where(valid, qk, -1.0e6)
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = tl.load(V + base + cols[:, None] * s_m + offs_d[None, :], mask=cols[:, None] < N_CTX, other=0.0)
        acc = tl.dot(p.to(V.dtype.element_ty), v, acc)
        m_i = m_ij
    acc = acc / l_i[:, None]
    tl.store(O + base + offs_m[:, None] * s_m + offs_d[None, :], acc.to(O.dtype.element_ty),
             mask=offs_m[:, None] < N_CTX)


def _arguments(shape, dtype, config):
    H, N, D = shape["H"], shape["N_CTX"], shape["HEAD_DIM"]
    return {"Q": Pointer(dtype), "K": Pointer(dtype), "V": Pointer(dtype), "O": Pointer(dtype),
            "sm_scale": 1.0 / math.sqrt(D), "s_z": H * N * D, "s_h": N * D, "s_m": D, "H": H, "N_CTX": N,
            "HEAD_DIM": D, "CAUSAL": bool(shape["CAUSAL"]), **config}


def _make_inputs(shape, dtype, device, seed):
    import torch

    generator = torch.Generator(device=device).manual_seed(seed)
    size = (shape["Z"], shape["H"], shape["N_CTX"], shape["HEAD_DIM"])
    q, k, v = (torch.randn(size, generator=generator, device=device, dtype=dtype) for _ in range(3))
    return {"q": q, "k": k, "v": v, "o": torch.empty_like(q), "causal": bool(shape["CAUSAL"]),
            "sm_scale": 1.0 / math.sqrt(shape["HEAD_DIM"])}


def _launch(fn, inputs, config):
    q, k, v, o = inputs["q"], inputs["k"], inputs["v"], inputs["o"]
    Z, H, N, D = q.shape
    # The kernel addresses all four tensors with Q's strides and a unit stride along HEAD_DIM.
    assert q.stride() == k.stride() == v.stride() == o.stride() and q.stride(3) == 1, \
        "attention tensors must be contiguous and share their strides"
    grid = (cdiv(N, config["BLOCK_M"]), Z * H)
    return fn[grid](q, k, v, o, inputs["sm_scale"], q.stride(0), q.stride(1), q.stride(2), H, N,
                    HEAD_DIM=D, CAUSAL=inputs["causal"], **config)


def _reference(inputs):
    import torch

    q, k, v = (inputs[n].float() for n in ("q", "k", "v"))
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=inputs["causal"],
                                                           scale=inputs["sm_scale"])
    return out.to(inputs["o"].dtype)


def _framework(inputs):
    import torch

    return torch.nn.functional.scaled_dot_product_attention(inputs["q"], inputs["k"], inputs["v"],
                                                            is_causal=inputs["causal"], scale=inputs["sm_scale"])


def _flops(shape):
    # Two products of N_CTX × N_CTX × HEAD_DIM per head, two operations per multiply-add; a causal
    # mask skips half of them.
    flops = 4 * shape["Z"] * shape["H"] * shape["N_CTX"] ** 2 * shape["HEAD_DIM"]
    return flops // 2 if shape["CAUSAL"] else flops


KERNEL = BuiltinKernel(
    name="attention",
    family="attention",
    fn=attn_fwd_kernel,
    description="flash-attention forward, optional causal mask",
    space={
        "BLOCK_M": [32, 64, 128, 256],
        "BLOCK_N": [16, 32, 64, 128],
        "num_warps": [2, 4, 8],
        "num_stages": [1, 2, 3, 4],
    },
    constraints=[],
    shape_keys=("Z", "H", "N_CTX", "HEAD_DIM", "CAUSAL"),
    shapes=[
        {"Z": 4, "H": 32, "N_CTX": 4096, "HEAD_DIM": 64, "CAUSAL": False},
        {"Z": 4, "H": 32, "N_CTX": 4096, "HEAD_DIM": 64, "CAUSAL": True},
        {"Z": 2, "H": 16, "N_CTX": 8192, "HEAD_DIM": 128, "CAUSAL": False},
    ],
    arguments=_arguments,
    _make_inputs=_make_inputs,
    _launch=_launch,
    _reference=_reference,
    reference_name="torch sdpa",
    _framework=_framework,
    tensor_cores=True,
    output_name="o",
    _flops=_flops,
    # Q, K and V read once and O written once.
    _bytes=lambda s, size: 4 * s["Z"] * s["H"] * s["N_CTX"] * s["HEAD_DIM"] * size,
)
