"""Replays recorded H200 tuning sessions (gpu_bench.py rows) through today's session code, with
each config's recorded measurement as its time: what a change to the strategy or the stop rule
would have done on the GPU's own noisy timings, without the GPU (issue 10).

    .venv/bin/python benchmarks/session_replay.py RUN [RUN ...] [--option NAME=VALUE ...] [--stop auto]

A session is replayed exactly as long as it asks only for configs the recorded one measured (the
cost model, the agent and the seed are the shipped ones, as on the GPU; refusals replay as
recorded; the registers, spills and shared memory the static stage added to each measurement
come from the run's results.db when it is there). A change that only ends sessions earlier (a
stop rule) replays every session exactly; one that changes the path leaves the recorded one, and
such a session is reported as having left it at that evaluation, not given an invented time.
Per problem: evaluations recorded and replayed, the best time of each, replayed over recorded
(the noisy single measurements the strategy saw, not the confirmation re-timing).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))


class LeftThePath(Exception):
    pass


STATIC = ("n_regs", "n_spills", "shared", "occupancy")


def static_fields(store: Path) -> dict[tuple, dict]:
    """(config, ms or status) → what the static stage added to that measurement (registers, spills,
    shared memory, occupancy: the agent's state reads them), from the run's results store."""
    import sqlite3

    out: dict[tuple, dict] = {}
    if not store.exists():
        return out
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        for config, status, ms, *values in db.execute(f"SELECT config, status, ms, {', '.join(STATIC)} "
                                                      "FROM measurements"):
            key = tuple(sorted(json.loads(config).items()))
            fields = {k: v for k, v in zip(STATIC, values, strict=True) if v is not None}
            out[(key, ms if status == "ok" else status)] = fields
    return out


def replay(row: dict, options: dict, stop: str, static: dict[tuple, dict]) -> dict:
    from dr_kernel.analysis import H200
    from dr_kernel.kernels import get
    from dr_kernel.session import builtin_problem, run_session
    from dr_kernel.tuner import stop_options

    session = row["dr_kernel"]
    recorded = {tuple(sorted(h["config"].items())): h for h in session["history"]}
    kernel = get(row["kernel"])
    space = kernel.space_for(row["shape"], H200)
    problem = builtin_problem(kernel, row["shape"], row["dtype"], row["device"])
    asked: list[int] = [0]

    def measure(batch, best_ms):
        out = []
        for config in batch:
            h = recorded.get(tuple(sorted(config.items())))
            if h is None:
                raise LeftThePath(asked[0] + 1)
            asked[0] += 1
            m = {"status": h["status"]}
            if h.get("ms") is not None:
                m.update(ms=h["ms"], ms_p20=h["ms"], ms_p80=h["ms"])
            key = tuple(sorted(config.items()))
            m.update(static.get((key, h["ms"] if h["status"] == "ok" else h["status"]), {}))
            out.append((m, 0.0))
        return out

    try:
        result = run_session(problem, space, measure, strategy=session["strategy"], max_evals=session["max_evals"],
                             options={**stop_options(stop, session["strategy"]), **options})
    except LeftThePath as left:
        return {"left_at": left.args[0]}
    ok = [m["ms"] for _, m, _ in result.history if m["status"] == "ok"]
    return {"evaluations": result.evaluations, "best_ms": min(ok) if ok else math.nan}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, help="gpu_bench.py --out folders")
    p.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                   help="a strategy option on top of the stop rule's")
    p.add_argument("--stop", default="auto", choices=("auto", "budget"))
    args = p.parse_args()
    options = {k: float(v) for k, _, v in (o.partition("=") for o in args.option)}
    for run in args.runs:
        used, recorded_used, ratios, left = [], [], [], 0
        static = static_fields(run / "results.db")
        print(f"{run}:" + ("" if static else " (no results.db: sessions that read registers or shared memory "
                                              "may leave the recorded path)"))
        for path in sorted(run.glob("*.json")):
            row = json.loads(path.read_text())
            if "dr_kernel" not in row or not row["dr_kernel"].get("history"):
                continue
            history = row["dr_kernel"]["history"]
            best = min((h["ms"] for h in history if h["status"] == "ok"), default=math.nan)
            r = replay(row, options, args.stop, static)
            if "left_at" in r:
                left += 1
                print(f"  {row['problem']:32} recorded {len(history):3d} evaluations; replay left the recorded path "
                      f"at evaluation {r['left_at']}")
                continue
            used.append(r["evaluations"])
            recorded_used.append(len(history))
            ratios.append(r["best_ms"] / best)
            print(f"  {row['problem']:32} recorded {len(history):3d} evaluations, best {best:.4f} ms; replayed "
                  f"{r['evaluations']:3d}, best {r['best_ms']:.4f} ms ({r['best_ms'] / best:.3f}x)")
        if used:
            geo = math.exp(sum(math.log(x) for x in used) / len(used))
            geo_recorded = math.exp(sum(math.log(x) for x in recorded_used) / len(recorded_used))
            print(f"  {len(used)} replayed exactly (geomean evaluations {geo_recorded:.1f} recorded, {geo:.1f} "
                  f"replayed; worst best {max(ratios):.3f}x the recorded), {left} left the recorded path")


if __name__ == "__main__":
    main()
