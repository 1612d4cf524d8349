"""How wide the confirmation band of a session's winner needs to be, read from recorded GPU sessions.

When a search ends, `session.confirm_winner` times again, in three rotating rounds, the best
configs whose first measurement lies within `confirm_within` (10 %) of the fastest, and the lowest
median wins. This reads every recorded `gpu_bench.py` session under benchmarks/results (their
`history`, the first measurements, and `confirmed`, the rounds) and prints, by how much slower a
challenger looked at first, how many challengers the rounds then made the winner and by how much;
and what a narrower band would have saved (candidates timed, confirmations held at all); and what
confirm_winner's early stop (a candidate out of reach is not timed again) saves on the recorded rounds.

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


def confirmed_sessions(paths):
    """(path, session) of every recorded gpu_bench.py session that timed at least two candidates again."""
    for path in paths:
        try:
            record = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            continue
        session = record.get("dr_kernel") if isinstance(record, dict) else None
        if isinstance(session, dict) and len(session.get("confirmed") or []) >= 2:
            yield path, session


def challengers(paths):
    """(first gap, confirmed gap, won, path) of every candidate but the first measurements' best."""
    rows = []
    for path, session in confirmed_sessions(paths):
        if not session.get("history"):
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


def early_stop(paths):
    """Replays every recorded session's confirmation rounds through session.confirm_winner, which
    stops timing a candidate once its rounds so far put it out of reach: (re-timings recorded,
    re-timings the early stop makes, their milliseconds of kernel time recorded and made, sessions
    whose winner differs). The recorded rounds answer its re-timings in order."""
    from dr_kernel.session import confirm_winner

    recorded = made = 0
    recorded_ms = made_ms = 0.0
    differ = 0
    for _, session in confirmed_sessions(paths):
        confirmed = session["confirmed"]
        rounds = {json.dumps(c["config"], sort_keys=True): [math.nan if t is None else t for t in c["ms"]]
                  for c in confirmed}
        served = collections.Counter()

        def remeasure(configs, rounds=rounds, served=served):
            out = []
            for config in configs:
                key = json.dumps(config, sort_keys=True)
                ms = rounds[key][served[key]]
                served[key] += 1
                out.append({"status": "ok", "ms": ms} if math.isfinite(ms) else {"status": "crashed"})
            return out

        # The candidates in their recorded order, as the first measurements had ranked them.
        history = [(c["config"], {"status": "ok", "ms": 1.0 + i * 1e-9}, 0.0) for i, c in enumerate(confirmed)]
        n_rounds = max(len(c["ms"]) for c in confirmed)
        stopped = confirm_winner(history, remeasure, candidates=len(confirmed), rounds=n_rounds, within=1.0)
        # All rounds' winner, ties to the first candidate as in confirm_winner.
        full = min(((statistics.median(t), i, k) for i, (k, t) in enumerate(rounds.items())
                    if all(math.isfinite(x) for x in t)), default=(math.inf, 0, None))[2]
        differ += (json.dumps(stopped[0], sort_keys=True) if stopped else None) != full
        recorded += sum(len(t) for t in rounds.values())
        made += sum(served.values())
        recorded_ms += sum(x for t in rounds.values() for x in t if math.isfinite(x))
        made_ms += sum(x for k, t in rounds.items() for x in t[:served[k]] if math.isfinite(x))
    return recorded, made, recorded_ms, made_ms, differ


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
    paths = sorted(glob.glob(str(RESULTS / "*" / "bench*" / "*.json")))
    recorded, made, recorded_ms, made_ms, differ = early_stop(paths)
    report.update(early_stop={"retimings_recorded": recorded, "retimings_made": made,
                              "kernel_ms_recorded": round(recorded_ms, 3), "kernel_ms_made": round(made_ms, 3),
                              "winners_that_differ": differ})
    print(f"stopping a candidate once out of reach: {recorded} re-timings -> {made} ({made / recorded:.0%}), "
          f"kernel time {recorded_ms:.0f} -> {made_ms:.0f} ms, {differ} winners differ")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
