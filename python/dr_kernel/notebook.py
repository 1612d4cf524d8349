"""dr_kernel in Jupyter: a live view of each tuning, and the `%%dr_kernel` cell magic.

    %load_ext dr_kernel

    %%dr_kernel --budget 40
    @triton.autotune(configs=[...], key=["n"])     # tuned by dr_kernel in this cell
    @triton.jit
    def kernel(...): ...
    kernel[grid](...)                              # its tuning shows live, then a table

In a cell run under `%%dr_kernel`, `triton.autotune` is dr_kernel's drop-in (install()), measuring
in a measuring process wherever the kernel can be sent there (its source: a notebook's kernels are
no module's) and it has no hooks (`--in-process` measures in the notebook's process, as
triton.autotune does); every tuning the cell starts shows a live view (the best time against
evaluations, the config being measured); after the cell, each kernel the cell tuned shows its last
session as a table. Outside the magic, `@optimize(verbose=True)` shows the same live view in a
notebook. A session's `.plot()` draws its curve with matplotlib; a session displays as a table
(`_repr_html_`).
"""

from __future__ import annotations

import argparse
import html
import math
import shlex
from typing import Any


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (an IPython shell that displays rich output)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def _sparkline(values: list[float], width: int = 240, height: int = 60) -> str:
    """An inline SVG of best-so-far times against evaluations (no plotting library: it is redrawn
    after every measurement)."""
    finite = [v for v in values if math.isfinite(v)]
    if len(finite) < 1:
        return ""
    lo, hi = min(finite), max(finite)
    span = hi - lo or 1.0
    n = max(len(values) - 1, 1)
    points = " ".join(f"{i * width / n:.1f},{height - 4 - (v - lo) / span * (height - 8):.1f}"
                      for i, v in enumerate(values) if math.isfinite(v))
    return (f"<svg width='{width}' height='{height}' style='background:#fafafa;border:1px solid #ddd'>"
            f"<polyline fill='none' stroke='#1f77b4' stroke-width='2' points='{points}'/></svg>")


class NotebookView:
    """The live view of one tuning in a notebook: one display area, updated after every measurement."""

    def __init__(self, total: int | None, desc: str) -> None:
        from IPython.display import HTML, display

        self._html = HTML
        self.total, self.desc = total, desc
        self.done, self.best_ms, self.curve = 0, math.inf, []
        self.last: tuple[dict | None, str] = (None, "")
        self._handle = display(HTML(self._render()), display_id=True)

    def _render(self) -> str:
        best = f"{self.best_ms:.4g} ms" if math.isfinite(self.best_ms) else "-"
        config, status = self.last
        current = html.escape(" ".join(f"{k}={v}" for k, v in (config or {}).items()))
        total = f"/{self.total}" if self.total else ""
        return (f"<div class='dr-kernel-live'><b>{html.escape(self.desc)}</b>: {self.done}{total} evaluations, "
                f"best {best}<br>{_sparkline(self.curve)}<br><code>{current}</code> {html.escape(status)}</div>")

    def update(self, n: int = 1, **fields: Any) -> None:
        self.done += n
        self._handle.update(self._html(self._render()))

    def trial(self, measurement: dict, config: dict | None = None) -> None:
        if measurement.get("status") == "ok" and measurement.get("ms") is not None:
            self.best_ms = min(self.best_ms, float(measurement["ms"]))
        self.curve.append(self.best_ms)
        self.last = (config, measurement.get("status", ""))
        self.update(1)


# ----- the cell magic ---------------------------------------------------------------------------------

def _magic_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="%%dr_kernel", add_help=False)
    p.add_argument("--budget", type=int, help="evaluations per key (default: dr_kernel's choice for the list)")
    p.add_argument("--widen", action="store_true", help="search beyond each list (install(widen=True))")
    p.add_argument("--strategy", default="ppo")
    p.add_argument("--in-process", action="store_true",
                   help="measure in the notebook's kernel process, as triton.autotune does (default: in a "
                        "measuring process wherever the kernel can be sent there, so that a config that "
                        "crashes the GPU context does not take the notebook's kernel with it)")
    return p


def dr_kernel_magic(line: str, cell: str) -> None:
    """Runs the cell with triton.autotune replaced by dr_kernel's and each tuning shown live; then
    shows what the cell's kernels tuned."""
    import os

    from IPython import get_ipython
    from IPython.display import HTML, display

    from . import switch
    from .tuner import TunedKernel

    try:
        args = _magic_parser().parse_args(shlex.split(line))
    except SystemExit:
        display(HTML(f"<pre>%%dr_kernel: {html.escape(line)}: give --budget N, --widen, --strategy NAME, "
                     "--in-process</pre>"))
        return
    shell = get_ipython()
    before = {id(v) for v in shell.user_ns.values()}
    was_installed = switch.is_installed()
    old_verbose = os.environ.get("DR_KERNEL_VERBOSE")
    os.environ["DR_KERNEL_VERBOSE"] = "1"
    if not was_installed:
        switch.install(widen=args.widen, max_evals=args.budget, strategy=args.strategy,
                       isolate=False if args.in_process else None)
    try:
        shell.run_cell(cell)
    finally:
        if not was_installed:
            switch.uninstall()
        if old_verbose is None:
            os.environ.pop("DR_KERNEL_VERBOSE", None)
        else:
            os.environ["DR_KERNEL_VERBOSE"] = old_verbose
    def tuned_kernel(value):
        # @triton.heuristics above the autotune wraps it: the TunedKernel is down the `.fn` chain.
        for _ in range(4):
            if isinstance(value, TunedKernel):
                return value
            value = getattr(value, "fn", None)
        return None

    tuned = [(name, tuned_kernel(v)) for name, v in shell.user_ns.items() if id(v) not in before]
    tuned = [(name, k) for name, k in tuned if k is not None and k.last_session is not None]
    for name, kernel in tuned:
        display(HTML(f"<h4>{html.escape(name)}</h4>{kernel.last_session._repr_html_()}"))


def load_ipython_extension(ipython) -> None:
    """`%load_ext dr_kernel`: registers the `%%dr_kernel` cell magic."""
    ipython.register_magic_function(dr_kernel_magic, magic_kind="cell", magic_name="dr_kernel")
