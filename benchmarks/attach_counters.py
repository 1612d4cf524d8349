"""Stores probe counters (rows that benchmarks/ncu_probes.py wrote) with their measurements in
recorded tables: the first measure row of the same problem and config gets `"counters":
{"probe": Q, ...}`, as `dr-kernel evaluate --profile` stores counters. Every other line stays
byte for byte; a row that already has counters keeps them. Prints what it attached.

    python3 benchmarks/attach_counters.py PROBES.jsonl TABLE.jsonl [TABLE.jsonl ...]
"""

import argparse
import json
import sys


def identity(row: dict) -> str:
    return json.dumps([row["family"], row["shape"], row.get("dtype", ""), row["config"]], sort_keys=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("probes")
    parser.add_argument("tables", nargs="+")
    args = parser.parse_args()
    wanted: dict[str, dict] = {}
    with open(args.probes) as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                print(f"{args.probes}:{line_no}: not JSON ({error}); fix or delete the line", file=sys.stderr)
                return 2
            if row.get("type") == "counters" and "counters" in row:
                wanted.setdefault(identity(row), {"probe": row["probe"], **row["counters"]})
    attached = 0
    for path in args.tables:
        with open(path) as f:
            lines = f.readlines()
        changed = False
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            row = json.loads(line)
            if row.get("type") != "measure" or "counters" in row:
                continue
            counters = wanted.pop(identity(row), None)
            if counters is None:
                continue
            row["counters"] = counters
            lines[i] = json.dumps(row, separators=(",", ":")) + "\n"
            changed = True
            attached += 1
        if changed:
            with open(path, "w") as f:
                f.writelines(lines)
    print(f"attached {attached} probes' counters; {len(wanted)} matched no measure row")
    for key in wanted:
        print("  unmatched:", key)
    return 0


if __name__ == "__main__":
    sys.exit(main())
