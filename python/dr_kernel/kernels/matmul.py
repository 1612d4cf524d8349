"""Matrix multiplication C = A·B with fp32 accumulation and a grouped order of output tiles.

The kernel is the one the recorded tables in data/h200/matmul.jsonl were measured with; its
parameter names and its code for fp16 are kept exactly, so that a configuration here compiles to
the binary that was timed there. The only change is that the result is cast to the element type
of the output pointer instead of always to fp16, which makes bf16 and fp32 problems possible.
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


def _arguments(shape, dtype, config):
    # The strides are those of contiguous row-major A (M×K), B (K×N) and C (M×N), as make_inputs
    # allocates them; the unit strides therefore compile as the constant 1.
    M, N, K = shape["M"], shape["N"], shape["K"]
    return {"a_ptr": Pointer(dtype), "b_ptr": Pointer(dtype), "c_ptr": Pointer(dtype),
            "M": M, "N": N, "K": K, "sam": K, "sak": 1, "sbk": N, "sbn": 1, "scm": N, "scn": 1, **config}


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
    grid = (cdiv(M, config["BLOCK_M"]) * cdiv(N, config["BLOCK_N"]),)
    return fn[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                    c.stride(0), c.stride(1), **config)


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
    },
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
