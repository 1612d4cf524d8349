"""A TPE anchor for benchmarks/agent.md: Optuna's TPE sampler replayed over the bundled tables.

Each table is searched in the same space `dr-kernel replay` replays it in (the product of the values
its rows hold less the configs that break its space row's constraints, which cost no evaluation;
configs of that space absent from the table counting as failed evaluations). One evaluation is one
distinct config: a config TPE asks for again is answered from its cache, as any tuner would, without
counting. Failed configs score 10x the table's slowest ok time. The figure is the median over seeds
of the evaluations until the best so far is within 1.05x of the table's best ok config (budget + 1
when never), as agent_eval and `dr-kernel replay` count it.

    .venv/bin/python benchmarks/tpe_anchor.py --repeats 10 --budget 100 --json tpe.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import optuna
from dr_kernel import _core, bundled_tables


def _key(config: dict) -> tuple:
    return tuple(sorted((k, json.dumps(v)) for k, v in config.items()))


def evals_to_within(table, budget: int, within: float, seed: int) -> int:
    rows = table.rows()
    values: dict[str, list] = {}
    for config, _ in rows:
        for name, value in config.items():
            values.setdefault(name, [])
            if value not in values[name]:
                values[name].append(value)
    for name in values:
        values[name].sort(key=lambda v: (isinstance(v, str), v))
    space = _core.Space(list(values.items()), list(table.constraints))
    ok_ms = {_key(c): m["ms"] for c, m in rows if m["status"] == "ok"}
    penalty = 10 * max(ok_ms.values())
    target = within * table.oracle_ms
    seen: dict[tuple, float] = {}
    state = {"reached": 0}

    def objective(trial: optuna.Trial) -> float:
        config = {name: vals[trial.suggest_int(name, 0, len(vals) - 1)] for name, vals in values.items()}
        key = _key(config)
        if not space.is_valid(config):  # Not a config of the problem: TPE learns to avoid it, free.
            return math.log(penalty)
        if key not in seen:
            seen[key] = ok_ms.get(key, penalty)
            if not state["reached"] and seen[key] <= target:
                state["reached"] = len(seen)
        if state["reached"] or len(seen) >= budget:
            trial.study.stop()
        return math.log(seen[key])

    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    # Repeats of cached configs and configs outside the space do not count; stop anyway after many.
    study.optimize(objective, n_trials=20 * budget)
    return state["reached"] or budget + 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", type=Path, help="tables (default: the bundled H200 tables)")
    parser.add_argument("--repeats", type=int, default=10, help="seeds 0 .. R-1 (default 10)")
    parser.add_argument("--budget", type=int, default=100)
    parser.add_argument("--within", type=float, default=1.05)
    parser.add_argument("--json", type=Path, help="write {problem key: [median, evals per seed]} here")
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tables = _core.read_tables([str(p) for p in (args.data or bundled_tables())])
    out = {}
    for table in tables:
        p = table.problem
        label = p["family"] + " " + " ".join(f"{k}={v}" for k, v in p["shape"].items())
        if p["dtype"]:
            label += " " + p["dtype"]
        runs = [evals_to_within(table, args.budget, args.within, seed) for seed in range(args.repeats)]
        out[label] = {"family": p["family"], "median": statistics.median(runs), "runs": runs}
        print(f"{label:<60} tpe {statistics.median(runs):6.1f}  {runs}", flush=True)
    medians = [v["median"] for v in out.values()]
    print(f"geometric mean {math.exp(sum(map(math.log, medians)) / len(medians)):.1f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
