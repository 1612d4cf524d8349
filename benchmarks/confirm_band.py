"""How wide the confirmation band of a session's winner needs to be, read from recorded GPU sessions.

When a search ends, `session.confirm_winner` times again, in three rotating rounds, the best
configs whose first measurement lies within `confirm_within` (10 %) of the fastest, and the lowest
median wins. This reads every recorded `gpu_bench.py` session under benchmarks/results (their
`history`, the first measurements, and `confirmed`, the rounds) and prints, by how much slower a
challenger looked at first, how many challengers the rounds then made the winner and by how much;
and what a narrower band would have saved (candidates timed, confirmations held at all).

    .venv/bin/python benchmarks/confirm_band.py [--band 0.05] [--json out.json]
"""

import argparse
import collections
import glob
import json
import math
import statistics
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
BINS = [(0.0, 0.01), (0.01, 0.02), (0.02, 0.03), (0.03, 0.05), (0.05, 0.10)]


def challengers(paths):
    """(first gap, confirmed gap, won, path) of every candidate but the first measurements' best."""
    rows = []
    for path in paths:
        try:
            record = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            continue
        session = record.get("dr_kernel") if isinstance(record, dict) else None
        if not isinstance(session, dict) or len(session.get("confirmed") or []) < 2 or not session.get("history"):
            continue
        first = {}
        for trial in session["history"]:
            if trial.get("status") == "ok" and trial.get("ms"):
                first.setdefault(json.dumps(trial["config"], sort_keys=True), trial["ms"])
        medians = {}
        for candidate in session["confirmed"]:
            times = [t for t in candidate["ms"] if t is not None and math.isfinite(t)]
            medians[json.dumps(candidate["config"], sort_keys=True)] = statistics.median(times) if times else math.inf
        known = [k for k in medians if k in first]
        if len(known) < 2:
            continue
        leader = min(known, key=first.get)
        winner = min(medians, key=medians.get)
        for key in known:
            if key != leader:
                rows.append((first[key] / first[leader] - 1, medians[key] / medians[leader] - 1, key == winner,
                             str(Path(path).relative_to(RESULTS))))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--band", type=float, default=0.05, help="the narrower band to count the savings of")
    parser.add_argument("--json", type=Path, help="where to write the figures")
    args = parser.parse_args()
    rows = challengers(sorted(glob.glob(str(RESULTS / "*" / "bench*" / "*.json"))))
    sessions = collections.defaultdict(list)
    for row in rows:
        sessions[row[3]].append(row)
    report = {"sessions": len(sessions), "challengers": len(rows),
              "cards": dict(collections.Counter(p.split("-")[0] for p in sessions)), "bins": []}
    print(f"{len(rows)} challengers in {len(sessions)} confirmed sessions ({report['cards']})")
    for low, high in BINS:
        chosen = [r for r in rows if low <= r[0] < high]
        won = sorted(-r[1] for r in chosen if r[2])
        report["bins"].append({"first_gap": [low, high], "challengers": len(chosen), "won": len(won),
                               "largest_gains": won[-3:]})
        print(f"  {low:4.0%}-{high:4.0%} slower at first: {len(chosen):4d} challengers, {len(won):3d} won the rounds"
              + (f" (gaining up to {won[-1]:.1%})" if won else ""))
    timed = sum(len(rs) + 1 for rs in sessions.values())
    narrow = sum(1 + sum(r[0] < args.band for r in rs) for rs in sessions.values())
    held = sum(any(r[0] < args.band for r in rs) for rs in sessions.values())
    report.update(band=args.band, candidates_timed=timed, candidates_timed_narrow=narrow,
                  confirmations_narrow=held)
    print(f"with a band of {args.band:.0%}: candidates timed {timed} -> {narrow}, confirmations "
          f"{len(sessions)} -> {held}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
