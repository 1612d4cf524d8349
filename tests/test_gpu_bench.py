"""The parts of benchmarks/gpu_bench.py that run without a GPU: its command line, its problem
list, the hand-picked triton.autotune lists and the summary table."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dr_kernel.kernels import BUILTINS

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_bench.py"


def load(name: str = "gpu_bench"):
    """A script of benchmarks/ as a module (they are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPT.parent / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(*args):
    # As the lead runs it: from the repository root, the package found through the script's path.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          cwd=SCRIPT.parents[1], timeout=120)


def test_command_line_lists_problems_and_refuses_bad_input_in_one_line(tmp_path):
    assert run("--help").returncode == 0
    listed = run("--list")
    assert listed.returncode == 0
    assert [line.split(":")[0] for line in listed.stdout.splitlines()][:2] == ["matmul-4096", "matmul-8192x2048x1024"]
    bad = run("--out", str(tmp_path), "--problems", "matmul-4096,conv")
    assert bad.returncode == 2 and "unknown problem conv" in bad.stderr
    no_gpu = run("--out", str(tmp_path), "--problems", "softmax-4096")
    assert no_gpu.returncode == 2 and "no CUDA GPU" in no_gpu.stderr


def test_problem_selection_and_hand_picked_lists():
    bench = load()
    assert bench.parse_problems(None, quick=False)[-1] == bench.LAUNCH and len(bench.parse_problems(None, False)) == 13
    assert bench.parse_problems(None, quick=True) == bench.QUICK
    assert bench.parse_problems(" softmax-4096 ,launch-overhead", quick=False) == ["softmax-4096", "launch-overhead"]
    with pytest.raises(ValueError, match="unknown problem"):
        bench.parse_problems("softmax", quick=False)
    sizes = {"matmul": 8, "attention": 12, "softmax": 9}
    for name, (family, shape) in bench.PROBLEMS.items():
        kernel = BUILTINS[family]
        kernel.check_shape(shape)
        configs = bench.autotune_configs(family, shape)
        assert len(configs) == sizes[family], name
        for config in configs:
            kernel.check_config(config)
    softmax = bench.autotune_configs("softmax", {"rows": 4096, "cols": 4096})
    # The softmax tutorial's own choice (the whole row, 8 warps, 2 stages) is among them.
    assert {"BLOCK": 4096, "num_warps": 8, "num_stages": 2} in softmax


def test_summary_reads_the_result_files(tmp_path):
    bench = load()
    timing = {"ms": 0.2, "tuning_wall_s": 10.0}
    (tmp_path / "matmul-4096.json").write_text(json.dumps({
        "dr_kernel": {**timing, "evaluations": 50, "refused": 4, "copied": 2}, "autotune": {**timing, "ms": 0.25},
        "torch": {"ms": 0.18}}))
    (tmp_path / "launch-overhead.json").write_text(json.dumps({"us_per_call": {"bare": 6.0, "@optimize": 9.5}}))
    text = bench.summary(tmp_path)
    assert "matmul-4096" in text and "0.80" in text and "50 (4, 2)" in text and "@optimize 9.50" in text


INTERPRETED_LAUNCHERS = r"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("gpu_bench", sys.argv[1])
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
from dr_kernel import kernels
small = {"matmul": ({"M": 40, "N": 33, "K": 64}, {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}),
         "softmax": ({"rows": 3, "cols": 300}, {}),
         "attention": ({"Z": 1, "H": 2, "N_CTX": 64, "HEAD_DIM": 16, "CAUSAL": True}, {"BLOCK_M": 32, "BLOCK_N": 16})}
for family, (shape, smaller) in small.items():
    kernel = kernels.get(family)
    config = {**bench.autotune_configs(family, shape)[-1], **smaller}
    _, launch = bench.autotuned_launcher(kernel, [config])  # One config: triton.autotune runs it untimed.
    inputs = kernel.make_inputs(shape, "fp32", "cpu", 0)
    launch(inputs)
    print(json.dumps({family: bench.relative_error(kernel.output(inputs), kernel.reference(inputs))}))
"""


def test_the_triton_autotune_launchers_pass_each_kernel_its_arguments():
    # Triton's interpreter runs the kernels on the CPU; a wrong argument order or grid shows here
    # instead of on the GPU.
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", INTERPRETED_LAUNCHERS, str(SCRIPT)], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    errors = {k: v for line in out.stdout.splitlines() for k, v in json.loads(line).items()}
    assert set(errors) == {"matmul", "softmax", "attention"} and all(e < 1e-4 for e in errors.values()), errors


def test_smoke_runs_the_whole_flow_on_the_cpu_writes_results_and_resumes(tmp_path):
    problems = "matmul-4096x4095x4096,launch-overhead"
    out, cache = tmp_path / "out", tmp_path / "cache"
    first = run("--smoke", "--out", str(out), "--cache", str(cache), "--problems", problems)
    assert first.returncode == 0, first.stderr[-3000:]
    # The Triton caches stay out of the results folder, which the GPU machine sends back.
    assert sorted(p.name for p in out.iterdir()) == ["launch-overhead.json", "matmul-4096x4095x4096.json",
                                                     "results.db"]
    assert any(cache.rglob("*.json"))
    tmp_path = out
    result = json.loads((tmp_path / "matmul-4096x4095x4096.json").read_text())
    dr = result["dr_kernel"]
    assert dr["evaluations"] == 3 and dr["statuses"].get("ok", 0) >= 1 and dr["relerr"] < 2e-2
    # The space searched, for session_replay.py: the smoke space, two values of each parameter.
    assert dr["space"]["values"] == {k: v[:2] for k, v in BUILTINS["matmul"].space.items()}
    assert result["autotune"]["configs"] == 8 and result["autotune"]["relerr"] < 2e-2
    assert all(result[k]["ms"] > 0 for k in ("dr_kernel", "autotune", "torch"))
    launch = json.loads((tmp_path / "launch-overhead.json").read_text())
    assert set(launch["us_per_call"]) == {"bare", "triton.autotune", "@optimize"}
    assert launch["optimize_evaluations_on_reuse"] == 0  # The stored winner, not a second tuning.
    assert "matmul-4096x4095x4096" in first.stdout and "launch overhead" in first.stdout
    again = run("--smoke", "--out", str(out), "--cache", str(cache), "--problems", problems)
    assert again.returncode == 0 and again.stdout.count("done before, skipped") == 2


def test_session_replay_ends_a_recorded_h200_session_where_a_stop_rule_would_have():
    """benchmarks/session_replay.py feeds a recorded H200 session's own noisy measurements to the
    session code: with the agent and the stop rule that ran, it replays the session exactly; a stop
    rule that only ends sessions earlier replays it exactly up to its end. (Exact only with the
    agent that recorded it: the run is the first of the agent trained on the matmul tables recorded
    again, in the eighth session of 2026-12-04, kept beside the run for this.)"""
    replay = load("session_replay")
    run_dir = SCRIPT.parents[1] / "benchmarks" / "results" / "h200-2026-12-04h" / "bench-auto-retrained"
    replay.use_agent(run_dir.parent / "agent-cfbe488")
    try:
        row = json.loads((run_dir / "matmul-8x8192x8192.json").read_text())
        static = replay.static_fields(run_dir / "results.db")
        history = row["dr_kernel"]["history"]
        assert len(history) == 28 and static
        result = replay.replay(row, {}, "auto", static)
        assert result["evaluations"] == 28 and result["best_ms"] == min(h["ms"] for h in history if h["status"] == "ok")
        # A window of 8 measurements instead of 24 ends it sooner, on the same path.
        shorter = replay.replay(row, {"stop_patience": 8}, "auto", static)
        n = shorter["evaluations"]
        assert 8 < n < 28
        assert shorter["best_ms"] == min(h["ms"] for h in history[:n] if h["status"] == "ok")
        # A session whose recorded path ends before the replay's is reported where it left it; with
        # another run's session of the problem filling in (--fill), it goes on through that one's times.
        row["dr_kernel"]["history"] = history[:5]
        assert replay.replay(row, {}, "budget", static) == {"left_at": 6}
        fill = replay.fill_times([run_dir])["matmul-8x8192x8192"]
        assert len(fill) == 28
        filled = replay.replay(row, {}, "auto", static, fill)
        assert filled["filled"] == 23 and filled["evaluations"] == 28
        # A session that asked the compile stage (`static`) replays with the answers its row keeps
        # (`observed`, since the fifth session of 2026-12-05); one that asks past them has left it.
        row["dr_kernel"]["history"] = history
        row["dr_kernel"]["options"] = {**row["dr_kernel"].get("options", replay.LEGACY_OPTIONS), "static": 1.0}
        row["dr_kernel"]["observed"] = []
        left = replay.replay(row, {}, "auto", static)
        assert set(left) == {"left_at"} and left["left_at"] <= 28
    finally:
        from dr_kernel import load_agent

        load_agent()  # The shipped agent, for the tests after this one.


def test_session_replay_searches_the_space_a_row_records_and_older_rows_the_space_they_ran_in():
    """A kernel's live space changes between versions (matmul's persistent TMA kernel joined
    Hopper's in the third session of 2026-12-06): rows record the space they searched, and
    session_replay.py rebuilds older rows' without the values added since, or today's whole when
    told (--current-space)."""
    from dr_kernel.analysis import H200

    replay = load("session_replay")
    matmul = BUILTINS["matmul"]
    shape = {"M": 8192, "N": 8192, "K": 4096}
    row = {"kernel": "matmul", "shape": shape, "dr_kernel": {}}
    today = matmul.space_for(shape, H200)
    older = replay.searched_space(row, matmul, H200)
    assert {c["TMA"] for c in today.configs()} == {0, 2}
    assert {c["TMA"] for c in older.configs()} == {0}
    assert older.count_valid() == sum(c["TMA"] == 0 for c in today.configs())
    assert replay.searched_space(row, matmul, H200, current=True).count_valid() == today.count_valid()
    # A row that records its space is replayed in it, whatever the code's space is today.
    values, constraints = matmul.space_parts(shape, H200)
    assert values["TMA"] == [0, 2] and constraints[-1].startswith("TMA == 0 or")
    row["dr_kernel"]["space"] = {"values": {**values, "BLOCK_K": [64]}, "constraints": constraints}
    recorded = replay.searched_space(row, matmul, H200)
    assert {c["BLOCK_K"] for c in recorded.configs()} == {64} and 0 < recorded.count_valid() < today.count_valid()


def test_core_determinism_answers_the_same_twice_and_names_the_first_difference():
    """benchmarks/core_determinism.py: what the shipped agent ranks first and proposes on made-up
    times, per bench problem. The same process gives the same answers twice (the comparison of two
    machines' files rests on that), and a changed proposal is reported by problem and position."""
    det = load("core_determinism")
    first, again = det.run(), det.run()
    assert first == again and len(first) == len(det.PROBLEMS)
    assert det.compare(first, again) == []
    key = sorted(first)[0]
    session = first[key]["session"]
    assert len(session) == 30 and session[0][1] == "jump: the prior's best"
    changed = json.loads(json.dumps(first))
    changed[key]["session"][3][0] = [-1]
    assert det.compare(first, changed) == [f"{key}: session differs at 4: {session[3]} against {[[-1], session[3][1]]}"]


def test_session_replay_refits_as_the_recorded_session_did():
    """Rows before the sixth session of 2026-12-05 recorded ppo's default refits (none) where the
    session had set them by the space's size: softmax 1000x50257 (192 configs) refitted its cost
    model every 4 measurements while in doubt, and replayed with the recorded options its climb
    orders two neighbours otherwise at its fifth measurement. Replayed with the refits the session
    set, it follows its recorded path to the end."""
    replay = load("session_replay")
    run_dir = SCRIPT.parents[1] / "benchmarks" / "results" / "h200-2026-12-05" / "bench-auto"
    replay.use_agent(SCRIPT.parents[1] / "benchmarks" / "results" / "h100-2026-12-05" / "agent-b828b3a")
    try:
        row = json.loads((run_dir / "softmax-1000x50257.json").read_text())
        static = replay.static_fields(run_dir / "results.db")
        history = row["dr_kernel"]["history"]
        assert "options_as_run" not in row["dr_kernel"] and row["dr_kernel"]["options"]["refit"] == 0
        result = replay.replay(row, {}, "auto", static)
        assert result["evaluations"] == len(history) == 21
        assert result["best_ms"] == min(h["ms"] for h in history if h["status"] == "ok")
        # As recorded (no refits): the path is left where the first refit changed the beliefs.
        row["dr_kernel"]["options_as_run"] = True
        assert replay.replay(row, {}, "auto", static) == {"left_at": 5}
    finally:
        from dr_kernel import load_agent

        load_agent()  # The shipped agent, for the tests after this one.
