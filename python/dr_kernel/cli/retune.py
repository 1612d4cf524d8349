"""`dr-kernel retune`: the hottest stored keys, and re-tuning them in a run of the user's program."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from .common import UsageError, program_argument, program_command


def _fmt_ms(ms: float | None) -> str:
    return f"{ms:.4g} ms" if ms is not None and math.isfinite(ms) else "-"


def cmd_retune(args: argparse.Namespace) -> int:
    from ..hot import default_budget, hottest, retune

    if args.top < 1:
        raise UsageError(f"--top {args.top}: give at least 1")
    if args.budget is not None and args.budget < 1:
        raise UsageError(f"--budget {args.budget}: give at least 1 evaluation")
    command = program_command(args)
    db = str(args.db) if args.db else None
    rows = retune(command, top=args.top, budget=args.budget, db=db, timeout=args.timeout) if command else \
        hottest(args.top, db)
    if args.json or not rows:
        print(json.dumps(rows, default=str) if args.json else
              "no tuned key in the store yet: run the program once, then retune what it launched most")
        return 0
    if not command:
        print(f"{'launches':>10} {'evals':>6} {'budget':>6} {'retune':>6}  kernel and key")
        for w in rows:
            budget = args.budget or default_budget(w)
            print(f"{w['launches']:>10} {w['evaluations']:>6} {w['budget'] or '-':>6} {budget:>6}  "
                  f"{w['label'] or w['key']}  {_fmt_ms(w['ms'])}")
        print("re-tune them: dr-kernel retune --top N -- python your_program.py ...")
        return 0
    for r in rows:
        name = r["label"] or r["key"]
        if not r["retuned"]:
            print(f"{name}: not reached by the program; the stored winner stands")
        elif r["replaced"]:
            print(f"{name}: {r['after']['config']} ({_fmt_ms(r['after']['ms'])}, {r['after']['evaluations']} "
                  f"evaluations) replaces {r['before']['config']} ({_fmt_ms(r['before']['ms'])})")
        else:
            print(f"{name}: the stored winner re-measured fastest in {r['after']['evaluations']} evaluations "
                  f"and stands ({_fmt_ms(r['after']['ms'])})")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("retune", help="re-tune the most launched stored keys with a larger budget, in a run of "
                                      "your program",
                       description="Without a command: the stored keys launched most (every tuned launch is "
                                   "counted into the store). With a command (after --): runs it with those keys "
                                   "re-tuned when the program reaches them, the stored winner measured beside the "
                                   "new candidates; a winner is replaced only by one that re-measures faster, and "
                                   "the next process picks it up.")
    p.add_argument("--top", type=int, default=5, help="how many of the hottest keys (default 5)")
    p.add_argument("--budget", type=int, help="evaluations per key (default: the most of 100, 4x the evaluations "
                                              "its tuning spent and 2x its budget)")
    p.add_argument("--db", type=Path, help="the database file (default: $DR_KERNEL_DB or the per-user cache)")
    p.add_argument("--timeout", type=float, help="seconds the program may run (default: no limit)")
    p.add_argument("--json", action="store_true", help="print one JSON list")
    program_argument(p)
    p.set_defaults(func=cmd_retune)
