"""Issue 9's faults on a real GPU: one `@optimize` tuning whose space holds a config that makes an
illegal address, one that never ends (a kernel spinning on a flag nobody sets), one that writes
NaN, beside correct ones. On the CPU tests/test_faults.py makes the same faults with a killed
process standing in for a CUDA context an illegal address ruins; this runs them for real.

    DR_KERNEL_DB=faults.db python3 benchmarks/gpu_faults.py > faults.json

What must hold (the script asserts it and prints one JSON object): the tuning returns with a
correct winner; each bad config is stored once with a status that says what happened (crashed,
the hang killed at the measuring timeout, wrong); the caller's CUDA context still works (the
winner's launch gives 2x); a second process tuning the same kernel measures nothing.
"""

import json
import os
import sys
import time

import torch
import triton
import triton.language as tl
from dr_kernel import optimize
from dr_kernel.measure import MeasureSettings
from dr_kernel.store import open_store

N = 1 << 20
FAULTS = {0: "correct", 1: "illegal address", 2: "hang", 3: "NaN"}
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # The CPU: Triton's interpreter, for trying the script.


def grid(meta):
    return (triton.cdiv(N, meta["BLOCK"]),)


@optimize(space={"FAULT": list(FAULTS), "BLOCK": [1024]}, key=["n"], max_evals=len(FAULTS), strategy="exhaustive",
          stop="budget", isolate=True, reference=lambda x_ptr, **_: [2 * x_ptr], outputs=["y_ptr"],
          settings=MeasureSettings(reps=5, timeout_s=20, confirm=0))
@triton.jit
def faulty(x_ptr, y_ptr, flag_ptr, n, FAULT: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if FAULT == 1:
        far = offs.to(tl.int64) + (1 << 40)  # 8 TB past the buffer: an illegal address.
        tl.store(y_ptr + far, 2 * x, mask=mask)
    elif FAULT == 2:
        while tl.load(flag_ptr, volatile=True) == 0:  # Nobody sets the flag: the kernel never ends.
            pass
        tl.store(y_ptr + offs, 2 * x, mask=mask)
    elif FAULT == 3:
        tl.store(y_ptr + offs, x * float("nan"), mask=mask)
    else:
        tl.store(y_ptr + offs, 2 * x, mask=mask)


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(N, device=DEVICE)
    y = torch.empty_like(x)
    flag = torch.zeros(1, device=DEVICE, dtype=torch.int32)
    start = time.perf_counter()
    faulty[grid](x, y, flag, N)
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - start
    assert torch.equal(y, 2 * x), "the winner's launch in the caller's process gave a wrong answer"
    config = faulty.best_config
    winner = dict(config.all_kwargs()) if hasattr(config, "all_kwargs") else dict(config)
    store = open_store(os.environ["DR_KERNEL_DB"], read_only=True)
    rows = [(config, measurement) for problem in store.problems() for config, measurement in store.rows(problem)]
    status = {FAULTS[int(c["FAULT"])]: {"status": m.get("status"), "error": str(m.get("error", ""))[:300]}
              for c, m in rows}
    out = {"wall_s": round(wall, 2), "winner": winner, "rows": len(rows), "status": status}
    print(json.dumps(out), flush=True)
    assert winner["FAULT"] == 0, winner
    assert len(rows) == len(FAULTS), rows
    assert status["illegal address"]["status"] != "ok" and status["hang"]["status"] != "ok", status
    assert status["NaN"]["status"] == "wrong", status


if __name__ == "__main__":
    # The measuring process imports the kernel by its module's name, so this file runs as the
    # module gpu_faults (a kernel in __main__ is measured in the tuning process only).
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    os.environ["PYTHONPATH"] = os.pathsep.join([here, *filter(None, [os.environ.get("PYTHONPATH")])])
    import gpu_faults

    sys.exit(gpu_faults.main())
