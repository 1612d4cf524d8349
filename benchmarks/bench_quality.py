"""Quality and first-call time of gpu_bench.py runs against a run of 50-evaluation sessions (issue 10).

    .venv/bin/python benchmarks/bench_quality.py RUN [RUN ...] [--against BUDGET_RUN]

For each problem of each RUN (a gpu_bench.py --out folder): the `stop="auto"` session's winner time
over the 50-evaluation session's, each the lowest median of the session's own confirmation re-timing
(its best time while tuning when it confirmed nothing), its tuning wall time beside triton.autotune's
first call in the same run, its evaluations and where its seconds went. Then per run: the geomean
quality, how many problems are within 2 %, the median first calls of dr_kernel and autotune.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path


def confirmed_ms(session: dict) -> float:
    timings = session.get("confirmed") or []
    if not timings:
        return session["best_ms_while_tuning"]
    return min(statistics.median(t["ms"]) for t in timings)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--against", type=Path, default=Path("benchmarks/results/h200-2026-12-03d/bench-budget"),
                   help="a gpu_bench.py run with --stops budget (default: the fifth session's of 2026-12-03)")
    args = p.parse_args()
    for run in args.runs:
        qualities, walls, autotune = [], [], []
        for path in sorted(run.glob("*.json")):
            row = json.loads(path.read_text())
            base_path = args.against / path.name
            if "dr_kernel" not in row or not base_path.exists():
                continue
            base = json.loads(base_path.read_text())
            base = base.get("dr_kernel_budget") or base.get("dr_kernel")
            dr = row["dr_kernel"]
            quality = confirmed_ms(dr) / confirmed_ms(base)
            at = (row.get("autotune") or {}).get("tuning_wall_s", math.nan)
            qualities.append(quality)
            walls.append(dr["tuning_wall_s"])
            autotune.append(at)
            split = " ".join(f"{k} {v:.1f}" for k, v in dr["split_s"].items())
            if dr.get("compile_readiness"):  # Runs after 2026-12-04: were the compiles guessed in time?
                split += "; compiles " + " ".join(f"{k} {v}" for k, v in dr["compile_readiness"].items())
            print(f"{path.stem:32s} quality {quality:.3f}  first call {dr['tuning_wall_s']:5.1f} s "
                  f"(autotune {at:5.1f} s)  {dr['evaluations']:2d} evaluations  [{split}]")
        if not qualities:
            print(f"{run}: no problem with a session in {args.against}")
            continue
        geomean = math.exp(sum(map(math.log, qualities)) / len(qualities))
        print(f"{run}: quality {geomean:.3f} geomean, {sum(q <= 1.02 for q in qualities)} of {len(qualities)} "
              f"within 2 %; median first call {statistics.median(walls):.2f} s against autotune's "
              f"{statistics.median(autotune):.2f} s\n")


if __name__ == "__main__":
    main()
