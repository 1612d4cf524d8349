"""dr_kernel.ops: torch's results through the tuned built-in kernels, torch itself for what they do
not cover, the race against torch, and choices that the next process takes from the store
(tests/ops_program.py, in Triton's interpreter)."""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def _run(db: Path) -> dict:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join([str(HERE), *sys.path]))
    out = subprocess.run([sys.executable, str(HERE / "ops_program.py"), str(db)], capture_output=True, text=True,
                         env=env, timeout=900, cwd=db.parent)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def ops_db(tmp_path_factory):
    return tmp_path_factory.mktemp("ops") / "results.db"


@pytest.fixture(scope="module")
def runs(ops_db):
    return _run(ops_db), _run(ops_db)


def test_each_operator_gives_torchs_result_through_its_tuned_kernel(runs):
    first, _ = runs
    for op, r in first["covered"].items():
        assert r["shape_ok"], op
        # fp16 and bf16 outputs carry the dtype's rounding of an fp32 result (bf16: 8 bits).
        assert r["max_diff"] <= 2 ** -7 * max(1.0, r["scale"]) * 2, (op, r)
    choices = first["choices"]
    assert [c["op"] for c in choices[:6]] == ["matmul", "matmul", "softmax", "rms_norm", "attention", "add_rms_norm"]
    assert all(c["variant"] == "triton" and c["source"] == "tuned" and c["evaluations"] == 2 and c["config"]
               for c in choices[:6])
    # Rows of 40 and 29 elements are padded to multiples of 16; rows of 40 and 24 are not.
    assert choices[0]["padded"] == {"M": 38, "N": 32, "K": 48} and choices[1]["padded"] is None


def test_calls_the_kernels_do_not_cover_are_torchs_own(runs):
    first, _ = runs
    assert first["uncovered"] and all(first["uncovered"].values()), first["uncovered"]
    assert first["untouched"]  # None of them tuned anything.


def test_torch_serves_a_problem_where_it_is_faster(runs):
    first, _ = runs
    raced = first["choices"][6]
    # The interpreter runs the kernel one program after another: torch's CPU softmax wins the race.
    assert raced["op"] == "softmax" and raced["variant"] == "torch" and raced["source"] == "tuned"
    assert raced["torch_ms"] < raced["triton_ms"] and raced["torch_call_ms"] < raced["triton_call_ms"]
    assert first["raced_equal"]


def test_a_fused_chain_races_torchs_operators_apart(runs):
    first, _ = runs
    # Torch's add and rms_norm (not ops.rms_norm: nothing else is decided on the way) win on the CPU.
    assert [c["op"] for c in first["choices"][7:]] == ["add_rms_norm"]
    fused = first["choices"][7]
    assert fused["variant"] == "torch" and fused["source"] == "tuned" and fused["config"] is None
    assert fused["torch_ms"] < fused["triton_ms"]
    assert first["raced_fused_equal"]


def test_a_tolerance_lets_fp8_serve_a_matmul_within_it_and_never_outside(runs):
    first, again = runs
    fp8 = first["fp8"]
    assert fp8["variant"] == "fp8" and fp8["kernel"] == "fp8_matmul" and fp8["source"] == "tuned"
    # e4m3 keeps 3 bits of mantissa: a few per cent of error, within 0.1, and measured as it is.
    assert 0.005 < fp8["error"] <= 0.1 and fp8["fp8_error"] == pytest.approx(fp8["error"], rel=1e-3)
    assert fp8["tight_variant"] == "triton" and fp8["tight_fp8_error"] > 1e-4 and fp8["tight_equal"]
    assert again["fp8"]["source"] == "store" and again["fp8"]["variant"] == "fp8"
    assert again["fp8"]["error"] == fp8["error"]  # The stored config, the same result.


def test_the_next_process_takes_every_choice_from_the_store(runs):
    first, again = runs
    assert [c["source"] for c in again["choices"]] == ["store"] * 8
    def strip(choices):
        return sorted(json.dumps({k: c[k] for k in ("op", "shape", "padded", "variant", "config")}, sort_keys=True)
                      for c in choices)

    assert strip(again["choices"]) == strip(first["choices"])
    for times in ("torch_ms", "triton_ms", "torch_call_ms", "triton_call_ms"):
        assert again["choices"][6][times] == first["choices"][6][times]
    assert again["rows"] == first["rows"] > 0  # Nothing measured again.


def test_the_choices_are_no_candidates_for_retune(runs, ops_db):
    # They are stored among the winners, but made by a race, not by a program's launches.
    from dr_kernel import _core, hot

    # The 8 choices of the first run's operators and races, and the fp8 matmul's two tolerances.
    assert sum(w["key"].startswith("ops.") for w in _core.Store(str(ops_db)).hottest_winners(100)) == 10
    assert hot.hottest(5, str(ops_db)) == []


def test_a_tuning_that_fails_warns_once_and_torch_serves_the_problem(monkeypatch, tmp_path):
    torch = pytest.importorskip("torch")
    from dr_kernel import ops

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(ops, "_tune_and_race", lambda *a: (_ for _ in ()).throw(RuntimeError("the GPU went away")))
    ops.configure(db=str(tmp_path / "results.db"))
    try:
        x = torch.randn(4, 64)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert torch.equal(ops.softmax(x), torch.softmax(x, -1))
            assert torch.equal(ops.softmax(x), torch.softmax(x, -1))
        assert len(caught) == 1 and "the GPU went away" in str(caught[0].message)
        assert "torch serves this problem" in str(caught[0].message)
        assert ops.decisions()[-1].source == "tuning failed: RuntimeError"
    finally:
        ops.configure(db=None)


@pytest.mark.parametrize("changes, named", [({"variants": ("cuda",)}, "variants"), ({"max_evals": 0}, "max_evals"),
                                            ({"stop": "soon"}, "stop"), ({"margin": 1.5}, "margin"),
                                            ({"tolerance": 0.0}, "tolerance"), ({"tolerance": 2}, "tolerance"),
                                            ({"reps": 0}, "reps"), ({"budget": 5}, "no setting budget")])
def test_a_bad_setting_is_refused_naming_it(changes, named):
    from dr_kernel import ops

    before = ops.settings
    with pytest.raises(ValueError, match=named):
        ops.configure(**changes)
    assert ops.settings is before
