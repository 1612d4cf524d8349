"""Nsight Compute counters of two configs of each of the four first built-in kernels (issue 12):
a good config and a poor one on the kernel's first recorded shape, fp16, on the visible GPU.

    python3 benchmarks/ncu_builtins.py --out OUT     # OUT/ncu.json, and each raw report OUT/<kernel>-<i>.csv
"""

import argparse
import json
import os
import time

from dr_kernel.kernels import get
from dr_kernel.profiling import ProfileError, find_ncu, profile

CONFIGS = {
    "matmul": [{"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3},
               {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 2, "num_stages": 2}],
    "softmax": [{"BLOCK": 4096, "num_warps": 8, "num_stages": 1}, {"BLOCK": 4096, "num_warps": 1, "num_stages": 4}],
    "attention": [{"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
                  {"BLOCK_M": 32, "BLOCK_N": 16, "num_warps": 2, "num_stages": 1}],
    "rmsnorm": [{"BLOCK": 4096, "num_warps": 8, "num_stages": 1}, {"BLOCK": 4096, "num_warps": 1, "num_stages": 4}],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    print("ncu:", find_ncu(), flush=True)
    rows = []
    for name, configs in CONFIGS.items():
        kernel = get(name)
        shape = dict(kernel.shapes[0])
        for i, config in enumerate(configs):
            start = time.perf_counter()
            try:
                result = profile(name, shape, "fp16", config, keep_report=os.path.join(args.out, f"{name}-{i}.csv"))
            except ProfileError as error:
                result = {"error": str(error)}
            row = {"kernel": name, "shape": shape, "config": config, "profile_s": round(time.perf_counter() - start, 1),
                   **result}
            print(json.dumps(row), flush=True)
            rows.append(row)
    with open(os.path.join(args.out, "ncu.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
