"""What the Gluon probes (gluon_attention_probe.py, gluon_matmul_probe.py) share: timing, the
per-config check-and-time loop, the rows' file and summary, and the command line (--out on a
GPU, --compile-only anywhere, --problems N for a smoke run)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))


def do_bench_ms(fn: Callable[[], object]) -> float:
    """Median ms of fn's launches over 100 ms, the L2 cleared before each (triton.testing.do_bench)."""
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


# The Gluon GEMM has 12 warps (a consumer warpgroup of 4, the load warp's group, a second consumer
# of 4): 65,536 registers / 384 threads = 170 a thread, so at most 168 (what Triton sets itself
# for 12 warps); the load warp takes 24 and the second consumer 240, the default partition what
# is left (240).
MAXNREG = 168


def compile_for_sm90(kernel, signature: dict[str, str], constexprs: dict[str, object]):
    """Compiles a Gluon kernel for sm_90 without a GPU (ptxas from Triton's wheel), 4 warps in its
    default partition, as a tuning's compile stage does (analysis.compile_kernel)."""
    from dr_kernel.analysis import H200, compile_kernel

    compiled, _ = compile_kernel(kernel, signature, constexprs, {}, {"num_warps": 4, "maxnreg": MAXNREG}, H200)
    return compiled


def check_and_time(row: dict, configs: Sequence[dict], run: Callable[[dict], None], error_of: Callable[[], float],
                   tolerance: float, flops: float, reference_ms: float) -> None:
    """Appends one entry a config to row["configs"]: its first launch, its error against the
    reference (error_of(), after run(config) wrote the output) and, if within `tolerance`, its
    time, TFLOP/s and the reference's time over it. A config that fails is an entry, not the end."""
    import torch

    for config in configs:
        entry = dict(config)
        try:
            print("launching", row["problem"], config, flush=True)  # A pipeline that deadlocks hangs here.
            started = time.perf_counter()
            run(config)
            torch.cuda.synchronize()
            entry["first_launch_s"] = time.perf_counter() - started
            entry["error"] = error_of()
            entry["correct"] = bool(entry["error"] <= tolerance)
            if entry["correct"]:
                entry["ms"] = do_bench_ms(lambda config=config: run(config))
                entry["tflops"] = flops / entry["ms"] / 1e9
                entry["speedup"] = reference_ms / entry["ms"]
        except Exception as error:  # noqa: BLE001 - a config that fails is a row, not the end of the probe.
            entry["failed"] = f"{type(error).__name__}: {str(error)[:300]}"
        row["configs"].append(entry)
        print(row["problem"], entry, flush=True)


def builtin_best_ms(family: str, inputs: dict, configs: Sequence[dict]) -> float:
    """The best time of a built-in kernel over a few configs (a config that fails is skipped)."""
    from dr_kernel.kernels import get

    kernel, best = get(family), float("inf")
    for config in configs:
        try:
            kernel.launch(inputs, config)
            best = min(best, do_bench_ms(lambda config=config: kernel.launch(inputs, config)))
        except Exception as error:  # noqa: BLE001
            print(family, config, error, flush=True)
    return best


def main(doc: str, out_name: str, problems: Sequence[tuple], measure_problem: Callable[..., dict],
         compile_report: Callable[[], None], reference: str) -> None:
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help=f"folder for {out_name} (on a GPU)")
    parser.add_argument("--compile-only", action="store_true", help="compile every config for sm_90 and report")
    parser.add_argument("--problems", type=int, default=len(problems),
                        help="measure the first this many problems (1: a smoke test before the whole run)")
    args = parser.parse_args()
    if args.compile_only:
        compile_report()
        return
    if args.out is None:
        parser.error("--out DIR is needed to measure (on a GPU), or --compile-only")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for problem in problems[:args.problems]:
        rows.append(measure_problem(*problem))
        (args.out / out_name).write_text(json.dumps(rows, indent=1))
    for row in rows:
        ok = [c for c in row["configs"] if "ms" in c]
        if not ok:
            print(f"{row['problem']}: no config ran correctly")
            continue
        best = min(ok, key=lambda c: c["ms"])
        print(f"{row['problem']}: {reference} {row['reference_ms']:.4f} ms, built-in {row['builtin_best_ms']:.4f}, "
              f"gluon {best['ms']:.4f} ({best}): {best['speedup']:.3f}x {reference}")
