"""`dr-kernel evaluate --profile` (issue 12): Nsight Compute's counters of one config. On the CPU
the report is the one ncu wrote for the built-in matmul on the H200 (tests/data); a stand-in ncu
replays it, so that the command line dr_kernel gives ncu and the parsing of what comes back are
tested, not ncu."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from dr_kernel.profiling import ProfileError, counters, format_counters, parse_csv, profile

REPORT = Path(__file__).resolve().parent / "data" / "ncu_matmul_h200.csv"
CONFIG = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}


def test_the_h200_report_of_the_matmul_reads_as_its_counters():
    (launch,) = parse_csv("==PROF== Connected to process 1\n" + REPORT.read_text())
    c = counters(launch)
    assert c["kernel"] == "matmul_kernel"
    # 128x256 tiles, 8 warps, 220 registers a thread: one block per SM, 8 of 64 warps.
    assert c["registers_per_thread"] == 220 and c["theoretical_occupancy_pct"] == 12.5
    assert 12 < c["achieved_occupancy_pct"] <= 12.5
    assert c["sm_throughput_pct"] > 80 > c["dram_throughput_pct"]  # Compute-bound, as a 4096^3 GEMM is.
    assert c["duration_ns"] == pytest.approx(193376)
    assert "selected" not in c["stalls"] and list(c["stalls"])[:2] == ["barrier", "long_scoreboard"]
    assert format_counters(c).startswith("counters (ncu): achieved occupancy 12 %, L2 hit rate 64 %")


def test_counters_are_stored_with_their_measurement_and_read_back(tmp_path):
    from dr_kernel.profiling import read_stored_counters, stored_counters
    from dr_kernel.store import open_store

    (launch,) = parse_csv(REPORT.read_text())
    c = counters(launch)
    store = open_store(tmp_path / "r.db")
    problem = {"family": "matmul", "shape": {"M": 4096, "N": 4096, "K": 4096}, "device": "NVIDIA H200", "dtype": ""}
    store.add(problem, CONFIG, {"status": "ok", "ms": 0.193, "counters": stored_counters(c)}, "evaluate")
    ((_, m),) = open_store(tmp_path / "r.db").rows(problem)
    assert m["counters"]["stall_barrier"] == c["stalls"]["barrier"] and m["counters"]["registers_per_thread"] == 220
    assert format_counters(read_stored_counters(m["counters"])) == format_counters(c)


def test_a_report_without_launches_is_one_clear_error():
    with pytest.raises(ProfileError, match="no table of launches"):
        parse_csv("==PROF== Disconnected from process 1\n==WARNING== No kernels were profiled.\n")


def _fake_ncu(tmp_path: Path, report: str) -> Path:
    """An `ncu` that records its arguments and writes `report` to its --log-file."""
    ncu = tmp_path / "ncu"
    ncu.write_text(f"#!{sys.executable}\n" + f"""
import json, sys
args = sys.argv[1:]
json.dump(args, open({str(tmp_path / "args.json")!r}, "w"))
open(args[args.index("--log-file") + 1], "w").write({report!r})
""")
    ncu.chmod(ncu.stat().st_mode | stat.S_IXUSR)
    return ncu


def test_profile_asks_ncu_for_one_launch_after_the_warmup_and_keeps_the_clocks(tmp_path):
    ncu = _fake_ncu(tmp_path, REPORT.read_text())
    c = profile("matmul", {"M": 4096, "N": 4096, "K": 4096}, "fp16", CONFIG, ncu=str(ncu),
                keep_report=str(tmp_path / "kept.csv"))
    assert c["sm_throughput_pct"] == pytest.approx(86.14)
    args = json.loads((tmp_path / "args.json").read_text())
    assert args[args.index("--clock-control") + 1] == "none"
    assert args[args.index("--kernel-name") + 1] == "regex:^matmul_kernel$"
    assert args[args.index("--launch-skip") + 1] == "2" and args[args.index("--launch-count") + 1] == "1"
    target = json.loads(args[-1])
    assert args[-3:-1] == ["-m", "dr_kernel.profiling"] and target["config"] == CONFIG
    assert (tmp_path / "kept.csv").read_text() == REPORT.read_text()


def test_a_report_of_another_kernel_only_is_an_error_naming_the_kernel(tmp_path):
    ncu = _fake_ncu(tmp_path, REPORT.read_text().replace("matmul_kernel", "some_other_kernel"))
    with pytest.raises(ProfileError, match="no launch of softmax_kernel"):
        profile("softmax", {"rows": 4096, "cols": 4096}, "fp16", {"BLOCK": 4096, "num_warps": 8, "num_stages": 1},
                ncu=str(ncu))


def test_evaluate_profile_without_a_gpu_says_what_it_needs_in_one_line():
    run = subprocess.run([sys.executable, "-m", "dr_kernel.cli", "evaluate", "--kernel", "matmul", "--config",
                          json.dumps(CONFIG), "--profile"], capture_output=True, text=True,
                         env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().count("\n") == 0 and "--profile" in run.stderr and "GPU" in run.stderr


PROBES_REPORT = Path(__file__).resolve().parent / "data" / "ncu_probes_h200.csv"


def _probe_specs(first_matmul: bool = False) -> list[dict]:
    """The middle probes of every bundled table, as benchmarks/ncu_probes.py profiled them
    (`first_matmul`: with matmul's problems as first recorded, when they were profiled: matmul.jsonl's
    four, and 2048x1000x16384 with the recorded kernel, before it was recorded whole again)."""
    from dr_kernel import _core, bundled_tables
    from dr_kernel.profiling import probe_config

    paths = [str(p) for p in bundled_tables()]
    if first_matmul:  # In matmul.jsonl's place (the report's launches come in the tables' order).
        first = str(Path(__file__).parent / "data" / "matmul_first_recording.jsonl")
        deep = str(Path(__file__).parent / "data" / "matmul_2048x1000x16384_bf16_first_recording.jsonl")
        renamed = {"matmul.jsonl": first, "matmul_2048x1000x16384_bf16.jsonl": deep}
        paths = [renamed.get(Path(p).name, p) for p in paths
                 if Path(p).name not in ("matmul_1024x1024x1024_fp16.jsonl", "matmul_16x4096x4096_fp16.jsonl")]
    specs = []
    for table in _core.read_tables(paths):
        ok = [config for config, m in table.rows() if m["status"] == "ok"]
        problem = table.problem
        specs.append({"kernel": problem["family"], "shape": dict(problem["shape"]), "dtype": problem["dtype"] or "fp16",
                      "config": probe_config(ok), "counters": next(
                          (m["counters"] for config, m in table.rows() if m.get("counters", {}).get("probe") == 0.5
                           and config == probe_config(ok)), None)})
    return specs


def test_the_probe_is_the_config_nearest_the_middle_of_every_parameter():
    from dr_kernel.profiling import probe_config

    configs = [{"BLOCK": b, "num_warps": w} for b in (256, 512, 1024, 2048, 4096) for w in (1, 2, 4, 8)]
    assert probe_config(configs) == {"BLOCK": 1024, "num_warps": 2}  # Positions 2 of 0..4, 1.5 of 0..3: the earlier.
    assert probe_config(configs, 0.0) == {"BLOCK": 256, "num_warps": 1}
    assert probe_config(configs, 1.0) == {"BLOCK": 4096, "num_warps": 8}
    # Only what exists is chosen: without the middle, the nearest by positions.
    assert probe_config([c for c in configs if c["BLOCK"] != 1024]) in (
        {"BLOCK": 512, "num_warps": 2}, {"BLOCK": 2048, "num_warps": 2})
    with pytest.raises(ValueError, match="at least one config"):
        probe_config([])
    # The bundled tables carry the middle probe's counters on that probe's own row; matmul 1024^3,
    # recorded again (docs/data-format.md), keeps its first recording's probes, and ties among its
    # rows, which came in another order, now name another middle probe; 2048x1000x16384, recorded
    # again with another kernel, has none.
    specs = _probe_specs()
    unprobed = [s["shape"] for s in specs if not s["counters"]]
    assert len(specs) == 34 and unprobed == [{"M": 1024, "N": 1024, "K": 1024}, {"M": 2048, "N": 1000, "K": 16384}]
    matmul = next(s for s in specs if s["kernel"] == "matmul" and s["shape"] == {"M": 4096, "N": 4096, "K": 4096})
    assert matmul["config"] == {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 4,
                                "num_stages": 3}


def test_profile_many_reads_each_configs_launch_from_one_batch_report(tmp_path):
    """The report ncu wrote on the H200 for the 32 middle probes in one process: each spec gets its
    own launch's counters, the ones stored with the bundled tables. (The two softmax tables recorded
    later were probed in a batch of their own: the report holds the 32 others.)"""
    from dr_kernel.profiling import match_launches, profile_many

    in_report = {counters(launch)["duration_ns"] for launch in parse_csv(PROBES_REPORT.read_text())}
    specs = [s for s in _probe_specs(first_matmul=True) if s["counters"]["duration_ns"] in in_report]
    assert len(specs) == 32
    ncu = tmp_path / "ncu"
    ncu.write_text(f"#!{sys.executable}\n" + f"""
import json, sys
args = sys.argv[1:]
json.dump(args, open({str(tmp_path / "args.json")!r}, "w"))
open(args[args.index("--log-file") + 1], "w").write(open({str(PROBES_REPORT)!r}).read())
json.dump(["ok"] * {len(specs)}, open(args[-1], "w"))
""")
    ncu.chmod(ncu.stat().st_mode | stat.S_IXUSR)
    results = profile_many([{k: s[k] for k in ("kernel", "shape", "dtype", "config")} for s in specs], ncu=str(ncu))
    args = json.loads((tmp_path / "args.json").read_text())
    assert args[args.index("--profile-from-start") + 1] == "off" and "--many" in args
    for spec, result in zip(specs, results, strict=True):
        assert "error" not in result, (spec, result)
        assert result["duration_ns"] == spec["counters"]["duration_ns"], spec
    # A config that failed in the program has no launch: the others still get their own.
    launches = parse_csv(PROBES_REPORT.read_text())
    assert len(launches) > len(specs)  # Some kernels launch a second one (a reduction, a cast).
    names = [result["kernel"] for result in results]
    outcomes = ["ok"] * len(specs)
    outcomes[3] = "OutOfResources: shared memory"
    fourth = next(i for i, launch in enumerate(launches)
                  if counters(launch)["duration_ns"] == results[3]["duration_ns"])
    matched = match_launches(launches[:fourth] + launches[fourth + 1:], names, outcomes)
    assert matched[3] == {"error": "OutOfResources: shared memory"}
    assert [m["duration_ns"] for i, m in enumerate(matched) if i != 3] == [
        s["counters"]["duration_ns"] for i, s in enumerate(specs) if i != 3]


def test_tune_profile_stores_the_counters_of_the_winner_and_of_the_probe_with_their_measurements(tmp_path,
                                                                                                  monkeypatch):
    """`dr-kernel tune --profile` after a session (here a stand-in for one, its two configs timed):
    one ncu process reads both; each is stored with its measurement, the probe's marked as the
    tables mark it, so that a table exported from the store gives the cost model its features."""
    import dr_kernel.session
    from dr_kernel.cli.tune import profile_tuning
    from dr_kernel.kernels import get
    from dr_kernel.store import open_store

    lines = PROBES_REPORT.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID",'))
    matmuls = [line for line in lines[start + 2:] if '"matmul_kernel"' in line][:2]
    ncu = tmp_path / "ncu"
    ncu.write_text(f"#!{sys.executable}\n" + f"""
import json, sys
args = sys.argv[1:]
open(args[args.index("--log-file") + 1], "w").write({chr(10).join(lines[start:start + 2] + matmuls)!r})
json.dump(["ok", "ok"], open(args[-1], "w"))
""")
    ncu.chmod(ncu.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(dr_kernel.session, "device_name", lambda interpret: "NVIDIA H200")
    kernel, shape = get("matmul"), {"M": 4096, "N": 4096, "K": 4096}
    space = kernel.space_for(shape)
    winner = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3,
              "SPLIT_K": 1, "TMA": 0}
    probe = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 4, "num_stages": 3,
             "SPLIT_K": 1, "TMA": 0}

    class Session:
        best_config = winner
        history = [(winner, {"status": "ok", "ms": 0.2}, 1.0), (probe, {"status": "ok", "ms": 0.36}, 2.0)]

    store = open_store(tmp_path / "r.db")
    out = profile_tuning(kernel, shape, "fp16", space, Session, store, ncu=str(ncu))
    first, second = (counters(launch) for launch in parse_csv("\n".join(lines[start:start + 2] + matmuls)))
    assert out["winner"]["config"] == winner and out["winner"]["duration_ns"] == first["duration_ns"]
    assert out["probe"]["config"] == probe and out["probe"]["duration_ns"] == second["duration_ns"]
    problem = {"family": "matmul", "shape": shape, "device": "NVIDIA H200", "dtype": ""}
    stored = {json.dumps(c, sort_keys=True): m.get("counters") for c, m in open_store(tmp_path / "r.db").rows(problem)}
    assert stored[json.dumps(probe, sort_keys=True)]["probe"] == 0.5
    assert "probe" not in stored[json.dumps(winner, sort_keys=True)]
    assert stored[json.dumps(winner, sort_keys=True)]["duration_ns"] == first["duration_ns"]


def test_tune_profile_in_the_interpreter_says_what_it_needs_in_one_line():
    run = subprocess.run([sys.executable, "-m", "dr_kernel.cli", "tune", "--kernel", "softmax", "--shape",
                          "rows=4,cols=64", "--interpret", "--profile", "--budget", "2"],
                         capture_output=True, text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().count("\n") == 0 and "--profile" in run.stderr and "--interpret" in run.stderr


PROFILED_SCRIPT = """
import json, sys, torch, triton
import optimize_kernels
profiled_kernel = getattr(optimize_kernels, sys.argv[2])
from dr_kernel.store import open_store
n = 1000
x = torch.randn(n)
y = torch.empty_like(x)
profiled_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
rows = [(c, m.get("counters")) for problem in open_store(sys.argv[1]).problems() for c, m in
        open_store(sys.argv[1]).rows(problem)]
print(json.dumps({"correct": bool((y == 2 * x).all()), "best": profiled_kernel.best_config.all_kwargs(),
                  "counters": {str(k): v for k, v in profiled_kernel.counters.items()}, "rows": rows,
                  "notes": profiled_kernel.notes}))
"""


@pytest.mark.parametrize("name, switch", [("profiled_kernel", None), ("profiled_here_kernel", "1")])
def test_optimize_profile_reads_the_winners_counters_in_a_process_that_launches_it(tmp_path, name, switch):
    """@optimize(profile=True), or DR_KERNEL_PROFILE=1: after the tuning, ncu runs the profiled
    program (here a stand-in ncu runs the real program in the interpreter, then writes the H200
    report renamed to this kernel): the program sets up the tuning's measuring job (for a kernel
    measured in the tuning process, the one a measuring process would get) and launches the
    winner; its counters are kept per key and stored with the winner's measurement."""
    record = tmp_path / "ncu.json"
    ncu = tmp_path / "ncu"
    ncu.write_text(f"#!{sys.executable}\n" + f"""
import json, subprocess, sys
args = sys.argv[1:]
log = args[args.index("--log-file") + 1]
run = subprocess.run(args[args.index("--log-file") + 2:], capture_output=True, text=True)
done = json.load(open(args[-1])) if run.returncode == 0 else None
ran = {{"args": args, "rc": run.returncode, "stderr": run.stderr[-3000:], "done": done}}
json.dump(ran, open({str(record)!r}, "w"))
open(log, "w").write({REPORT.read_text().replace("matmul_kernel", name)!r})
""")
    ncu.chmod(ncu.stat().st_mode | stat.S_IXUSR)
    db = tmp_path / "results.db"
    env = dict(os.environ, TRITON_INTERPRET="1", DR_KERNEL_DB=str(db), DR_KERNEL_NCU=str(ncu),
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), *sys.path]))
    env.pop("DR_KERNEL_PROFILE", None)
    if switch:
        env["DR_KERNEL_PROFILE"] = switch
    out = subprocess.run([sys.executable, "-c", PROFILED_SCRIPT, str(db), name], capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    ran = json.loads(record.read_text())
    assert ran["rc"] == 0 and ran["done"] == ["ok"], ran["stderr"]  # The winner launched in the program.
    assert ran["args"][ran["args"].index("--profile-from-start") + 1] == "off" and "--job" in ran["args"]
    assert result["correct"] and not result["notes"], result["notes"]
    (counters_read,) = result["counters"].values()
    (launch,) = parse_csv(REPORT.read_text())
    assert counters_read["kernel"] == name
    assert counters_read["duration_ns"] == counters(launch)["duration_ns"]
    stored = [(c, m) for c, m in result["rows"] if m is not None]
    assert len(stored) == 1 and stored[0][0]["BLOCK"] == result["best"]["BLOCK"]
    assert stored[0][1]["duration_ns"] == counters(launch)["duration_ns"]


def test_optimize_profile_without_ncu_keeps_the_tuning_and_says_why(tmp_path):
    env = dict(os.environ, TRITON_INTERPRET="1", DR_KERNEL_DB=str(tmp_path / "results.db"),
               DR_KERNEL_NCU=str(tmp_path / "no-ncu-here"), PATH="/usr/bin:/bin",
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), *sys.path]))
    out = subprocess.run([sys.executable, "-c", PROFILED_SCRIPT, str(tmp_path / "results.db"), "profiled_kernel"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["correct"] and result["counters"] == {}
    (note,) = result["notes"]
    assert "profile=True read no counters" in note and "needs Nsight Compute's ncu" in note
