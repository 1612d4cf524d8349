"""Two values of one parameter of a recorded sweep, tile for tile: a kernel variant against another
(`dr-kernel sweep` rows, `benchmarks/device_run.sh sweeps-tma2` for instance). Per problem: the
reference's time (the sweep's `reference` row: SDPA, cuBLAS, torch), each value's best config,
best against best, the same configs against each other (geomean, least and most, over the configs
that ran with both values), and the reference's speed over each best.

    .venv/bin/python benchmarks/variant_compare.py benchmarks/results/h100-2026-12-06/sweeps/*.jsonl \\
        --param TMA --values 1 2
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path


def compare(path: Path, param: str, old, new) -> dict:
    """The figures of one sweep file (one problem) for `param` = `old` against `new`."""
    reference, times = None, {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise SystemExit(f"{path}:{number}: not a JSON line ({error.msg}); fix or remove the line") from None
        if row.get("type") == "reference":
            reference = row["ms"]
        elif row.get("type") == "measure" and row.get("status") == "ok" and row.get("ms"):
            config = dict(row["config"])
            value = config.pop(param, None)
            times.setdefault(json.dumps(config, sort_keys=True), {})[value] = row["ms"]
    best = {v: min((t[v] for t in times.values() if v in t), default=math.nan) for v in (old, new)}
    ratios = sorted(t[old] / t[new] for t in times.values() if old in t and new in t)
    if not ratios:
        raise SystemExit(f"{path}: no config ran with both {param} = {old} and {param} = {new}")
    return {"problem": path.stem, "reference_ms": reference, "best_ms": best, "pairs": len(ratios),
            "best_speedup": best[old] / best[new],
            "pair_geomean": math.exp(sum(map(math.log, ratios)) / len(ratios)),
            "pair_min": ratios[0], "pair_max": ratios[-1],
            "reference_over_best": {v: reference / best[v] if reference else None for v in (old, new)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweeps", nargs="+", type=Path, help="sweep files (JSON lines), one problem each")
    parser.add_argument("--param", required=True, help="the parameter whose values are compared")
    parser.add_argument("--values", nargs=2, type=int, required=True, metavar=("OLD", "NEW"))
    parser.add_argument("--json", action="store_true", help="print the figures as JSON lines")
    args = parser.parse_args()
    old, new = args.values
    for path in args.sweeps:
        r = compare(path, args.param, old, new)
        if args.json:
            print(json.dumps(r))
            continue
        ref = r["reference_over_best"]
        print(f"{r['problem']}: best {r['best_ms'][old]:.4f} -> {r['best_ms'][new]:.4f} ms "
              f"({r['best_speedup']:.3f}x); {r['pairs']} configs with both: geomean {r['pair_geomean']:.3f}x "
              f"({r['pair_min']:.3f}-{r['pair_max']:.3f})"
              + (f"; reference over best {ref[old]:.2f} -> {ref[new]:.2f}" if r["reference_ms"] else ""))


if __name__ == "__main__":
    sys.exit(main())
