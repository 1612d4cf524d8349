"""`dr-kernel retune` end to end on a GPU: a program with one hot and one cold key of a tuned
matmul, tuned on its first run with a tiny budget, re-tuned with a larger one in a run of the
program, and run once more to show that a new process launches the re-tuned winner.

    DR_KERNEL_DB=run.db RETUNE_FIRST_EVALS=1 RETUNE_FIRST_STRATEGY=exhaustive python3 benchmarks/retune_gpu.py
    dr-kernel retune --top 1 --budget 40 --db run.db -- python3 benchmarks/retune_gpu.py
    DR_KERNEL_DB=run.db python3 benchmarks/retune_gpu.py                          # picks it up

The first run stands for a first call whose budget was far too small: one evaluation, of the
space's first config (exhaustive order: the smallest tiles). The kernel is the built-in matmul's
(its tuning space, its parameter names) decorated as a user would decorate their own; the hot key
(4096^3, fp16) is launched 200 times, the cold one (1024^3) 10 times. Prints one JSON line: each
key's launched config and the hot key's kernel time (CUDA events, median of 50 launches).
"""

import json
import os
import statistics

import torch
import triton
from dr_kernel import optimize
from dr_kernel.kernels import get
from dr_kernel.kernels.matmul import matmul_kernel

# The built-in space less what selects another kernel or launch (SPLIT_K, TMA): only the parameters
# this one kernel takes, and the launch options.
SPACE = {name: values for name, values in get("matmul").space.items()
         if name in matmul_kernel.arg_names or name in ("num_warps", "num_stages")}
matmul = optimize(space=SPACE, key=["M", "N", "K"], max_evals=int(os.environ.get("RETUNE_FIRST_EVALS", "100")),
                  strategy=os.environ.get("RETUNE_FIRST_STRATEGY", "ppo"), stop="budget")(matmul_kernel)


def launch(a, b, c):
    M, K = a.shape
    N = b.shape[1]
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
    matmul[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))


def launched_config() -> dict:
    config = matmul.best_config
    return dict(config.all_kwargs()) if hasattr(config, "all_kwargs") else dict(config)


def kernel_ms(a, b, c) -> float:
    """The launched config's kernel time: CUDA events, median of 50 launches."""
    samples = []
    for _ in range(50):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch(a, b, c)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)


def run(n: int, times: int) -> dict:
    torch.manual_seed(0)
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    c = torch.empty(n, n, device="cuda", dtype=torch.float16)
    for _ in range(times):
        launch(a, b, c)
    torch.cuda.synchronize()
    assert torch.allclose(c.float(), a.float() @ b.float(), atol=0.5, rtol=0.02), "wrong product"
    return {"config": launched_config(), "ms": kernel_ms(a, b, c)}


if __name__ == "__main__":
    print(json.dumps({"hot": run(4096, 200), "cold": run(1024, 10)}))
