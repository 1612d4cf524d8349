"""@optimize(profile=True) on the GPU: a kernel of the script being run (__main__, so its launch
reaches ncu's program as its source, as it reaches a measuring process), tuned on its first call,
then the winner's counters read by Nsight Compute. Prints, as JSON: the first call's seconds, what
the profiling took (`phases_s["profile"]`), the winner, its counters and every warning.

    PYTHONPATH=python python3 benchmarks/optimize_profile_gpu.py
"""

import json
import time
import warnings

import torch
import triton
import triton.language as tl
from dr_kernel import optimize


@optimize(space={"BLOCK": [4096, 8192], "num_warps": [4, 8, 16], "num_stages": [1]}, key=["n_cols"], max_evals=6,
          strategy="exhaustive", profile=True)
@triton.jit
def profiled_softmax(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=offs < n_cols)


def main() -> None:
    x = torch.randn(8192, 4000, device="cuda", dtype=torch.float16)
    y = torch.empty_like(x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        profiled_softmax[(8192,)](x, y, 4000)
        torch.cuda.synchronize()
        first = time.perf_counter() - start
    print(json.dumps({
        "first_call_s": first, "profile_s": profiled_softmax.phases_s.get("profile"),
        "best_config": profiled_softmax.last_session.best_config,
        "counters": {str(k): v for k, v in profiled_softmax.counters.items()},
        "warnings": [str(w.message)[:400] for w in caught],
        "correct": bool(torch.allclose(y.float(), torch.softmax(x.float(), dim=1), atol=2e-3))}, default=str))


if __name__ == "__main__":
    main()
