"""`dr-kernel replay`: search strategies over recorded tables, the agent only where it is out of sample."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from ..progress import Progress
from .common import (
    BUDGET,
    MAX,
    SEED,
    UsageError,
    _check_range,
    _fmt,
    _label,
    _parse_options,
    _read_tables,
    _strategy_names,
)


def cmd_replay(args: argparse.Namespace) -> int:
    from .. import _core, agent_folder
    from ..holdout import problem_key, shipped_agent_trained_on
    from ..report import plot_replay

    # `dr-kernel train` lists beside policy.bin the problems the agent was trained on (None: unknown).
    trained_on_file = agent_folder() / "trained_on.json"
    trained_on = shipped_agent_trained_on()
    agent_strategies = ("ppo",)  # Strategies that use the trained agent.

    _check_range(args, budget=BUDGET, repeats=(1, 1000), within=(1.0, MAX), seed=SEED)
    _, tables = _read_tables(args.data)
    # A problem where nothing ran has no best to come near: replaying it would report success at once.
    unmeasured = [_label(t.problem) for t in tables if not math.isfinite(t.oracle_ms)]
    if unmeasured:
        tables = [t for t in tables if math.isfinite(t.oracle_ms)]
        if not tables:
            raise UsageError("no problem in --data has a config that ran correctly (an 'ok' row): nothing to replay")
        print(f"note: left out {len(unmeasured)} problem(s) where no config ran correctly: {'; '.join(unmeasured)}",
              file=sys.stderr)
    options = _parse_options(args.option)
    strategies = _strategy_names(args.strategy)
    if options and len(strategies) > 1:
        raise UsageError("--option applies to one strategy: name a single --strategy with it")

    # The agent is replayed only on tables it was not trained on: in-sample figures are no result.
    # With --holdout family it is trained anew for each family, on the others only.
    unseen = [t for t in tables if trained_on is None or problem_key(t.problem) not in trained_on]
    if args.holdout == "family":
        unseen = tables
    reports, held_back = {}, {}
    bar = Progress(len(strategies), "replay", unit="strategy")
    # With a bar, the held-out families' training news goes after it instead of on lines of their own.
    say = (lambda text: bar.update(0, now=text)) if bar.shown else _say
    try:
        for name in strategies:
            replayed = unseen if name in agent_strategies else tables
            held_back[name] = len(tables) - len(replayed)
            bar.update(0, strategy=name, problems=len(replayed))
            if not replayed:
                bar.update(1)
                continue
            if name in agent_strategies and args.holdout == "family":
                from ..holdout import replay_held_out

                reports[name] = replay_held_out(replayed, name, args.budget, args.repeats, args.within, args.seed,
                                                options, progress=say, trace=args.trace)
            else:
                reports[name] = _core.replay(replayed, name, args.budget, args.repeats, args.within, args.seed,
                                             options, args.trace)
            bar.update(1)
    finally:
        bar.close()
    if args.json:
        for name in strategies:
            if name in agent_strategies:
                out = json.loads(reports[name].to_json()) if name in reports else {"strategy": name, "problems": []}
                out["agent_training"] = ("leave-one-family-out" if args.holdout == "family" else
                                         "unknown" if trained_on is None else "none of these problems")
                out["in_sample_problems_left_out"] = held_back[name]
                print(json.dumps(out))
            else:
                print(reports[name].to_json())
    else:
        _print_replay(reports, args)
        if args.trace:
            _print_traces(reports)
        for name in strategies:
            if name not in agent_strategies:
                continue
            if args.holdout == "family":
                print(f"\n{name}: each family's rows by an agent trained with the shipped recipe on the other "
                      "families' tables only (leave-one-family-out): kernels it has never seen, as a user's are")
            elif trained_on is None:
                print(f"\n{name}: the agent does not record what it was trained on ({trained_on_file.name} is "
                      "missing): its rows may be in-sample; leave-one-family-out figures are in benchmarks/agent.md")
            elif held_back[name] == len(tables):
                print(f"\n{name}: the shipped agent was trained on all {len(tables)} of these problems, so it is not "
                      "replayed on them (in-sample rows are no result); --holdout family replays it on each family "
                      "with an agent trained without that family")
            elif held_back[name]:
                print(f"\n{name}: shown only on problems the shipped agent was not trained on; {held_back[name]} of "
                      f"{len(tables)} are in its training data and left out (in-sample rows are no result). "
                      "Leave-one-family-out figures: benchmarks/agent.md")
    if args.plot and not reports:
        print("note: no strategy was replayed on any problem, so no plot was written", file=sys.stderr)
    elif args.plot:
        plot_replay({name: r.curves for name, r in reports.items()}, args.plot, args.within)
        if not args.json:
            print(f"\nplot: {args.plot}")
    return 0

def _say(text: str) -> None:
    print(text, file=sys.stderr)

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
        for p, (problem, _) in zip(json.loads(report.to_json())["problems"], report.curves, strict=True):
            label = p["family"] + " " + " ".join(f"{k}={v}" for k, v in p["shape"].items())
            if problem["dtype"]:
                label += " " + problem["dtype"]
            by_problem.setdefault(label, []).append((name, p))
    for label, rows in by_problem.items():
        for name, p in rows:
            e = p["evals_to_within"]
            evals = f"{e['median']:.0f} ({e['p25']:.0f}-{e['p75']:.0f})"
            best = " ".join(f"{_fmt(p['best_over_oracle'].get(k)):>6}" for k in checkpoints)
            print(f"{label:<52} {name:<11} {evals:>16} {best} {_fmt(p['tuning_s_to_within'], 1):>8}")


def _print_traces(reports: dict) -> None:
    """Every run's measurements in order: time over the table's best (or how it failed), config and,
    where the strategy says (ppo), why it proposed it."""
    for name, report in reports.items():
        data = json.loads(report.to_json())
        for p in data["problems"]:
            label = p["family"] + " " + " ".join(f"{k}={v}" for k, v in p["shape"].items())
            for run, steps in enumerate(p.get("traces", [])):
                print(f"\n{name}, {label}, run {run} (seed {data['seed'] + run}):")
                best = math.inf
                for i, step in enumerate(steps, 1):
                    over = step["over_best"]
                    shown = f"{over:.3f}" if over is not None else step["status"]
                    mark = " *" if over is not None and over < best else "  "
                    best = min(best, over) if over is not None else best
                    config = " ".join(f"{k}={v}" for k, v in step["config"].items())
                    why = f"  ({step['why']})" if step.get("why") else ""
                    print(f"  {i:4d} {shown:>18}{mark} {config}{why}")


def add_parser(sub) -> None:
    p = sub.add_parser("replay", help="replay search strategies over recorded tuning tables")
    p.add_argument("--data", nargs="+", type=Path,
                   help="recorded tables (JSON lines); default: the bundled H200 tables")
    p.add_argument("--strategy", default="all", help="a strategy name, a comma-separated list, or 'all' (default)")
    p.add_argument("--budget", type=int, default=100, help="evaluations per run (default 100)")
    p.add_argument("--repeats", type=int, default=20, help="runs per problem, seeds S, S+1, ... (default 20)")
    p.add_argument("--within", type=float, default=1.05, help="'near the best' means <= F x the best (default 1.05)")
    p.add_argument("--seed", type=int, default=0, help="seed of the first run (default 0)")
    p.add_argument("--option", action="append", default=[], metavar="NAME=VALUE", help="a strategy option")
    p.add_argument("--json", action="store_true", help="print one JSON object per strategy")
    p.add_argument("--plot", type=Path, help="write a PNG of best-so-far / best against evaluations")
    p.add_argument("--trace", action="store_true",
                   help="also show every run's measurements in order (time over the table's best, * a new best; "
                        "for ppo, why it measured each: its climb, a move, a jump; with --json, a 'traces' list "
                        "per problem)")
    p.add_argument("--holdout", choices=["none", "family"], default="none",
                   help="family: replay the agent on each family with an agent trained (shipped recipe, about 40 s "
                        "per family on 2 cores) on the other families only; none (default): only on tables the "
                        "shipped agent was not trained on")
    p.set_defaults(func=cmd_replay)
