"""What a launch of an already-tuned key costs on the CPU, on top of the JIT launch itself:
triton.autotune's dispatch against dr_kernel.autotune's (the key, the config lookup, the launch
count), on one kernel with three tensors and two key arguments. Both wrap the same @triton.jit
function, whose own launch is replaced by a no-op so that only the tuners' share is timed.

    PYTHONPATH=python .venv/bin/python benchmarks/dispatch_bench.py

Prints the median over 15 alternating rounds of 20,000 launches each, in microseconds per launch.
A step of a CPU-bound training loop (FlagGems' ops run at 5 ms of Python per step on the H200)
launches a few tuned kernels: this is what dr_kernel adds to, or takes from, each.
"""

import json
import statistics
import timeit
import warnings

import dr_kernel
import torch
import triton
import triton.language as tl

warnings.simplefilter("ignore")
CONFIGS = [triton.Config({"BLOCK": 128}, num_warps=4), triton.Config({"BLOCK": 256}, num_warps=8)]


def kernel(decorator):
    @decorator(configs=CONFIGS, key=["n", "m"])
    @triton.jit
    def scale(x_ptr, y_ptr, z_ptr, n, m, BLOCK: tl.constexpr):
        pass

    scale.fn.run = lambda *args, **kwargs: None
    return scale


def main() -> None:
    x, y, z = torch.zeros(16), torch.zeros(16), torch.zeros(16)
    kernels = {"triton.autotune": kernel(triton.autotune), "dr_kernel.autotune": kernel(dr_kernel.autotune)}
    for k in kernels.values():  # The key tuned already: its winner in the kernel's cache.
        key = (16, 8, "torch.float32", "torch.float32", "torch.float32")
        k.cache[key] = CONFIGS[0]
    number, rounds = 20_000, 15
    times = {name: [] for name in kernels}
    for _ in range(rounds):
        for name, k in kernels.items():
            launch = lambda k=k: k.run(x, y, z, 16, 8, grid=(1,))  # noqa: E731
            times[name].append(timeit.timeit(launch, number=number) / number * 1e6)
    print(json.dumps({name: round(statistics.median(t), 2) for name, t in times.items()}))


if __name__ == "__main__":
    main()
