"""Zero-wait launches (issue 10, `max_evals=0`): how far the cost model's predicted config is from
the table's best, on kernel families the model has never seen (leave-one-family-out, the shipped
recipe).

    .venv/bin/python benchmarks/zero_wait_eval.py --agents /tmp/lofo_agents

`--agents` is the folder benchmarks/stop_eval.py keeps each family's agent in (trained there if
missing). Per problem: the predicted config's time over the table's best (inf where it fails).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    from dr_kernel import _core, bundled_tables, load_agent
    from dr_kernel.holdout import use_agent_without

    p = argparse.ArgumentParser()
    p.add_argument("--agents", type=Path, required=True)
    args = p.parse_args()
    tables = _core.read_tables([str(t) for t in bundled_tables()])
    ratios = []
    for family in dict.fromkeys(t.problem["family"] for t in tables):
        use_agent_without(family, tables, args.agents)
        for table in (t for t in tables if t.problem["family"] == family):
            rows = table.rows()
            names = list(rows[0][0])
            space = _core.Space([(n, sorted({c[n] for c, _ in rows})) for n in names])
            space.allow_only([c for c, _ in rows])
            (config,) = _core.predicted_order(dict(table.problem), space, 1)
            times = {tuple(sorted(c.items())): m for c, m in rows}
            m = times[tuple(sorted(config.items()))]
            ratio = m["ms"] / table.oracle_ms if m["status"] == "ok" else math.inf
            ratios.append(ratio)
            shape = " ".join(f"{k}={v}" for k, v in table.problem["shape"].items())
            print(f"{family} {shape} {table.problem['dtype']}: {ratio:.3f}")
    load_agent()
    finite = [r for r in ratios if math.isfinite(r)]
    print(f"{len(ratios)} problems: median {statistics.median(ratios):.3f}, geomean of those that ran "
          f"{math.exp(sum(map(math.log, finite)) / len(finite)):.3f}, within 1.05x {sum(r <= 1.05 for r in ratios)}, "
          f"within 1.25x {sum(r <= 1.25 for r in ratios)}, failed {len(ratios) - len(finite)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
