"""Where a measuring process's start goes (issue 10: an isolated session waits 3.5-5.6 s on it).

    PYTHONPATH=python python3 benchmarks/worker_start_probe.py [--out FILE]

Runs, in fresh interpreters, the steps a measuring worker takes before its first timing, each
timed from the interpreter's start: importing dr_kernel.measure, torch, triton, the built-in
kernels; the CUDA context; the problem's inputs, its reference (cuBLAS for a matmul), the timer's
flush buffer; one config's first launch (its binary loaded from Triton's cache) and its timing.
Then, from a parent, the MeasurePool's start to its first result, as a session sees it. Three
rounds each (the first also pays the disk's cold cache)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

CHILD = r"""
import json, sys, time
t0 = float(sys.argv[1]); marks = {}
def mark(name): marks[name] = time.time() - t0
mark("interpreter")
import dr_kernel.measure as m; mark("import dr_kernel.measure")
import torch; mark("import torch")
import triton; mark("import triton")
from dr_kernel import kernels; mark("import dr_kernel.kernels")
torch.zeros(1, device="cuda"); torch.cuda.synchronize(); mark("CUDA context")
job = m.BuiltinJob("matmul", {"M": 4096, "N": 4096, "K": 4096}, "fp16")
state = job.setup("cuda:0"); torch.cuda.synchronize(); mark("inputs")
ref = job.expected(state); torch.cuda.synchronize(); mark("reference")
timer = m._Timer("cuda:0", 256 << 20); mark("timer")
config = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3, "SPLIT_K": 1}
job.launch(state, config); torch.cuda.synchronize(); mark("first launch (load)")
result, _ = m.measure_config(job, state, config, ref, float("inf"), m.MeasureSettings(), timer)
mark("checked and timed")
print("MARKS " + json.dumps(marks))
"""


def pool_to_first_result() -> dict:
    from dr_kernel.measure import BuiltinJob, MeasurePool

    config = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3,
              "SPLIT_K": 1}
    start = time.perf_counter()
    with MeasurePool(BuiltinJob("matmul", {"M": 4096, "N": 4096, "K": 4096}, "fp16"), ["cuda:0"]) as pool:
        (m, seconds), = pool.measure([config])
        first = time.perf_counter() - start
        (m2, seconds2), = pool.measure([config])
        second = time.perf_counter() - start - first
    return {"first_result_s": first, "its_measure_s": seconds, "next_result_s": second, "status": m["status"]}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out")
    args = p.parse_args()
    env = dict(os.environ, DR_KERNEL_FRESH_WORKERS="1")
    rows = []
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", CHILD, repr(time.time())], capture_output=True, text=True,
                             env=env, timeout=300)
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("MARKS ")), None)
        rows.append(json.loads(line[6:]) if line else {"error": out.stderr[-2000:]})
        print(json.dumps(rows[-1]), flush=True)
    os.environ["DR_KERNEL_FRESH_WORKERS"] = "1"
    pools = [pool_to_first_result() for _ in range(3)]
    for row in pools:
        print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"steps": rows, "pool": pools}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
