"""Writes benchmarks/hand_lists.md: on every recorded H200 table of matmul, softmax and attention,
how far the best config of triton.autotune's hand-picked list is from the table's best, and how far
dr_kernel's agent gets in 50 evaluations on the same table when it has never seen the problem.

The hand-picked lists are gpu_bench.py's (the matmul tutorial's eight configs, the fused-attention
tutorial's twelve, nine around the softmax tutorial's choice). triton.autotune over a list times
every config and keeps the fastest, so its result on a recorded table is the fastest `ok` row among
the list's configs. A config of the list that the table lacks cannot be timed and is left out: the
attention list's four 7-stage configs (the recorded space stops at 4 stages) and configs beyond
where a partial table stopped. That can only make the list look worse than it is; a problem with
no config of the list recorded is left out altogether.

dr_kernel's figure is the median best-so-far after 50 evaluations of a replay of the table by the
agent trained without it (leave-one-problem-out), from `agent_eval --tables all --json`:

    build/cpp-tests/agent_eval --tables all --ablations 0 --sampled 0 --refit 8 \
        --ppo-steps 1000000 --json loo.json > loo.md
    .venv/bin/python benchmarks/hand_lists.py --loo loo.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
from pathlib import Path

HERE = Path(__file__).resolve().parent
FAMILIES = ("matmul", "softmax", "attention")
STRATEGIES = ("ppo", "anneal", "random")


def hand_lists():
    spec = importlib.util.spec_from_file_location("gpu_bench", HERE / "gpu_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.autotune_configs


def hand_best(table, configs: list[dict]) -> tuple[float, int]:
    """The fastest ok time among `configs` in `table`, and how many of them the table holds."""
    rows = {json.dumps(c, sort_keys=True): m for c, m in table.rows()}
    found = [rows[k] for k in (json.dumps(c, sort_keys=True) for c in configs) if k in rows]
    times = [m["ms"] for m in found if m["status"] == "ok"]
    return (min(times) if times else math.inf), len(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loo", type=Path, required=True, help="agent_eval --tables all --json output")
    parser.add_argument("--evals", type=int, default=50, choices=(20, 50, 100))
    parser.add_argument("--out", type=Path, default=HERE / "hand_lists.md")
    args = parser.parse_args()

    from dr_kernel import _core, bundled_tables

    autotune_configs = hand_lists()
    loo = json.loads(args.loo.read_text())
    tables = _core.read_tables(sorted(str(p) for p in bundled_tables()))
    if len(tables) != len(loo):
        raise SystemExit(f"{args.loo} holds {len(loo)} problems and the bundled tables {len(tables)}: run "
                         "agent_eval with --tables all on the same data")
    at = str(args.evals)
    lines = [
        "# Hand-picked lists against dr_kernel on the recorded H200 tables",
        "",
        __doc__.split("\n\n")[1].replace("\n", " "),
        "",
        __doc__.split("\n\n")[2].replace("\n", " "),
        "",
        "    build/cpp-tests/agent_eval --tables all --ablations 0 --sampled 0 --refit 8 --ppo-steps 1000000 \\",
        "        --json loo.json > loo.md",
        f"    .venv/bin/python benchmarks/hand_lists.py --loo loo.json --evals {args.evals}",
        "",
        f"Times are the table's, relative to its best ok config (1.000 = the best). dr_kernel: {args.evals} "
        "evaluations; anneal and random: the median of 10 runs of the same budget. No tuner can do better than "
        "the table's best, so the hand list's time is also the most any tuner can gain over it.",
        "",
        "| problem | list configs in table | hand list | " + " | ".join(f"{s} @{args.evals}" for s in STRATEGIES)
        + " | hand / ppo |",
        "|---|---:|---:|" + "---:|" * len(STRATEGIES) + "---:|",
    ]
    logs: dict[str, list[float]] = {s: [] for s in STRATEGIES}
    skipped: list[str] = []
    oracle: list[float] = []
    for table, row in zip(tables, loo, strict=True):
        problem = table.problem
        if not row["problem"].startswith(problem["family"] + " "):
            raise SystemExit(f"{args.loo} lists {row['problem']} where the tables have {problem['family']}")
        if problem["family"] not in FAMILIES:
            continue
        configs = autotune_configs(problem["family"], problem["shape"])
        hand_ms, found = hand_best(table, configs)
        if not math.isfinite(hand_ms):
            skipped.append(f"{row['problem']} ({found} of the list's {len(configs)} configs recorded, none ok)")
            continue
        hand = hand_ms / table.oracle_ms
        oracle.append(math.log(hand))
        ours = {s: row["best_over_oracle"][s][at] for s in STRATEGIES}
        for s in STRATEGIES:
            logs[s].append(math.log(hand / ours[s]))
        lines.append(f"| {row['problem']} | {found} of {len(configs)} | {hand:.3f} | "
                     + " | ".join(f"{ours[s]:.3f}" for s in STRATEGIES) + f" | {hand / ours['ppo']:.2f} |")
    n = len(logs["ppo"])
    lines += [
        "",
        f"Geometric mean over {n} problems of the hand list's time over each strategy's: "
        + ", ".join(f"{s} {math.exp(sum(v) / n):.3f}" for s, v in logs.items())
        + f"; over the table's best (the most any tuner can reach): {math.exp(sum(oracle) / n):.3f}.",
    ]
    if skipped:
        lines += ["", "Left out, as the hand list cannot be timed on them: " + "; ".join(skipped) + "."]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
