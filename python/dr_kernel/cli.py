"""The ``dr-kernel`` command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from . import bundled_tables


class UsageError(Exception):
    """A mistake in the command line or its inputs; printed as one line, exit status 2."""


def _parse_options(pairs: Sequence[str]) -> dict[str, float]:
    options = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        try:
            options[name] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name:
            raise UsageError(f"--option {pair!r}: write NAME=NUMBER, e.g. --option t0=0.2")
    return options


def _strategy_names(text: str) -> list[str]:
    from . import _core

    available = [s[0] for s in _core.strategies()]
    names = available if text == "all" else [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if name not in available:
            raise UsageError(f"unknown strategy {name!r}; the available strategies are: {', '.join(available)}")
    return names


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def cmd_replay(args: argparse.Namespace) -> int:
    from . import _core
    from .report import plot_replay

    paths = [str(p) for p in (args.data or bundled_tables())]
    if args.budget < 1 or args.repeats < 1:
        raise UsageError("--budget and --repeats must be at least 1")
    tables = _core.read_tables(paths)
    options = _parse_options(args.option)
    strategies = _strategy_names(args.strategy)
    if options and len(strategies) > 1:
        raise UsageError("--option applies to one strategy: name a single --strategy with it")

    reports = {}
    for name in strategies:
        reports[name] = _core.replay(tables, name, args.budget, args.repeats, args.within, args.seed, options)
    if args.json:
        for report in reports.values():
            print(report.to_json())
    else:
        _print_replay(reports, args)
    if args.plot:
        plot_replay({name: r.curves for name, r in reports.items()}, args.plot, args.within)
        if not args.json:
            print(f"\nplot: {args.plot}")
    return 0


def _print_replay(reports: dict, args: argparse.Namespace) -> None:
    checkpoints = [k for k in ("10", "20", "50", "100") if int(k) <= args.budget]
    print(
        f"replay: budget {args.budget} evaluations, {args.repeats} runs per problem, seed {args.seed}; "
        f"'evals' = median evaluations to within {args.within}x of the table's best (p25-p75), "
        f"{args.budget + 1} = never"
    )
    header = f"{'problem':<52} {'strategy':<11} {'evals':>16} " + " ".join(f"{'@' + k:>6}" for k in checkpoints)
    print(header + f" {'tune s':>8}")
    print("-" * (len(header) + 9))
    by_problem: dict[str, list] = {}
    for name, report in reports.items():
        for p in json.loads(report.to_json())["problems"]:
            label = p["family"] + " " + " ".join(f"{k}={v}" for k, v in p["shape"].items())
            by_problem.setdefault(label, []).append((name, p))
    for label, rows in by_problem.items():
        for name, p in rows:
            e = p["evals_to_within"]
            evals = f"{e['median']:.0f} ({e['p25']:.0f}-{e['p75']:.0f})"
            best = " ".join(f"{_fmt(p['best_over_oracle'].get(k)):>6}" for k in checkpoints)
            print(f"{label:<52} {name:<11} {evals:>16} {best} {_fmt(p['tuning_s_to_within'], 1):>8}")


def cmd_strategies(args: argparse.Namespace) -> int:
    from . import _core

    for name, description, options in _core.strategies():
        print(f"{name}: {description}")
        for opt, text, default in options:
            print(f"    {opt} (default {default:g}): {text}")
    return 0


def cmd_db(args: argparse.Namespace) -> int:
    from . import _core
    from .store import open_store

    store = open_store(args.db)
    if args.action == "import":
        if not args.files:
            raise UsageError("db import needs the recorded tables to import, e.g. dr-kernel db import sweep.jsonl")
        added = store.import_tables(_core.read_tables([str(f) for f in args.files]))
        print(f"imported {added} rows into {store.path} ({store.count()} in all)")
    elif args.action == "export":
        if len(args.files) != 1:
            raise UsageError("db export needs one output file, e.g. dr-kernel db export all.jsonl")
        tables = store.export_tables()
        _core.write_tables(tables, str(args.files[0]))
        print(f"exported {sum(len(t) for t in tables)} rows of {len(tables)} problems to {args.files[0]}")
    else:
        problems = store.problems()
        print(f"{store.path}: {store.count()} measurements of {len(problems)} problems")
        for p in problems:
            shape = " ".join(f"{k}={v}" for k, v in p["shape"].items())
            print(f"  {p['family']} {shape} {p['dtype']} {p['device']}: {len(store.rows(p))} rows")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dr-kernel", description="Auto-tuning of Triton GPU kernels.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("replay", help="replay search strategies over recorded tuning tables")
    p.add_argument("--data", nargs="+", type=Path, help="recorded tables (JSON lines); default: the bundled H200 tables")
    p.add_argument("--strategy", default="all", help="a strategy name, a comma-separated list, or 'all' (default)")
    p.add_argument("--budget", type=int, default=100, help="evaluations per run (default 100)")
    p.add_argument("--repeats", type=int, default=20, help="runs per problem, seeds S, S+1, ... (default 20)")
    p.add_argument("--within", type=float, default=1.05, help="'near the best' means <= F x the best (default 1.05)")
    p.add_argument("--seed", type=int, default=0, help="seed of the first run (default 0)")
    p.add_argument("--option", action="append", default=[], metavar="NAME=VALUE", help="a strategy option")
    p.add_argument("--json", action="store_true", help="print one JSON object per strategy")
    p.add_argument("--plot", type=Path, help="write a PNG of best-so-far / best against evaluations")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("db", help="the results store: import or export recorded tables, or list what it holds")
    p.add_argument("action", choices=["stats", "import", "export"])
    p.add_argument("files", nargs="*", type=Path)
    p.add_argument("--db", type=Path, help="the database file (default: $DR_KERNEL_DB or the per-user cache)")
    p.set_defaults(func=cmd_db)

    p = sub.add_parser("strategies", help="list the search strategies and their options")
    p.set_defaults(func=cmd_strategies)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as e:
        print(f"dr-kernel {args.command}: {e}", file=sys.stderr)
        return 2
    except (ValueError, OSError) as e:  # The engine's errors about user input (data file, space, store).
        print(f"dr-kernel {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
