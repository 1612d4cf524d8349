"""Adaptive stopping in replay (issue 10): evaluations used against the quality reached, with the
agent on kernel families it has never seen (leave-one-family-out, the shipped recipe), or on
shapes it has never seen of families it knows (`--holdout problem`: what a GPU session of the
shipped agent meets on a user's new shape).

    .venv/bin/python benchmarks/stop_eval.py [--stops 0,0.05,0.1,0.2] [--budget 100] [--repeats 10] [--json OUT]
        [--holdout family|problem] [--option stop_local=1]

For each family (each problem): the agent is trained once on the other families' (problems')
tables, then each held-out problem is replayed with ppo's `stop` option at each threshold (0: the
whole budget). Per threshold: the median evaluations a session used, the median of its final best
over the table's best, and how many problems ended more than 5 % above the best (median run).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    from dr_kernel import _core, bundled_tables, load_agent
    from dr_kernel.holdout import use_agent_without, use_agent_without_problem

    p = argparse.ArgumentParser()
    p.add_argument("--stops", default="0,0.05,0.1,0.2")
    p.add_argument("--budget", type=int, default=100)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--json", type=Path)
    p.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                   help="another ppo option for every stopping run (stop_gain, stop_after, stop_trust)")
    p.add_argument("--agents", type=Path, help="keep (and reuse) each family's trained agent in this folder")
    p.add_argument("--holdout", choices=["family", "problem"], default="family")
    p.add_argument("--seed", type=int, default=0, help="training seed of the held-out agents (0: the shipped recipe's)")
    args = p.parse_args()
    stops = [float(s) for s in args.stops.split(",")]
    extra = {k: float(v) for k, v in (o.split("=", 1) for o in args.option)}
    tables = _core.read_tables([str(t) for t in bundled_tables()])
    families = list(dict.fromkeys(t.problem["family"] for t in tables))
    rows = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.agents or Path(scratch)
        if args.holdout == "family":
            groups = [(family, lambda family=family: use_agent_without(family, tables, folder, seed=args.seed),
                       [t for t in tables if t.problem["family"] == family]) for family in families]
        else:
            groups = [(f"problem {i} ({t.problem['family']})",
                       lambda i=i: use_agent_without_problem(i, tables, folder, seed=args.seed), [t])
                      for i, t in enumerate(tables)]
        for family, load, held in groups:
            load()
            for stop in stops:
                options = {**extra, "stop": stop} if stop > 0 else dict(extra)
                report = json.loads(_core.replay(held, "ppo", args.budget, args.repeats, 1.05, 0, options).to_json())
                for problem in report["problems"]:
                    rows.append({"stop": stop, "family": family, "shape": problem["shape"],
                                 "used": problem["evaluations_used"]["median"],
                                 "final": problem["final_over_oracle"],
                                 "evals_to_within": problem["evals_to_within"]["median"]})
            print(f"{family}: done after {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    load_agent()
    print(f"{'stop':>6} {'evals used (median, geomean)':>30} {'final/best (median, worst)':>28} {'> 1.05':>7}")
    for stop in stops:
        mine = [r for r in rows if r["stop"] == stop]
        used = [r["used"] for r in mine]
        final = [r["final"] for r in mine]
        geomean = math.exp(sum(map(math.log, used)) / len(used))
        print(f"{stop:6.2f} {statistics.median(used):15.1f} {geomean:14.1f} {statistics.median(final):14.3f} "
              f"{max(final):13.3f} {sum(f > 1.05 for f in final):7d}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
