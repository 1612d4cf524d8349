"""Replays recorded H200 tuning sessions (gpu_bench.py rows) through today's session code, with
each config's recorded measurement as its time: what a change to the strategy or the stop rule
would have done on the GPU's own noisy timings, without the GPU (issue 10).

    .venv/bin/python benchmarks/session_replay.py RUN [RUN ...] [--option NAME=VALUE ...] [--stop auto]
        [--fill OTHER_RUN] [--problems P,...] [--trace] [--agent DIR]

A session is replayed exactly as long as it asks only for configs the recorded one measured (the
cost model, the agent and the seed are the ones it ran with: the shipped ones, or with --agent
those of a folder, for runs recorded by an agent shipped before (`benchmarks/results/h200-2026-12-04h/
agent-cfbe488`: the runs of that folder from `bench-auto-retrained` on); refusals replay as
recorded; the registers, spills and shared memory the static stage added to each measurement
come from the run's results.db when it is there). A change that only ends sessions earlier (a
stop rule) replays every session exactly; one that changes the path leaves the recorded one, and
such a session is reported as having left it at that evaluation, not given an invented time —
unless --fill names runs whose sessions measured the config (their time is then used, and the
row says how many times were filled in; a filled time is another session's, on another machine).
Per problem: evaluations recorded and replayed, the best time of each, replayed over recorded
(the noisy single measurements the strategy saw, not the confirmation re-timing). A session is
replayed with the strategy options it ran with: rows record them since the eighth session of
2026-12-04; older rows ran before `jump_draws` and `climb_ridge` existed, whose defaults changed
then, and replay with those two off (LEGACY_OPTIONS); options added since (`static`, `climb_doubt`,
`second_opinion`, `binaries`, `twins`, `twin_after`, `alike`, `losing`, `refit_async`,
`climb_warps`, `climb_pair_near`) are off for rows that do not record them (ADDED_OPTIONS). Until the sixth session of
2026-12-05 rows recorded ppo's default refits (none) where the session had refitted every 8
measurements (every 4 in doubt) on spaces of 64 configs or more; those rows replay with the refits
set as the session set them (SIZED_OPTIONS), newer rows with all options as run (`options_as_run`).
A session that asked the compile stage about configs it had not measured (`static`) was told what
had compiled by then, which depends on timing: it replays exactly from rows that keep those answers
(`observed`, since the fifth session of 2026-12-05), and leaves the recorded path early from rows
that ran with `static` before them (`h100-2026-12-05/bench-auto`). Rows record the space they
searched since the third session of 2026-12-06; older ones replay in today's space less the values
added since (SPACE_ADDED), or with --current-space in today's whole.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))


# The options whose defaults changed since the first recorded sessions, as those sessions ran.
LEGACY_OPTIONS = {"jump_draws": 1.0, "climb_ridge": 0.0}
# Options run_session sets by the space's size when the caller does not (ppo's refits).
SIZED_OPTIONS = ("refit", "doubt_refit")
# Options added since rows record theirs (ninth session of 2026-12-04), with the value that is the
# behaviour before them: a row without one ran without it.
ADDED_OPTIONS = {"static": 0.0, "climb_doubt": 0.0, "second_opinion": 0.0, "binaries": 0.0, "twins": 0.0,
                 "twin_after": 0.0, "alike": 0.0, "losing": 0.0, "refit_async": 0.0, "climb_warps": 0.0,
                 "climb_pair_near": 0.0}


# Values added to a kernel's live space since the first recorded sessions, which rows without a
# record of their space did not search: matmul's persistent TMA kernel (third session of 2026-12-06),
# attention's warp-specialised one (sixth session of 2026-12-06).
SPACE_ADDED = {"matmul": {"TMA": [2]}, "attention": {"TMA": [3, 4]}}


class LeftThePath(Exception):
    pass


def use_agent(folder: Path) -> None:
    """Makes the agent of `folder` (policy.bin, and cost_model.bin or cost_model.bin.xz) the one the
    ppo strategy uses in this process."""
    import lzma
    import tempfile

    from dr_kernel import _core

    policy, model = folder / "policy.bin", folder / "cost_model.bin"
    packed = folder / "cost_model.bin.xz"
    if not policy.exists() or not (model.exists() or packed.exists()):
        raise SystemExit(f"--agent {folder}: it needs policy.bin and cost_model.bin (or cost_model.bin.xz)")
    if model.exists():
        _core.load_agent(str(policy), str(model))
        return
    with tempfile.TemporaryDirectory() as tmp:
        unpacked = Path(tmp) / "cost_model.bin"
        unpacked.write_bytes(lzma.decompress(packed.read_bytes()))
        _core.load_agent(str(policy), str(unpacked))


STATIC = ("n_regs", "n_spills", "shared", "occupancy")


def static_fields(store: Path) -> dict[tuple, dict]:
    """(config, ms or status) → what the static stage added to that measurement (registers, spills,
    shared memory, occupancy: the agent's state reads them), from the run's results store."""
    import sqlite3

    out: dict[tuple, dict] = {}
    if not store.exists():
        return out
    # immutable: a committed run's store is only read, and a store in WAL mode opened read-only would
    # still leave -shm and -wal files beside it in the checkout.
    with contextlib.closing(sqlite3.connect(f"file:{store}?immutable=1", uri=True)) as db:
        for config, status, ms, *values in db.execute(f"SELECT config, status, ms, {', '.join(STATIC)} "
                                                      "FROM measurements"):
            key = tuple(sorted(json.loads(config).items()))
            fields = {k: v for k, v in zip(STATIC, values, strict=True) if v is not None}
            out[(key, ms if status == "ok" else status)] = fields
    return out


def fill_times(runs: list[Path]) -> dict[str, dict[tuple, dict]]:
    """--fill: problem → config → a measurement of that config in another recorded run (the first
    run listed that has it; a run of 50-evaluation sessions holds the most)."""
    out: dict[str, dict[tuple, dict]] = {}
    for run in runs:
        for path in sorted(run.glob("*.json")):
            row = json.loads(path.read_text())
            for session in (v for k, v in row.items() if k.startswith("dr_kernel") and isinstance(v, dict)):
                for h in session.get("history") or []:
                    out.setdefault(row["problem"], {}).setdefault(tuple(sorted(h["config"].items())), h)
    return out


def searched_space(row: dict, kernel, limits, current: bool = False):
    """The space the recorded session searched: the row's record of it (since the third session of
    2026-12-06); for older rows the kernel's space today but for the values added since
    (SPACE_ADDED), or with `current` today's whole (rows recorded by code that had them but did not
    record its space yet: `h100-2026-12-06c/bench-auto`, whose space is today's as of d8214d0; since
    then matmul searches the persistent kernel only from two waves of tiles on, and three of its
    twelve sessions leave the recorded path with it)."""
    from dr_kernel.space import make_space

    recorded = row["dr_kernel"].get("space")
    if recorded:
        return make_space(recorded["values"], constraints=recorded["constraints"])
    values, constraints = kernel.space_parts(row["shape"], limits)
    if not current:
        for name, added in SPACE_ADDED.get(kernel.name, {}).items():
            if name in values:
                values[name] = [v for v in values[name] if v not in added]
    return make_space(values, constraints=constraints)


def replay(row: dict, options: dict, stop: str, static: dict[tuple, dict], fill: dict[tuple, dict] | None = None,
           trace: bool = False, current_space: bool = False) -> dict:
    from dr_kernel.analysis import H200
    from dr_kernel.kernels import get
    from dr_kernel.session import builtin_problem, run_session
    from dr_kernel.tuner import stop_options

    session = row["dr_kernel"]
    recorded = {tuple(sorted(h["config"].items())): h for h in session["history"]}
    kernel = get(row["kernel"])
    space = searched_space(row, kernel, H200, current_space)
    problem = builtin_problem(kernel, row["shape"], row["dtype"], row["device"])
    asked: list[int] = [0]
    filled: list[int] = [0]

    def measure(batch, best_ms):
        out = []
        for config in batch:
            key = tuple(sorted(config.items()))
            own = key in recorded
            h = recorded[key] if own else (fill or {}).get(key)
            if h is None:
                raise LeftThePath(asked[0] + 1)
            asked[0] += 1
            filled[0] += not own
            if trace:
                shown = f"{h['ms']:.4f} ms" if h.get("ms") is not None else h["status"]
                print(f"    {asked[0]:3d} {shown:>16} {'        ' if own else '(filled)'} {config}")
            m = {"status": h["status"]}
            if h.get("ms") is not None:
                m.update(ms=h["ms"], ms_p20=h["ms"], ms_p80=h["ms"])
            m.update(static.get((key, h["ms"] if h["status"] == "ok" else h["status"]), {}))
            out.append((m, 0.0))
        return out

    # The compile stage's answers, as the session had them (rows since the fifth session of
    # 2026-12-05): a replay that asks another question, or asks past them, has left the path.
    observed = session.get("observed")
    answered: list[int] = [0]

    def observe(config):
        if observed is None:
            return None
        if answered[0] >= len(observed) or observed[answered[0]][0] != config:
            raise LeftThePath(asked[0] + 1)
        answered[0] += 1
        return observed[answered[0] - 1][1]

    # The options the session ran with, less its stop rule's: the replay's stop rule replaces those.
    # Rows before the sixth session of 2026-12-05 recorded the strategy's default refits (none)
    # where run_session had set them by the space's size (every 8 measurements, every 4 while in
    # doubt, on spaces of 64 configs or more): those two are left to run_session again, as live.
    stop_rule = stop_options("auto", session["strategy"])
    ran_with = {**ADDED_OPTIONS, **session.get("options", LEGACY_OPTIONS)}
    as_run = session.get("options_as_run", False)
    ran_with = {k: v for k, v in ran_with.items() if k not in stop_rule and (as_run or k not in SIZED_OPTIONS)}
    ran_with.update(stop_options(stop, session["strategy"]))
    # A session that opened with configs of a variant no table holds (BuiltinKernel.opening) opens so again.
    opening = [h["config"] for h in session["history"] if str(h.get("why") or "").startswith("opening")]
    try:
        result = run_session(problem, space, measure, strategy=session["strategy"], max_evals=session["max_evals"],
                             options={**ran_with, **options}, observe=observe, opening=opening)
    except LeftThePath as left:
        return {"left_at": left.args[0]}
    ok = [m["ms"] for _, m, _ in result.history if m["status"] == "ok"]
    return {"evaluations": result.evaluations, "best_ms": min(ok) if ok else math.nan, "filled": filled[0]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, help="gpu_bench.py --out folders")
    p.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                   help="a strategy option on top of the stop rule's")
    p.add_argument("--stop", default="auto", choices=("auto", "budget"))
    p.add_argument("--fill", action="append", default=[], type=Path, metavar="RUN",
                   help="configs the recorded session did not measure take their time from this run's session of "
                        "the same problem (e.g. one of 50 evaluations), so that a change can be followed further")
    p.add_argument("--problems", help="comma-separated problems to replay (default: all)")
    p.add_argument("--trace", action="store_true", help="print every measurement the replayed session asks for")
    p.add_argument("--agent", type=Path, help="the agent the runs were recorded with, if not the shipped one: a folder "
                                              "of policy.bin and cost_model.bin (or .bin.xz)")
    p.add_argument("--current-space", action="store_true",
                   help="rows that do not record their space searched today's whole (see searched_space)")
    args = p.parse_args()
    if args.agent:
        use_agent(args.agent)
    options = {k: float(v) for k, _, v in (o.partition("=") for o in args.option)}
    fill = fill_times(args.fill)
    wanted = set(args.problems.split(",")) if args.problems else None
    for run in args.runs:
        used, recorded_used, ratios, left, filled = [], [], [], 0, 0
        static = static_fields(run / "results.db")
        print(f"{run}:" + ("" if static else " (no results.db: sessions that read registers or shared memory "
                                              "may leave the recorded path)"))
        for path in sorted(run.glob("*.json")):
            row = json.loads(path.read_text())
            if "dr_kernel" not in row or not row["dr_kernel"].get("history"):
                continue
            if wanted is not None and row["problem"] not in wanted:
                continue
            history = row["dr_kernel"]["history"]
            best = min((h["ms"] for h in history if h["status"] == "ok"), default=math.nan)
            if args.trace:
                print(f"  {row['problem']}:")
            r = replay(row, options, args.stop, static, fill.get(row["problem"]), args.trace, args.current_space)
            if "left_at" in r:
                left += 1
                unrecorded = (row["dr_kernel"].get("options") or {}).get("static", 0) > 0 and \
                    "observed" not in row["dr_kernel"]
                print(f"  {row['problem']:32} recorded {len(history):3d} evaluations; replay left the recorded path "
                      f"at evaluation {r['left_at']}"
                      + (" (the session asked the compile stage, and its row predates the answers: `observed`)"
                         if unrecorded else ""))
                continue
            filled += r["filled"] > 0
            used.append(r["evaluations"])
            recorded_used.append(len(history))
            ratios.append(r["best_ms"] / best)
            print(f"  {row['problem']:32} recorded {len(history):3d} evaluations, best {best:.4f} ms; replayed "
                  f"{r['evaluations']:3d}, best {r['best_ms']:.4f} ms ({r['best_ms'] / best:.3f}x)"
                  + (f", {r['filled']} times filled in" if r["filled"] else ""))
        if used:
            geo = math.exp(sum(math.log(x) for x in used) / len(used))
            geo_recorded = math.exp(sum(math.log(x) for x in recorded_used) / len(recorded_used))
            print(f"  {len(used) - filled} replayed exactly" + (f", {filled} with times filled in" if filled else "")
                  + f" (geomean evaluations {geo_recorded:.1f} recorded, {geo:.1f} "
                  f"replayed; worst best {max(ratios):.3f}x the recorded), {left} left the recorded path")


if __name__ == "__main__":
    main()
