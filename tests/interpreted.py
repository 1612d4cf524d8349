"""Runs Python in a child process under Triton's interpreter (TRITON_INTERPRET=1 must be set before
Triton defines its helpers, so a test process that compiles kernels cannot switch to it itself)."""

from __future__ import annotations

import os
import subprocess
import sys

import triton
from dr_kernel.versions import triton_version

# Triton 3.9's interpreter rejects a scalar term in an atomic's mask, which the split-K kernel's
# mask has ("this program has iterations"; 3.6-3.8 and every compiled kernel take it): split-K is
# then checked compiled, not run in the interpreter.
SPLIT_K_INTERPRETS = triton_version(triton.__version__) < (3, 9)


def run_interpreted(args: list[str], cwd=None, timeout: float = 600, env: dict | None = None) -> str:
    """`python ARGS` in a child with the interpreter on, this process's import path and `env` on top
    of its environment; its stdout, after asserting that it exited cleanly (the end of its stderr in
    the failure)."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
           **(env or {})}
    run = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout
