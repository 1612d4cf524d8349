"""`dr-kernel tune-many`: tune every entry of a work list on the GPUs of a Ray cluster or this machine."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from .common import MAX, UsageError, _check_range


def engine_arguments(p: argparse.ArgumentParser) -> None:
    """The options that say where the work runs (tune-many, sweep)."""
    p.add_argument("--address", help="a Ray cluster's address (e.g. ray://head:10001, or auto inside the cluster); "
                                     "default: this machine")
    p.add_argument("--backend", choices=["auto", "ray", "pool"],
                   help="ray: Ray (started in this process without --address); pool: local processes; auto "
                        "(default): Ray when it is installed")
    p.add_argument("--measurers", type=int, help="measuring workers (default: one per GPU; on a machine or cluster "
                                                 "without GPUs, one per node, or half this machine's cores)")


def cmd_tune_many(args: argparse.Namespace) -> int:
    from ..tune_many import tune_many

    _check_range(args, budget=(1, 100_000), measurers=(1, 4096), seed=(0, 2**63 - 1), max_seconds=(1e-3, MAX))
    done = [0]

    def show(result: dict, engine) -> None:
        done[0] += 1
        if result.get("error"):
            print(f"[{done[0]}] {result['label']}: failed: {result['error']}", file=sys.stderr)
        else:
            w = result["winner"]
            best = f"{w['ms']:.4g} ms" if w and math.isfinite(w["ms"]) else "-"
            print(f"[{done[0]}] {result['label']}: {w['evaluations']} evaluations, best {best} "
                  f"({result['wall_s']:.1f} s)", file=sys.stderr)

    try:
        report = tune_many(args.work, db=args.db, address=args.address, backend=args.backend or "auto",
                           measurers=args.measurers, budget=args.budget, seed=args.seed, inputs=args.inputs,
                           on_result=show, max_seconds=args.max_seconds)
    except (ImportError, AttributeError) as e:
        raise UsageError(f"--inputs {args.inputs}: {e}") from None
    engine = report.engine
    out = {"entries": report.entries, "keys": report.keys, "already_stored": report.stored_before,
           "tuned": len(report.tuned), "failed": report.failed, "rows": report.rows, "wall_s": report.wall_s,
           "backend": engine.backend if engine else None, "workers": engine.workers if engine else 0,
           "requeued": engine.requeued if engine else 0, "by_host": dict(engine.hosts) if engine else {},
           "left": report.left}
    if args.json:
        print(json.dumps(out))
    else:
        where = f" on {out['workers']} {out['backend']} workers" if engine else ""
        print(f"{args.work}: {report.entries} entries, {report.keys} keys: {report.stored_before} already stored, "
              f"{len(report.tuned)} tuned{where} ({report.rows} measurements stored, {out['requeued']} handed out "
              f"again after a worker died), {len(report.failed)} failed; {report.wall_s:.1f} s")
        if report.left:
            print(f"{len(report.left)} keys not started in --max-seconds {args.max_seconds:g}: run the same command "
                  "again to tune them")
        if report.moved:
            print(f"note: {len(report.moved)} winners are stored for the workers' device or Triton, not the one the "
                  "work list was collected on; the program finds them only there")
    return 1 if report.failed or report.left else 0


def add_parser(sub) -> None:
    p = sub.add_parser("tune-many", help="tune every entry of a work list (dr-kernel collect) on all GPUs, on Ray",
                       description="Tunes each key of the work list whose winner the store lacks, one entry per "
                                   "measuring worker at a time, its arguments rebuilt as random data of the recorded "
                                   "layouts (or by --inputs); the winners go to the store the program reads. Run it "
                                   "again after an interruption: stored keys are not measured again.")
    p.add_argument("work", type=Path, help="the work list dr-kernel collect wrote")
    p.add_argument("--db", type=Path, help="the results store to write (default: $DR_KERNEL_DB or the per-user cache)")
    engine_arguments(p)
    p.add_argument("--budget", type=int, help="evaluations per key (default: each kernel's own max_evals)")
    p.add_argument("--seed", type=int, default=0, help="seed of the rebuilt arguments' random data (default 0)")
    p.add_argument("--inputs", metavar="MODULE:FUNCTION",
                   help="a function (kernel name, arguments, device) -> the arguments to use instead, for inputs "
                        "random data cannot stand for (index tensors that must be sorted, objects)")
    p.add_argument("--max-seconds", type=float,
                   help="start no entry after this many seconds (a GPU reservation's window); the entries started "
                        "finish and are stored, the rest are tuned by the next run (exit status 1 until then)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_tune_many)
