"""Nsight Compute counters of each recorded problem's probe configs (issue 12): the data that lets
the cost model's ranking be compared with and without counters (benchmarks/cost_model.md).

For every problem of the bundled H200 tables, the probe (`profiling.probe_config`: the ok config
nearest the middle of every parameter's range) and, for the robustness check, the configs nearest
the first and third quartiles; each batch is one ncu process (`profiling.profile_many`). Rows are
table rows of type "counters", ready to be appended to the tables:

    python3 benchmarks/ncu_probes.py --out OUT [--quantiles 0.5,0.25,0.75] [--deadline 480] [--tables T.jsonl ...]
"""

import argparse
import json
import os
import time

from dr_kernel import _core, bundled_tables
from dr_kernel.profiling import ProfileError, find_ncu, probe_config, profile_many, stored_counters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--quantiles", default="0.5,0.25,0.75")
    parser.add_argument("--deadline", type=float, default=480.0, help="seconds; later batches are skipped")
    parser.add_argument("--batch-timeout", type=float, default=300.0)
    parser.add_argument("--tables", nargs="+", help="tables whose problems to probe (default: every bundled table)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    start = time.perf_counter()
    print("ncu:", find_ncu(), flush=True)
    tables = _core.read_tables(args.tables or [str(p) for p in bundled_tables()])
    rows_path = os.path.join(args.out, "probes.jsonl")
    for q in (float(x) for x in args.quantiles.split(",")):
        left = args.deadline - (time.perf_counter() - start)
        if left < 30:
            print(f"quantile {q}: skipped, {left:.0f} s left", flush=True)
            continue
        specs, problems = [], []
        for table in tables:
            problem = table.problem
            ok = [config for config, m in table.rows() if m["status"] == "ok"]
            if not ok:
                continue
            specs.append({"kernel": problem["family"], "shape": dict(problem["shape"]),
                          "dtype": problem["dtype"] or "fp16", "config": probe_config(ok, q)})
            problems.append(problem)
        batch_start = time.perf_counter()
        try:
            results = profile_many(specs, timeout_s=min(args.batch_timeout, left),
                                   keep_report=os.path.join(args.out, f"report-q{q:g}.csv"))
        except ProfileError as error:
            results = [{"error": str(error)}] * len(specs)
        took = time.perf_counter() - batch_start
        read = sum("error" not in r for r in results)
        print(f"quantile {q}: {read} of {len(specs)} read in {took:.0f} s", flush=True)
        with open(rows_path, "a") as f:
            for problem, spec, result in zip(problems, specs, results, strict=True):
                row = {"type": "counters", "family": problem["family"], "shape": spec["shape"],
                       "dtype": problem["dtype"], "device": problem["device"], "config": spec["config"],
                       "probe": q}
                if "error" in result:
                    row["error"] = result["error"][-600:]
                else:
                    row["counters"] = stored_counters(result)
                print(json.dumps(row), flush=True)
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
