"""A real program's kernels collected, tuned with tune-many and timed: the step time of a small
transformer block's forward and backward (benchmarks/tune_many_block.py, every kernel a built-in
one under @optimize) with each kernel's default config, then with the winners tune-many stored.

    python benchmarks/tune_many_gpu.py --out benchmarks/results/tune-many-h200
    python benchmarks/tune_many_gpu.py --out /tmp/tm --interpret --tokens 32 --dim 64 --heads 2 --ffn 96 --vocab 200

Steps, each in a process of its own, into --out: the step time with each kernel's first config
(what a program without a tuner launches) and with PyTorch's operators; `dr-kernel collect` of a
run of the program (nothing tuned); `dr-kernel tune-many` of the work list (with cross-entropy's
targets rebuilt valid by tune_many_block.valid_inputs; on --address's Ray cluster, or this
machine's GPUs); the step time again, launching the stored winners. Writes tune_many_gpu.json
(and keeps work.jsonl and results.db, so that a second run resumes and measures nothing new).
--interpret runs the same at toy sizes in Triton's interpreter (its times are not GPU times).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
COLLECT_ENV = "DR_KERNEL_COLLECT"  # dr_kernel.collect.ENV (not imported: this head never imports dr_kernel).


def run_steps(args: argparse.Namespace) -> dict:
    """One process's steps (--run MODE): the median step time per token count, and how many configs
    the program's kernels measured (0 once every key is stored)."""
    import torch

    sys.path.insert(0, str(HERE))
    import tune_many_block as block

    device = "cpu" if args.interpret else "cuda"
    dtype = torch.float32 if args.interpret else torch.bfloat16
    model = block.Block(args.dim, args.heads, args.ffn, args.vocab, device, dtype)
    out = {"mode": block.MODE, "device": "cpu (Triton interpreter)" if args.interpret else
           torch.cuda.get_device_name(0), "tokens": {}}
    for tokens in args.tokens:
        x, target = block.batch(tokens, args.dim, args.vocab, device, dtype)
        times = []
        for i in range(args.warmup + args.steps):
            if device == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
            loss = model.step(x, target)
            if device == "cuda":
                torch.cuda.synchronize()
            if i >= args.warmup:
                times.append((time.perf_counter() - started) * 1e3)
        out["tokens"][str(tokens)] = {"step_ms": statistics.median(times), "loss": float(loss)}
    kernels = [block.matmul_kernel, block.rmsnorm_kernel, block.attention_kernel, block.swiglu_kernel,
               block.cross_entropy_kernel]
    out["evaluations"] = sum(k.evaluations for k in kernels)
    out["tuning_s"] = sum(k.tuning_s for k in kernels)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="the folder to write tune_many_gpu.json, work.jsonl and results.db to")
    p.add_argument("--tokens", type=lambda s: [int(t) for t in s.split(",")], default=[2048, 4096],
                   help="token counts per step, comma-separated (default 2048,4096: two sets of keys)")
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--ffn", type=int, default=2816)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--steps", type=int, default=20, help="timed steps per token count (default 20)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--budget", type=int, default=40, help="evaluations per key in tune-many (default 40)")
    p.add_argument("--address", help="a Ray cluster's address for tune-many (default: this machine)")
    p.add_argument("--measurers", type=int, help="tune-many's measuring workers (default: one per GPU)")
    p.add_argument("--tune-seconds", type=float,
                   help="tune-many's --max-seconds: keys not started by then keep their first config in the step "
                        "after (a second run with the same --out tunes them)")
    p.add_argument("--interpret", action="store_true", help="Triton's interpreter on the CPU, at toy sizes")
    p.add_argument("--run", choices=["default", "torch", "tuned"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.run:
        print(json.dumps(run_steps(args)))
        return 0
    if args.out is None:
        p.error("--out is required")
    args.out.mkdir(parents=True, exist_ok=True)
    db, work = args.out / "results.db", args.out / "work.jsonl"
    env = dict(os.environ, DR_KERNEL_DB=str(db), TUNE_MANY_BLOCK_BUDGET=str(args.budget),
               PYTHONPATH=os.pathsep.join([str(HERE), *filter(None, os.environ.get("PYTHONPATH", "").split(":"))]))
    if args.interpret:
        env["TRITON_INTERPRET"] = "1"
    shape = ["--tokens", ",".join(map(str, args.tokens)), "--dim", str(args.dim), "--heads", str(args.heads),
             "--ffn", str(args.ffn), "--vocab", str(args.vocab), *(["--interpret"] if args.interpret else [])]
    me = [sys.executable, str(Path(__file__).resolve()), *shape]
    result: dict = {"shape": {"tokens": args.tokens, "dim": args.dim, "heads": args.heads, "ffn": args.ffn,
                              "vocab": args.vocab}, "budget": args.budget, "interpreted": args.interpret}

    def steps(mode: str, collect: str | None = None) -> dict:
        started = time.perf_counter()
        done = subprocess.run([*me, "--run", mode, "--steps", str(args.steps), "--warmup", str(args.warmup)],
                              env={**env, "TUNE_MANY_BLOCK_MODE": mode, **({COLLECT_ENV: collect} if collect else {})},
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"the {mode} run failed:\n{done.stderr[-4000:]}")
        out = json.loads(done.stdout.strip().splitlines()[-1])
        out["process_s"] = time.perf_counter() - started
        print(f"{mode}: {json.dumps(out['tokens'])}", file=sys.stderr)
        return out

    result["default"] = steps("default")
    result["torch"] = steps("torch")
    started = time.perf_counter()
    collect = subprocess.run([sys.executable, "-m", "dr_kernel", "collect", "-o", str(work), "--", *me, "--run",
                              "tuned", "--steps", "1", "--warmup", "0"],
                             env={**env, "TUNE_MANY_BLOCK_MODE": "tuned"}, capture_output=True, text=True)
    if collect.returncode != 0:
        raise SystemExit(f"dr-kernel collect failed:\n{collect.stderr[-4000:]}")
    result["collect"] = {"wall_s": time.perf_counter() - started, "said": collect.stdout.strip().splitlines()[-1]}
    print(result["collect"]["said"], file=sys.stderr)
    engine = [*(["--address", args.address] if args.address else []),
              *(["--measurers", str(args.measurers)] if args.measurers else []),
              *(["--max-seconds", str(args.tune_seconds)] if args.tune_seconds else [])]
    started = time.perf_counter()
    tuned = subprocess.run([sys.executable, "-m", "dr_kernel", "tune-many", str(work), "--db", str(db), "--json",
                            "--budget", str(args.budget), "--inputs", "tune_many_block:valid_inputs", *engine],
                           env=env, capture_output=True, text=True)
    if tuned.returncode not in (0, 1):
        print(tuned.stderr[-4000:], file=sys.stderr)
        raise SystemExit(f"tune-many exited with status {tuned.returncode}")
    result["tune_many"] = {**json.loads(tuned.stdout.strip().splitlines()[-1]),
                           "process_s": time.perf_counter() - started,
                           # tune-many's line per key: "[n] label: E evaluations, best T ms (W s)" or "failed: why".
                           "per_key": [line for line in tuned.stderr.splitlines() if line.startswith("[")]}
    print(f"tune-many: {json.dumps(result['tune_many'])}", file=sys.stderr)
    # Keys left by --tune-seconds launch their first config, untuned: the after step runs in
    # collect mode (stored winners, else the first config; nothing tuned), into a scratch list.
    left = result["tune_many"].get("left") or []
    result["keys_left_untuned"] = left
    result["after"] = steps("tuned", collect=str(args.out / "after.jsonl") if left else None)
    result["speedup_over_default"] = {t: result["default"]["tokens"][t]["step_ms"] / a["step_ms"]
                                      for t, a in result["after"]["tokens"].items()}
    result["speedup_over_torch"] = {t: result["torch"]["tokens"][t]["step_ms"] / a["step_ms"]
                                    for t, a in result["after"]["tokens"].items()}
    (args.out / "tune_many_gpu.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("speedup_over_default", "speedup_over_torch")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
