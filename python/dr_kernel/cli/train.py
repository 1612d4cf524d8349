"""`dr-kernel train`: the cost model and the PPO agent from recorded tables."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..holdout import BC_EPISODES, PPO_STEPS, SYNTHETIC
from ..progress import Progress
from .common import MIN_TRAINING_ROWS, SEED, UsageError, _check_range, _read_tables


def cmd_train(args: argparse.Namespace) -> int:

    from .. import MODEL_FILE, POLICY_FILE, _core

    _check_range(args, ppo_steps=(1, 10**10), bc_episodes=(0, 10**7), synthetic=(0, 10**5), seed=SEED)
    paths, tables = _read_tables(args.data)
    measured = sum(m["status"] == "ok" for t in tables for _, m in t.rows())
    if measured < MIN_TRAINING_ROWS:
        raise UsageError(f"--data holds {measured} rows of configs that ran correctly; the cost model and the agent "
                         f"need at least {MIN_TRAINING_ROWS}: sweep more configs or problems")
    out = args.out
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give a folder for policy.bin, cost_model.bin and trained_on.json")
    out.mkdir(parents=True, exist_ok=True)
    print(f"training the cost model and the agent on {len(tables)} problems from {len(paths)} files", file=sys.stderr)
    start = time.perf_counter()

    bar = Progress(args.ppo_steps, "train: PPO", unit="step")
    done = [0]

    def progress(steps: int, mean_return: float, mean_length: float) -> None:
        bar.update(steps - done[0], mean_return=f"{mean_return:.3f}", episode=f"{mean_length:.1f}")
        done[0] = steps

    try:
        report = _core.train_agent(tables, args.ppo_steps, args.bc_episodes, args.synthetic, args.seed,
                                   str(out / POLICY_FILE.name), str(out / MODEL_FILE.name), progress)
    finally:
        bar.close()
    report["seconds"] = time.perf_counter() - start
    # What the agent has seen, so that replay shows it only on what it has not.
    (out / "trained_on.json").write_text(json.dumps({
        "files": [Path(p).name for p in paths], "ppo_steps": args.ppo_steps, "bc_episodes": args.bc_episodes,
        "synthetic": args.synthetic, "seed": args.seed,
        "problems": [{k: t.problem[k] for k in ("family", "shape", "dtype", "device")} for t in tables],
    }, indent=1) + "\n")
    if args.json:
        print(json.dumps(report))
    else:
        print(f"cost model: {report['model_seconds']:.1f} s; behaviour cloning on {report['demonstrations']:,} expert "
              f"steps ({report['bc_accuracy']:.1%} agreement): {report['bc_seconds']:.1f} s; PPO "
              f"{report['ppo_steps']:,} simulated steps over {report['table_tasks']} recorded and "
              f"{report['synthetic_tasks']} synthetic problems: {report['ppo_seconds']:.1f} s")
        print(f"wrote {out / POLICY_FILE.name}, {out / MODEL_FILE.name} and {out / 'trained_on.json'}")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("train", help="pre-train the cost model and the PPO agent on recorded tables")
    p.add_argument("--data", nargs="+", type=Path, help="recorded tables; default: the bundled H200 tables")
    p.add_argument("--ppo-steps", type=int, default=PPO_STEPS,
                   help="simulated PPO steps (default 200,000: on kernel families it has not seen, the agent did "
                        "better than with 1,000,000, which fit the training families)")
    p.add_argument("--bc-episodes", type=int, default=BC_EPISODES,
                   help="expert episodes for behaviour cloning (default 1500)")
    p.add_argument("--synthetic", type=int, default=SYNTHETIC,
                   help="synthetic problems between the recorded ones (default 24)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True,
                   help="folder for policy.bin, cost_model.bin and trained_on.json (the shipped agent is "
                        "python/dr_kernel/data/agent: name it to replace it)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_train)
