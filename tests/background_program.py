"""A long-running program whose hot key is re-tuned in the background (hot.retune_in_background),
run by tests/test_retune.py in Triton's interpreter. Its key is first tuned with one evaluation
(the smallest block: the slowest config in the interpreter); the program then launches without a
pause for a while (a busy device: nothing may be timed), then pauses (idle: the re-tune runs), and
launches once more. Prints what it saw as JSON.

    background_program.py inprocess|isolate IDLE_S"""

import json
import os
import sys
import time

os.environ["TRITON_INTERPRET"] = "1"

import dr_kernel  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from dr_kernel import _core, optimize  # noqa: E402

ISOLATE = sys.argv[1] == "isolate"
IDLE_S = float(sys.argv[2])


@optimize(space={"BLOCK": [16, 32, 64, 128, 256, 512, 1024]}, key=["n"], max_evals=1, strategy="exhaustive",
          isolate=ISOLATE, static_checks=False)
@triton.jit
def scale(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y + offs, 2.0 * tl.load(x + offs, mask=mask), mask=mask)


n = 4096
x = torch.randn(n)
y = torch.empty_like(x)


def launch() -> dict:
    scale[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
    return dict(scale.best_config.all_kwargs())


first = launch()
store = _core.Store(os.environ["DR_KERNEL_DB"])
rows_before = store.count()
retune = dr_kernel.retune_in_background(top=1, budget=7, min_launches=5, idle_s=IDLE_S, every_s=0.05)
busy_until = time.monotonic() + float(os.environ.get("BUSY_S", "4"))
busy_launches = 0
while time.monotonic() < busy_until:  # Busy: launches back to back, each well under 0.5 s.
    launch()
    busy_launches += 1
busy = {"launches": busy_launches, "results": len(retune.results), "rows_added": store.count() - rows_before}
handled = retune.wait(timeout=240)  # Idle: the program waits, the re-tune times.
after = launch()
assert torch.equal(y, 2 * x)
print(json.dumps({"first": first, "busy": busy, "handled": handled, "after": after, "results": retune.results,
                  "running": retune.running, "notes": retune.notes}))
