"""Tables of docs/benchmarks.md from a gpu_bench.py run and the recorded tables.

    .venv/bin/python benchmarks/gpu_report.py benchmarks/results/h200-2026-11-29

For problems with a recorded exhaustive table, dr_kernel's winner is also looked up there, so that it
is compared with the whole space's optimum as measured by one method; triton.autotune over the
whole space was not run (it compiles configs one after another: about 25 minutes per matmul shape),
its tuning wall time is estimated from the table as the sum of the recorded compile times plus
triton.autotune's default timing of 0.125 s per config (do_bench: 25 ms warm-up, 100 ms of runs),
with 60 s for each config recorded as a compile timeout. Many recorded compile times are cache hits
(milliseconds), so the estimate is a lower bound.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from dr_kernel import _core, bundled_tables


def geomean(values):
    values = [v for v in values if v and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results/h200-2026-11-29")
    tables = {}
    for t in _core.read_tables([str(p) for p in bundled_tables()]):
        tables[(t.problem["family"], json.dumps(t.problem["shape"]), t.problem["dtype"] or "fp16")] = t
    rows, speedups, table_rows = [], [], []
    for path in sorted(folder.glob("*.json")):
        r = json.loads(path.read_text())
        if "dr_kernel" not in r:
            continue
        dr, at, torch = r["dr_kernel"], r["autotune"], r["torch"]
        speedups.append(at["ms"] / dr["ms"])
        history = [h for h in dr["history"] if h["status"] == "ok"]
        final = min(h["ms"] for h in history)
        first_near = next(i + 1 for i, h in enumerate(dr["history"]) if h["status"] == "ok" and h["ms"] <= 1.05 * final)
        rows.append(f"| {r['problem']} | {dr['ms']:.4f} | {at['ms']:.4f} ({at['configs']}) | {torch['ms']:.4f} | "
                    f"{at['ms'] / dr['ms']:.2f} | {torch['ms'] / dr['ms']:.2f} | {dr['tuning_wall_s']:.1f} | "
                    f"{at['tuning_wall_s']:.1f} | {first_near} | {dr['fraction_of_peak']:.2f} |")
        table = tables.get((r["kernel"], json.dumps(r["shape"]), r["dtype"]))
        if table is not None:
            recorded = {json.dumps(c, sort_keys=True): m for c, m in table.rows()}
            m = recorded.get(json.dumps(dr["best_config"], sort_keys=True))
            ratio = m["ms"] / table.oracle_ms if m and m["status"] == "ok" else float("nan")
            whole_s = sum((60.0 if m["status"] == "compile_timeout" else (m["compile_s"] or 0.0)) + 0.125
                          for _, m in table.rows())
            table_rows.append(f"| {r['problem']} | {len(table)} | {table.oracle_ms:.4f} | {ratio:.3f} | "
                              f"{dr['tuning_wall_s']:.1f} | {whole_s:.0f} | {whole_s / dr['tuning_wall_s']:.0f}× |")
    print("| problem | dr_kernel ms | triton.autotune ms (configs) | torch ms | autotune / dr | torch / dr | "
          "dr tuning s | autotune tuning s | dr evals to 1.05× of its best | dr fraction of peak |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    print(f"\nGeometric mean of autotune / dr_kernel: {geomean(speedups):.3f}")
    print("\n| problem | recorded configs | table's best ms | dr_kernel's winner in the table / best | "
          "dr tuning s | whole-space autotune s (estimated) | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print("\n".join(table_rows))
    launch = json.loads((folder / "launch-overhead.json").read_text())
    us = launch["us_per_call"]
    print(f"\nLaunch of a stored winner, µs per call ({launch['calls']} calls, tiny softmax): "
          + ", ".join(f"{k} {v:.2f}" for k, v in us.items()))


if __name__ == "__main__":
    main()
