"""How long a first call waits for compiles, simulated on the CPU from the bundled H200 tables: the
real session code (run_session, its StaticStage and CompilePool, ppo with the first call's stop rule)
over a pool whose workers sleep each config's recorded compile seconds instead of compiling, and a
"GPU" that sleeps each config's recorded load seconds plus its timed launches. Every time is scaled
by --scale (0.25: four times faster than recorded, though the pool's start and the host's search
are not scaled) and figures are given back in recorded seconds. It compares values of ppo options,
each problem with the same session seed for each value: what a change to what the session asks for
or compiles ahead does to the waiting. (It measured ppo's `hint` of the first session of
2026-12-06, the configs its next jumps would likely measure compiled while the batch was measured:
no gain, and the option was removed; benchmarks/results/compile-wait-sim-hint.json. Nor did the
session's polling its compile pool while the GPU measured, tried in the second session of
2026-12-06: 104 of the 127 configs not ready when asked for were already compiling, not queued;
benchmarks/results/compile-wait-sim-polls.json. Nor, in the fifth session of 2026-12-06, a climb
that measures first a neighbour whose compile has finished, from the next 3 or 16 in promise
(ppo option `climb_ready`, prototyped): median compile wait 1.62, 1.67 and 1.62 s, 31, 32 and 30
configs cold of about 545; the climb's neighbours were mostly compiled already, and what a first
call waits for is the guesses still compiling when asked for;
benchmarks/results/compile-wait-sim-climb-ready.json.)

    .venv/bin/python benchmarks/compile_wait_sim.py [--workers 15] [--scale 1] [--json F] twins=1 twins=0

An option that changes what the session is told (`static`, say) changes which configs it measures,
and a problem's first call can then move by 2x either way through the configs' own load and launch
seconds alone (`static=1 static=0`: 0.45-2.3x per problem, medians 3.19 and 2.36 s): compare medians
over all problems, and per-evaluation waits, not single problems.

The decisions are the shipped agent's (it trained on these tables: the evaluations are not a result
here, only the waiting). The host's own search time (refits, the policy) is real, on this machine.
"""

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from dr_kernel import _core, bundled_tables  # noqa: E402
from dr_kernel.analysis import StaticReport  # noqa: E402
from dr_kernel.compile_pool import CompilePool, CompileRequest  # noqa: E402
from dr_kernel.session import StaticStage, run_session  # noqa: E402
from dr_kernel.space import make_space  # noqa: E402
from dr_kernel.tuner import stop_options  # noqa: E402

LAUNCHES = 30  # Timed launches of an ok config (ReplayCost's figure).
OVERHEAD_S = 0.05  # Setting up one measurement.


def recorded_compile(request: CompileRequest) -> StaticReport:
    """A compile worker's task: sleeps the config's recorded compile seconds (scaled) and answers
    what the recording says compiling it gave."""
    row = request.shape
    time.sleep(row["compile_s"] * row["scale"])
    report = StaticReport(kernel="recorded", config=dict(request.config), compile_s=row["compile_s"])
    status = row["status"]
    if status == "compile_timeout":
        report.reason = "compile timed out (recorded)"
    elif status == "compile_error":
        report.reason = "did not compile (recorded)"
    else:
        report.binary_hash = json.dumps(sorted(request.config.items()))
        report.n_regs, report.n_spills, report.shared = row["n_regs"], row["n_spills"], row["shared"]
        report.valid = status != "out_of_resources"
        if not report.valid:
            report.reason = "over the device's limits (recorded)"
    return report


def key(config: dict) -> str:
    return json.dumps(sorted((k, int(v) if float(v).is_integer() else v) for k, v in config.items()))


def session(table, workers: int, scale: float, seed: int, options: dict) -> dict:
    recorded = table.rows()
    rows = {key(c): m for c, m in recorded}
    params: dict[str, set] = {}
    for config, _ in recorded:
        for name, value in config.items():
            params.setdefault(name, set()).add(value)
    space = make_space({name: sorted(values) for name, values in params.items()})

    def describe(config: dict) -> CompileRequest:
        m = rows.get(key(config), {"status": "compile_error"})
        compile_s = m.get("compile_s")
        row = {"status": m["status"], "scale": scale,
               "compile_s": compile_s if compile_s is not None and math.isfinite(compile_s) else 1.0,
               "n_regs": max(0, int(m.get("n_regs", 0) or 0)), "n_spills": max(0, int(m.get("n_spills", 0) or 0)),
               "shared": max(0, int(m.get("shared", 0) or 0))}
        return CompileRequest("recorded", dict(config), shape=row)

    def measure(configs, best_ms):
        out = []
        for config in configs:
            m = rows.get(key(config), {"status": "compile_error"})
            if m["status"] != "ok":
                out.append(({"status": m["status"], "error": "recorded"}, 0.0))
                continue
            load_s = m.get("load_s") if m.get("load_s") is not None and math.isfinite(m["load_s"]) else 0.02
            seconds = load_s + LAUNCHES * m["ms"] / 1e3 + OVERHEAD_S
            time.sleep(seconds * scale)
            out.append(({"status": "ok", "ms": m["ms"], "ms_p20": m["ms"], "ms_p80": m["ms"], "relerr": 0.0},
                        seconds * scale))
        return out

    # Forked workers: the task is this script's own function, which a fresh process could not import.
    stage = StaticStage(CompilePool(workers=workers, timeout_s=60 * scale, task=recorded_compile, fork=True), describe)
    try:
        result = run_session(dict(table.problem), space, measure, static=stage, strategy="ppo", max_evals=50,
                             seed=seed, options={**stop_options("auto", "ppo"), **options})
    finally:
        stage.close()
    return {"wall_s": result.wall_s / scale, "compile_s": result.split_s.get("compile", 0.0) / scale,
            "evaluations": result.evaluations, "readiness": dict(result.compile_readiness)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=15,
                        help="compile workers (the H200 machine's 16 cores, less one)")
    parser.add_argument("--scale", type=float, default=0.25, help="simulated seconds per recorded second")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("options", nargs="+", help="the ppo option values to compare, NAME=VALUE each")
    args = parser.parse_args()
    settings = [dict([(o.split("=", 1)[0], float(o.split("=", 1)[1]))]) for o in args.options]
    tables = _core.read_tables([str(t) for t in bundled_tables()])
    out = []
    for table in tables:
        label = f"{table.problem['family']} {json.dumps(table.problem['shape'])} {table.problem.get('dtype', '')}"
        runs = [session(table, args.workers, args.scale, args.seed, options) for options in settings]
        out.append({"problem": label, "runs": runs})
        print(label, " | ".join(f"{r['wall_s']:.2f} s ({r['compile_s']:.2f} compile, {r['evaluations']} ev, "
                                f"cold {r['readiness'].get('cold', 0)})" for r in runs), flush=True)
    for i, options in enumerate(settings):
        walls = [p["runs"][i]["wall_s"] for p in out]
        waits = [p["runs"][i]["compile_s"] for p in out]
        cold = sum(p["runs"][i]["readiness"].get("cold", 0) for p in out)
        asked = sum(sum(p["runs"][i]["readiness"].values()) for p in out)
        print(f"{options}: median wall {statistics.median(walls):.2f} s, median compile wait "
              f"{statistics.median(waits):.2f} s, cold {cold} of {asked} configs asked")
    if args.json:
        args.json.write_text(json.dumps({"settings": settings, "workers": args.workers, "scale": args.scale,
                                         "problems": out}, indent=1))


if __name__ == "__main__":
    main()
