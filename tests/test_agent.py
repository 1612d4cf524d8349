"""The shipped PPO agent and `dr-kernel train`."""

import json
import lzma
import math
import shutil
import subprocess
import sys

import pytest
from dr_kernel import AGENT_DIR, POLICY_FILE, _core, load_agent, model_file


def test_the_package_ships_a_trained_agent_and_ppo_uses_it(recorded_tables):
    tables = recorded_tables
    assert POLICY_FILE.exists() and model_file(AGENT_DIR) is not None
    assert _core.has_agent()
    # On bundled problems (the shipped agent has seen their tables) the greedy agent reaches 5 % of
    # each table's best within the budget, and in a geometric mean of a few evaluations (matmul
    # 1024^3, whose 10 us kernels were timed with 10-40 % spread, takes the most: about 30).
    report = json.loads(_core.replay(tables, "ppo", 50, 1, 1.05, 0, {}).to_json())
    evals = [p["evals_to_within"]["median"] for p in report["problems"]]
    assert all(e <= 50 for e in evals), evals
    assert math.exp(sum(map(math.log, evals)) / len(evals)) <= 4, evals
    random = json.loads(_core.replay(tables, "random", 50, 20, 1.05, 0, {}).to_json())
    ppo_total = sum(p["evals_to_within"]["median"] for p in report["problems"])
    random_total = sum(p["evals_to_within"]["median"] for p in random["problems"])
    assert ppo_total * 3 < random_total


def test_train_writes_an_agent_that_loads(tmp_path, tables):
    out = subprocess.run(
        [sys.executable, "-m", "dr_kernel.cli", "train", "--ppo-steps", "2048", "--bc-episodes", "20",
         "--synthetic", "2", "--out", str(tmp_path), "--json"],
        capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["ppo_steps"] >= 2048 and report["demonstrations"] > 0 and report["table_tasks"] == len(tables)
    # The problems it trained on are listed beside it, for replay's train/test split.
    trained_on = json.loads((tmp_path / "trained_on.json").read_text())
    assert len(trained_on["problems"]) == len(tables) and trained_on["ppo_steps"] == 2048
    load = subprocess.run(
        [sys.executable, "-c", f"from dr_kernel import _core; _core.load_agent({str(tmp_path / 'policy.bin')!r}, "
                               f"{str(tmp_path / 'cost_model.bin')!r}); print(_core.has_agent())"],
        capture_output=True, text=True)
    assert load.stdout.strip() == "True", load.stderr
    # A damaged policy file is one clear error naming the file.
    (tmp_path / "policy.bin").write_bytes(b"not a policy")
    bad = subprocess.run(
        [sys.executable, "-c", f"from dr_kernel import _core; _core.load_agent({str(tmp_path / 'policy.bin')!r}, "
                               f"{str(tmp_path / 'cost_model.bin')!r})"],
        capture_output=True, text=True)
    assert bad.returncode != 0 and "policy.bin" in bad.stderr.splitlines()[-1]


def test_train_refuses_counts_that_train_nothing_and_writes_no_files(tmp_path):
    for flag, value in [("--ppo-steps", "0"), ("--bc-episodes", "-1"), ("--synthetic", "-1")]:
        out = subprocess.run([sys.executable, "-m", "dr_kernel.cli", "train", flag, value, "--out", str(tmp_path)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and f"{flag} {value}: give a number" in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_train_needs_an_out_folder_and_enough_measured_rows(tmp_path, table_paths):
    def train(*args):
        return subprocess.run([sys.executable, "-m", "dr_kernel.cli", "train", "--ppo-steps", "64", *args],
                              capture_output=True, text=True, timeout=120)

    # No default folder: the package's own agent is replaced only when named.
    before = POLICY_FILE.stat().st_mtime_ns
    out = train()
    assert out.returncode == 2 and "--out" in out.stderr and POLICY_FILE.stat().st_mtime_ns == before
    few = tmp_path / "few.jsonl"
    few.write_text("\n".join(table_paths[0].read_text().splitlines()[:6]) + "\n")
    out = train("--data", str(few), "--out", str(tmp_path / "agent"))
    assert out.returncode == 2 and "rows of configs that ran correctly" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and not (tmp_path / "agent").exists()
    out = train("--out", str(few))
    assert out.returncode == 2 and f"--out {few} is a file" in out.stderr


def test_holdout_family_replays_each_family_with_an_agent_that_never_saw_it(tables, monkeypatch):
    from dr_kernel import holdout

    chosen = [t for t in tables if t.problem["family"] in ("rmsnorm", "softmax", "layernorm")]
    shipped = _core.replay(chosen[:1], "ppo", 20, 2, 1.05, 0, {}).to_json()
    trained_on = []
    train = _core.train_agent

    def recording(training, *args, **kwargs):
        trained_on.append({t.problem["family"] for t in training})
        return train(training, *args, **kwargs)

    monkeypatch.setattr(_core, "train_agent", recording)
    report = holdout.replay_held_out(chosen, "ppo", 20, 2, 1.05, 0, {}, ppo_steps=2048, bc_episodes=20, synthetic=0)
    problems = json.loads(report.to_json())["problems"]
    # Every problem once, each family's by an agent trained on the two others only.
    assert sorted(json.dumps(p["shape"], sort_keys=True) for p in problems) == \
        sorted(json.dumps(t.problem["shape"], sort_keys=True) for t in chosen)
    assert sorted(map(sorted, trained_on)) == [["layernorm", "rmsnorm"], ["layernorm", "softmax"],
                                                ["rmsnorm", "softmax"]]
    assert len(report.curves) == len(chosen)
    # The shipped agent is back for whatever the process does next.
    assert _core.replay(chosen[:1], "ppo", 20, 2, 1.05, 0, {}).to_json() == shipped
    with pytest.raises(ValueError, match="nothing to learn from"):
        holdout.replay_held_out(chosen[:1], "ppo", 20, 2, 1.05, 0, {}, ppo_steps=2048, bc_episodes=20)


def test_an_agent_without_one_problem_is_trained_on_every_other_table_once(tables, tmp_path, monkeypatch):
    from dr_kernel import holdout

    chosen = [t for t in tables if t.problem["family"] == "softmax"][:3]
    trained_on = []
    train = _core.train_agent

    def recording(training, *args, **kwargs):
        trained_on.append(sorted(json.dumps(t.problem["shape"], sort_keys=True) for t in training))
        return train(training, *args, **kwargs)

    monkeypatch.setattr(_core, "train_agent", recording)
    try:
        holdout.use_agent_without_problem(1, chosen, tmp_path, ppo_steps=2048, bc_episodes=20, synthetic=0)
        # The held-out problem is the only one missing from its training.
        assert trained_on == [sorted(json.dumps(chosen[i].problem["shape"], sort_keys=True) for i in (0, 2))]
        saved = {f.name: f.stat().st_mtime_ns for f in tmp_path.iterdir()}
        assert set(saved) == {"problem1.policy.bin", "problem1.model.bin"}
        # Again: loaded from the folder, not trained anew.
        holdout.use_agent_without_problem(1, chosen, tmp_path, ppo_steps=2048, bc_episodes=20, synthetic=0)
        assert len(trained_on) == 1 and {f.name: f.stat().st_mtime_ns for f in tmp_path.iterdir()} == saved
    finally:
        load_agent()


def test_an_agent_trained_with_counters_has_a_cost_model_that_reads_them(tables, tmp_path):
    """lofo_options.py --counters: the held-out agents' cost model describes problems by their probe's
    hardware counters (the bundled tables carry them). Training is deterministic, so the same tables
    and seed give the same model without them, and another with them."""
    from dr_kernel import holdout

    chosen = [t for t in tables if t.problem["family"] == "softmax"][:3]
    models = {}
    try:
        for counters in (False, True, False):
            folder = tmp_path / f"{counters}-{len(models)}"
            holdout.use_agent_without_problem(1, chosen, folder, ppo_steps=2048, bc_episodes=20, synthetic=0,
                                              counters=counters)
            models.setdefault(counters, []).append((folder / "problem1.model.bin").read_bytes())
    finally:
        load_agent()
    assert models[False][0] == models[False][1]
    assert models[True][0] != models[False][0]


def test_a_packed_cost_model_is_unpacked_once_into_the_cache(tmp_path, monkeypatch):
    # The shipped agent keeps its cost model xz-compressed; an agent folder may too.
    folder = tmp_path / "agent"
    folder.mkdir()
    shutil.copy(POLICY_FILE, folder / "policy.bin")
    shutil.copy(AGENT_DIR / "cost_model.bin.xz", folder / "cost_model.bin.xz")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    unpacked = model_file(folder)
    assert unpacked.parent.parent == tmp_path / "cache" / "dr_kernel" and unpacked.name == "cost_model.bin"
    assert unpacked.read_bytes() == lzma.decompress((folder / "cost_model.bin.xz").read_bytes())
    written = unpacked.stat().st_mtime_ns
    assert model_file(folder) == unpacked and unpacked.stat().st_mtime_ns == written  # Not unpacked again.
    try:
        _core.load_agent(str(folder / "policy.bin"), str(unpacked))
        assert _core.has_agent()
    finally:
        load_agent()
    # A cost_model.bin beside it is used as it is; a folder with neither has none.
    (folder / "cost_model.bin").write_bytes(unpacked.read_bytes())
    assert model_file(folder) == folder / "cost_model.bin"
    assert model_file(tmp_path) is None
    # A damaged archive is one clear error naming it and the fix.
    (folder / "cost_model.bin").unlink()
    (folder / "cost_model.bin.xz").write_bytes(b"not xz")
    with pytest.raises(ValueError, match="cost_model.bin.xz: not an xz-compressed cost model.*dr-kernel train"):
        model_file(folder)


def _worker_has_agent(_request) -> bool:
    """A compile worker's task (imported by reference in the worker): whether it loaded the agent."""
    return _core.has_agent()


def test_workers_start_without_the_agent():
    # Compile and measuring workers never ask the agent; loading its cost model would cost each of
    # them 50-80 ms of its start. The process that tunes has it.
    from dr_kernel import measure
    from dr_kernel.compile_pool import _Worker

    assert measure._worker_env("cuda:0")["DR_KERNEL_WORKER"] == "1"
    assert _core.has_agent()
    worker = _Worker(_worker_has_agent)
    try:
        assert worker.connection.poll(120), "the compile worker did not start"
        assert worker.connection.recv()[0] == "ready"
        worker.connection.send((0, None))
        assert worker.connection.poll(60)
        assert worker.connection.recv() == ("done", 0, False)
    finally:
        worker.kill()
