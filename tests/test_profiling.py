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
