"""dr-kernel evaluate, tune and sweep on a machine without a GPU: static analysis, Triton's
interpreter for the measuring, and one clear line for every mistake a user can make."""

from __future__ import annotations

import json
import statistics

import pytest
from dr_kernel import _core
from dr_kernel.cli import main
from interpreted import SPLIT_K_INTERPRETS

MATMUL_OK = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}
MATMUL_TOO_BIG = {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 5}
TINY_SOFTMAX = ["--kernel", "softmax", "--shape", "rows=3,cols=200", "--precision", "fp32", "--interpret",
                "--workers", "1", "--reps", "2"]
SOFTMAX = json.dumps({"BLOCK": 256, "num_warps": 4, "num_stages": 1})
TINY_SPACE = json.dumps({"BLOCK": [64, 256], "num_warps": [1, 4], "num_stages": [1, 2]})


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    # The tests describe this machine; a GPU would make them time configs instead.
    monkeypatch.setattr("dr_kernel.cli.common._gpu_available", lambda: False)


def run(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_evaluate_without_a_gpu_gives_the_static_analysis_and_says_so(capsys):
    code, out, _ = run(capsys, "evaluate", "--kernel", "matmul", "--config", json.dumps(MATMUL_OK), "--json")
    assert code == 0
    result = json.loads(out)
    assert result["valid"] is True and result["reason"] == "" and result["measured"] is False
    assert result["shape"] == {"M": 4096, "N": 4096, "K": 4096}  # The first recorded problem.
    assert result["static"]["n_regs"] > 0 and result["static"]["shared"] > 0
    assert 0 < result["static"]["occupancy"] <= 1 and "no GPU" in result["note"]
    # 2·4096³ FLOPs at 989 TFLOP/s.
    assert result["roofline_ms"] == pytest.approx(2 * 4096**3 / 989e12 * 1e3)

    code, out, _ = run(capsys, "evaluate", "--kernel", "matmul", "--config", json.dumps(MATMUL_TOO_BIG),
                       "--shape", "M=4096,N=4096,K=4096", "--json")
    result = json.loads(out)
    assert code == 0 and result["valid"] is False
    assert result["reason"].startswith("needs 655360 B of shared memory")

    code, out, _ = run(capsys, "evaluate", "--kernel", "softmax", "--precision", "bf16", "--shape",
                       "rows=64,cols=1000", "--config", '{"BLOCK": 1024, "num_warps": 4, "num_stages": 1}')
    assert code == 0 and "registers" in out and "valid: yes" in out and "static analysis" in out


@pytest.mark.parametrize("args,message", [
    (["evaluate", "--kernel", "conv2d", "--config", "{}"], "no built-in kernel named 'conv2d'"),
    (["evaluate", "--kernel", "softmax", "--config", "{BLOCK: 1}"], "--config is not valid JSON"),
    (["evaluate", "--kernel", "softmax", "--config", "[1, 2]"], "must be a JSON object"),
    (["evaluate", "--kernel", "softmax", "--config", '{"BLOCK": 256, "num_warps": 4, "num_stages": 1, "W": 2}'],
     "has unknown W"),
    (["evaluate", "--kernel", "softmax", "--config", '{"BLOCK": 256, "num_warps": 4}'], "lacks num_stages"),
    (["evaluate", "--kernel", "softmax", "--config", '{"BLOCK": "x", "num_warps": 4, "num_stages": 1}'],
     'BLOCK = "x" is not a whole number of at least 1'),
    (["evaluate", "--kernel", "softmax", "--config", '{"BLOCK": 0, "num_warps": 4, "num_stages": 1}'],
     "BLOCK = 0 is not a whole number of at least 1"),
    (["evaluate", "--kernel", "softmax", "--shape", "rows=4", "--config", "{}"], "lacks cols"),
    (["evaluate", "--kernel", "softmax", "--shape", "rows=four,cols=2", "--config", "{}"], "KEY=INTEGER"),
    (["tune", "--kernel", "softmax"], "measuring needs a GPU"),
    (["tune", "--kernel", "softmax", "--strategy", "simplex", "--interpret"], "unknown strategy 'simplex'"),
    (["tune", "--kernel", "softmax", "--space", '{"BLOCK": [1], "num_warps": [1]}', "--interpret"],
     "lacks num_stages"),
    (["sweep", "--kernel", "softmax", "--out", "x.jsonl"], "measuring needs a GPU"),
    # Every value of every --space list is checked, not only the first.
    *[(["tune", "--kernel", "softmax", "--interpret", "--space",
        json.dumps({"BLOCK": [128, bad], "num_warps": [4], "num_stages": [1]})],
       f"--space: BLOCK = {json.dumps(bad)} is not a whole number of at least 1") for bad in ("x", -16, 0, 2.5)],
    # A switch (attention's TMA) may be 0, not less; a block size may not be 0.
    (["tune", "--kernel", "attention", "--interpret", "--space",
      '{"BLOCK_M": [16], "BLOCK_N": [16], "num_warps": [4], "num_stages": [1], "TMA": [0, -1]}'],
     "--space: TMA = -1 is not a whole number of at least 0"),
    (["tune", "--kernel", "attention", "--interpret", "--space",
      '{"BLOCK_M": [0], "BLOCK_N": [16], "num_warps": [4], "num_stages": [1], "TMA": [0, 1]}'],
     "--space: BLOCK_M = 0 is not a whole number of at least 1"),
    # Sizes: positive, each key once, and (to measure) tensors that fit in memory.
    (["evaluate", "--kernel", "softmax", "--shape", "rows=-5,cols=128", "--config", SOFTMAX],
     "--shape rows=-5: sizes are whole numbers of at least 1"),
    (["tune", "--kernel", "softmax", "--shape", "rows=0,cols=128", "--interpret"], "--shape rows=0: sizes are"),
    (["evaluate", "--kernel", "softmax", "--shape", "rows=3,cols=128,rows=5", "--config", SOFTMAX],
     "gives rows twice"),
    (["evaluate", "--kernel", "softmax", "--shape", "rows=1000000,cols=1000000000", "--interpret", "--config",
      SOFTMAX], "more than this machine's memory"),
    # Counts: a timed launch at least, and numbers the engine can hold.
    (["tune", "--kernel", "softmax", "--reps", "0", "--interpret"], "--reps 0: give a number from 1 to"),
    (["tune", "--kernel", "softmax", "--reps", "-1", "--interpret"], "--reps -1: give a number from 1 to"),
    (["tune", "--kernel", "softmax", "--budget", "99999999999999999999", "--interpret"],
     "--budget 99999999999999999999: give a number from 1 to 100,000"),
    (["tune", "--kernel", "softmax", "--seed", "-1", "--interpret"], "--seed -1: give a number from 0"),
    (["sweep", "--kernel", "softmax", "--out", "x.jsonl", "--reps", "0", "--interpret"], "--reps 0: give"),
])
def test_mistakes_get_one_line_and_exit_status_2(capsys, args, message):
    code, _, err = run(capsys, *args)
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_tune_in_the_interpreter_runs_the_whole_flow_and_says_its_times_are_not_gpu_times(capsys, tmp_path):
    db = tmp_path / "r.db"
    # Interpreter times are CPU times, noisy under load: a wide band makes every measured binary a
    # candidate for the re-timing at the end. (binaries=0: the agent may propose a config whose
    # binary it measured, so that the session copies results; with it, this space's four binaries
    # end the session after four or five evaluations: tests/test_session.py.)
    code, out, _ = run(capsys, "tune", *TINY_SOFTMAX, "--space", TINY_SPACE, "--budget", "6", "--seed", "1",
                       "--confirm-within", "100", "--db", str(db), "--json", "--option", "binaries=0")
    assert code == 0
    result = json.loads(out)
    assert result["interpreted"] and "not GPU times" in result["note"]
    assert result["evaluations"] == 6 and len(result["history"]) == 6
    assert result["measured"] + result["copied"] + result["refused"] == 6
    # num_stages does not change the softmax binary, so some configs are copies of others.
    assert result["copied"] >= 1 and result["statuses"] == {"ok": 6}
    assert result["best_config"]["BLOCK"] in (64, 256) and result["best_ms"] > 0
    assert all(h["n_regs"] > 0 for h in result["history"])
    # Every config the search measured or refused was asked of the compile stage once.
    assert sum(result["compile_readiness"].values()) == result["measured"] + result["copied"] + result["refused"]
    assert result["reference"]["name"] == "torch.softmax" and result["reference"]["ms"] > 0
    # The best 3 measured binaries were timed again, up to 3 more times each (at least twice, the
    # winner in every round: one whose first two put it out of reach is not timed a third time), and
    # the winner is the one with the lowest median of its rounds.
    confirmed = result["confirmed"]
    assert len(confirmed) == min(3, result["measured"]) and all(2 <= len(c["ms"]) <= 3 for c in confirmed)
    winner = min(confirmed, key=lambda c: statistics.median(c["ms"]))
    assert result["best_config"] == winner["config"] and result["best_ms"] == statistics.median(winner["ms"])
    assert len(winner["ms"]) == max(len(c["ms"]) for c in confirmed)
    stored = _core.Store(str(db))
    assert stored.count() == 6 + sum(len(c["ms"]) for c in confirmed)
    # Each stored row has the static analysis of its binary, occupancy included: these small
    # programs fill half the H200's 64 warp slots with 32 resident one-warp blocks (its most), and
    # all of them with 16 four-warp blocks.
    (problem,) = stored.problems()
    rows = stored.rows(problem)
    assert all(m["n_regs"] > 0 and 0 < m["occupancy"] <= 1 for _, m in rows)
    assert {(c["num_warps"], m["occupancy"]) for c, m in rows} <= {(1, 0.5), (4, 1.0)}

    code, out, _ = run(capsys, "tune", *TINY_SOFTMAX, "--space", TINY_SPACE, "--budget", "2", "--db", str(db))
    assert code == 0 and "not GPU times" in out and "best:" in out and "compiles asked for:" in out


def test_tune_in_process_measures_here_and_says_how_to_run_it_when_it_cannot(capsys, tmp_path):
    import os
    import subprocess
    import sys

    # Kernels decorated without the interpreter (this process's) cannot run on the CPU here: one
    # clear line naming the fix.
    code, _, err = run(capsys, "tune", *TINY_SOFTMAX, "--space", TINY_SPACE, "--budget", "2", "--in-process",
                       "--db", str(tmp_path / "a.db"))
    assert code == 2 and "TRITON_INTERPRET=1" in err and "isolate" in err
    # With the interpreter on from the start, the whole flow runs in the one process: configs are
    # measured and stored as in a worker, with the same statuses.
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, "-m", "dr_kernel.cli", "tune", *TINY_SOFTMAX, "--space", TINY_SPACE,
                           "--budget", "4", "--seed", "1", "--in-process", "--confirm", "0", "--db",
                           str(tmp_path / "b.db"), "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["in_process"] and result["evaluations"] == 4 and result["statuses"] == {"ok": 4}
    assert result["best_ms"] > 0 and _core.Store(str(tmp_path / "b.db")).count() == 4


@pytest.mark.skipif(not SPLIT_K_INTERPRETS, reason="this Triton's interpreter cannot run the split-K kernel")
def test_tune_searches_split_k_when_the_space_asks_and_checks_it_like_any_config(capsys, tmp_path):
    space = json.dumps({"BLOCK_M": [16], "BLOCK_N": [32], "BLOCK_K": [32], "GROUP_M": [1], "num_warps": [4],
                        "num_stages": [2], "SPLIT_K": [1, 4]})
    code, out, _ = run(capsys, "tune", "--kernel", "matmul", "--shape", "M=40,N=72,K=300", "--precision", "fp16",
                       "--interpret", "--workers", "1", "--reps", "2", "--space", space, "--budget", "2",
                       "--db", str(tmp_path / "r.db"), "--json")
    assert code == 0
    result = json.loads(out)
    # Both variants compiled (two binaries), ran and matched torch.matmul.
    assert result["statuses"] == {"ok": 2} and result["measured"] == 2
    assert sorted(h["config"]["SPLIT_K"] for h in result["history"]) == [1, 4]
    assert all(h["relerr"] < 2e-2 for h in result["history"])


def test_tune_goes_on_from_what_the_store_holds_and_fresh_measures_again(capsys, tmp_path):
    # Issue 9, point 14: a second run (or a run after an interruption) re-measured every config.
    db = tmp_path / "r.db"
    # binaries=0: a budget of six in a space of four binaries (see the test above).
    common = ["tune", *TINY_SOFTMAX, "--space", TINY_SPACE, "--seed", "3", "--confirm", "0", "--db", str(db), "--json",
              "--option", "binaries=0"]
    code, out, _ = run(capsys, *common, "--budget", "3")
    assert code == 0
    first = json.loads(out)
    stored = _core.Store(str(db)).count()
    assert stored == 3
    # The same seed and budget walk through the three stored configs again, free: the times the
    # walk decides by are the stored ones.
    code, out, _ = run(capsys, *common, "--budget", "3")
    again = json.loads(out)
    assert code == 0 and [h["config"] for h in again["history"]] == [h["config"] for h in first["history"]]
    assert again["measured"] + again["copied"] + again["refused"] == 0
    assert _core.Store(str(db)).count() == stored
    # A larger budget goes on from there: what it meets in the store is free, the rest is measured.
    # (Its path may leave the first one's: the policy sees how much of its budget is left.)
    code, out, _ = run(capsys, *common, "--budget", "6")
    second = json.loads(out)
    assert code == 0 and second["evaluations"] == 6
    known = {json.dumps(h["config"], sort_keys=True) for h in first["history"]}
    new = [h for h in second["history"] if json.dumps(h["config"], sort_keys=True) not in known]
    assert second["measured"] + second["copied"] + second["refused"] == len(new) >= 3
    assert _core.Store(str(db)).count() == stored + len(new)
    code, out, _ = run(capsys, *common, "--budget", "6", "--fresh")
    assert code == 0 and json.loads(out)["measured"] + json.loads(out)["copied"] == 6
    assert _core.Store(str(db)).count() == stored + len(new) + 6


def test_sweep_appends_rows_the_table_reader_reads_and_resumes(capsys, tmp_path):
    out_file = tmp_path / "softmax.jsonl"
    args = ["sweep", *TINY_SOFTMAX, "--space", TINY_SPACE, "--out", str(out_file), "--db", str(tmp_path / "r.db")]
    code, out, _ = run(capsys, *args, "--limit", "3")
    assert code == 0 and "3 new rows" in out
    rows = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert rows[0]["type"] == "reference" and rows[0]["ref"] == "torch.softmax" and rows[0]["dtype"] == "fp32"
    assert rows[0]["flops"] == 5 * 3 * 200 and rows[0]["bytes"] == 2 * 3 * 200 * 4
    assert {"triton", "torch", "device"} <= set(rows[0])
    assert all(r["type"] == "measure" and r["status"] == "ok" and r["ms"] > 0 for r in rows[1:])
    assert all({"compile_s", "n_regs", "n_spills", "shared", "relerr", "ms_p20", "ms_p80", "t"} <= set(r)
               for r in rows[1:])

    # An interrupted write leaves half a line; the rerun drops it and records that config again.
    with open(out_file, "a") as handle:
        handle.write('{"type":"measure","family":"softmax","sha')
    code, out, _ = run(capsys, *args)
    assert code == 0 and "5 new rows" in out and "3 of 8 configs already recorded" in out
    tables = _core.read_tables([str(out_file)])
    assert len(tables) == 1 and len(tables[0]) == 8
    assert tables[0].problem["dtype"] == "fp32" and tables[0].problem["device"] == "cpu (Triton interpreter)"
    configs = [json.dumps(c, sort_keys=True) for c, _ in tables[0].rows()]
    assert len(set(configs)) == 8

    code, out, _ = run(capsys, *args)
    assert code == 0 and "0 new rows" in out and len(_core.read_tables([str(out_file)])[0]) == 8


def test_a_sweep_records_its_spaces_constraints_and_replay_keeps_to_them(capsys, tmp_path):
    # layernorm's space forbids a third of its (BLOCK_SIZE, num_warps) pairs: the table says so in
    # a space row, so that a replay leaves them out as a tuning session of the kernel does, instead
    # of charging an evaluation for each as a row the recording lacks.
    out_file = tmp_path / "layernorm.jsonl"
    space = json.dumps({"BLOCK_SIZE": [512, 1024], "num_warps": [1, 4, 8]})
    args = ["sweep", "--kernel", "layernorm", "--shape", "rows=3,cols=700", "--precision", "fp32", "--interpret",
            "--workers", "1", "--reps", "2", "--space", space, "--out", str(out_file), "--db", str(tmp_path / "r.db")]
    code, out, _ = run(capsys, *args)
    assert code == 0 and "5 new rows" in out  # Not 512 with 8 warps: 2 elements a thread.
    rows = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert [r["type"] for r in rows[:2]] == ["reference", "space"]
    assert rows[1]["constraints"] == ["BLOCK_SIZE >= 4 * 32 * num_warps", "BLOCK_SIZE <= 64 * 32 * num_warps"]
    [table] = _core.read_tables([str(out_file)])
    assert table.constraints == rows[1]["constraints"] and len(table) == 5
    # Measuring the whole space in replay takes its five configs, not the product's six: 512 with
    # 8 warps is no config of the problem, not a row the recording lacks.
    report = json.loads(_core.replay([table], "exhaustive", 100, 1, 1.0, 0, {}).to_json())["problems"][0]
    assert report["evaluations_used"]["median"] == 5 and report["final_over_oracle"] == 1.0
    # Resumed, the sweep writes no second space row.
    code, out, _ = run(capsys, *args)
    assert code == 0 and [json.loads(line)["type"] for line in out_file.read_text().splitlines()].count("space") == 1


def test_evaluate_in_the_interpreter_checks_and_times_the_config_against_torch(capsys, tmp_path):
    config = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 2}
    db = tmp_path / "r.db"
    code, out, _ = run(capsys, "evaluate", "--kernel", "matmul", "--shape", "M=40,N=33,K=64", "--precision", "fp32",
                       "--interpret", "--config", json.dumps(config), "--json", "--db", str(db))
    result = json.loads(out)
    assert code == 0 and result["valid"] and result["measured"] and result["correct"]
    assert result["relerr"] < 1e-4 and result["ms"] > 0 and result["reference"]["name"] == "torch.matmul"
    assert result["reference"]["ms"] > 0 and "not GPU times" in result["note"]
    assert "tflops" not in result  # No fraction of a GPU's peak from a CPU's time.
    # The measurement is in the store, as a tuning's are.
    from dr_kernel.store import open_store

    (problem,) = open_store(db).problems()
    assert problem["family"] == "matmul" and problem["dtype"] == "fp32" and result["db"] == str(db)
    ((stored_config, m),) = open_store(db).rows(problem)
    assert stored_config == result["config"] and m["status"] == "ok" and m["ms"] == result["ms"] and "counters" not in m
