"""Measuring jobs that misbehave on purpose, for tests/test_faults.py. A module of their own: the
measuring process imports it to unpickle the job."""

from __future__ import annotations

import ctypes
import os
import time
from dataclasses import dataclass

from dr_kernel.measure import Job


@dataclass
class FaultyJob(Job):
    """y = 2x for config X; X names a fault: 0-3 are correct (X=0 fastest, each step 2 ms slower),
    "hang" never returns, "segv" and "abort" kill the process, "sticky" raises CUDA's
    illegal-address error at that launch and every later one in the process (what an illegal
    address did to a measuring process on the H200), "nan" writes NaN, "noisy" writes a
    different wrong answer at every launch, "jitter" a different right one (within rounding) at every launch."""

    n: int = 4096

    def setup(self, device):
        import torch

        x = torch.randn(self.n, generator=torch.Generator().manual_seed(0))
        return {"x": x, "y": torch.empty_like(x), "launches": 0}

    def launch(self, state, config):
        import torch

        x, y, fault = state["x"], state["y"], config["X"]
        state["launches"] += 1
        if fault == "hang":
            time.sleep(3600)
        elif fault == "segv":
            ctypes.string_at(0)
        elif fault == "abort":
            os.abort()
        elif fault == "sticky" or state.get("sticky"):
            # What an illegal address does to a CUDA context: this launch and every later one fail.
            state["sticky"] = True
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        elif fault == "nan":
            y.fill_(float("nan"))
        elif fault == "noisy":
            y.copy_(2 * x + torch.randn(self.n) * (1 + state["launches"] % 3))
        elif fault == "jitter":
            y.copy_(2 * x * (1 + 1e-6 * (state["launches"] % 5)))
        else:
            time.sleep(0.002 * int(fault))
            y.copy_(2 * x)

    def outputs(self, state):
        return [state["y"]]

    def expected(self, state):
        return [2 * state["x"]]


@dataclass
class SlowJob(FaultyJob):
    """FaultyJob whose configs are named "FAULT-i" (many distinct configs of a few faults), each
    launch `sleep_s` longer: sessions long enough to be killed in the middle."""

    sleep_s: float = 0.04

    def launch(self, state, config):
        time.sleep(self.sleep_s)
        super().launch(state, {"X": config["X"].split("-")[0]})


@dataclass
class DiesInSetup(FaultyJob):
    """FaultyJob whose set-up SIGKILLs its own process: once when `marker` names a file to
    create (the first process dies, the next finds the file), every time when it is empty."""

    marker: str = ""

    def setup(self, device):
        import signal

        if not self.marker or not os.path.exists(self.marker):
            if self.marker:
                open(self.marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return super().setup(device)
