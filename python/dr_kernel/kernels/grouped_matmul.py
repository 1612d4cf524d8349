"""Grouped GEMM of a mixture-of-experts layer: C[rows of group g] = A[rows of group g] · B[g].

The tokens routed to each expert are sorted by expert into one (M, K) matrix A, group g owning
rows group_end[g-1] to group_end[g] (uneven, as routing makes them); B holds one (K, N) weight per
expert. The kernel is the persistent grouped GEMM of Triton's tutorial (08-grouped-gemm) in the
MoE layout: a fixed grid of num_sms · PROGRAMS_PER_SM programs walks the output tiles of all
groups in order, each program taking every (num_sms · PROGRAMS_PER_SM)-th tile, so that one launch
serves any split of the tokens without knowing it on the host. num_sms is the device's SM count,
an argument (so one binary serves every GPU of an architecture); PROGRAMS_PER_SM, the tile sizes,
warps and pipeline stages are tuned. Accumulation is in fp32.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .base import BuiltinKernel, Pointer

# The H200's SM count: the num_sms a compile without a GPU assumes, and the launch's on a CPU. The
# SM counts of the A100 (108), L40S (142) and B200 (148) specialise the same way (not multiples of 16).
H200_SMS = 132


@triton.jit
def grouped_matmul_kernel(a_ptr, b_ptr, c_ptr, group_end_ptr, n_groups, N, K, stride_am, stride_bg, stride_bk,
                          stride_bn, stride_cm, num_sms, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_K: tl.constexpr, PROGRAMS_PER_SM: tl.constexpr):
    tile = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    first_tile = 0
    row_start = 0
    for g in range(n_groups):
        row_end = tl.load(group_end_ptr + g)
        group_tiles = tl.cdiv(row_end - row_start, BLOCK_M) * tiles_n
        # Every tile of this group that falls to this program, before moving to the next group.
        while tile >= first_tile and tile < first_tile + group_tiles:
            local = tile - first_tile
            offs_m = row_start + (local // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
            offs_n = (local % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
            offs_k = tl.arange(0, BLOCK_K)
            a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :]
            b_ptrs = b_ptr + g * stride_bg + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for k in range(0, tl.cdiv(K, BLOCK_K)):
                k_left = K - k * BLOCK_K
                a = tl.load(a_ptrs, mask=(offs_m[:, None] < row_end) & (offs_k[None, :] < k_left), other=0.0)
                b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
                acc = tl.dot(a, b, acc)
                a_ptrs += BLOCK_K
                b_ptrs += BLOCK_K * stride_bk
            c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :]
            tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < row_end) & (offs_n[None, :] < N))
            tile += num_sms * PROGRAMS_PER_SM
        first_tile += group_tiles
        row_start = row_end


def group_sizes(groups: int, rows: int, seed: int = 0) -> list[int]:
    """Returns an uneven split of `rows` tokens over `groups` experts, the same for a given seed:
    each expert's share is drawn between 0.5 and 1.5 of the mean, as a load-balanced router leaves
    them, and every expert gets at least one token."""
    import random

    rng = random.Random(seed)
    weights = [0.5 + rng.random() for _ in range(groups)]
    sizes = [max(1, int(rows * w / sum(weights))) for w in weights]
    sizes[-1] += rows - sum(sizes)
    return sizes


def _arguments(shape, dtype, config):
    N, K = shape["N"], shape["K"]
    return {"a_ptr": Pointer(dtype), "b_ptr": Pointer(dtype), "c_ptr": Pointer(dtype), "group_end_ptr": Pointer("i32"),
            "n_groups": shape["G"], "N": N, "K": K, "stride_am": K, "stride_bg": K * N, "stride_bk": N,
            "stride_bn": 1, "stride_cm": N, "num_sms": H200_SMS, **config}


def _make_inputs(shape, dtype, device, seed):
    import torch

    generator = torch.Generator(device=device).manual_seed(seed)
    G, M, N, K = shape["G"], shape["M"], shape["N"], shape["K"]
    if M < G:
        raise ValueError(f"grouped_matmul shape {shape}: M (tokens) must be at least G (groups)")
    a = torch.randn((M, K), generator=generator, device=device, dtype=dtype)
    b = torch.randn((G, K, N), generator=generator, device=device, dtype=dtype)
    sizes = group_sizes(G, M, seed)
    ends = torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(device=device, dtype=torch.int32)
    sms = torch.cuda.get_device_properties(device).multi_processor_count if str(device).startswith("cuda") \
        else H200_SMS
    return {"a": a, "b": b, "group_end": ends, "sizes": sizes, "num_sms": sms,
            "c": torch.empty((M, N), device=device, dtype=dtype)}


def _launch(fn, inputs, config):
    a, b, c = inputs["a"], inputs["b"], inputs["c"]
    G, K, N = b.shape
    # Offsets are 32-bit: every tensor must have fewer than 2^31 elements.
    assert a.is_contiguous() and b.is_contiguous() and c.is_contiguous() and max(a.numel(), b.numel(),
                                                                                  c.numel()) < 2**31, \
        "grouped_matmul tensors must be contiguous and under 2^31 elements each"
    grid = (inputs["num_sms"] * config["PROGRAMS_PER_SM"],)
    return fn[grid](a, b, c, inputs["group_end"], G, N, K, a.stride(0), b.stride(0), b.stride(1), b.stride(2),
                    c.stride(0), inputs["num_sms"], **config)


def _per_group(inputs, a, b):
    import torch

    return torch.cat([torch.matmul(part, b[g]) for g, part in enumerate(a.split(inputs["sizes"]))])


def _reference(inputs):
    return _per_group(inputs, inputs["a"].float(), inputs["b"].float()).to(inputs["c"].dtype)


def _framework(inputs):
    # What an eager MoE layer runs: one cuBLAS GEMM per expert on its slice of the sorted tokens.
    return _per_group(inputs, inputs["a"], inputs["b"])


KERNEL = BuiltinKernel(
    name="grouped_matmul",
    family="grouped_matmul",
    fn=grouped_matmul_kernel,
    description="MoE grouped GEMM, persistent over the tiles of all groups, PROGRAMS_PER_SM programs per SM",
    space={
        "BLOCK_M": [64, 128],
        "BLOCK_N": [64, 128, 256],
        "BLOCK_K": [32, 64, 128],
        "PROGRAMS_PER_SM": [1, 2],
        "num_warps": [4, 8],
        "num_stages": [2, 3, 4],
    },
    # The pipeline's tiles of A and B (2-byte elements) within the H200's 227 KiB of shared memory
    # per block, and at most 128 fp32 accumulators per thread (more only spills).
    constraints=["(BLOCK_M + BLOCK_N) * BLOCK_K * num_stages <= 114688", "BLOCK_M * BLOCK_N <= 128 * 32 * num_warps"],
    shape_keys=("G", "M", "N", "K"),
    # Mixtral-like top-2 routing of 4k tokens over 8 experts; 64 fine-grained experts (DeepSeek-like)
    # with 16k routed tokens; an odd token count over 6 experts with an odd N.
    shapes=[{"G": 8, "M": 8192, "N": 4096, "K": 2048}, {"G": 64, "M": 16384, "N": 1408, "K": 2048},
            {"G": 6, "M": 3001, "N": 1000, "K": 1024}],
    arguments=_arguments,
    _make_inputs=_make_inputs,
    _launch=_launch,
    _reference=_reference,
    reference_name="torch.matmul per group",
    _framework=_framework,
    tensor_cores=True,
    output_name="c",
    _flops=lambda s: 2 * s["M"] * s["N"] * s["K"],
    _bytes=lambda s, size: (s["M"] * s["K"] + s["G"] * s["K"] * s["N"] + s["M"] * s["N"]) * size,
)
