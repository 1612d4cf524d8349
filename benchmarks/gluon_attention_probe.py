"""Issue 11's attention bar (0.9x SDPA) on Hopper: attention's warp-specialised Gluon forward
(`TMA` 3 and 4, python/dr_kernel/kernels/attention_ws.py) on every config of its space, against
SDPA and the refined TMA kernel's usual tiles.

A tuning searches those configs beside the Triton kernels' (attention.py, WS_RULE); this probe
measures all twelve on ten problems, so that the variant's worth does not depend on what a
tuning chose to measure: head dims 64, 128 and 256, causal or not, where the Triton kernels lose
most (0.64-0.85x SDPA on an H100 at head dim 128, 0.83-1.14x at 64:
benchmarks/results/h100-2026-12-06b/ops.log).

    python3 benchmarks/gluon_attention_probe.py --out DIR            # on the GPU: check and time
    python3 benchmarks/gluon_attention_probe.py --compile-only       # anywhere: compile for sm_90

On the GPU every config's output is checked against torch's SDPA in fp32 before it is timed; the
rows (config, ms, TFLOP/s, SDPA's ms, the refined TMA kernel's best ms over its tiles) go to
DIR/gluon_attention.json.
"""

from __future__ import annotations

import math

import gluon_probe
from gluon_probe import builtin_best_ms, check_and_time, do_bench_ms

# attention's warp-specialised configs (WS_RULE): TMA 3, or 4 with FA3's overlap inside each
# warpgroup; 128-row tiles of two warpgroups of 4 warps.
CONFIGS = [{"BLOCK_M": 128, "BLOCK_N": n, "num_warps": 4, "num_stages": s, "TMA": t}
           for t in (3, 4) for n in (64, 128) for s in (2, 3, 4)]


def compile_for_sm90(head_dim: int, block_n: int, stages: int, causal: bool, pipe: bool = False,
                     dtype: str = "fp16", n_ctx: int = 4096):
    """Compiles the kernel for sm_90 without a GPU (ptxas from Triton's wheel), as a tuning's
    compile stage does."""
    from dr_kernel.analysis import H200, compile_kernel
    from dr_kernel.kernels import get

    attention = get("attention")
    shape = {"Z": 1, "H": 8, "N_CTX": n_ctx, "HEAD_DIM": head_dim, "CAUSAL": causal}
    config = {"BLOCK_M": 128, "BLOCK_N": block_n, "num_warps": 4, "num_stages": stages, "TMA": 4 if pipe else 3}
    compiled, _ = compile_kernel(attention.fn_for(config, shape), *attention.compile_source(shape, dtype, config),
                                 {"num_warps": 4, "num_stages": stages}, H200)
    return compiled


PROBLEMS = [  # (Z, H, N_CTX, HEAD_DIM, causal, dtype): the ops set's head-dim-128 and -256 shapes, a few of 64.
    (2, 16, 8192, 128, False, "bf16"), (2, 16, 8192, 128, True, "fp16"), (1, 8, 16384, 128, True, "bf16"),
    (4, 32, 2048, 128, False, "fp16"), (4, 32, 2048, 128, True, "bf16"), (8, 32, 1024, 128, True, "bf16"),
    (4, 32, 4096, 64, False, "fp16"), (4, 32, 4096, 64, True, "bf16"), (1, 32, 4096, 64, True, "fp16"),
    (1, 16, 2048, 256, False, "bf16"),  # Head dim 256: only BLOCK_N 64 with 2 stages fits (197 KB).
]


def measure_problem(Z: int, H: int, N: int, D: int, causal: bool, dtype_name: str) -> dict:
    """SDPA, every Gluon config (checked against SDPA in fp32 first) and the refined TMA kernel's
    best over four usual tiles, on one problem."""
    import torch
    import torch.nn.functional as F
    from dr_kernel.kernels import get

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn((Z, H, N, D), generator=gen, device="cuda", dtype=dtype) for _ in range(3))
    scale = 1.0 / math.sqrt(D)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal, scale=scale)
    sdpa_ms = do_bench_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale))
    row = {"problem": [Z, H, N, D, causal, dtype_name], "reference": "sdpa", "reference_ms": sdpa_ms, "configs": []}
    o = torch.full_like(q, float("nan"))
    attention = get("attention")
    inputs = {"q": q, "k": k, "v": v, "o": o, "causal": causal, "sm_scale": scale}

    def run(config: dict) -> None:
        attention.launch(inputs, config)

    # Error: the largest absolute difference from SDPA in fp32 (outputs are O(1)).
    check_and_time(row, CONFIGS, run, lambda: (o.float() - ref).abs().max().item(), 2e-2,
                   4.0 * Z * H * N * N * D * (0.5 if causal else 1.0), sdpa_ms)
    # The refined TMA kernel (attention's live variant on Hopper) on its usual best tiles.
    row["builtin_best_ms"] = builtin_best_ms("attention", inputs, [
        {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps, "num_stages": stages, "TMA": 2}
        for bm, bn, warps, stages in ((128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 4, 3), (64, 64, 4, 3))])
    return row


def compile_report() -> None:
    from dr_kernel.analysis import binary_resources

    for D in (64, 128, 256):
        for causal in (False, True):
            for config in CONFIGS:
                try:
                    kernel = compile_for_sm90(D, config["BLOCK_N"], config["num_stages"], causal, config["TMA"] == 4)
                    regs, spills = binary_resources(kernel.kernel, kernel.asm.get("ptx"))
                    print(f"HEAD_DIM {D} causal {causal:d} {config}: shared {kernel.metadata.shared} B, "
                          f"{kernel.metadata.num_warps} warps, {regs} registers, {spills} spilled words")
                except Exception as error:  # noqa: BLE001
                    print(D, causal, config, "failed:", type(error).__name__, str(error)[:500])


if __name__ == "__main__":
    gluon_probe.main(__doc__, "gluon_attention.json", PROBLEMS, measure_problem, compile_report, "sdpa")
