"""A kernel defined in the script being run (__main__), tuned by @optimize on the GPU: it reaches
the measuring process as its source (shipping.py). Prints, as JSON: whether it was measured in a
measuring process, each measured config's first-launch seconds there (small when the compile
pool's binary was found in Triton's cache, a compile's seconds when not) and the result's check.

    PYTHONPATH=python python3 benchmarks/shipped_gpu.py
"""

import json
import time
import warnings

import torch
import triton
import triton.language as tl
from dr_kernel import optimize

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def exp_of(x):
    return tl.exp2(x * LOG2E)


@optimize(space={"BLOCK": [4096, 8192, 16384], "num_warps": [2, 4, 8, 16], "num_stages": [1]},
          key=["n_cols"], max_evals=10, strategy="exhaustive")
@triton.jit
def softmax_rows(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=-float("inf"))
    e = exp_of(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=offs < n_cols)


def main() -> None:
    x = torch.randn(4096, 4000, device="cuda", dtype=torch.float16)
    y = torch.empty_like(x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        softmax_rows[(4096,)](x, y, 4000)
        torch.cuda.synchronize()
        first = time.perf_counter() - start
    session = softmax_rows.last_session
    loads = [round(m.get("load_s", float("nan")), 3) for _, m, _ in session.history if m["status"] == "ok"]
    print(json.dumps({
        "first_call_s": first, "evaluations": session.evaluations, "split_s": session.split_s,
        "measuring_process": softmax_rows._isolated(), "in_process_warning": [str(w.message)[:200] for w in caught
                                                                              if "this process" in str(w.message)],
        "load_s": loads, "best_config": session.best_config,
        "correct": bool(torch.allclose(y.float(), torch.softmax(x.float(), dim=1), atol=2e-3))}))


if __name__ == "__main__":
    main()
