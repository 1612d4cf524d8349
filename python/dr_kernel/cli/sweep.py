"""`dr-kernel sweep`: every config of one problem recorded in the table format (resumable)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..progress import Progress
from . import common
from .common import (
    INTERPRETER_NOTE,
    MAX,
    NO_GPU,
    UsageError,
    _builtin,
    _check_range,
    _check_size,
    _kernel_arguments,
    _parse_shape,
    _parse_space,
)
from .tune_many import engine_arguments


def cmd_sweep(args: argparse.Namespace) -> int:
    from ..kernels import dtype_name
    from ..measure import MeasureSettings, WorkerError
    from ..store import open_store
    from ..sweep import run_sweep

    kernel = _builtin(args.kernel)
    shape = _parse_shape(kernel, args.shape)
    dtype = dtype_name(args.precision)
    space = _parse_space(kernel, args.space)
    _check_range(args, limit=(1, MAX), reps=(1, 10**6), workers=(1, 4096), measurers=(1, 4096))
    spread = bool(args.address or args.backend or args.measurers)  # On the measuring workers of tune-many.
    if not spread and not common._gpu_available() and not args.interpret:
        raise UsageError(NO_GPU)
    _check_size(kernel, shape, dtype, args.interpret)
    configs = None
    if space is not None:
        configs = [c for c in space.configs(space.product_size)]
    store = open_store(args.db)
    progress = Progress(None, f"sweep {kernel.name}", unit="config")
    done = [0]

    def show(r) -> None:
        if done[0] == 0:
            progress.set_total(r.total - r.skipped)
        progress.update(r.recorded - done[0], **{s: n for s, n in sorted(r.statuses.items())})
        done[0] = r.recorded

    try:
        if spread:
            from ..tune_many import sweep_many

            result = sweep_many(kernel, shape, dtype, args.out, configs=configs, limit=args.limit,
                                interpret=args.interpret, compile_timeout_s=args.timeout, reps=args.reps, store=store,
                                address=args.address, backend=args.backend or "auto", measurers=args.measurers,
                                progress=show)
        else:
            result = run_sweep(kernel, shape, dtype, args.out, configs=configs, limit=args.limit,
                               interpret=args.interpret, compile_timeout_s=args.timeout, workers=args.workers,
                               settings=MeasureSettings.exact(reps=args.reps), store=store, progress=show)
    except WorkerError as e:
        raise UsageError(f"the measuring worker failed: {e}") from None
    except KeyboardInterrupt:
        progress.close()
        print(f"interrupted: the rows measured so far are in {args.out}; run the same command again to go on",
              file=sys.stderr)
        return 130
    finally:
        progress.close()
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(result.statuses.items())) or "none"
    print(f"{args.out}: {result.recorded} new rows ({statuses}; {result.copied} copied from an identical binary), "
          f"{result.skipped} of {result.total} configs already recorded; {result.wall_s:.1f} s")
    if args.interpret:
        print(f"note: {INTERPRETER_NOTE}")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("sweep", help="record every config of a built-in kernel on one problem (resumable)")
    _kernel_arguments(p)
    p.add_argument("--out", type=Path, required=True, help="the JSON-lines file to append rows to")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one compile may take (default 300)")
    p.add_argument("--space", help="JSON object of value lists replacing the kernel's space")
    p.add_argument("--limit", type=int, help="record only the first N configs of the space")
    p.add_argument("--db", type=Path, help="the results store (default: $DR_KERNEL_DB or the per-user cache)")
    p.add_argument("--workers", type=int, help="compile processes (default: one per CPU core)")
    p.add_argument("--reps", type=int, default=20,
                   help="timed launches per config at most (default 20; fewer once a config is 1.3x slower than "
                        "the best, or its launches add up to 50 ms)")
    p.add_argument("--interpret", action="store_true",
                   help="measure in Triton's interpreter on the CPU (small shapes; not GPU times)")
    engine_arguments(p)  # Any of them: the configs are recorded in chunks by tune-many's measuring workers.
    p.set_defaults(func=cmd_sweep)
