"""Progress of long operations (tune, sweep, train, replay, a tuning inside @optimize) on stderr.

A tqdm bar: how much is done, the rate and the time left, and what matters for the operation
(the best time so far, the last config's status). By default it shows only when stderr is a
terminal, so that logs, CI output and pipes stay clean; `enabled=True` (`@optimize(verbose=True)`,
DR_KERNEL_VERBOSE=1) shows it anyway, as plain lines when stderr is not a terminal, and in a
Jupyter kernel as a live view in the cell's output (notebook.py). Without tqdm
installed the bars are left out (tqdm is a dependency of dr_kernel; a GPU machine that cannot
install it still tunes).
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any

VERBOSE_ENV = "DR_KERNEL_VERBOSE"


def verbose_from_env() -> bool:
    """Whether DR_KERNEL_VERBOSE asks for the progress of tunings inside @optimize."""
    return os.environ.get(VERBOSE_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


def _columns(stream: Any) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return 0


class Progress:
    """One bar. `total` is the most steps the operation takes (None: unknown); `unit` names a step.

    update(n, **fields) advances by n and shows the fields after the bar; trial(measurement)
    advances by one measured config and keeps the best time."""

    def __init__(self, total: int | None, desc: str, *, unit: str = "eval", enabled: bool | None = None,
                 stream: Any = None) -> None:
        self.best_ms = math.inf
        self._bar = None  # The tqdm bar, or
        self._view = None  # the live view in a Jupyter cell's output (instead of text on stderr).
        if enabled and stream is None:
            from .notebook import NotebookView, in_notebook

            if in_notebook():
                self._view = NotebookView(total, desc)
                return
        stream = stream or sys.stderr
        tty = bool(getattr(stream, "isatty", lambda: False)())
        if enabled is False or (enabled is None and not tty):
            return
        try:
            from tqdm import tqdm
        except ImportError:
            return
        # Off a terminal (enabled=True into a log): a line at most every 5 s instead of a redrawn bar.
        # A terminal that reports no size (a pseudo-terminal nobody sized) gets 100 × 20: with 0
        # rows tqdm would hide the bar as a nested bar below the screen.
        sized = tty and _columns(stream) > 0
        self._bar = tqdm(total=total, desc=desc, unit=unit, file=stream, dynamic_ncols=sized,
                         ncols=None if sized else 100, nrows=None if sized else 20, leave=True,
                         mininterval=0.1 if tty else 5.0, ascii=not tty)

    @property
    def shown(self) -> bool:
        return self._bar is not None or self._view is not None

    def update(self, n: int = 1, **fields: Any) -> None:
        if self._view is not None:  # It shows its own fields.
            self._view.update(n)
        if self._bar is None:
            return
        if fields:
            self._bar.set_postfix(fields, refresh=False)
        self._bar.update(n)

    def trial(self, measurement: dict, config: dict | None = None) -> None:
        """One measured config: the bar moves on and shows the best time so far and this status."""
        if self._view is not None:
            self._view.trial(measurement, config)
            return
        if measurement.get("status") == "ok" and measurement.get("ms") is not None:
            self.best_ms = min(self.best_ms, float(measurement["ms"]))
        fields = {"best": f"{self.best_ms:.4g} ms" if math.isfinite(self.best_ms) else "-",
                  "last": measurement.get("status", "?")}
        if config is not None:
            fields["config"] = " ".join(f"{k}={v}" for k, v in config.items())
        self.update(1, **fields)

    def set_total(self, total: int) -> None:
        if self._bar is not None:
            self._bar.total = total
            self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        self._bar = self._view = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
