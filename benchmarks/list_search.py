"""Whether the agent should search a library's list of 17-32 configs rather than measure it whole.

The drop-in measures lists of up to `tuner.WHOLE_LIST` (32) configs whole and searches longer ones
with ppo. This replays the alternative on lists cut from the bundled tables the way libraries
write them: a product of a few values per parameter (17-32 configs, at least 80 % of them running),
under a kernel name the agent has never seen, searched by ppo with the drop-in's stop rule
(`stop="auto"`) and a budget of half the longest list, by the agent trained without the family
(leave-one-family-out, cached in --agents as `lofo_options.py` caches it). Prints, per family and
over all lists, how many evaluations the search used and how far its final config is from the
list's best; every session counts (10 session seeds a list), since a kernel is tuned once.

    .venv/bin/python benchmarks/list_search.py --agents /tmp/lofo_agents --seed 0 --json out.json
"""

import argparse
import collections
import itertools
import json
import math
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from dr_kernel import _core, bundled_tables  # noqa: E402
from dr_kernel.holdout import use_agent_without  # noqa: E402
from dr_kernel.tuner import AUTO_STOP  # noqa: E402


def lists_of(rows: list[dict], rng: random.Random, per_table: int, smallest: int, largest: int):
    """Up to `per_table` product lists of one table's configs, as (values per parameter, rows)."""
    running = {json.dumps(r["config"], sort_keys=True) for r in rows if r.get("status") == "ok"}
    names = list(rows[0]["config"])
    values = {n: sorted({r["config"][n] for r in rows}) for n in names}
    made = 0
    for _ in range(400):
        if made == per_table:
            return
        pick = {n: sorted(rng.sample(v, rng.randint(1, min(len(v), 4)))) for n, v in values.items()}
        if not smallest <= math.prod(len(v) for v in pick.values()) <= largest:
            continue
        keys = {json.dumps(dict(zip(names, c, strict=True)), sort_keys=True) for c in itertools.product(*pick.values())}
        if len(keys & running) < 0.8 * len(keys):
            continue
        made += 1
        yield pick, [r for r in rows if json.dumps(r["config"], sort_keys=True) in keys]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=Path, required=True, help="folder of the per-family agents (cache)")
    parser.add_argument("--seed", type=int, default=0, help="training seed of the agents, and of the lists drawn")
    parser.add_argument("--budget", type=int, default=16, help="evaluations a list's search may use")
    parser.add_argument("--per-table", type=int, default=4, help="lists drawn from each table")
    parser.add_argument("--sizes", default="17-32", help="smallest-largest list length")
    parser.add_argument("--within", type=float, default=1.02, help="how near the list's best counts as found")
    parser.add_argument("--json", type=Path, help="where to write every list's result")
    args = parser.parse_args()
    smallest, largest = map(int, args.sizes.split("-"))
    files = [str(t) for t in bundled_tables()]
    tables = _core.read_tables(files)
    rows = collections.defaultdict(list)
    for f in files:
        for line in open(f):
            row = json.loads(line) if line.strip() else {}
            if row.get("type") == "measure":
                rows[(row["family"], json.dumps(row["shape"], sort_keys=True), row.get("dtype", ""))].append(row)
    rng = random.Random(args.seed)
    results, loaded = [], None
    with tempfile.TemporaryDirectory() as folder:
        for (family, shape, dtype), table_rows in rows.items():
            for pick, chosen in lists_of(table_rows, rng, args.per_table, smallest, largest):
                path = Path(folder) / f"list{len(results)}.jsonl"
                path.write_text("".join(json.dumps({**r, "family": "list of " + family}) + "\n" for r in chosen))
                (table,) = _core.read_tables([str(path)])
                if family != loaded:
                    use_agent_without(family, tables, args.agents, seed=args.seed)
                    loaded = family
                report = json.loads(_core.replay([table], "ppo", args.budget, 10, args.within, 0,
                                                 dict(AUTO_STOP)).to_json())
                problem = report["problems"][0]
                results.append({"family": family, "shape": json.loads(shape), "dtype": dtype, "list": pick,
                                "size": math.prod(len(v) for v in pick.values()),
                                "evaluations": problem["evaluations_used"]["median"],
                                "final_over_list_best": problem["final_over_oracle"],
                                "runs_to_within": problem["evals_to_within"]["runs"]})

    def beyond(v) -> bool:  # A session that ended without the list's best within reach.
        return v is None or v > args.budget

    runs = [v for r in results for v in r["runs_to_within"]]
    missed = sum(map(beyond, runs))
    by_family = collections.defaultdict(list)
    for r in results:
        by_family[r["family"]].append(r)
    for family, rs in by_family.items():
        print(f"{family:15s} {len(rs):3d} lists, {sum(r['size'] for r in rs) / len(rs):5.1f} configs, "
              f"{sum(r['evaluations'] for r in rs) / len(rs):5.1f} evaluations, "
              f"{sum(beyond(v) for r in rs for v in r['runs_to_within'])} of {10 * len(rs)} sessions "
              f"ended beyond {args.within}x the list's best")
    finals = [r["final_over_list_best"] for r in results]
    summary = {"lists": len(results), "configs_mean": sum(r["size"] for r in results) / len(results),
               "evaluations_mean": sum(r["evaluations"] for r in results) / len(results),
               "sessions": len(runs), "sessions_beyond": missed,
               "median_final_geomean": math.exp(sum(map(math.log, finals)) / len(finals)),
               "median_final_worst": max(finals)}
    print(json.dumps(summary))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "lists": results}, indent=0) + "\n")


if __name__ == "__main__":
    main()
