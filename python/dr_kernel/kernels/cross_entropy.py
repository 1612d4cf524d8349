"""Cross-entropy forward over a large vocabulary: loss = logsumexp(logits) - logits[target], per token.

The kernel is the forward of the fused cross-entropy kernels libraries ship for LLM training
(Liger-Kernel, Unsloth, flash-attn's xentropy): one program per token row streams the row of
logits in chunks of BLOCK_V with an online logsumexp (a running maximum and a running sum of
exponentials rescaled whenever the maximum grows), so a vocabulary of 128k never has to fit in
registers. It writes the loss and the row's logsumexp (what the backward pass needs) in fp32;
targets equal to ignore_index (padding) give a loss of 0, as torch's cross_entropy does.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .base import BuiltinKernel, Pointer

IGNORE_INDEX = -100


@triton.jit
def cross_entropy_fwd_kernel(logits_ptr, target_ptr, loss_ptr, lse_ptr, n_vocab, stride, ignore_index,
                             BLOCK_V: tl.constexpr):
    row = tl.program_id(0)
    row_ptr = logits_ptr + row.to(tl.int64) * stride
    m = -float("inf")
    s = 0.0
    for start in range(0, n_vocab, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        x = tl.load(row_ptr + cols, mask=cols < n_vocab, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    lse = m + tl.log(s)
    target = tl.load(target_ptr + row)
    ignored = target == ignore_index
    target_logit = tl.load(row_ptr + tl.where(ignored, 0, target)).to(tl.float32)
    tl.store(loss_ptr + row, tl.where(ignored, 0.0, lse - target_logit))
    tl.store(lse_ptr + row, lse)


def _arguments(shape, dtype, config):
    return {"logits_ptr": Pointer(dtype), "target_ptr": Pointer("i64"), "loss_ptr": Pointer("fp32"),
            "lse_ptr": Pointer("fp32"), "n_vocab": shape["vocab"], "stride": shape["vocab"],
            "ignore_index": IGNORE_INDEX, **config}


def _make_inputs(shape, dtype, device, seed):
    import torch

    generator = torch.Generator(device=device).manual_seed(seed)
    tokens, vocab = shape["tokens"], shape["vocab"]
    # Logits of a trained model's scale (a few units), so the logsumexp is dominated by a few
    # entries as in practice; about 1 token in 16 is padding.
    logits = (3.0 * torch.randn((tokens, vocab), generator=generator, device=device)).to(dtype)
    target = torch.randint(0, vocab, (tokens,), generator=generator, device=device)
    padding = torch.rand((tokens,), generator=generator, device=device) < 1 / 16
    target[padding] = IGNORE_INDEX
    return {"logits": logits, "target": target,
            "loss": torch.empty((tokens,), device=device, dtype=torch.float32),
            "lse": torch.empty((tokens,), device=device, dtype=torch.float32)}


def _launch(fn, inputs, config):
    logits = inputs["logits"]
    assert logits.stride(1) == 1, "cross_entropy logits must be row-major"
    return fn[(logits.shape[0],)](logits, inputs["target"], inputs["loss"], inputs["lse"], logits.shape[1],
                                  logits.stride(0), IGNORE_INDEX, **config)


def _reference(inputs):
    import torch

    return torch.nn.functional.cross_entropy(inputs["logits"].float(), inputs["target"], reduction="none",
                                             ignore_index=IGNORE_INDEX)


def _framework(inputs):
    import torch

    return torch.nn.functional.cross_entropy(inputs["logits"], inputs["target"], reduction="none",
                                             ignore_index=IGNORE_INDEX)


KERNEL = BuiltinKernel(
    name="cross_entropy",
    family="cross_entropy",
    fn=cross_entropy_fwd_kernel,
    description="cross-entropy forward per token, online logsumexp over vocabulary chunks of BLOCK_V",
    space={
        "BLOCK_V": [512, 1024, 2048, 4096, 8192, 16384, 32768],
        "num_warps": [1, 2, 4, 8, 16, 32],
    },
    # Between 4 and 64 logits per thread and chunk (see layernorm): fewer idles lanes, more spills.
    constraints=["BLOCK_V >= 4 * 32 * num_warps", "BLOCK_V <= 64 * 32 * num_warps"],
    shape_keys=("tokens", "vocab"),
    # Llama 2's vocabulary over 8k tokens, Llama 3's over 4k, GPT-2's (odd: no aligned rows).
    shapes=[{"tokens": 8192, "vocab": 32000}, {"tokens": 4096, "vocab": 128256}, {"tokens": 2047, "vocab": 50257}],
    arguments=_arguments,
    _make_inputs=_make_inputs,
    _launch=_launch,
    _reference=_reference,
    reference_name="torch.nn.functional.cross_entropy",
    _framework=_framework,
    output_name="loss",
    # Per logit: the maximum, the difference, the exponential and the sum.
    _flops=lambda s: 4 * s["tokens"] * s["vocab"],
    # The logits read once; the targets (int64) read, loss and logsumexp (fp32) written.
    _bytes=lambda s, size: s["tokens"] * s["vocab"] * size + 16 * s["tokens"],
)
