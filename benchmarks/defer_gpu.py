"""Deferred tuning on the GPU, end to end, with a kernel of a space and one of a list.

    DR_KERNEL_DB=/tmp/defer.db python3 benchmarks/defer_gpu.py > defer.json

Three cases, each in this one fresh process (its own Triton cache and store from the caller):
- `space`: @optimize(space=..., defer=True) (measured in a measuring process where the kernel can
  go: this script's kernels travel as their source): the first call launches the cost model's
  pick, later calls tune once the predicted configs have compiled;
- `list`: dr_kernel.autotune(configs=..., defer=True), measured in this process;
- `held`: @optimize without defer on a call whose output already holds the result (the buffer of
  a loop): the outputs must still be found, and the configs checked.
Every call's output is checked against torch. Prints one JSON object. Without a GPU it runs small
in Triton's interpreter (TRITON_INTERPRET=1), to try the script itself.
"""

from __future__ import annotations

import json
import time

import dr_kernel
import torch
import triton
import triton.language as tl
from dr_kernel import optimize

GPU = torch.cuda.is_available()
ROWS, COLS = (8192, 4096) if GPU else (64, 256)
BLOCKS = [COLS, 2 * COLS]
SPACE = {"BLOCK": BLOCKS, "num_warps": [1, 2, 4, 8, 16], "num_stages": [1, 2, 3]}


def _softmax(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * stride + offs, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, 0))
    tl.store(y_ptr + row * stride + offs, (e / tl.sum(e, 0)).to(y_ptr.dtype.element_ty), mask=mask)


space_softmax = optimize(max_evals=20, key=["n_cols"], space=SPACE, defer=True)(triton.jit(_softmax))
list_softmax = dr_kernel.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in BLOCKS
                                           for w in (2, 4, 8, 16)], key=["n_cols"], defer=True)(triton.jit(_softmax))
# Another space than the first's, so that its winner is not the one stored for that space.
held_softmax = optimize(max_evals=6, key=["n_cols"], space={"BLOCK": BLOCKS, "num_warps": [2, 4, 8]},
                        isolate=False)(triton.jit(_softmax))


def synchronize() -> None:
    if GPU:
        torch.cuda.synchronize()


def run_deferred(kernel, x, y, ref) -> dict:
    def call() -> bool:
        kernel[(ROWS,)](x, y, COLS, x.stride(0))
        synchronize()
        return bool(torch.allclose(y.float(), ref, atol=2e-3))

    y.zero_()
    start = time.perf_counter()
    right = call()
    first_s = time.perf_counter() - start
    first = {"first_s": first_s, "right": right, "pending": len(kernel.pending()),
             "config": str(kernel.best_config)}
    calls, steps = 1, []
    start = time.perf_counter()
    while kernel.pending() and time.perf_counter() - start < 120:
        y.zero_()
        t = time.perf_counter()
        right = call() and right
        steps.append(time.perf_counter() - t)
        calls += 1
    session = kernel.last_session
    return {**first, "calls": calls, "settle_s": time.perf_counter() - start, "slowest_call_s": max(steps, default=0),
            "all_right": right, "pending_after": len(kernel.pending()), "evaluations": kernel.evaluations,
            "statuses": session.statuses() if session else None,
            "compile_wait_s": session.split_s.get("compile") if session else None,
            "winner": str(kernel.best_config), "notes": kernel.notes[:3]}


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(ROWS, COLS, device="cuda" if GPU else "cpu", dtype=torch.float16)
    y = torch.empty_like(x)
    ref = torch.softmax(x.float(), -1)
    out = {"space": run_deferred(space_softmax, x, y, ref), "list": run_deferred(list_softmax, x, y, ref)}
    y.copy_(ref.half())  # The result is there already.
    held_softmax[(ROWS,)](x, y, COLS, x.stride(0))
    synchronize()
    session = held_softmax.last_session
    out["held"] = {"statuses": session.statuses(), "right": bool(torch.allclose(y.float(), ref, atol=2e-3)),
                   "winner": str(held_softmax.best_config)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
