"""A one-element Triton kernel that a spare measuring process launches while it waits for a job.

A process's first Triton launch pays for what every later launch reuses: Triton's CUDA driver
utilities (built with the C compiler into a fresh cache), its backend, the compiler's version
checks, the CUDA context itself. On the H200 machine the first config a tuning session measured
took 0.9-1.3 s to load, after that config's compile, on the first call's critical path; with a
spare that did this ahead (`measure.prestart`, in time the program spends elsewhere), 0.2-0.4 s
(`docs/benchmarks.md`, eighth session of 2026-12-03).
"""

from __future__ import annotations

import os

import triton
import triton.language as tl


@triton.jit
def _increment(x_ptr):
    tl.store(x_ptr, tl.load(x_ptr) + 1)


def warm() -> bool:
    """Creates this process's CUDA context and makes its first Triton launch; returns whether it
    did (not without a GPU, nor under Triton's interpreter). Any failure is left to the job's own
    first launch, which meets it as it would have anyway."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return False
    try:
        import torch

        if not torch.cuda.is_available():
            return False
        x = torch.zeros(1, device="cuda", dtype=torch.int32)
        _increment[(1,)](x)
        torch.cuda.synchronize()
        return int(x.item()) == 1
    except Exception:  # noqa: BLE001 -- only a head start: the job's first launch does the same.
        return False
