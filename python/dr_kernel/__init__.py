"""dr_kernel: an auto-tuner for Triton GPU kernels.

The engine (spaces, environments, strategies, the PPO agent, the cost model, the store) is C++ in
``dr_kernel._core``; this package binds it to Triton, the GPU and the user.
"""

from __future__ import annotations

from pathlib import Path

__version__ = "0.1.0"

# The recorded H200 tables that ship with the package (replay, tests, pre-training data).
DATA_DIR = Path(__file__).resolve().parent / "data"


def bundled_tables() -> list[Path]:
    """Paths of every bundled recorded table, sorted by name."""
    return sorted(DATA_DIR.glob("h200/*.jsonl"))


# The pre-trained agent (policy and cost model) behind the ppo strategy, built by `dr-kernel train`.
AGENT_DIR = DATA_DIR / "agent"
POLICY_FILE = AGENT_DIR / "policy.bin"
MODEL_FILE = AGENT_DIR / "cost_model.bin"


def _load_shipped_agent() -> None:
    from . import _core

    if POLICY_FILE.exists() and not _core.has_agent():
        _core.load_agent(str(POLICY_FILE), str(MODEL_FILE))


_load_shipped_agent()


# The two doors: @optimize (dr_kernel's signature) and autotune (triton.autotune's, for code we did
# not write; install() puts it in triton.autotune's place for the whole process). They import
# Triton, which reads TRITON_INTERPRET when its kernels are decorated: they load on first use, so
# that `import dr_kernel` leaves the variable to be set afterwards (the interpreter's workers do).
_LAZY = {"autotune": "dropin", "optimize": "decorator", "install": "switch", "installed": "switch",
         "kept": "switch", "taken_over": "switch", "uninstall": "switch", "retune": "hot", "hottest": "hot",
         "retune_in_background": "hot", "flush_launch_counts": "hot", "pending_tunings": "tuner"}


def load_ipython_extension(ipython) -> None:
    """`%load_ext dr_kernel` in IPython or Jupyter: the `%%dr_kernel` cell magic (notebook.py)."""
    from .notebook import load_ipython_extension as load

    load(ipython)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'dr_kernel' has no attribute {name!r}")


__all__ = ["DATA_DIR", "autotune", "bundled_tables", "flush_launch_counts", "hottest", "install", "installed", "kept",
           "optimize", "pending_tunings", "retune", "retune_in_background", "taken_over", "uninstall"]
