"""What ppo's asynchronous refits (`refit_async`) save of a tuning session's wall time (issue 10),
without a GPU: sessions on the recorded tables in which every measurement takes a fixed latency
(`--latency`, the compile wait and timing of a GPU evaluation: 0.2-0.5 s on the H200 machine), with
the refits a GPU session makes (every 8 measurements, every 4 while the walk doubts its prior) and
`stop="auto"`, each problem replayed by an agent that never saw it (leave-one-problem-out, the
agents cached in --agents as by lofo_options.py). Per problem and mode: wall time, evaluations,
the time outside the measurements (the strategy's: proposals and the refits it waited for) and
the best found over the table's best.

    .venv/bin/python benchmarks/refit_overlap.py --agents /tmp/lopo_agents [--latency 0.3]
        [--families matmul,attention] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))


def session(table, space, options: dict, latency: float) -> dict:
    from dr_kernel.session import run_session

    times = {json.dumps(c, sort_keys=True): m for c, m, *_ in table.rows()}
    slept = [0.0]

    def measure(batch, best_ms):
        time.sleep(latency * len(batch))
        slept[0] += latency * len(batch)
        out = []
        for config in batch:
            m = times[json.dumps(config, sort_keys=True)]
            row = {"status": m["status"]}
            if m.get("ms") is not None:
                row.update(ms=m["ms"], ms_p20=m["ms"], ms_p80=m["ms"])
            out.append((row, latency))
        return out

    started = time.perf_counter()
    result = run_session(dict(table.problem), space, measure, strategy="ppo", max_evals=50, options=options)
    wall = time.perf_counter() - started
    ok = [m["ms"] for _, m, _ in result.history if m["status"] == "ok"]
    return {"wall_s": wall, "outside_measuring_s": wall - slept[0], "evaluations": result.evaluations,
            "best_ms": min(ok) if ok else math.nan}


def main() -> int:
    from dr_kernel import _core, bundled_tables
    from dr_kernel.holdout import use_agent_without_problem
    from dr_kernel.space import make_space
    from dr_kernel.tuner import AUTO_STOP

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--agents", type=Path, required=True, help="folder of the held-out agents (cache)")
    p.add_argument("--seed", type=int, default=0, help="training seed of the held-out agents")
    p.add_argument("--latency", type=float, default=0.3, help="seconds each measurement takes")
    p.add_argument("--families", default="matmul,attention")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    families = set(args.families.split(","))
    tables = _core.read_tables([str(t) for t in bundled_tables()])
    rows = []
    for i, table in enumerate(tables):
        if table.problem["family"] not in families:
            continue
        use_agent_without_problem(i, tables, args.agents, seed=args.seed)
        configs = [c for c, *_ in table.rows()]
        space = make_space(configs=configs)
        best = min(m["ms"] for _, m, *_ in table.rows() if m.get("status") == "ok")
        name = f"{table.problem['family']} {json.dumps(table.problem['shape'])} {table.problem.get('dtype', '')}"
        row = {"problem": name}
        for mode in (0, 1):
            options = {**AUTO_STOP, "refit": 8, "refit_async": mode, "doubt_refit": 4}
            r = session(table, space, options, args.latency)
            r["over_best"] = r["best_ms"] / best
            row["async" if mode else "sync"] = r
        rows.append(row)
        shown = [f"{key} {r['wall_s']:5.2f} s ({r['evaluations']:2d}, outside {r['outside_measuring_s']:4.2f}, "
                 f"{r['over_best']:.3f}x)" for key, r in (("sync", row["sync"]), ("async", row["async"]))]
        print(f"{name[:60]:60s} {'  '.join(shown)}", flush=True)
    for key in ("sync", "async"):
        walls = [r[key]["wall_s"] for r in rows]
        outside = [r[key]["outside_measuring_s"] for r in rows]
        best = math.exp(sum(math.log(r[key]["over_best"]) for r in rows) / len(rows))
        print(f"{key}: median wall {sorted(walls)[len(walls) // 2]:.2f} s, total outside measuring "
              f"{sum(outside):.2f} s, geomean best {best:.4f}x")
    if args.json:
        args.json.write_text(json.dumps({"latency_s": args.latency, "seed": args.seed, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
