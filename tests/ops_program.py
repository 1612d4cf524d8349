"""dr_kernel.ops in Triton's interpreter, run by tests/test_ops.py: each operator on problems its
kernel covers (tuned with 2 evaluations, Triton kept) and on calls it does not cover, then one
problem raced against torch (configure() starts the process's choices afresh). Prints one JSON
line: per covered call, the largest difference from an fp32 torch result and that result's scale;
per uncovered call, whether it is torch's own; the choices; the store's row count."""

import json
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
from dr_kernel import _core, ops  # noqa: E402

db = sys.argv[1]
F = torch.nn.functional
torch.manual_seed(0)
ops.configure(variants=("triton",), max_evals=2, db=db)


def diff(out, expected) -> dict:
    out, expected = out.float(), expected.float()
    return {"shape_ok": out.shape == expected.shape, "max_diff": (out - expected).abs().max().item(),
            "scale": expected.abs().max().item()}


def same(outs, expected) -> bool:
    return len(outs) == len(expected) and all(torch.equal(o, e) for o, e in zip(outs, expected, strict=True))


a = torch.randn(2, 19, 40, dtype=torch.float16)  # Batch dimensions fold into 38 rows; K = 40 and N = 29
b = torch.randn(40, 29, dtype=torch.float16)      # are no multiples of 16: served padded to 48 and 32.
# Rows of 40 and 24 elements: multiples of 8, served as they are by the kernel told so.
a16, b16 = torch.randn(24, 40, dtype=torch.float16), torch.randn(40, 24, dtype=torch.float16)
x = torch.randn(3, 2, 300, dtype=torch.bfloat16)
w = torch.randn(300, dtype=torch.bfloat16)
r = torch.randn(3, 2, 300, dtype=torch.bfloat16)
q, k, v = (torch.randn(1, 2, 50, 16, dtype=torch.float16) for _ in range(3))
covered = {
    "matmul": diff(ops.matmul(a, b), torch.matmul(a.float(), b.float())),
    "matmul aligned": diff(ops.matmul(a16, b16), torch.matmul(a16.float(), b16.float())),
    "softmax": diff(ops.softmax(x, dim=-1), torch.softmax(x.float(), -1)),
    "rms_norm": diff(ops.rms_norm(x, (300,), w, 1e-5), F.rms_norm(x.float(), (300,), w.float(), 1e-5)),
    "attention": diff(ops.attention(q, k, v, is_causal=True, scale=0.3),
                      F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True, scale=0.3)),
    # The fused residual add and norm: (y, h) against the chain in fp32.
    "add_rms_norm": diff(torch.stack(ops.add_rms_norm(x, r, (300,), w, 1e-5)),
                         torch.stack([F.rms_norm(x.float() + r.float(), (300,), w.float(), 1e-5),
                                      x.float() + r.float()])),
}
tuned = len(ops.decisions())

# Calls the kernels do not cover: torch's own result, bit for bit, and nothing tuned.
grad = torch.randn(38, 40, dtype=torch.float16, requires_grad=True)
kv = torch.randn(1, 2, 30, 16, dtype=torch.float16)
mask = torch.ones(50, 50, dtype=torch.bool).tril()
xg = x.clone().requires_grad_(True)
# Calls of the kernels' serving paths while the uncovered calls run: none may reach them.
launched = []


def counted(name):
    original = getattr(ops, name)

    def serve(*args, **kwargs):
        launched.append(name)
        return original(*args, **kwargs)
    return serve


for name in ("_matmul_triton", "_attention_triton"):
    setattr(ops, name, counted(name))


def shifted(t):
    """t's values in a contiguous view that starts one element (2 bytes) past a 16-byte boundary."""
    out = torch.empty(t.numel() + 8, dtype=t.dtype)[1:t.numel() + 1].view(t.shape)
    assert out.is_contiguous() and out.data_ptr() % 16 == 2
    return out.copy_(t)


uncovered = {
    "matmul fp32": torch.equal(ops.matmul(a.float(), b.float()), torch.matmul(a.float(), b.float())),
    # Against torch's call on the same strided operand: a GEMM over another layout may round otherwise.
    "matmul transposed b": torch.equal(ops.matmul(a, b.t().contiguous().t()), torch.matmul(a, b.t().contiguous().t())),
    "matmul 1-d b": torch.equal(ops.matmul(a, b[:, 0].contiguous()), torch.matmul(a, b[:, 0].contiguous())),
    "matmul needs grad": torch.equal(ops.matmul(grad, b), torch.matmul(grad, b)),
    # A covered problem (the stored choice is a kernel's) whose A starts one element into its storage.
    "matmul unaligned start": torch.equal(ops.matmul(shifted(a16), b16), torch.matmul(shifted(a16), b16)),
    "softmax dim 0": torch.equal(ops.softmax(x, dim=0), torch.softmax(x, 0)),
    "softmax dtype": torch.equal(ops.softmax(x, -1, dtype=torch.float32), torch.softmax(x, -1, dtype=torch.float32)),
    "softmax strided": torch.equal(ops.softmax(x[:, :, ::2]), torch.softmax(x[:, :, ::2], -1)),
    "rms_norm no weight": torch.equal(ops.rms_norm(x, (300,)), F.rms_norm(x, (300,))),
    "rms_norm two dims": torch.equal(ops.rms_norm(x, (2, 300)), F.rms_norm(x, (2, 300))),
    "add_rms_norm no weight": same(ops.add_rms_norm(x, r, (300,)), (F.rms_norm(x + r, (300,)), x + r)),
    "add_rms_norm needs grad": same(ops.add_rms_norm(xg, r, (300,), w), (F.rms_norm(xg + r, (300,), w), xg + r)),
    "attention mask": torch.equal(ops.attention(q, k, v, attn_mask=mask),
                                  F.scaled_dot_product_attention(q, k, v, mask)),
    "attention unaligned start": torch.equal(ops.attention(shifted(q), k, v),
                                             F.scaled_dot_product_attention(shifted(q), k, v)),
    "attention kv length": torch.equal(ops.attention(q, kv, kv), F.scaled_dot_product_attention(q, kv, kv)),
    "attention head dim 12": torch.equal(ops.attention(q[..., :12].contiguous(), k[..., :12].contiguous(),
                                                       v[..., :12].contiguous()),
                                         F.scaled_dot_product_attention(q[..., :12], k[..., :12], v[..., :12])),
}
untouched = len(ops.decisions()) == tuned and not launched
choices = ops.decisions()

# The race: torch on the CPU beats the interpreter, so torch serves the problem, with its result.
ops.configure(variants=("triton", "torch"), rounds=2, reps=3)
s = torch.randn(4, 256, dtype=torch.float16)
raced_equal = torch.equal(ops.softmax(s), torch.softmax(s, -1))
# Fused against apart: torch's add and rms_norm win on the CPU, with torch's results.
s2, w2 = torch.randn(4, 256, dtype=torch.float16), torch.randn(256, dtype=torch.float16)
raced_fused_equal = same(ops.add_rms_norm(s, s2, (256,), w2, 1e-5), (F.rms_norm(s + s2, (256,), w2, 1e-5), s + s2))
raced = ops.decisions()

# Precision as a choice: with a tolerance, matmul's fp8 variant (e4m3 operands, a scale per row of A
# and per column of B) is checked against the fp32 result on the call's inputs and serves where it
# is within it; a tolerance it misses leaves it out (the fp16 kernel serves).
a64, b64 = torch.randn(40, 64, dtype=torch.float16), torch.randn(64, 48, dtype=torch.float16)
ops.configure(variants=("fp8",), tolerance=0.1, max_evals=2)
out = ops.matmul(a64, b64).float()
exact = a64.float() @ b64.float()
loose = ops.decisions()[-1]
ops.configure(variants=("triton", "fp8"), tolerance=1e-4, max_evals=2)
tight_equal = torch.equal(ops.matmul(a64, b64), ops._matmul_triton(ops.decisions()[-1], a64, b64))
tight = ops.decisions()[-1]
fp8 = {"error": ((out - exact).norm() / exact.norm()).item(), "variant": loose.variant, "kernel": loose.kernel,
       "source": loose.source, "fp8_error": loose.fp8_error, "tight_variant": tight.variant,
       "tight_fp8_error": tight.fp8_error, "tight_equal": tight_equal}

print(json.dumps({
    "covered": covered, "uncovered": uncovered, "untouched": untouched,
    "raced_equal": raced_equal, "raced_fused_equal": raced_fused_equal,
    "choices": [{k: getattr(c, k) for k in ("op", "shape", "padded", "variant", "source", "config", "triton_ms",
                                             "torch_ms", "triton_call_ms", "torch_call_ms", "evaluations")}
                for c in choices + raced],
    "fp8": fp8,
    "rows": _core.Store(db).count(),
}))
