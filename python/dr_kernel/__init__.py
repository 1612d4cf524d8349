"""dr_kernel: an auto-tuner for Triton GPU kernels.

The engine (spaces, environments, strategies, the PPO agent, the cost model, the store) is C++ in
``dr_kernel._core``; this package binds it to Triton, the GPU and the user.
"""

from __future__ import annotations

import os
from pathlib import Path

__version__ = "0.1.0"

# The recorded tables that ship with the package (replay, tests, pre-training data): data/h200 holds
# the H200's, on which the project's figures are measured; data/h100 problems recorded on an H100
# only (none is an H200 table's twin), more data for training and held-out replays.
DATA_DIR = Path(__file__).resolve().parent / "data"


def bundled_tables(every_device: bool = False) -> list[Path]:
    """Paths of the bundled H200 tables, sorted by name; with `every_device`, the other GPUs' after them."""
    h200 = sorted(DATA_DIR.glob("h200/*.jsonl"))
    if not every_device:
        return h200
    return h200 + sorted(p for p in DATA_DIR.glob("*/*.jsonl") if p.parent.name != "h200")


# The pre-trained agent (policy and cost model) behind the ppo strategy, built by `dr-kernel train`.
# The shipped cost model is kept xz-compressed (cost_model.bin.xz: 1 MB instead of 25; most of it is
# its training rows, which refits need) and unpacked once into the per-user cache.
AGENT_DIR = DATA_DIR / "agent"
POLICY_FILE = AGENT_DIR / "policy.bin"
MODEL_FILE = AGENT_DIR / "cost_model.bin"


def agent_folder() -> Path:
    """The folder of the agent behind the ppo strategy: the one that DR_KERNEL_AGENT names (written by
    `dr-kernel train --out FOLDER`), else the shipped one."""
    return Path(os.environ.get("DR_KERNEL_AGENT") or AGENT_DIR)


def model_file(folder: Path) -> Path | None:
    """The cost model of an agent folder: its cost_model.bin, else its cost_model.bin.xz unpacked
    (once per content) into the per-user cache folder, or the temporary folder when that cannot be
    written; None when the folder has neither."""
    import hashlib
    import lzma
    import tempfile

    plain = folder / MODEL_FILE.name
    if plain.is_file():
        return plain
    packed = folder / (MODEL_FILE.name + ".xz")
    if not packed.is_file():
        return None
    data = packed.read_bytes()
    name = f"agent-{hashlib.sha256(data).hexdigest()[:16]}"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    roots = [cache / "dr_kernel", Path(tempfile.gettempdir())]
    for root in roots:
        if (root / name / MODEL_FILE.name).is_file():
            return root / name / MODEL_FILE.name
    try:
        unpacked = lzma.decompress(data)
    except lzma.LZMAError as e:
        raise ValueError(f"{packed}: not an xz-compressed cost model ({e}); reinstall dr_kernel, or write "
                         "the agent again with `dr-kernel train --out FOLDER`") from None
    for root in roots:
        target = root / name / MODEL_FILE.name
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            # Unpacked beside, then renamed: processes that start together (workers) never read half a file.
            with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as out:
                out.write(unpacked)
            os.replace(out.name, target)
            return target
        except OSError:
            continue
    raise OSError(f"{packed}: could not unpack the cost model into {roots[0]} or {roots[1]}; free some space there "
                  "or set XDG_CACHE_HOME to a writable folder")


def load_agent() -> None:
    """Makes the agent of agent_folder() the ppo strategy's (its policy.bin and cost model)."""
    from . import _core

    folder = agent_folder()
    policy, model = folder / POLICY_FILE.name, model_file(folder)
    if folder != AGENT_DIR and not (policy.is_file() and model is not None):
        raise ImportError(f"DR_KERNEL_AGENT={folder}: the folder needs policy.bin and cost_model.bin (or "
                          "cost_model.bin.xz), as `dr-kernel train --out FOLDER` writes them; train one there, or "
                          "unset the variable to use the shipped agent")
    if policy.exists() and model is not None:
        _core.load_agent(str(policy), str(model))


def _load_shipped_agent() -> None:
    from . import _core

    # Compile and measuring workers (DR_KERNEL_WORKER, set where they start) never ask the agent:
    # loading its cost model would cost each 50-80 ms of its start.
    if not _core.has_agent() and os.environ.get("DR_KERNEL_WORKER") != "1":
        load_agent()


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
