"""dr_kernel.ops against torch on the H200: the published problem set of issue 11 (20 shapes per
family: regular, odd, skinny, deep-K, rows and strides that are not multiples of 16; fp16 and
bf16), each in a fresh store.

For each problem: the first call's wall time (tuning the built-in kernel, `stop="auto"`, then the
race against torch), then with Triton's do_bench (L2 cleared before each launch) torch's operator,
the tuned Triton kernel alone, and the dr_kernel.ops call (whichever won the race), timed in turns
(the median of five rounds of the three, so that clock drift weighs on all alike), each with the
fraction of the H200's peak it reaches (FLOP/s or bytes/s, the roofline's verdict). One JSON file
per problem under --out, written as it finishes, so that a run cut short keeps what it measured.

    python benchmarks/ops_bench.py --out DIR [--families matmul,attention] [--deadline 500]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

# (shape, dtype): the problem set. Sizes a model meets (LLM projections, heads, vocabularies) and
# the shapes tuners get wrong: odd sizes, one tile of rows, K far deeper than M·N.
PROBLEMS: dict[str, list[tuple[dict, str]]] = {
    "matmul": [
        ({"M": 1024, "N": 1024, "K": 1024}, "fp16"), ({"M": 2048, "N": 2048, "K": 2048}, "bf16"),
        ({"M": 4096, "N": 4096, "K": 4096}, "fp16"), ({"M": 8192, "N": 8192, "K": 4096}, "bf16"),
        ({"M": 4096, "N": 11008, "K": 4096}, "fp16"), ({"M": 8192, "N": 4096, "K": 14336}, "bf16"),
        ({"M": 16, "N": 4096, "K": 4096}, "fp16"), ({"M": 32, "N": 8192, "K": 8192}, "bf16"),
        ({"M": 128, "N": 4096, "K": 4096}, "fp16"), ({"M": 4096, "N": 128, "K": 4096}, "bf16"),
        ({"M": 8, "N": 14336, "K": 4096}, "bf16"), ({"M": 512, "N": 512, "K": 32768}, "fp16"),
        ({"M": 1024, "N": 1024, "K": 16384}, "bf16"), ({"M": 256, "N": 256, "K": 65536}, "fp16"),
        ({"M": 3000, "N": 5000, "K": 1000}, "fp16"), ({"M": 4095, "N": 4095, "K": 4095}, "bf16"),
        ({"M": 1000, "N": 1000, "K": 1000}, "fp16"), ({"M": 2047, "N": 1023, "K": 777}, "bf16"),
        ({"M": 4096, "N": 4095, "K": 4096}, "fp16"), ({"M": 6144, "N": 1000, "K": 2048}, "bf16"),
    ],
    "attention": [
        ({"Z": 4, "H": 32, "N_CTX": 4096, "HEAD_DIM": 64, "CAUSAL": False}, "fp16"),
        ({"Z": 4, "H": 32, "N_CTX": 4096, "HEAD_DIM": 64, "CAUSAL": True}, "bf16"),
        ({"Z": 2, "H": 16, "N_CTX": 8192, "HEAD_DIM": 128, "CAUSAL": False}, "bf16"),
        ({"Z": 2, "H": 16, "N_CTX": 8192, "HEAD_DIM": 128, "CAUSAL": True}, "fp16"),
        ({"Z": 1, "H": 8, "N_CTX": 16384, "HEAD_DIM": 128, "CAUSAL": True}, "bf16"),
        ({"Z": 8, "H": 16, "N_CTX": 1024, "HEAD_DIM": 64, "CAUSAL": False}, "fp16"),
        ({"Z": 16, "H": 16, "N_CTX": 512, "HEAD_DIM": 64, "CAUSAL": False}, "bf16"),
        ({"Z": 32, "H": 8, "N_CTX": 256, "HEAD_DIM": 128, "CAUSAL": False}, "fp16"),
        ({"Z": 4, "H": 32, "N_CTX": 2048, "HEAD_DIM": 128, "CAUSAL": False}, "fp16"),
        ({"Z": 4, "H": 32, "N_CTX": 2048, "HEAD_DIM": 128, "CAUSAL": True}, "bf16"),
        ({"Z": 1, "H": 32, "N_CTX": 4096, "HEAD_DIM": 64, "CAUSAL": True}, "fp16"),
        ({"Z": 2, "H": 8, "N_CTX": 3000, "HEAD_DIM": 64, "CAUSAL": False}, "bf16"),
        ({"Z": 1, "H": 16, "N_CTX": 1000, "HEAD_DIM": 128, "CAUSAL": True}, "fp16"),
        ({"Z": 8, "H": 32, "N_CTX": 1024, "HEAD_DIM": 128, "CAUSAL": True}, "bf16"),
        ({"Z": 2, "H": 32, "N_CTX": 2048, "HEAD_DIM": 64, "CAUSAL": False}, "bf16"),
        ({"Z": 1, "H": 4, "N_CTX": 32768, "HEAD_DIM": 64, "CAUSAL": True}, "fp16"),
        ({"Z": 4, "H": 8, "N_CTX": 4097, "HEAD_DIM": 64, "CAUSAL": False}, "fp16"),
        ({"Z": 16, "H": 16, "N_CTX": 128, "HEAD_DIM": 64, "CAUSAL": False}, "bf16"),
        ({"Z": 2, "H": 16, "N_CTX": 1536, "HEAD_DIM": 32, "CAUSAL": True}, "fp16"),
        ({"Z": 1, "H": 16, "N_CTX": 2048, "HEAD_DIM": 256, "CAUSAL": False}, "bf16"),
    ],
    "softmax": [
        ({"rows": 4096, "cols": 4096}, "fp16"), ({"rows": 8192, "cols": 1024}, "bf16"),
        ({"rows": 2048, "cols": 16384}, "fp16"), ({"rows": 1000, "cols": 50257}, "bf16"),
        ({"rows": 4096, "cols": 32000}, "fp16"), ({"rows": 512, "cols": 128256}, "bf16"),
        ({"rows": 16384, "cols": 512}, "fp16"), ({"rows": 65536, "cols": 128}, "bf16"),
        ({"rows": 32768, "cols": 256}, "fp16"), ({"rows": 4096, "cols": 4095}, "bf16"),
        ({"rows": 3000, "cols": 3000}, "fp16"), ({"rows": 1024, "cols": 65536}, "bf16"),
        ({"rows": 8192, "cols": 8192}, "fp16"), ({"rows": 128, "cols": 262144}, "bf16"),
        ({"rows": 2048, "cols": 2048}, "bf16"), ({"rows": 8192, "cols": 2000}, "fp16"),
        ({"rows": 100, "cols": 100000}, "fp16"), ({"rows": 16384, "cols": 1000}, "bf16"),
        ({"rows": 4096, "cols": 12288}, "fp16"), ({"rows": 256, "cols": 152064}, "bf16"),
    ],
    "rms_norm": [
        ({"rows": 4096, "cols": 4096}, "fp16"), ({"rows": 16384, "cols": 8192}, "bf16"),
        ({"rows": 8192, "cols": 2048}, "fp16"), ({"rows": 2048, "cols": 12288}, "bf16"),
        ({"rows": 3001, "cols": 5120}, "bf16"), ({"rows": 8192, "cols": 4095}, "fp16"),
        ({"rows": 32768, "cols": 1024}, "bf16"), ({"rows": 65536, "cols": 512}, "fp16"),
        ({"rows": 1024, "cols": 16384}, "fp16"), ({"rows": 4096, "cols": 7168}, "bf16"),
        ({"rows": 8192, "cols": 5120}, "fp16"), ({"rows": 16384, "cols": 3072}, "bf16"),
        ({"rows": 4096, "cols": 14336}, "bf16"), ({"rows": 512, "cols": 32768}, "fp16"),
        ({"rows": 2048, "cols": 2049}, "bf16"), ({"rows": 1, "cols": 4096}, "fp16"),
        ({"rows": 128, "cols": 4096}, "bf16"), ({"rows": 32768, "cols": 4096}, "fp16"),
        ({"rows": 8192, "cols": 6144}, "bf16"), ({"rows": 4000, "cols": 3000}, "fp16"),
    ],
}
# A linear layer with its bias and activation (ops.linear: the fused kernel against torch's F.linear
# and F.gelu/F.silu): MLP up projections of LLMs (SiLU) and GPT-style models (GELU), from a decode
# step's few tokens to a prefill's thousands. ACT: 1 GELU, 2 SiLU.
PROBLEMS["linear"] = [
    ({"M": 4096, "N": 11008, "K": 4096, "ACT": 2}, "bf16"), ({"M": 8192, "N": 4096, "K": 1024, "ACT": 1}, "fp16"),
    ({"M": 2048, "N": 14336, "K": 4096, "ACT": 2}, "bf16"), ({"M": 8192, "N": 3072, "K": 768, "ACT": 1}, "fp16"),
    ({"M": 4096, "N": 8192, "K": 2048, "ACT": 1}, "bf16"), ({"M": 1024, "N": 11008, "K": 4096, "ACT": 2}, "fp16"),
    ({"M": 512, "N": 4096, "K": 1024, "ACT": 1}, "bf16"), ({"M": 16384, "N": 5120, "K": 1280, "ACT": 1}, "fp16"),
    ({"M": 128, "N": 14336, "K": 4096, "ACT": 2}, "bf16"), ({"M": 16, "N": 11008, "K": 4096, "ACT": 2}, "fp16"),
    ({"M": 1, "N": 14336, "K": 4096, "ACT": 2}, "bf16"), ({"M": 3000, "N": 4096, "K": 1024, "ACT": 1}, "fp16"),
    ({"M": 4096, "N": 2816, "K": 1024, "ACT": 2}, "bf16"), ({"M": 2048, "N": 6144, "K": 1536, "ACT": 1}, "fp16"),
    ({"M": 8192, "N": 11008, "K": 4096, "ACT": 2}, "fp16"), ({"M": 1000, "N": 3072, "K": 768, "ACT": 1}, "bf16"),
    ({"M": 4096, "N": 4096, "K": 4096, "ACT": 1}, "fp16"), ({"M": 256, "N": 8192, "K": 2048, "ACT": 2}, "bf16"),
    ({"M": 2047, "N": 5120, "K": 1280, "ACT": 1}, "bf16"), ({"M": 64, "N": 4096, "K": 1024, "ACT": 1}, "fp16"),
]
# The residual add fused with RMSNorm (ops.add_rms_norm: the fused kernel against the add and the
# norm apart, where "torch" is the chain apart) on rms_norm's shapes.
PROBLEMS["add_rms_norm"] = list(PROBLEMS["rms_norm"])
# Scale, mask and softmax (ops.masked_softmax: the fused kernel against torch's multiply, add and
# softmax apart): attention scores of (batch · heads · queries) rows over keys, under a causal
# (queries, keys) mask repeated over batch and heads, or without a mask; odd lengths among them.
PROBLEMS["masked_softmax"] = [
    ({"rows": 32 * 2048, "cols": 2048, "mask_rows": 2048}, "fp16"),
    ({"rows": 32 * 1024, "cols": 4096, "mask_rows": 1024}, "bf16"),
    ({"rows": 16 * 512, "cols": 512, "mask_rows": 512}, "fp16"),
    ({"rows": 64 * 128, "cols": 128, "mask_rows": 128}, "bf16"),
    ({"rows": 8 * 4096, "cols": 4096, "mask_rows": 4096}, "fp16"),
    ({"rows": 12 * 1000, "cols": 1000, "mask_rows": 1000}, "bf16"),
    ({"rows": 32 * 77, "cols": 77, "mask_rows": 77}, "fp16"),
    ({"rows": 16 * 2047, "cols": 2047, "mask_rows": 2047}, "bf16"),
    ({"rows": 32 * 256, "cols": 8192, "mask_rows": 256}, "fp16"),
    ({"rows": 40 * 64, "cols": 16384, "mask_rows": 64}, "bf16"),
    ({"rows": 8192, "cols": 3000, "mask_rows": 0}, "fp16"),
    ({"rows": 32 * 2048, "cols": 2048, "mask_rows": 0}, "bf16"),
    ({"rows": 16 * 1024, "cols": 1024, "mask_rows": 1}, "fp16"),
    ({"rows": 4096, "cols": 32768, "mask_rows": 1}, "bf16"),
    ({"rows": 24 * 1536, "cols": 1536, "mask_rows": 1536}, "fp16"),
    ({"rows": 32 * 4096, "cols": 4096, "mask_rows": 4096}, "bf16"),
    ({"rows": 96 * 197, "cols": 197, "mask_rows": 0}, "fp16"),
    ({"rows": 32 * 3000, "cols": 3000, "mask_rows": 3000}, "bf16"),
    ({"rows": 8 * 8192, "cols": 8192, "mask_rows": 8192}, "fp16"),
    ({"rows": 128 * 64, "cols": 64, "mask_rows": 64}, "bf16"),
]
# One small problem per family, to try the script on the CPU in Triton's interpreter (--interpret);
# attention in fp16, since the interpreter computes the bf16 kernel wrongly (relative error 1e9).
TINY = {"matmul": [({"M": 40, "N": 24, "K": 32}, "fp16")], "attention": [({"Z": 1, "H": 2, "N_CTX": 40, "HEAD_DIM": 16,
                                                                         "CAUSAL": True}, "fp16")],
        "softmax": [({"rows": 4, "cols": 300}, "fp16")], "rms_norm": [({"rows": 4, "cols": 300}, "bf16")],
        "add_rms_norm": [({"rows": 4, "cols": 300}, "fp16")],
        "linear": [({"M": 40, "N": 72, "K": 56, "ACT": 1}, "fp16")],
        "masked_softmax": [({"rows": 12, "cols": 300, "mask_rows": 4}, "fp16")]}
DEVICE = "cuda"
ROUNDS = 5  # Turns of timing per problem (see run_problem's bench()).
TUNING: dict = {}  # dr_kernel.ops settings of the run (--max-evals, --stop, --tolerance).
KERNEL = {"matmul": "matmul", "attention": "attention", "softmax": "softmax", "rms_norm": "rmsnorm",
          "add_rms_norm": "add_rmsnorm", "linear": "linear_act", "masked_softmax": "masked_softmax"}


def name_of(family: str, shape: dict, dtype: str) -> str:
    sizes = "x".join(str(int(v)) for k, v in shape.items() if k not in ("CAUSAL", "ACT"))
    act = {1: "-gelu", 2: "-silu"}.get(shape.get("ACT"), "")
    return f"{family}-{sizes}{'-causal' if shape.get('CAUSAL') else ''}{act}-{dtype}"


def call(family: str, shape: dict, dtype: str):
    """(the dr_kernel.ops call, torch's call, alone(choice): the call through the Triton kernel
    of `choice` as dr_kernel.ops makes it, padding included) on fresh inputs of the problem."""
    import torch
    import torch.nn.functional as F
    from dr_kernel import ops
    from dr_kernel.kernels.base import torch_dtype

    t = torch_dtype(dtype)
    g = torch.Generator(device=DEVICE).manual_seed(0)

    def rand(*size):
        return torch.randn(size, generator=g, device=DEVICE, dtype=t)

    if family == "matmul":
        a, b = rand(shape["M"], shape["K"]), rand(shape["K"], shape["N"])
        # Alone: through the variant the choice names (the fp8 one where it won, else the fp16 kernel).
        return ((lambda: ops.matmul(a, b)), (lambda: torch.matmul(a, b)),
                (lambda c: lambda: (ops._matmul_fp8 if c.variant == "fp8" else ops._matmul_triton)(c, a, b)))
    if family == "softmax":
        x = rand(shape["rows"], shape["cols"])
        return ((lambda: ops.softmax(x, -1)), (lambda: torch.softmax(x, -1)),
                (lambda c: lambda: ops._softmax_triton(c, x)))
    if family == "rms_norm":
        x, w = rand(shape["rows"], shape["cols"]), rand(shape["cols"])
        cols = (shape["cols"],)
        return ((lambda: ops.rms_norm(x, cols, w, 1e-6)), (lambda: F.rms_norm(x, cols, w, 1e-6)),
                (lambda c: lambda: ops._rms_norm_triton(c, x, w, 1e-6)))
    if family == "add_rms_norm":
        x, r, w = rand(shape["rows"], shape["cols"]), rand(shape["rows"], shape["cols"]), rand(shape["cols"])
        cols = (shape["cols"],)

        def apart():
            h = x + r
            return F.rms_norm(h, cols, w, 1e-6), h

        return ((lambda: ops.add_rms_norm(x, r, cols, w, 1e-6)), apart,
                (lambda c: lambda: ops._add_rms_norm_fused(c, x, r, w, 1e-6)))
    if family == "masked_softmax":
        from dr_kernel.kernels.masked_softmax import causal_mask

        rows, cols, mask_rows = shape["rows"], shape["cols"], shape["mask_rows"]
        mask = causal_mask(mask_rows, cols, t, DEVICE) if mask_rows else None
        x = rand(rows, cols).view(-1, mask_rows, cols) if mask_rows else rand(rows, cols)
        mask2 = None if mask is None else mask.view(-1, cols)
        return ((lambda: ops.masked_softmax(x, mask, 0.125)), (lambda: ops._masked_softmax_torch(x, mask, 0.125)),
                (lambda c: lambda: ops._masked_softmax_fused(c, x, mask2, 0.125)))
    if family == "linear":
        from dr_kernel.kernels.linear_act import apply_activation

        act, name = shape["ACT"], {1: "gelu", 2: "silu"}[shape["ACT"]]
        x = rand(shape["M"], shape["K"])
        w = ((torch.rand(shape["N"], shape["K"], generator=g, device=DEVICE) * 2 - 1) * shape["K"] ** -0.5).to(t)
        b = ((torch.rand(shape["N"], generator=g, device=DEVICE) * 2 - 1) * shape["K"] ** -0.5).to(t)
        return ((lambda: ops.linear(x, w, b, name)), (lambda: apply_activation(act, F.linear(x, w, b))),
                (lambda c: lambda: ops._linear_triton(c, x, w, b, act)))
    size = (shape["Z"], shape["H"], shape["N_CTX"], shape["HEAD_DIM"])
    q, k, v = rand(*size), rand(*size), rand(*size)
    causal = shape["CAUSAL"]
    scale = 1.0 / math.sqrt(shape["HEAD_DIM"])
    return ((lambda: ops.attention(q, k, v, is_causal=causal)),
            (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)),
            (lambda c: lambda: ops._attention_triton(c, q, k, v, causal, scale)))


def run_problem(family: str, shape: dict, dtype: str, out: Path) -> dict:
    import torch
    import triton
    from dr_kernel import kernels, ops
    from dr_kernel.analysis import H200, device_limits, throughput

    kernel = kernels.get(KERNEL[family])
    ops.configure(db=str(out / "stores" / f"{name_of(family, shape, dtype)}.db"), **TUNING)
    ours, theirs, alone = call(family, shape, dtype)
    expected = theirs()
    start = time.perf_counter()
    got = ours()
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    first_s = time.perf_counter() - start
    choice = ops.decisions()[-1]
    if isinstance(got, tuple):  # add_rms_norm's (y, h).
        got, expected = torch.stack(got), torch.stack(expected)
    relerr = ((got.float() - expected.float()).norm() / expected.float().norm().clamp_min(1e-12)).item()

    def bench_once(fn) -> float:
        if DEVICE != "cuda":
            start = time.perf_counter()
            fn()
            return (time.perf_counter() - start) * 1e3
        return float(triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median"))

    def bench(**fns) -> dict[str, float]:
        """Median of ROUNDS turns, the callables timed one after another in each: a large GEMM's
        clocks drift by several per cent within a second (timed back to back, a torch-served ops
        call came out 6 % slower than torch itself on the H200), and the turns spread it alike."""
        times: dict[str, list[float]] = {who: [] for who in fns}
        for _ in range(ROUNDS if DEVICE == "cuda" else 1):
            for who, fn in fns.items():
                times[who].append(bench_once(fn))
        return {who: statistics.median(t) for who, t in times.items()}

    contenders = {"torch": theirs, "ops": ours}
    if choice.variant == "fp8":  # The fp8 variant alone; "triton" stays the fp16 kernel's time.
        contenders["fp8"] = alone(choice)
    triton_config = choice.config if choice.variant == "triton" else None
    if triton_config is None:
        # Torch won the race, so the choice keeps no config: the Triton kernel alone is timed at
        # the tuned session's best (on the padded problem, when it was padded), read back from
        # the problem's store.
        triton_config = _best_tuned(kernel, choice.padded or shape, dtype,
                                    out / "stores" / f"{name_of(family, shape, dtype)}.db", choice.device)
    if triton_config is not None:
        contenders["triton"] = alone(dataclasses.replace(choice, kernel=KERNEL[family], variant="triton",
                                                         config=triton_config))
    timed = bench(**contenders)
    limits = device_limits(0) if DEVICE == "cuda" else H200
    peak = limits.peak_tflops(dtype, kernel.tensor_cores), limits.peak_gbps
    flops, moved = kernel.flops(shape), kernel.bytes(shape, dtype)
    row = {"family": family, "problem": name_of(family, shape, dtype), "shape": shape, "dtype": dtype,
           "device": choice.device, "triton_version": triton.__version__,
           "torch_version": torch.__version__, "first_call_s": first_s, "variant": choice.variant,
           "config": triton_config, "padded": choice.padded, "evaluations": choice.evaluations,
           "race_triton_ms": choice.triton_ms, "race_call_ms": [choice.triton_call_ms, choice.torch_call_ms],
           "race_torch_ms": choice.torch_ms, "race_fp8_ms": choice.fp8_ms, "fp8_error": choice.fp8_error,
           "relerr_vs_torch": relerr, "ms": timed,
           "fraction_of_peak": {who: throughput(flops, moved, ms, *peak)["fraction_of_peak"]
                                for who, ms in timed.items()}}
    return row


def dispatch(out: Path) -> dict:
    """Host microseconds per call of a decided dr_kernel.ops call against torch's own, on a small
    softmax (launch-bound): served by torch, then by the Triton kernel (variants=("triton",))."""
    import timeit

    import torch
    from dr_kernel import ops

    x = torch.randn(8, 256, device=DEVICE, dtype=torch.float16)
    row = {}
    before = ops.settings  # Restored after: the problems run under the run's settings (--tolerance's fp8).
    for variants in (("torch",), ("triton",)):
        ops.configure(db=str(out / "stores" / "dispatch.db"), variants=variants, max_evals=8)
        ops.softmax(x)
        for name, fn in (("ops", lambda: ops.softmax(x)), ("torch", lambda: torch.softmax(x, -1))):
            fn()
            if DEVICE == "cuda":
                torch.cuda.synchronize()
            row[f"{variants[0]}-served {name} us"] = min(timeit.repeat(fn, number=2000, repeat=3)) / 2000 * 1e6
    ops.configure(variants=before.variants, max_evals=before.max_evals, db=before.db)
    return row


def _best_tuned(kernel, shape: dict, dtype: str, db: Path, device: str) -> dict | None:
    """The tuned session's best config, read back from the problem's store (the fastest ok row)."""
    from dr_kernel.session import builtin_problem
    from dr_kernel.store import open_store

    problem = builtin_problem(kernel, shape, dtype, device)
    rows = [(m["ms"], c) for c, m in open_store(db).rows(problem) if m["status"] == "ok" and m.get("ms")]
    return min(rows, key=lambda r: r[0])[1] if rows else None


def report(out: Path) -> str:
    """The markdown tables of a run's rows: per problem, and per family (geometric means)."""
    rows = [json.loads(p.read_text()) for p in sorted(out.glob("*.json")) if p.name != "dispatch.json"]

    def geomean(xs):
        return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else math.nan

    # Two counts of the Triton kernel alone against torch: do_bench of the call as dr_kernel.ops
    # makes it (a problem of tens of microseconds is then the host's time, which varies between
    # machines), and the race's GPU time (L2 flushed, the host's launch hidden): the kernels'.
    lines = ["| problem | served by | evals | first call s | torch ms | Triton alone ms | ops ms "
             "| Triton / torch speed | the same, GPU time | ops / torch speed | ops, fraction of peak |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    summary = ["| family | problems | Triton alone / torch, geomean | min | below 0.8× "
               "| the same by GPU time | min | below 0.8× | served by Triton "
               "| ops / torch, geomean | min | fraction of peak, median: torch / Triton / ops "
               "| first call s, median | max |",
               "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def gpu(r):  # The race's GPU-time ratio, where the race ran.
        triton, torch = r.get("race_triton_ms"), r.get("race_torch_ms")
        return torch / triton if triton and torch else math.nan
    for family in PROBLEMS:
        fam = [r for r in rows if r["family"] == family and "ms" in r]
        if not fam:
            continue
        for r in fam:
            ms = r["ms"]
            alone = ms.get("triton", math.nan)
            served = r["variant"] + (" (padded)" if r.get("padded") and r["variant"] == "triton" else "")
            lines.append(f"| {r['problem']} | {served} | {r['evaluations']} | {r['first_call_s']:.1f} | "
                         f"{ms['torch']:.4f} | {alone:.4f} | {ms['ops']:.4f} | {ms['torch'] / alone:.2f} | "
                         f"{gpu(r):.2f} | {ms['torch'] / ms['ops']:.2f} | {r['fraction_of_peak']['ops']:.2f} |")
        alone = [r["ms"]["torch"] / r["ms"]["triton"] for r in fam if "triton" in r["ms"]]
        by_gpu = [x for x in map(gpu, fam) if not math.isnan(x)]

        def peak(who, fam=fam):  # The roofline's verdict (FLOP/s or bytes/s, whichever binds).
            got = sorted(r["fraction_of_peak"][who] for r in fam if who in r["fraction_of_peak"])
            return f"{statistics.median(got):.2f}" if got else "–"
        ops = [r["ms"]["torch"] / r["ms"]["ops"] for r in fam]
        first = sorted(r["first_call_s"] for r in fam)
        summary.append(f"| {family} | {len(fam)} | {geomean(alone):.3f} | {min(alone, default=math.nan):.2f} | "
                       f"{sum(x < 0.8 for x in alone)} | {geomean(by_gpu):.3f} | {min(by_gpu, default=math.nan):.2f} | "
                       f"{sum(x < 0.8 for x in by_gpu)} | {sum(r['variant'] == 'triton' for r in fam)} | "
                       f"{geomean(ops):.3f} | {min(ops):.2f} | {peak('torch')} / {peak('triton')} / {peak('ops')} | "
                       f"{first[len(first) // 2]:.1f} | {first[-1]:.1f} |")
    return "\n".join(summary) + "\n\n" + "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--max-evals", type=int, default=50, help="evaluations per problem's tuning (dr_kernel.ops' 50)")
    p.add_argument("--stop", choices=["auto", "budget"], default="auto")
    p.add_argument("--tolerance", type=float, default=None,
                   help="relative error a lower precision may have (matmul's fp8 variant races within it)")
    p.add_argument("--report", action="store_true", help="print the tables of the rows under --out and stop")
    p.add_argument("--families", default=",".join(PROBLEMS))
    p.add_argument("--deadline", type=float, default=math.inf, help="seconds after which no new problem starts")
    p.add_argument("--dispatch", action="store_true", help="also time a decided call's host cost (dispatch.json)")
    p.add_argument("--interpret", action="store_true",
                   help="one tiny problem per family on the CPU in Triton's interpreter (tries the script; no figures)")
    args = p.parse_args()
    if args.report:
        print(report(args.out))
        return 0
    global DEVICE
    TUNING.update(max_evals=args.max_evals, stop=args.stop, tolerance=args.tolerance)
    problems = PROBLEMS
    if args.interpret:
        os.environ["TRITON_INTERPRET"] = "1"
        DEVICE, problems = "cpu", TINY
    started = time.monotonic()
    (args.out / "stores").mkdir(parents=True, exist_ok=True)
    import torch  # noqa: F401 -- before the first ops call, so that the spare measuring process starts at once.
    from dr_kernel.tuner import _prestart_measuring

    _prestart_measuring()
    if args.dispatch:
        row = dispatch(args.out)
        (args.out / "dispatch.json").write_text(json.dumps(row, indent=1))
        print("dispatch:", ", ".join(f"{k} {v:.1f}" for k, v in row.items()), flush=True)
    for family in args.families.split(","):
        for shape, dtype in problems[family]:
            name = name_of(family, shape, dtype)
            path = args.out / f"{name}.json"
            if path.exists():
                continue
            if time.monotonic() - started > args.deadline:
                print(f"{name}: skipped (deadline)", flush=True)
                continue
            try:
                row = run_problem(family, shape, dtype, args.out)
            except Exception as e:  # noqa: BLE001 -- one problem's failure is a row, not the end of the run.
                row = {"family": family, "problem": name, "shape": shape, "dtype": dtype,
                       "error": f"{type(e).__name__}: {e}"}
            path.write_text(json.dumps(row, indent=1))
            ms = row.get("ms", {})
            print(f"{name}: {row.get('variant', row.get('error'))} first {row.get('first_call_s', 0):.1f} s, "
                  f"torch {ms.get('torch', math.nan):.4f} triton {ms.get('triton', math.nan):.4f} "
                  f"ops {ms.get('ops', math.nan):.4f} ms", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("DR_KERNEL_PRESTART", "1")
    sys.exit(main())
