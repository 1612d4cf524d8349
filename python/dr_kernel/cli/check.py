"""`dr-kernel check`: the tuned kernels' times against a committed baseline, for CI (check.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from . import common
from .common import BUDGET, NO_GPU, UsageError, _builtin, _check_range, _parse_shape


def _entry(text: str):
    """--add KERNEL:SHAPE[:PRECISION], e.g. matmul:M=4096,N=4096,K=4096:fp16."""
    from ..check import Entry
    from ..kernels import dtype_name

    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise UsageError(f"--add {text}: give KERNEL:SHAPE[:PRECISION], e.g. matmul:M=4096,N=4096,K=4096:fp16")
    kernel = _builtin(parts[0])
    try:
        shape = _parse_shape(kernel, parts[1])
        precision = dtype_name(parts[2] if len(parts) == 3 else "fp16")
    except (UsageError, ValueError, KeyError) as error:
        raise UsageError(f"--add {text}: {error}") from None
    return Entry(kernel.name, shape, precision)


def cmd_check(args: argparse.Namespace) -> int:
    from ..check import BaselineError, check, merge, read_baseline, table, updated
    from ..store import open_store

    _check_range(args, budget=BUDGET)
    if args.threshold is not None and not 0 < args.threshold < 10:
        raise UsageError(f"--threshold {args.threshold}: give a fraction above 0 (0.05 is 5 %)")
    if args.add and not args.update:
        raise UsageError("--add puts problems into the baseline: use it with --update")
    if not common._gpu_available() and not args.interpret:
        raise UsageError(NO_GPU)
    try:
        baseline = read_baseline(args.baseline, missing_ok=args.update)
    except BaselineError as error:
        raise UsageError(str(error)) from None
    baseline = merge(baseline, [_entry(text) for text in args.add])
    if not baseline.entries:
        raise UsageError(f"{args.baseline}: no problems to check; add some with --update --add "
                         "KERNEL:SHAPE[:PRECISION]")
    threshold = args.threshold if args.threshold is not None else baseline.threshold
    store = open_store(args.db)
    outcomes = check(baseline, store, interpret=args.interpret, tune=args.tune, budget=args.budget,
                     threshold=threshold)
    if args.json:
        print(json.dumps([o.to_json() for o in outcomes], default=str))
    else:
        print(table(outcomes, threshold))
    if args.update:
        new = updated(baseline, outcomes)
        if args.threshold is not None:
            new.threshold = args.threshold
        new.write()
        if not args.json:
            print(f"wrote {args.baseline}: {sum(e.ms is not None for e in new.entries)} of {len(new.entries)} "
                  "problems with their current winner's time")
        return 0 if all(o.ms is not None for o in outcomes) else 1
    return 1 if any(o.verdict in ("regressed", "failed") for o in outcomes) else 0


def add_parser(sub) -> None:
    p = sub.add_parser("check", help="compare the tuned kernels' times with a committed baseline (a CI gate)",
                       description="Times the current winner of every problem in BASELINE (the store's best "
                                   "config, tuned anew where it has none or with --tune) and compares it with "
                                   "the baseline's time. Exit code 1 when one is slower by more than the "
                                   "threshold or no longer runs, 2 on a usage error, 0 otherwise.")
    p.add_argument("baseline", type=Path, help="the baseline JSON file (written by --update)")
    p.add_argument("--update", action="store_true", help="write the current figures into the baseline")
    p.add_argument("--add", action="append", default=[], metavar="KERNEL:SHAPE[:PRECISION]",
                   help="with --update: a problem to add, e.g. matmul:M=4096,N=4096,K=4096:fp16 (repeatable)")
    p.add_argument("--threshold", type=float, help="a regression is a time above baseline x (1 + this) "
                                                   "(default: the baseline's, else 0.05)")
    p.add_argument("--tune", action="store_true", help="tune every problem anew instead of taking the stored winner")
    p.add_argument("--budget", type=int, default=50, help="evaluations of a tuning (default 50)")
    p.add_argument("--db", type=Path, help="the database file (default: $DR_KERNEL_DB or the per-user cache)")
    p.add_argument("--interpret", action="store_true",
                   help="measure in Triton's interpreter on the CPU (small shapes; CPU times, for testing)")
    p.add_argument("--json", action="store_true", help="print one JSON list, one object per problem")
    p.set_defaults(func=cmd_check)
