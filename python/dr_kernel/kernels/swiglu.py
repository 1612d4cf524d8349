"""Fused SiLU-and-multiply (the SwiGLU activation): out = silu(gate) · up.

The input is the output of an LLM MLP's fused gate/up projection, one (tokens, 2·ffn) tensor
whose first ffn columns are the gate and the last ffn the up projection, and the kernel writes the
(tokens, ffn) activation, as vLLM's and SGLang's silu_and_mul do. Each program handles a tile of
BLOCK_T tokens × BLOCK_D features: tall tiles reuse address arithmetic across tokens and suit
few-token (decode) batches, wide ones give long contiguous loads. The activation is computed in
fp32 and rounded once.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .base import BuiltinKernel, Pointer, cdiv


@triton.jit
def silu_and_mul_kernel(x_ptr, out_ptr, n_tokens, d, stride_x, stride_out,
                        BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    tokens = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    feats = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = (tokens[:, None] < n_tokens) & (feats[None, :] < d)
    rows = tokens.to(tl.int64)[:, None]
    gate = tl.load(x_ptr + rows * stride_x + feats[None, :], mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + rows * stride_x + d + feats[None, :], mask=mask, other=0.0).to(tl.float32)
    out = gate * tl.sigmoid(gate) * up
    tl.store(out_ptr + rows * stride_out + feats[None, :], out.to(out_ptr.dtype.element_ty), mask=mask)


def _arguments(shape, dtype, config):
    d = shape["ffn"]
    return {"x_ptr": Pointer(dtype), "out_ptr": Pointer(dtype), "n_tokens": shape["tokens"], "d": d,
            "stride_x": 2 * d, "stride_out": d, **config}


def _make_inputs(shape, dtype, device, seed):
    import torch

    generator = torch.Generator(device=device).manual_seed(seed)
    tokens, d = shape["tokens"], shape["ffn"]
    x = torch.randn((tokens, 2 * d), generator=generator, device=device, dtype=dtype)
    return {"x": x, "out": torch.empty((tokens, d), device=device, dtype=dtype)}


def _launch(fn, inputs, config):
    x, out = inputs["x"], inputs["out"]
    tokens, d = out.shape
    assert x.stride(1) == 1 and out.stride(1) == 1 and x.shape[1] == 2 * d, \
        "silu_and_mul takes a row-major (tokens, 2·ffn) input and a (tokens, ffn) output"
    grid = (cdiv(tokens, config["BLOCK_T"]), cdiv(d, config["BLOCK_D"]))
    return fn[grid](x, out, tokens, d, x.stride(0), out.stride(0), **config)


def _reference(inputs):
    import torch

    x = inputs["x"].float()
    gate, up = x.chunk(2, dim=-1)
    return (torch.nn.functional.silu(gate) * up).to(inputs["out"].dtype)


def _framework(inputs):
    # The unfused activation an eager model runs: two kernels and an intermediate tensor.
    import torch

    gate, up = inputs["x"].chunk(2, dim=-1)
    return torch.nn.functional.silu(gate) * up


KERNEL = BuiltinKernel(
    name="swiglu",
    family="swiglu",
    fn=silu_and_mul_kernel,
    description="fused SiLU(gate)·up over a (tokens, 2·ffn) projection, BLOCK_T × BLOCK_D tiles",
    space={
        "BLOCK_T": [1, 2, 4, 8, 16, 32],
        "BLOCK_D": [128, 256, 512, 1024, 2048, 4096],
        "num_warps": [1, 2, 4, 8, 16],
    },
    # Between 4 and 32 elements per thread for each of the two loads: fewer idles lanes, more
    # only spills (three tiles are live), and tiles of over 16k elements add nothing for an
    # elementwise kernel.
    constraints=["BLOCK_T * BLOCK_D >= 4 * 32 * num_warps", "BLOCK_T * BLOCK_D <= 32 * 32 * num_warps",
                 "BLOCK_T * BLOCK_D <= 16384"],
    shape_keys=("tokens", "ffn"),
    # Llama 3 8B and Llama 2 7B MLPs over a training micro-batch; an odd token count of Qwen2 1.5B.
    shapes=[{"tokens": 8192, "ffn": 14336}, {"tokens": 4096, "ffn": 11008}, {"tokens": 2999, "ffn": 8960}],
    arguments=_arguments,
    _make_inputs=_make_inputs,
    _launch=_launch,
    _reference=_reference,
    reference_name="torch silu(gate) * up",
    _framework=_framework,
    output_name="out",
    # Per output: the exponential, the add and the division of the sigmoid, two products.
    _flops=lambda s: 5 * s["tokens"] * s["ffn"],
    # Gate and up read, the activation written.
    _bytes=lambda s, size: 3 * s["tokens"] * s["ffn"] * size,
)
