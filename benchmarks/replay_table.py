"""Writes benchmarks/replay.md: every strategy's median evaluations to within 1.05x of each bundled
problem's best config, from `dr-kernel replay --json`.

    .venv/bin/python benchmarks/replay_table.py            # budget 300, 100 runs per problem
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("replay.md"))
    args = parser.parse_args()

    from dr_kernel import _core

    strategies = [s[0] for s in _core.strategies()]
    reports, seconds = {}, {}
    for name in strategies:
        start = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-m", "dr_kernel.cli", "replay", "--strategy", name, "--budget", str(args.budget),
             "--repeats", str(args.repeats), "--json"],
            check=True, capture_output=True, text=True,
        )
        seconds[name] = time.perf_counter() - start
        report = json.loads(out.stdout)
        if report["problems"]:  # The agent is replayed only on tables it was not trained on.
            reports[name] = report
    strategies = [name for name in strategies if name in reports]

    lines = [
        "# Replay over the bundled H200 tables",
        "",
        f"Median evaluations (p25–p75) until the best-so-far is within 1.05× of the table's best `ok` time; "
        f"budget {args.budget}, {args.repeats} runs per problem (seeds 0…{args.repeats - 1}); "
        f"{args.budget + 1} means not reached. Reproduce: `.venv/bin/python benchmarks/replay_table.py`.",
        "",
        "`dr-kernel replay` replays the shipped agent (`ppo`) only on tables it was not trained on; it was "
        "trained on all of these, so it has no column here (in-sample figures are no result). For problems and "
        "kernel families the agent has not seen see `benchmarks/agent.md`.",
        "",
        "| problem | configs | " + " | ".join(strategies) + " |",
        "|---|---:|" + "---:|" * len(strategies),
    ]
    first = reports[strategies[0]]["problems"]
    # The JSON report names a problem by family and shape; the tables add its dtype when not fp16.
    from dr_kernel import bundled_tables

    dtypes = [t.problem["dtype"] for t in _core.read_tables([str(p) for p in bundled_tables()])]
    for p, dtype in zip(first, dtypes, strict=True):
        shape = " ".join(f"{k}={v}" for k, v in p["shape"].items())
        p["label"] = f"{p['family']} {shape}" + (f" {dtype}" if dtype else "")
    for i, p in enumerate(first):
        cells = []
        for name in strategies:
            e = reports[name]["problems"][i]["evals_to_within"]
            cells.append(f"{e['median']:.0f} ({e['p25']:.0f}–{e['p75']:.0f})")
        lines.append(f"| {p['label']} | {p['configs']} | " + " | ".join(cells) + " |")
    lines += ["", "Median best-so-far / best after 20, 50 and 100 evaluations:", "",
              "| problem | " + " | ".join(strategies) + " |", "|---|" + "---:|" * len(strategies)]
    for i, p in enumerate(first):
        cells = []
        for name in strategies:
            b = reports[name]["problems"][i]["best_over_oracle"]
            cells.append(" / ".join(f"{b[k]:.3f}" if b.get(k) is not None else "–" for k in ("20", "50", "100")))
        lines.append(f"| {p['label']} | " + " | ".join(cells) + " |")
    lines += ["", "Wall time of each whole replay command (all 8 problems, this 2-core machine):", ""]
    lines += [f"- `{name}`: {seconds[name]:.2f} s" for name in strategies]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
