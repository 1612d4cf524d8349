"""collect, tune-many and distributed sweeps, in Triton's interpreter: a program's launches collected
into a work list of 20 keys, tuned on a local multi-node Ray cluster (ray.cluster_utils.Cluster) with
one of its actors killed and one of its nodes removed mid-run, on a plain process pool when Ray
cannot be imported, resumed after an interruption, and read by the program's next run.

Ray is a test dependency (scripts/setup installs it): these tests run in CI, they are not skipped.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import ray
from dr_kernel import _core, collect
from dr_kernel.store import open_store
from dr_kernel.tune_many import plan, sweep_many, tune_many
from ray.cluster_utils import Cluster

TESTS = Path(__file__).parent


def program_env(db: Path, **extra) -> dict:
    return dict(os.environ, TRITON_INTERPRET="1", DR_KERNEL_DB=str(db),
                PYTHONPATH=os.pathsep.join([str(TESTS), *sys.path]), **extra)


def dr_kernel(*args: str, env: dict, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "dr_kernel", *args], capture_output=True, text=True, env=env,
                         timeout=300)
    assert not check or out.returncode == 0, out.stderr[-3000:]
    return out


def run_program(db: Path) -> dict:
    """The program's own run (no collect; the drop-in switch on, as when it was collected): how many
    configs it measured."""
    out = subprocess.run([sys.executable, str(TESTS / "many_program.py")], capture_output=True, text=True,
                         env=program_env(db, DR_KERNEL_AUTOTUNE="1"), timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def work_list(tmp_path_factory) -> Path:
    """The work list of tests/many_program.py, collected once by `dr-kernel collect`."""
    folder = tmp_path_factory.mktemp("collect")
    db, work = folder / "results.db", folder / "work.jsonl"
    out = dr_kernel("collect", "-o", str(work), "--", sys.executable, str(TESTS / "many_program.py"),
                    env=program_env(db))
    assert json.loads(out.stdout.splitlines()[0]) == {"evaluations": 0}  # Nothing was tuned...
    assert "20 new entries, 20 in all (20 keys of 3 kernels)" in out.stdout
    assert open_store(db).count() == 0  # ...nor measured.
    return work


def test_collect_writes_each_distinct_launch_once(work_list, tmp_path):
    entries = collect.read_work(work_list)
    assert len(entries) == 20 and len({e["id"] for e in entries}) == 20 == len({e["store_key"] for e in entries})
    by_kernel = {}
    for e in entries:
        by_kernel.setdefault(e["kernel"]["function"], []).append(e)
    assert {k: len(v) for k, v in by_kernel.items()} == {"scale_kernel": 10, "strided_add_kernel": 6,
                                                         "gather_kernel": 4}
    add = by_kernel["strided_add_kernel"][0]
    assert add["kernel"]["switch"] == "1"  # A @triton.autotune kernel, seen through the drop-in switch.
    assert add["args"]["x_ptr"]["tensor"]["stride"] == [2] and add["args"]["stride_x"] == {"value": 2}
    assert by_kernel["gather_kernel"][0]["args"]["index_ptr"]["tensor"]["range"] == [0, 49]
    assert by_kernel["scale_kernel"][0]["grid"] == {"params": ["BLOCK"], "table": [[[32], [3]], [[64], [2]],
                                                                                   [[128], [1]]]}
    # Running the program again under collect adds nothing: the work list already has its launches.
    copy = tmp_path / "work.jsonl"
    shutil.copy(work_list, copy)
    out = dr_kernel("collect", "-o", str(copy), "--", sys.executable, str(TESTS / "many_program.py"),
                    env=program_env(tmp_path / "results.db"))
    assert "0 new entries, 20 in all" in out.stdout and copy.read_text() == work_list.read_text()


def test_rebuilt_arguments_keep_the_recorded_layouts():
    import torch

    base = torch.arange(40, dtype=torch.int32)
    strided = torch.randn(8, 6)[:, 1:5]  # A view: strides (6, 1), offset 1 element (4 bytes).
    entry = {"id": "x", "label": "k", "positional": 2, "kernel": {"function": "k"}, "kwargs": {"EXTRA": 3},
             "grid": {"params": ["BLOCK"], "table": [[[32], [4, 1]]]},
             "args": {"a": collect.describe_value(strided), "i": collect.describe_value(base[5:25]),
                      "n": collect.describe_value(7)}}
    args, kwargs = collect.rebuild_arguments(entry, "cpu", seed=1)
    a, i = args
    assert a.shape == (8, 4) and a.stride() == (6, 1) and a.storage_offset() == 1 and a.dtype == torch.float32
    assert i.dtype == torch.int32 and int(i.min()) >= 5 and int(i.max()) <= 24  # Indices stay in range.
    assert kwargs["n"] == 7 and kwargs["EXTRA"] == 3 and kwargs["grid"]({"BLOCK": 32}) == (4, 1)
    with pytest.raises(ValueError, match="no recorded launch grid"):
        kwargs["grid"]({"BLOCK": 64})
    entry["args"]["o"] = collect.describe_value(object())
    with pytest.raises(ValueError, match="--inputs"):
        collect.rebuild_arguments(entry, "cpu")
    hook = collect.rebuild_arguments(entry, "cpu", inputs=lambda name, values, device: {"o": "given"})
    assert hook[1]["o"] == "given"


def test_a_kernel_is_found_where_it_is_wrapped_not_where_its_function_is():
    import many_kernels

    where = collect.locate(many_kernels.wrapped_rmsnorm)
    assert (where["module"], where["name"], where["root"]) == ("many_kernels", "wrapped_rmsnorm", str(TESTS))
    assert collect.load_kernel(where) is many_kernels.wrapped_rmsnorm


def test_plan_tunes_each_key_once_and_skips_stored_keys(work_list, tmp_path):
    entries = collect.read_work(work_list)
    store = open_store(tmp_path / "results.db")
    store.put_winner(entries[3]["store_key"], {"BLOCK": 64}, 1.0, 1)
    todo, stored = plan([*entries, {**entries[0], "id": "another launch at the same key"}], store)
    assert stored == 1 and [e["id"] for e in todo] == [e["id"] for e in entries if e is not entries[3]]


def test_tune_many_without_ray_on_a_process_pool_resumes_after_an_interruption(work_list, tmp_path):
    db, log = tmp_path / "results.db", tmp_path / "hook.log"
    env = program_env(db, MANY_HOOK_LOG=str(log))
    blocked = "import sys; sys.modules['ray'] = None; from dr_kernel.cli import main; sys.exit(main(sys.argv[1:]))"
    command = [sys.executable, "-c", blocked, "tune-many", str(work_list), "--measurers", "2",
               "--inputs", "many_kernels:valid_inputs", "--json"]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    for line in first.stderr:  # One line per tuned key; interrupted after the fifth.
        if line.startswith("[5]"):
            first.send_signal(signal.SIGTERM)
            break
    rest = first.communicate(timeout=120)
    assert first.returncode == 130 and "interrupted; every key tuned so far is in the store" in rest[1], rest
    store = open_store(db)
    stored = [e for e in collect.read_work(work_list) if store.get_winner(e["store_key"]) is not None]
    assert 5 <= len(stored) < 20
    rows = store.count()

    out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    second = json.loads(out.stdout)
    assert second["backend"] == "pool" and second["workers"] == 2 and not second["failed"]
    assert second["already_stored"] == len(stored) and second["tuned"] == 20 - len(stored)
    assert store.count() == rows + second["rows"]  # Nothing measured twice, nothing lost.
    assert log.read_text().count("gather_kernel") >= 4  # The hook rebuilt the index tensors in the workers.
    assert run_program(db) == {"evaluations": 0}  # The program's next run launches the stored winners.


def test_a_window_of_max_seconds_starts_no_entry_after_it_and_the_next_run_tunes_the_rest(work_list, tmp_path):
    from dr_kernel.distributed import PoolEngine

    # The engine: one worker, items of 0.4 s each, a window of 1 s: the items started finish, the
    # rest are left, none is lost or run twice.
    engine = PoolEngine(1, program_env(tmp_path / "unused.db"))
    arrived: list[str] = []
    try:
        import time

        report = engine.run([(f"item{i}", "time:sleep", 0.4) for i in range(8)], lambda i, _: arrived.append(i),
                            deadline=time.monotonic() + 1.0)
    finally:
        engine.close()
    assert 1 <= len(arrived) < 8 and report.left == [f"item{i}" for i in range(len(arrived), 8)]
    assert arrived == [f"item{i}" for i in range(len(arrived))] and not report.failed

    # tune-many: a window that closes before the first hand-out tunes nothing, says so, exits 1,
    # and the store stays as it was; the entries are the next run's.
    db = tmp_path / "results.db"
    out = dr_kernel("tune-many", str(work_list), "--backend", "pool", "--max-seconds", "0.001", "--db", str(db),
                    env=program_env(db), check=False)
    assert out.returncode == 1, out.stderr[-3000:]
    assert "20 keys not started in --max-seconds 0.001: run the same command again to tune them" in out.stdout
    assert open_store(db).count() == 0
    bad = dr_kernel("tune-many", str(work_list), "--max-seconds", "0", env=program_env(db), check=False)
    assert bad.returncode == 2 and "--max-seconds 0: give a number at least 0.001" in bad.stderr


@pytest.fixture(scope="module")
def cluster():
    """A Ray cluster of three nodes on this machine: a head without GPUs and two nodes with one
    (nominal) GPU each, one CPU each, so one measuring actor per worker node."""
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    workers = [nodes.add_node(num_cpus=1, num_gpus=1) for _ in range(2)]
    ray.init(address=nodes.address, log_to_driver=False)
    nodes.wait_for_nodes()
    yield nodes, workers
    ray.shutdown()
    nodes.shutdown()


def test_sweep_records_chunks_on_the_cluster_and_resumes(cluster, tmp_path):
    from dr_kernel.kernels import get

    # layernorm: a kernel whose space has constraints, which the table's space row records (the
    # chunk that times the reference writes it; the head keeps one, as it keeps one reference).
    layernorm, out = get("layernorm"), tmp_path / "layernorm.jsonl"
    store = open_store(tmp_path / "results.db")
    shape = {"rows": 3, "cols": 700}
    first = sweep_many(layernorm, shape, "fp32", out, limit=6, interpret=True, store=store, chunk=2)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    types = [r["type"] for r in rows]
    assert first.recorded == 6 and types.count("reference") == 1 and types.count("space") == 1
    assert next(r for r in rows if r["type"] == "space")["constraints"] == layernorm.constraints
    assert len({json.dumps(r["config"], sort_keys=True) for r in rows if r["type"] == "measure"}) == 6
    assert store.count() == 6 and first.statuses.get("ok", 0) >= 1
    [table] = _core.read_tables([str(out)])
    assert table.constraints == layernorm.constraints
    again = sweep_many(layernorm, shape, "fp32", out, limit=6, interpret=True, store=store, chunk=2)
    assert again.recorded == 0 and again.skipped == 6 and out.read_text().count("\n") == 8


def test_on_ray_no_item_starts_after_the_deadline_and_those_started_finish(cluster, tmp_path):
    import time

    from dr_kernel.distributed import RayEngine

    # Two actors (one per GPU node), items of 0.5 s, a window of 1.2 s: the items started finish,
    # the rest are left, in their order, none lost or run twice.
    engine = RayEngine(None, None, {"PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])})
    arrived: list[str] = []
    try:
        engine.run([("warm-up", "time:sleep", 0.0)], lambda i, _: None)  # The actors' start is not timed.
        report = engine.run([(f"item{i}", "time:sleep", 0.5) for i in range(12)], lambda i, _: arrived.append(i),
                            deadline=time.monotonic() + 1.2)
    finally:
        engine.close()
    assert 2 <= len(arrived) < 12 and not report.failed
    assert sorted(arrived) == sorted(f"item{i}" for i in range(len(arrived)))
    assert report.left == [f"item{i}" for i in range(len(arrived), 12)]


def test_tune_many_on_a_ray_cluster_survives_a_killed_actor_and_a_lost_node(cluster, work_list, tmp_path):
    nodes, workers = cluster
    db = tmp_path / "results.db"
    accepted = []

    faults = []

    def on_result(result, engine):
        accepted.append(result)
        # Once both nodes' actors have measured (so the list is spread over the nodes), one actor is
        # killed in the middle of an entry (Ray restarts it), and four results later a node is lost
        # (its actor cannot come back: no other node has a free GPU).
        if not faults and len(engine.report.hosts) == 2 and engine.busy_actors():
            ray.kill(engine.busy_actors()[0], no_restart=False)
            faults.append(len(accepted))
        elif len(faults) == 1 and len(accepted) == faults[0] + 4:
            nodes.remove_node(workers[1])
            faults.append(len(accepted))

    report = tune_many(work_list, db=db, on_result=on_result)
    assert report.engine.backend == "ray" and report.engine.workers == 2
    assert len(faults) == 2, f"the faults were not injected ({faults}): a node's actor measured nothing"
    assert len(report.tuned) == 20 and not report.failed and report.engine.requeued >= 1
    assert len(report.engine.hosts) == 2 and sum(report.engine.hosts.values()) == 20
    store = open_store(db)
    entries = collect.read_work(work_list)
    assert all(store.get_winner(e["store_key"]) is not None for e in entries)
    # Every entry's result was written once: its measurements and no others (none of an attempt
    # that died, none twice).
    assert sorted(r["id"] for r in accepted) == sorted(e["id"] for e in entries)
    assert store.count() == report.rows == sum(len(r["rows"]) for r in accepted)
    for r in accepted:
        problem = r["rows"][0][0]
        assert len(store.rows(problem)) == len(r["rows"])
    # Every config was compiled (for the H200, by Ray tasks on the CPU workers) before it was measured.
    assert all(m["n_regs"] > 0 for r in accepted for _, _, m in r["rows"])
    assert {r["compiled_by"] for r in accepted} == {"RayCompilePool"}

    again = tune_many(work_list, db=db)
    assert again.stored_before == 20 and not again.tuned and again.engine is None and store.count() == report.rows
    assert run_program(db) == {"evaluations": 0}
