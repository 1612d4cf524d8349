"""`dr-kernel check`: a CI gate on the tuned kernels' times, in Triton's interpreter.

A baseline is written with --update (tuning the problem where the store has no winner), checked
again (the stored winner, timed anew), and judged: a baseline time far below today's is a
regression (exit 1), one far above is "faster" (exit 0). Bad baselines get one line (exit 2)."""

from __future__ import annotations

import json

import pytest
from dr_kernel.cli import main

ADD = ["--add", "softmax:rows=3,cols=200:fp32"]
# Interpreter times are CPU times: noisy under a loaded CI machine (the suite runs two tests at a
# time), so the threshold is wide here (400 %: "faster" below a fifth of the baseline, "regressed"
# above five times it); the judgement is shown with baselines 100x off.
FLAGS = ["--interpret", "--threshold", "4.0", "--budget", "3"]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_baseline_is_written_checked_and_a_regression_fails_the_gate(tmp_path, capsys):
    baseline, db = tmp_path / "baseline.json", str(tmp_path / "r.db")
    code, out, _ = run(capsys, "check", str(baseline), "--update", *ADD, *FLAGS, "--db", db)
    assert code == 0 and "new" in out and f"wrote {baseline}" in out
    written = json.loads(baseline.read_text())
    (entry,) = written["entries"]
    assert entry["kernel"] == "softmax" and entry["shape"] == {"rows": 3, "cols": 200} and entry["ms"] > 0
    assert entry["device"] == "cpu (Triton interpreter)" and set(entry["config"]) == {"BLOCK", "num_warps",
                                                                                      "num_stages"}

    code, out, _ = run(capsys, "check", str(baseline), *FLAGS, "--db", db, "--json")
    (o,) = json.loads(out)
    assert code == 0 and o["verdict"] == "ok" and o["source"] == "store" and not o["winner_changed"]
    assert o["config"] == entry["config"]

    measured = entry["ms"]
    written["entries"][0]["ms"] = measured / 100  # As if the kernel had been 100x faster once.
    baseline.write_text(json.dumps(written))
    code, out, _ = run(capsys, "check", str(baseline), *FLAGS, "--db", db)
    assert code == 1 and "regressed" in out and "1 regressed or failed" in out

    written["entries"][0]["ms"] = measured * 100
    baseline.write_text(json.dumps(written))
    code, out, _ = run(capsys, "check", str(baseline), *FLAGS, "--db", db)
    assert code == 0 and "faster" in out and "no regression" in out


def test_a_baseline_from_another_device_is_not_compared(tmp_path, capsys):
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"format": "dr_kernel check baseline", "version": 1, "threshold": 0.05,
                                    "entries": [{"kernel": "softmax", "shape": {"rows": 3, "cols": 200},
                                                 "precision": "fp32", "device": "NVIDIA H200",
                                                 "config": {"BLOCK": 256, "num_warps": 4, "num_stages": 1},
                                                 "ms": 0.01}]}))
    code, out, _ = run(capsys, "check", str(baseline), *FLAGS, "--db", str(tmp_path / "r.db"))
    assert code == 1 and "measured on NVIDIA H200, this is cpu (Triton interpreter)" in out


@pytest.mark.parametrize("text, message", [
    ("{not json", "not a baseline file"),
    ('{"entries": []}', "not a dr_kernel check baseline"),
    ('{"format": "dr_kernel check baseline", "version": 7, "entries": []}', "baseline version 7"),
    ('{"format": "dr_kernel check baseline", "version": 1, "entries": [{"kernel": "fft", "shape": {}}]}',
     "entry 1: there is no built-in kernel"),
    ('{"format": "dr_kernel check baseline", "version": 1, "entries": [{"kernel": "softmax", '
     '"shape": {"rows": 3, "cols": 200}, "ms": -1, "config": {}}]}', "entry 1: ms -1 is not a time"),
    ('{"format": "dr_kernel check baseline", "version": 1, "threshold": 0, "entries": []}', "threshold 0"),
])
def test_a_broken_baseline_is_one_line_naming_the_file(tmp_path, capsys, text, message):
    baseline = tmp_path / "baseline.json"
    baseline.write_text(text)
    code, _, err = run(capsys, "check", str(baseline), "--interpret", "--db", str(tmp_path / "r.db"))
    assert code == 2 and str(baseline) in err and message in err and len(err.strip().splitlines()) == 1


def test_usage_mistakes_get_one_line(tmp_path, capsys):
    missing = str(tmp_path / "none.json")
    assert run(capsys, "check", missing, "--interpret")[0] == 2
    assert run(capsys, "check", missing, *ADD, "--interpret")[2].strip().endswith("use it with --update")
    code, _, err = run(capsys, "check", missing, "--update", "--add", "softmax:rows=x", "--interpret")
    assert code == 2 and "--add softmax:rows=x" in err
    code, _, err = run(capsys, "check", missing, "--update", "--interpret")
    assert code == 2 and "no problems to check" in err
