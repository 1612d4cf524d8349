"""Replaying the agent on kernel families it has never seen: leave-one-family-out.

The shipped agent is trained on every bundled table, so a replay of it on those tables is
in-sample: no result. What a user meets is a kernel family the agent has never seen, and that is
what this replays: for each family of the tables, the cost model and the agent are trained with
the shipped recipe (`dr-kernel train`'s defaults) on the other families' tables only, then the
family's problems are replayed with it. The shipped agent is put back afterwards.

    dr-kernel replay --holdout family            # every strategy; ppo by families held out
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

# The shipped recipe: `dr-kernel train`'s defaults, and the agents trained here.
PPO_STEPS, BC_EPISODES, SYNTHETIC = 200_000, 1500, 24


def problem_key(problem: Mapping[str, Any]) -> str:
    """One problem's identity across tables, stores and trained_on.json."""
    return json.dumps({k: problem[k] for k in ("family", "shape", "dtype", "device")}, sort_keys=True)


def shipped_agent_trained_on() -> set[str] | None:
    """The problem_key()s the ppo strategy's agent (agent_folder(): the shipped one unless
    DR_KERNEL_AGENT names another) was trained on, from the trained_on.json that `dr-kernel train`
    writes beside policy.bin; None when it does not say (then every replay of it is suspect)."""
    from . import agent_folder

    listed = agent_folder() / "trained_on.json"
    if not listed.exists():
        return None
    return {problem_key(p) for p in json.loads(listed.read_text())["problems"]}


def use_agent_without(family: str, training: Sequence[Any], folder: Path, ppo_steps: int = PPO_STEPS,
                      bc_episodes: int = BC_EPISODES, synthetic: int = SYNTHETIC, seed: int = 0,
                      counters: bool = False, alike: float | None = None) -> None:
    """Makes the agent trained with the shipped recipe on `training` less `family`'s tables the
    one the ppo strategy uses: loaded from `folder` when an earlier call saved it there
    (FAMILY.policy.bin, FAMILY.model.bin), else trained and saved. Benchmarks that replay the
    held-out agent under several settings train it once."""
    others = [t for t in training if t.problem["family"] != family]
    if not others:
        raise ValueError(f"--holdout family: every training table is of family {family!r}, so an agent that has "
                         "not seen it has nothing to learn from; give tables of other families too")
    _use_agent(family, others, folder, ppo_steps, bc_episodes, synthetic, seed, counters, alike)


def use_agent_without_problem(index: int, training: Sequence[Any], folder: Path, ppo_steps: int = PPO_STEPS,
                              bc_episodes: int = BC_EPISODES, synthetic: int = SYNTHETIC, seed: int = 0,
                              counters: bool = False, alike: float | None = None) -> None:
    """Leave-one-problem-out's use_agent_without: the agent trained on every table of `training`
    but the index-th, loaded from `folder` (problemINDEX.policy.bin, problemINDEX.model.bin) or
    trained and saved there."""
    others = [t for j, t in enumerate(training) if j != index]
    _use_agent(f"problem{index}", others, folder, ppo_steps, bc_episodes, synthetic, seed, counters, alike)


def _use_agent(name: str, tables: Sequence[Any], folder: Path, ppo_steps: int, bc_episodes: int, synthetic: int,
               seed: int, counters: bool = False, alike: float | None = None) -> None:
    """The agent NAME.policy.bin and NAME.model.bin in `folder` becomes the ppo strategy's: loaded
    when there, else trained on `tables` and saved (training makes it the strategy's too). With
    `counters`, its cost model describes problems by their probe's hardware counters; with `alike`
    (not None), its practice walks correct their beliefs with that width of ppo's `alike` (the recipe
    leaves it off). The folder does not record either: give each setting a folder of its own."""
    from . import _core

    policy, model = Path(folder) / f"{name}.policy.bin", Path(folder) / f"{name}.model.bin"
    if policy.exists() and model.exists():
        _core.load_agent(str(policy), str(model))
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    _core.train_agent(tables, ppo_steps, bc_episodes, synthetic, seed, str(policy), str(model), counters=counters,
                      alike=alike)


class MergedReport:
    """Replay reports of several calls as one (the interface of _core.ReplayReport that the
    command line uses: to_json() and curves), problems family by family."""

    def __init__(self, reports: Sequence[Any], meta: Mapping[str, Any]) -> None:
        self._problems = [p for r in reports for p in json.loads(r.to_json())["problems"]]
        self.curves = [c for r in reports for c in r.curves]
        self._meta = dict(meta)

    def to_json(self) -> str:
        return json.dumps({**self._meta, "problems": self._problems})


def replay_held_out(tables: Sequence[Any], strategy: str, budget: int, repeats: int, within: float, seed: int,
                    options: Mapping[str, float], *, training: Sequence[Any] | None = None,
                    ppo_steps: int = PPO_STEPS, bc_episodes: int = BC_EPISODES, synthetic: int = SYNTHETIC,
                    progress: Callable[[str], None] | None = None, trace: bool = False) -> MergedReport:
    """Replays `strategy` (one that uses the trained agent) on `tables`, each family's problems
    with an agent trained on `training` (default: `tables`) without any table of that family.
    Raises ValueError when a family leaves too little to train on."""
    from . import _core, load_agent

    training = list(training if training is not None else tables)
    families = list(dict.fromkeys(t.problem["family"] for t in tables))
    reports = []
    try:
        with tempfile.TemporaryDirectory(prefix="dr_kernel_holdout_") as folder:
            for family in families:
                if progress is not None:
                    others = sum(t.problem["family"] != family for t in training)
                    progress(f"{strategy}: training an agent without {family} ({others} tables)")
                use_agent_without(family, training, Path(folder), ppo_steps, bc_episodes, synthetic, seed)
                held = [t for t in tables if t.problem["family"] == family]
                reports.append(_core.replay(held, strategy, budget, repeats, within, seed, dict(options), trace))
    finally:
        load_agent()
    return MergedReport(reports, {"strategy": strategy, "budget": budget, "within": within, "repeats": repeats,
                                  "seed": seed, "agent_training": "leave-one-family-out", "ppo_steps": ppo_steps})
