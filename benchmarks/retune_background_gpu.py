"""The background re-tune (dr_kernel.retune_in_background) on a GPU: a long-running program, as a
server is, whose hot key was tuned on its first call with a budget far too small, re-tunes that key
from a thread of its own while the GPU is idle, and launches the faster winner from then on.

    DR_KERNEL_DB=bg.db python3 benchmarks/retune_background_gpu.py

The kernel and key are benchmarks/retune_gpu.py's (the built-in matmul as a user decorates it,
4096^3 fp16, its first tuning one evaluation of the smallest tiles). Phases: 2,000 launches
back to back (a busy GPU: the re-tune must time nothing, the store's row count says whether it
did); then requests, a burst of 20 launches every `gap` seconds (the idle gaps the re-tune times
in), until the re-tune has handled the key or 240 s passed; then the launched config's kernel time
(CUDA events, median of 50). Prints one JSON line.
"""

import json
import os
import sys
import time

# retune_gpu.py's kernel and key, its first tuning one evaluation of the smallest tiles.
os.environ["RETUNE_FIRST_EVALS"], os.environ["RETUNE_FIRST_STRATEGY"] = "1", "exhaustive"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dr_kernel  # noqa: E402
import torch  # noqa: E402
from dr_kernel import _core  # noqa: E402
from retune_gpu import kernel_ms, launch, launched_config, matmul  # noqa: E402

GAP_S = float(os.environ.get("RETUNE_GAP_S", "1.0"))


torch.manual_seed(0)
n = 4096
a, b = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(2))
c = torch.empty(n, n, device="cuda", dtype=torch.float16)
started = time.perf_counter()
launch(a, b, c)  # The first call: tuned with one evaluation.
torch.cuda.synchronize()
out = {"first_call_s": time.perf_counter() - started, "first": {"config": launched_config(), "ms": kernel_ms(a, b, c)}}
# The exhaustive order only made the first tuning's one evaluation a poor config; the re-tune
# searches as a user's kernel would, with the default strategy (else it walks the smallest tiles).
matmul.strategy = "ppo"
store = _core.Store(os.environ["DR_KERNEL_DB"])
retune = dr_kernel.retune_in_background(top=1, budget=40, min_launches=100, idle_s=0.2, every_s=1.0)
rows = store.count()
busy_started = time.perf_counter()
for _ in range(2000):  # Busy: about 3 s of kernels queued back to back.
    launch(a, b, c)
torch.cuda.synchronize()
out["busy"] = {"launches": 2000, "s": time.perf_counter() - busy_started, "rows_added": store.count() - rows,
               "results": len(retune.results)}
requests, idle_started = 0, time.perf_counter()
while not retune.wait(timeout=GAP_S) and time.perf_counter() - idle_started < 240:
    for _ in range(20):
        launch(a, b, c)
    torch.cuda.synchronize()
    requests += 1
out["idle"] = {"requests": requests, "gap_s": GAP_S, "s_to_handled": time.perf_counter() - idle_started,
               "handled": bool(retune.results), "disturbed_batches": retune.disturbed}
torch.cuda.synchronize()
assert torch.allclose(c.float(), a.float() @ b.float(), atol=0.5, rtol=0.02), "wrong product"
after_ms = kernel_ms(a, b, c)  # Launches first: best_config is the config of the last launch.
out["after"] = {"config": launched_config(), "ms": after_ms}
out["results"], out["notes"] = retune.results, retune.notes
print(json.dumps(out))
