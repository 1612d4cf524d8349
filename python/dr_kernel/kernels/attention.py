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

from .attention_ws import attn_fwd_ws_kernel
from .base import BuiltinKernel, Pointer, cdiv, check_starts_aligned, ensure_allocator


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


@triton.jit
def _attend(acc, l_i, m_i, q, k_desc, v_desc, offs_m, lo, hi, N_CTX, qk_scale,
            BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, FUSED_SCALE: tl.constexpr):
    # Keys and values lo..hi (multiples of BLOCK_N) into the running softmax of one tile of rows;
    # only the blocks that straddle the diagonal or the end of the sequence test a mask.
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = k_desc.load([start_n, 0])
        qk = tl.dot(q, k.T)
        if not FUSED_SCALE:
            qk = qk * qk_scale
        if MASKED:
            cols = start_n + offs_n
            valid = cols[None, :] < N_CTX
            if CAUSAL:
                valid = valid & (offs_m[:, None] >= cols[None, :])
            qk = tl.where(valid, qk, -1.0e6)
        if FUSED_SCALE:
            # The scale applied inside the exponent's argument: one multiply-add a score where
            # scaling the scores first costs a multiply and a subtraction (the softmax's own
            # arithmetic, not the products, bounds this loop on Hopper).
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = v_desc.load([start_n, 0])
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def attn_fwd_tma_kernel(Q, K, V, O, sm_scale, s_z, s_h, s_m, H, N_CTX,  # noqa: E741
                        HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        CAUSAL: tl.constexpr, REFINED: tl.constexpr = False):
    # attn_fwd_kernel's arithmetic with Hopper's tensor memory accelerator: each (batch, head)
    # is a N_CTX × HEAD_DIM matrix behind a descriptor (rows past N_CTX load as zeros and are
    # not stored), and the key loop runs in two parts: the blocks wholly below the diagonal (all
    # of them without a causal mask) with no mask at all, then the few that straddle the
    # diagonal or the end of the sequence with one. The recorded kernel masks every block.
    # REFINED (TMA = 2): under a causal mask the tiles with the most keys start first, so that
    # the last wave holds the shortest ones; and the scale is fused into the exponent (_attend).
    start_m = tl.program_id(0)
    if REFINED and CAUSAL:
        start_m = tl.num_programs(0) - 1 - start_m
    off_hz = tl.program_id(1)
    base = (off_hz // H).to(tl.int64) * s_z + (off_hz % H).to(tl.int64) * s_h
    q_desc = tl.make_tensor_descriptor(Q + base, [N_CTX, HEAD_DIM], [s_m, 1], [BLOCK_M, HEAD_DIM])
    k_desc = tl.make_tensor_descriptor(K + base, [N_CTX, HEAD_DIM], [s_m, 1], [BLOCK_N, HEAD_DIM])
    v_desc = tl.make_tensor_descriptor(V + base, [N_CTX, HEAD_DIM], [s_m, 1], [BLOCK_N, HEAD_DIM])
    o_desc = tl.make_tensor_descriptor(O + base, [N_CTX, HEAD_DIM], [s_m, 1], [BLOCK_M, HEAD_DIM])
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    q = q_desc.load([start_m * BLOCK_M, 0])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.44269504
    if CAUSAL:
        clear = (start_m * BLOCK_M) // BLOCK_N * BLOCK_N  # Keys before every row of the tile.
        hi = tl.minimum((start_m + 1) * BLOCK_M, N_CTX)
    else:
        clear = N_CTX // BLOCK_N * BLOCK_N
        hi = N_CTX
    acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_desc, v_desc, offs_m, 0, clear, N_CTX, qk_scale,
                            BLOCK_N, False, CAUSAL, REFINED)
    acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_desc, v_desc, offs_m, clear, hi, N_CTX, qk_scale,
                            BLOCK_N, True, CAUSAL, REFINED)
    acc = acc / l_i[:, None]
    o_desc.store([start_m * BLOCK_M, 0], acc.to(O.dtype.element_ty))


def _variant(config, shape):
    """The recorded kernel, or with TMA = 1 the one that loads through tensor descriptors and masks
    only the blocks on the diagonal or the sequence's end (sm_90 and later); TMA = 2 is that kernel
    REFINED (heavy causal tiles first, the scale fused into the exponent), the one a tuning searches;
    TMA = 3 the warp-specialised Gluon forward of attention_ws.py (sm_90 only), 4 the same with
    FA3's softmax-under-PV overlap inside each warpgroup (PIPE)."""
    tma = config.get("TMA", 0)
    if tma >= WARP_SPECIALISED:
        return attn_fwd_ws_kernel
    return attn_fwd_tma_kernel if tma else attn_fwd_kernel


# The first TMA value that launches the warp-specialised Gluon kernel.
WARP_SPECIALISED = 3


def _kernel_config(config, n_ctx):
    """The kernel's own arguments and launch options for `config` on a sequence of `n_ctx`: the
    Gluon kernel pipelines by hand, so its stage count is a constexpr (STAGES) and so is whether
    the sequence ends inside a key block (TAIL)."""
    tma = config.get("TMA", 0)
    out = {k: v for k, v in config.items() if k != "TMA"}
    if tma == 2:
        out["REFINED"] = True
    elif tma >= WARP_SPECIALISED:
        out["PIPE"] = tma == WARP_SPECIALISED + 1
        out["STAGES"] = config["num_stages"]
        out["TAIL"] = n_ctx % config["BLOCK_N"] != 0
    return out


# Where the TMA kernel is searched: the tiles it was measured on (benchmarks/device_run.sh
# sweeps-tma, docs/gpu-notes.md). There its best beat the recorded kernel's best by 1.09-1.36x on
# four problems of five (lost 0.91x on the smallest, 8x16x1024x64) and its median config 1.05-1.28x.
# REFINED (TMA = 2) beat it on the same tiles by 1.14x, 1.02x and 1.02x (best against best; the same
# config 1.11x, 1.01x and 1.02x in geomean) on three problems (sweeps-tma2, on an H100).
TMA_RULE = "TMA == 0 or (BLOCK_M >= 64 and BLOCK_N >= 32 and num_warps >= 4 and num_stages >= 2)"
# The warp-specialised kernel runs 128-row tiles as two warpgroups of 4 warps (and a load warp),
# with key blocks of 64 or 128 in a ring of 2-4 stages (benchmarks/gluon_attention_probe.py).
WS_RULE = "TMA < 3 or (BLOCK_M == 128 and BLOCK_N >= 64 and num_warps == 4 and num_stages >= 2)"


def _problem_space(shape, limits):
    """The space a tuning of `shape` searches: the recorded one; on compute capability 9.0 and
    later the refined TMA kernel (TMA = 2) on the tiles of TMA_RULE beside it; and on 9.0 itself
    (Hopper's warpgroup MMA) the warp-specialised kernel (TMA = 3 and 4) on the tiles of WS_RULE."""
    if limits.arch < 90:
        return dict(KERNEL.space), list(KERNEL.constraints)
    if limits.arch == 90:
        return {**KERNEL.space, "TMA": [0, 2, 3, 4]}, [*KERNEL.constraints, TMA_RULE, WS_RULE]
    return {**KERNEL.space, "TMA": [0, 2]}, [*KERNEL.constraints, TMA_RULE]


def _opening(shape, limits):
    """What a tuning on sm_90 measures before its agent proposes anything: the warp-specialised
    kernel is in no recorded table, so the cost model cannot rank its configs (it put TMA 4's key
    blocks of 128 in three stages 87th of 258 on 2x16x8192x128). On an H100 (gluonattn, sixth
    session of 2026-12-06) that config was the fastest of the twelve on eight problems of nine with
    head dims 64 and 128, TMA 3 with the same blocks 8-12 % slower there (the fastest on the ninth),
    and head dim 256 fits only blocks of 64 in two stages. The first two whose query buffers and
    K/V ring fit the device's shared memory."""
    if limits.arch != 90:
        return []
    D = shape["HEAD_DIM"]
    out = []
    for tma, block_n, stages in ((4, 128, 3), (3, 128, 3), (3, 64, 2)):
        if 2 * (2 * 64 * D + 2 * stages * block_n * D) + 1024 <= limits.shared_per_block:
            out.append({"BLOCK_M": 128, "BLOCK_N": block_n, "num_warps": 4, "num_stages": stages, "TMA": tma})
    return out[:2]


def _arguments(shape, dtype, config):
    H, N, D = shape["H"], shape["N_CTX"], shape["HEAD_DIM"]
    return {"Q": Pointer(dtype), "K": Pointer(dtype), "V": Pointer(dtype), "O": Pointer(dtype),
            "sm_scale": 1.0 / math.sqrt(D), "s_z": H * N * D, "s_h": N * D, "s_m": D, "H": H, "N_CTX": N,
            "HEAD_DIM": D, "CAUSAL": bool(shape["CAUSAL"]), **_kernel_config(config, N)}


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
    if config.get("TMA", 0):
        check_starts_aligned("attention", q=q, k=k, v=v, o=o)
        ensure_allocator()
    return fn[grid](q, k, v, o, inputs["sm_scale"], q.stride(0), q.stride(1), q.stride(2), H, N,
                    HEAD_DIM=D, CAUSAL=inputs["causal"], **_kernel_config(config, N))


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
        # 1 launches attn_fwd_tma_kernel (compute capability 9.0 and later), 2 the same REFINED,
        # 3 and 4 attn_fwd_ws_kernel (9.0 only). The recorded tables have 0 only; a tuning on such
        # a GPU searches 0, 2 and (on 9.0) 3 and 4 (_problem_space).
        "TMA": [0],
    },
    defaults={"TMA": 0},
    variant=_variant,
    _problem_space=_problem_space,
    compiled_only={"TMA": [3, 4]},  # Gluon's kernel: not in Triton's interpreter.
    _opening=_opening,
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
