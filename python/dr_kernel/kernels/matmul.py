"""Matrix multiplication C = A·B with fp32 accumulation and a grouped order of output tiles.

The kernel is the one the recorded tables in data/h200/matmul.jsonl were measured with; its
parameter names and its code for fp16 are kept exactly, so that a configuration here compiles to
the binary that was timed there. The only change is that the result is cast to the element type
of the output pointer instead of always to fp16, which makes bf16 and fp32 problems possible.

SPLIT_K is the algorithm as a parameter: with SPLIT_K = 1 (the recorded tables' configs, which
lack it) the launch is that kernel; above 1 it is split-K, whose programs each take 1/SPLIT_K of
the K loop for one tile and add their partial sums into C with atomics (C zeroed first, inside
the launch, so that its cost is timed). A deep K and a small M·N leave most SMs idle with one
program per tile: 512×512×32768 has 16 tiles of 128×128 for 132 SMs.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .base import BuiltinKernel, Pointer, cdiv


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # Programs are numbered so that GROUP_M consecutive row-tiles share a column of B: the tiles
    # that run at the same time then reuse the same panels of A and B from L2.
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    # Row and column offsets wrap around instead of being masked, so loads along M and N never
    # need a mask; the store below masks the rows and columns that lie outside C.
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None] * sam + offs_k[None, :] * sak
    b_ptrs = b_ptr + offs_k[:, None] * sbk + offs_bn[None, :] * sbn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * sak
        b_ptrs += BLOCK_K * sbk
    c = acc.to(c_ptr.dtype.element_ty)
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + scm * offs_cm[:, None] + scn * offs_cn[None, :]
    tl.store(c_ptrs, c, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


@triton.jit
def _grouped_tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    # matmul_kernel's order of output tiles (which keeps its own inline copy: its source is the
    # recorded one), for the variants: GROUP_M row-tiles in turn share a column of B.
    width = GROUP_M * tl.cdiv(N, BLOCK_N)
    first_m = (pid // width) * GROUP_M
    rows = min(tl.cdiv(M, BLOCK_M) - first_m, GROUP_M)
    return first_m + (pid % width) % rows, (pid % width) // rows


@triton.jit
def matmul_splitk_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr):
    # The tiles as in matmul_kernel; program_id(1) picks this program's share of the K loop.
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    pid_k = tl.program_id(1)
    iters = tl.cdiv(K, BLOCK_K)
    per_split = tl.cdiv(iters, SPLIT_K)
    first_iter = pid_k * per_split
    last_iter = min(first_iter + per_split, iters)
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = first_iter * BLOCK_K + tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None] * sam + offs_k[None, :] * sak
    b_ptrs = b_ptr + offs_k[:, None] * sbk + offs_bn[None, :] * sbn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(first_iter, last_iter):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - (k - first_iter) * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - (k - first_iter) * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * sak
        b_ptrs += BLOCK_K * sbk
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + scm * offs_cm[:, None] + scn * offs_cn[None, :]
    mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N) & (first_iter < iters)
    tl.atomic_add(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask, sem="relaxed")


# The splits a sweep records and a user may search (--space '{..., "SPLIT_K": [1, 2, 4, 8, 16]}').
SPLIT_K_VALUES = [1, 2, 4, 8, 16]


def _variant(config):
    """The kernel a config launches: split-K above SPLIT_K = 1."""
    return matmul_splitk_kernel if config.get("SPLIT_K", 1) > 1 else matmul_kernel


def _kernel_config(config):
    # matmul_kernel has no SPLIT_K parameter: a config of 1 launches it as recorded.
    return {k: v for k, v in config.items() if k != "SPLIT_K" or v > 1}


def _arguments(shape, dtype, config):
    # The strides are those of contiguous row-major A (M×K), B (K×N) and C (M×N), as make_inputs
    # allocates them; the unit strides therefore compile as the constant 1.
    M, N, K = shape["M"], shape["N"], shape["K"]
    return {"a_ptr": Pointer(dtype), "b_ptr": Pointer(dtype), "c_ptr": Pointer(dtype),
            "M": M, "N": N, "K": K, "sam": K, "sak": 1, "sbk": N, "sbn": 1, "scm": N, "scn": 1,
            **_kernel_config(config)}


def _make_inputs(shape, dtype, device, seed):
    import torch

    generator = torch.Generator(device=device).manual_seed(seed)
    M, N, K = shape["M"], shape["N"], shape["K"]
    a = torch.randn((M, K), generator=generator, device=device, dtype=dtype)
    b = torch.randn((K, N), generator=generator, device=device, dtype=dtype)
    c = torch.empty((M, N), device=device, dtype=dtype)
    return {"a": a, "b": b, "c": c}


def _launch(fn, inputs, config):
    a, b, c = inputs["a"], inputs["b"], inputs["c"]
    M, K = a.shape
    N = b.shape[1]
    split = config.get("SPLIT_K", 1)
    grid = (cdiv(M, config["BLOCK_M"]) * cdiv(N, config["BLOCK_N"]), split)
    if split > 1:
        c.zero_()  # The partial sums are added into C: part of the launch, and of its time.
    return fn[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                    c.stride(0), c.stride(1), **_kernel_config(config))


def _reference(inputs):
    import torch

    return torch.matmul(inputs["a"].float(), inputs["b"].float()).to(inputs["c"].dtype)



def _torch():
    import torch

    return torch


KERNEL = BuiltinKernel(
    name="matmul",
    family="matmul",
    fn=matmul_kernel,
    description="C = A·B, fp32 accumulation, grouped tile order",
    space={
        "BLOCK_M": [16, 32, 64, 128, 256],
        "BLOCK_N": [32, 64, 128, 256],
        "BLOCK_K": [32, 64, 128],
        "GROUP_M": [1, 8],
        "num_warps": [2, 4, 8],
        "num_stages": [2, 3, 4, 5],
        # Split-K is searched only where asked for (space=, --space with SPLIT_K_VALUES) until the
        # tables are re-swept with it: the cost model has never seen a split, and extrapolates it
        # as a win on shapes whose tiles already fill the GPU (4096³ ranked SPLIT_K = 2 first).
        "SPLIT_K": [1],
    },
    # Configs written before SPLIT_K existed (the recorded tables, users' --config) mean 1.
    defaults={"SPLIT_K": 1},
    variant=_variant,
    # The recorded space has no constraints: the configurations that need too much shared memory
    # or take minutes in ptxas are part of what a tuner must learn to avoid, and the recorded
    # tables hold them as out_of_resources and compile_timeout rows.
    constraints=[],
    shape_keys=("M", "N", "K"),
    shapes=[
        {"M": 4096, "N": 4096, "K": 4096},
        {"M": 16, "N": 4096, "K": 4096},
        {"M": 8192, "N": 2048, "K": 1024},
        {"M": 1024, "N": 1024, "K": 1024},
    ],
    arguments=_arguments,
    _make_inputs=_make_inputs,
    _launch=_launch,
    _reference=_reference,
    reference_name="torch.matmul",
    _framework=lambda inputs: _torch().matmul(inputs["a"], inputs["b"]),
    tensor_cores=True,
    output_name="c",
    _flops=lambda s: 2 * s["M"] * s["N"] * s["K"],
    _bytes=lambda s, size: (s["M"] * s["K"] + s["K"] * s["N"] + s["M"] * s["N"]) * size,
)
