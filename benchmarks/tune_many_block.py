"""A small transformer block, forward and backward, built from dr_kernel's built-in Triton kernels:
the real program that benchmarks/tune_many_gpu.py collects, tunes with tune-many and times, and
whose work list benchmarks/tune_many_scaling.py tunes on 1 to N workers.

    x → rmsnorm → x·Wqkv → attention → ·Wo → + x → rmsnorm → ·W1 → SwiGLU → ·W2 → + → ·Wvocab → cross-entropy

Every matrix product, forward and backward (dX = dY·Wᵀ and dW = Xᵀ·dY, read through transposed
strides), is the built-in matmul kernel; rmsnorm, attention's forward, SwiGLU and cross-entropy's
forward are the built-in kernels too; the backward of those four is PyTorch's (no built-in kernel).
Each kernel is wrapped here with @optimize over its built-in space (a small one under Triton's
interpreter, so that a CPU run takes seconds).

MODE decides how a kernel is launched: "tuned" through dr_kernel (the stored winner; in collect
mode the space's first config), "default" the @triton.jit function itself with its space's first
config, as a program without a tuner would, "torch" PyTorch's operators throughout.
"""

from __future__ import annotations

import math
import os

import torch
import torch.nn.functional as F
import triton
from dr_kernel import optimize
from dr_kernel.kernels import attention, cross_entropy, matmul, rmsnorm, swiglu

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
MODE = os.environ.get("TUNE_MANY_BLOCK_MODE", "tuned")
BUDGET = int(os.environ.get("TUNE_MANY_BLOCK_BUDGET", "40"))


def _space(kernel, small: dict) -> dict:
    space = small if INTERPRET else {k: v for k, v in kernel.space.items() if k != "SPLIT_K"}
    return space


MATMUL_SPACE = _space(matmul.KERNEL, {"BLOCK_M": [16, 32], "BLOCK_N": [16, 32], "BLOCK_K": [16, 32],
                                      "GROUP_M": [1, 8], "num_warps": [1, 2], "num_stages": [1, 2]})
RMSNORM_SPACE = _space(rmsnorm.KERNEL, {"BLOCK": [64, 128], "num_warps": [1, 2], "num_stages": [1]})
ATTENTION_SPACE = _space(attention.KERNEL, {"BLOCK_M": [16, 32], "BLOCK_N": [16, 32], "num_warps": [1, 2],
                                            "num_stages": [1]})
SWIGLU_SPACE = _space(swiglu.KERNEL, {"BLOCK_T": [1, 2, 4], "BLOCK_D": [128, 256], "num_warps": [1, 2]})
CROSS_ENTROPY_SPACE = _space(cross_entropy.KERNEL, {"BLOCK_V": [128, 256, 512], "num_warps": [1, 2]})


def _tuned(kernel, key, space):
    constraints = [] if INTERPRET else kernel.KERNEL.constraints
    return optimize(max_evals=BUDGET, key=key, space=space, constraints=constraints)(kernel.KERNEL.fn)


matmul_kernel = _tuned(matmul, ["M", "N", "K"], MATMUL_SPACE)
rmsnorm_kernel = _tuned(rmsnorm, ["n_cols"], RMSNORM_SPACE)
attention_kernel = _tuned(attention, ["N_CTX", "HEAD_DIM", "H", "CAUSAL"], ATTENTION_SPACE)
swiglu_kernel = _tuned(swiglu, ["n_tokens", "d"], SWIGLU_SPACE)
cross_entropy_kernel = _tuned(cross_entropy, ["n_vocab"], CROSS_ENTROPY_SPACE)


def _first(space: dict) -> dict:
    from dr_kernel.space import make_space

    return dict(make_space(space=space).configs(1)[0])


def _launch(tuned, raw, space, grid, *args, **kwargs):
    if MODE == "tuned":
        return tuned[grid](*args, **kwargs)
    config = _FIRST.setdefault(id(space), _first(space))
    return raw[grid](*args, **kwargs, **config)


_FIRST: dict[int, dict] = {}


# ----- the operators ---------------------------------------------------------------------------------

def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b with the built-in matmul kernel (any strides)."""
    if MODE == "torch":
        return a @ b
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    _launch(matmul_kernel, matmul.matmul_kernel, MATMUL_SPACE,
            lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),),
            a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    return c


class Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return mm(x, w)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        return mm(dy, w.t()), mm(x.t(), dy)  # Transposed strides: other entries of the work list.


def norm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    if MODE == "torch":
        return F.rms_norm(x, (x.shape[1],), w, eps)
    y = torch.empty_like(x)
    _launch(rmsnorm_kernel, rmsnorm.rmsnorm_kernel, RMSNORM_SPACE, (x.shape[0],), x, w, y, x.shape[1], x.stride(0),
            eps)
    return y


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    if MODE == "torch":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    Z, H, N, D = q.shape
    o = torch.empty_like(q)
    _launch(attention_kernel, attention.attn_fwd_kernel, ATTENTION_SPACE,
            lambda meta: (triton.cdiv(N, meta["BLOCK_M"]), Z * H),
            q, k, v, o, 1.0 / math.sqrt(D), q.stride(0), q.stride(1), q.stride(2), H, N, HEAD_DIM=D, CAUSAL=True)
    return o


def silu_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[1] // 2
    if MODE == "torch":
        return F.silu(x[:, :d]) * x[:, d:]
    out = torch.empty((x.shape[0], d), device=x.device, dtype=x.dtype)
    _launch(swiglu_kernel, swiglu.silu_and_mul_kernel, SWIGLU_SPACE,
            lambda meta: (triton.cdiv(x.shape[0], meta["BLOCK_T"]), triton.cdiv(d, meta["BLOCK_D"])),
            x, out, x.shape[0], d, x.stride(0), out.stride(0))
    return out


def losses(logits: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token cross-entropy and log-sum-exp, with -100 as the ignored target."""
    loss = torch.empty(logits.shape[0], device=logits.device, dtype=torch.float32)
    lse = torch.empty_like(loss)
    _launch(cross_entropy_kernel, cross_entropy.cross_entropy_fwd_kernel, CROSS_ENTROPY_SPACE, (logits.shape[0],),
            logits, target, loss, lse, logits.shape[1], logits.stride(0), cross_entropy.IGNORE_INDEX)
    return loss, lse


class _Recomputed(torch.autograd.Function):
    """A Triton forward whose backward is PyTorch's, recomputed from the inputs."""

    @staticmethod
    def forward(ctx, triton_fn, torch_fn, *inputs):
        ctx.torch_fn = torch_fn
        ctx.save_for_backward(*inputs)
        return triton_fn(*inputs)

    @staticmethod
    def backward(ctx, grad):
        inputs = [t.detach().requires_grad_(t.requires_grad) for t in ctx.saved_tensors]
        with torch.enable_grad():
            out = ctx.torch_fn(*inputs)
        grads = torch.autograd.grad(out, [t for t in inputs if t.requires_grad], grad, allow_unused=True)
        it = iter(grads)
        return (None, None, *[next(it) if t.requires_grad else None for t in inputs])


def _torch_norm(x, w):
    return F.rms_norm(x, (x.shape[1],), w, 1e-6)


def _torch_attend(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _torch_silu_mul(x):
    d = x.shape[1] // 2
    return F.silu(x[:, :d]) * x[:, d:]


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target):
        loss, lse = losses(logits, target)
        ctx.save_for_backward(logits, target, lse)
        valid = (target != cross_entropy.IGNORE_INDEX).sum().clamp(min=1)
        return loss.sum() / valid

    @staticmethod
    def backward(ctx, grad):
        logits, target, lse = ctx.saved_tensors
        valid = (target != cross_entropy.IGNORE_INDEX)
        probs = torch.exp(logits.float() - lse[:, None])
        probs[valid, target[valid]] -= 1.0
        probs[~valid] = 0.0
        return (probs * (grad / valid.sum().clamp(min=1))).to(logits.dtype), None


# ----- the block -------------------------------------------------------------------------------------

class Block:
    """The block's weights and one training step's forward and backward."""

    def __init__(self, dim: int, heads: int, ffn: int, vocab: int, device: str, dtype: torch.dtype, seed: int = 0):
        g = torch.Generator(device=device).manual_seed(seed)

        def weight(*shape):
            return (torch.randn(shape, generator=g, device=device) / math.sqrt(shape[0])).to(dtype).requires_grad_()

        self.dim, self.heads = dim, heads
        self.n1 = torch.ones(dim, device=device, dtype=dtype, requires_grad=True)
        self.n2 = torch.ones(dim, device=device, dtype=dtype, requires_grad=True)
        self.wqkv, self.wo = weight(dim, 3 * dim), weight(dim, dim)
        self.w1, self.w2, self.wvocab = weight(dim, 2 * ffn), weight(ffn, dim), weight(dim, vocab)
        self.parameters = [self.n1, self.n2, self.wqkv, self.wo, self.w1, self.w2, self.wvocab]

    def _norm(self, x, w):
        return norm(x, w) if MODE == "torch" else _Recomputed.apply(norm, _torch_norm, x, w)

    def loss(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        linear = (lambda a, b: a @ b) if MODE == "torch" else Linear.apply
        T, D, H = x.shape[0], self.dim, self.heads
        qkv = linear(self._norm(x, self.n1), self.wqkv).view(T, 3, H, D // H).permute(1, 2, 0, 3)
        q, k, v = (t.unsqueeze(0).contiguous() for t in qkv)  # (1, H, T, D/H), one layout for the three.
        a = attend(q, k, v) if MODE == "torch" else _Recomputed.apply(attend, _torch_attend, q, k, v)
        x = x + linear(a[0].permute(1, 0, 2).reshape(T, D), self.wo)
        h = linear(self._norm(x, self.n2), self.w1)
        h = silu_mul(h) if MODE == "torch" else _Recomputed.apply(silu_mul, _torch_silu_mul, h)
        x = x + linear(h, self.w2)
        logits = linear(x, self.wvocab)
        if MODE == "torch":
            return F.cross_entropy(logits.float(), target, ignore_index=cross_entropy.IGNORE_INDEX)
        return _CrossEntropy.apply(logits, target)

    def step(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        for p in self.parameters:
            p.grad = None
        loss = self.loss(x, target)
        loss.backward()
        return loss.detach()


def batch(tokens: int, dim: int, vocab: int, device: str, dtype: torch.dtype, seed: int = 1):
    """Inputs of one step: activations and targets, about 1 in 16 of them padding (-100)."""
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn((tokens, dim), generator=g, device=device).to(dtype).requires_grad_()
    target = torch.randint(0, vocab, (tokens,), generator=g, device=device)
    target[torch.rand(tokens, generator=g, device=device) < 1 / 16] = cross_entropy.IGNORE_INDEX
    return x, target


def valid_inputs(name, arguments, device):
    """tune-many's --inputs hook: cross-entropy's targets, whose recorded range includes the ignored
    index -100 (random values in [-100, vocab) would read outside the logits), drawn valid."""
    if name != "cross_entropy_fwd_kernel":
        return None
    target = arguments["target_ptr"]
    vocab = arguments["n_vocab"]
    g = torch.Generator(device=device).manual_seed(0)
    valid = torch.randint(0, vocab, target.shape, generator=g, device=device, dtype=target.dtype)
    valid[torch.rand(target.shape, generator=g, device=device) < 1 / 16] = cross_entropy.IGNORE_INDEX
    return {"target_ptr": valid}
