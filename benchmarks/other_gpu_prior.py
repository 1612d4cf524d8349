"""What a prior learned on the H200's tables is worth on another GPU (issue 8, point 3).

Takes tables recorded on another GPU (`device_run.sh sweeps-other-gpu`: problems the bundled H200
tables also hold) and replays, for each, budget 100 over --repeats session seeds, the median
evaluations to 1.05x of that table's best:

- ppo as it runs there: the problem described on its own GPU (the cost model's features for that
  device: SMs, shared memory, bandwidth);
- ppo with the problem described as an H200's (the rows relabelled), as every session was before
  the cost model knew other devices;
- random search (budget 300, 30 seeds: issue 8's bar);
- and how good the H200 table's best config is there (its time over the other GPU's best).

By default the agent is the shipped one, which trained on the H200 tables of these very shapes:
the prior then carries what the H200 said about the same problem. With --agents DIR, each family's
problems are replayed by an agent trained without that family (leave-one-family-out, cached in DIR
as lofo_options.py caches them), so that neither GPU's table of the family was seen; with
--holdout problem, by an agent trained without the H200 table of that problem (its family's other
shapes seen; cached as lofo_options.py --holdout problem caches them).

    python benchmarks/other_gpu_prior.py benchmarks/results/h100-.../sweeps/*.jsonl
    python benchmarks/other_gpu_prior.py --agents /tmp/lofo0 --json out.json SWEEP.jsonl ...
    python benchmarks/other_gpu_prior.py --agents /tmp/lopo0 --holdout problem SWEEP.jsonl ...
    python benchmarks/other_gpu_prior.py --agents /tmp/lofo0 SWEEP.jsonl ... refit=8 doubt_refit=4
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from dr_kernel import _core, bundled_tables, load_agent  # noqa: E402
from dr_kernel.holdout import problem_key, use_agent_without, use_agent_without_problem  # noqa: E402

H200 = "NVIDIA H200"


def relabelled(path: Path, device: str, folder: Path) -> Path:
    """A copy of the table at `path` whose rows name `device` (the ones that name one)."""
    out = folder / path.name
    lines = []
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            if "device" in row:
                row["device"] = device
            line = json.dumps(row)
        lines.append(line)
    out.write_text("\n".join(lines) + "\n")
    return out


NEUTRAL = {"SPLIT_K": 1, "TMA": 0}


def key(config) -> str:
    return json.dumps({k: v for k, v in config.items() if NEUTRAL.get(k, object()) != v}, sort_keys=True)


def median_evals(table, strategy: str, budget: int, repeats: int, options=None) -> float:
    report = json.loads(_core.replay([table], strategy, budget, repeats, 1.05, 0, options or {}).to_json())
    median = report["problems"][0]["evals_to_within"]["median"]
    return median if median is not None else budget + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="+", metavar="TABLE_OR_OPTION",
                        help="tables recorded on the other GPU (JSONL), and NAME=VALUE options of ppo "
                             "(refit=8 doubt_refit=4: as a GPU session on these spaces runs it)")
    parser.add_argument("--agents", type=Path, help="replay each family with an agent trained without it (cache)")
    parser.add_argument("--holdout", choices=["family", "problem"], default="family",
                        help="what the --agents agents were trained without")
    parser.add_argument("--seed", type=int, default=0, help="training seed of the --agents agents")
    parser.add_argument("--repeats", type=int, default=10, help="session seeds per problem")
    parser.add_argument("--json", type=Path, help="where to write the rows")
    args = parser.parse_intermixed_args()
    tables = [Path(i) for i in args.inputs if "=" not in i]
    options = {k: float(v) for k, v in (i.split("=", 1) for i in args.inputs if "=" in i)}

    # In the order lofo_options.py trains its agents in (problem I of --holdout problem is the I-th).
    training = _core.read_tables([str(p) for p in bundled_tables()])
    h200 = {problem_key(t.problem | {"device": H200}): t for t in training}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in tables:
            table = _core.read_tables([str(path)])[0]
            device = table.problem.get("device") or ""
            if not device or H200 in device:
                raise SystemExit(f"{path}: its rows name the device {device!r}; give tables recorded on another GPU")
            as_h200 = _core.read_tables([str(relabelled(path, H200, Path(tmp)))])[0]
            twin = h200.get(problem_key(table.problem | {"device": H200}))
            if args.agents and args.holdout == "family":
                use_agent_without(table.problem["family"], training, args.agents, seed=args.seed)
            elif args.agents:
                if twin is None:
                    raise SystemExit(f"{path}: --holdout problem needs the H200 table of its problem; the bundled "
                                     "tables have none")
                use_agent_without_problem(training.index(twin), training, args.agents, seed=args.seed)
            # Keyed without parameters at values that change nothing (a sweep of today's matmul space
            # records SPLIT_K 1 and TMA 0, which the bundled tables lack), so that configs of either match.
            ok = {key(config): m["ms"] for config, m in table.rows() if m["status"] == "ok"}
            best = min(ok.values())
            row = {"problem": problem_key(table.problem), "configs": len(table), "best_ms": best,
                   "ppo": median_evals(table, "ppo", 100, args.repeats, options),
                   "ppo_as_h200": median_evals(as_h200, "ppo", 100, args.repeats, options),
                   "random": median_evals(table, "random", 300, 30)}
            if twin is not None:
                config, m = min(((c, m) for c, m in twin.rows() if m["status"] == "ok"), key=lambda cm: cm[1]["ms"])
                there = ok.get(key(config))
                row["h200_best_config_over_best"] = there / best if there else None
                row["h200_best_ms"] = m["ms"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    load_agent()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
