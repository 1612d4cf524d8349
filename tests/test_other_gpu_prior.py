"""benchmarks/other_gpu_prior.py on the tables recorded on an H100 (benchmarks/results/h100-2026-12-05e):
what the H200's tables are worth as a prior on another GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "other_gpu_prior.py"
H100 = ROOT / "benchmarks" / "results" / "h100-2026-12-05e"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def best_ok(rows: list[dict]) -> dict:
    return min((r for r in rows if r.get("type") == "measure" and r["status"] == "ok"), key=lambda r: r["ms"])


def test_h100_tables_are_replayed_as_recorded_and_the_h200_best_is_found_among_their_rows(tmp_path):
    matmul = H100 / "sweeps-small" / "matmul_16x4096x4096_fp16.jsonl"
    softmax = H100 / "sweeps" / "softmax_4096x4096_bf16.jsonl"
    result = run(str(matmul), str(softmax), "--repeats", "3", "--json", str(tmp_path / "rows.json"))
    assert result.returncode == 0, result.stderr
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert [json.loads(r["problem"])["device"] for r in rows] == ["NVIDIA H100 80GB HBM3"] * 2

    # The H200's best config, looked up among the H100's rows by hand: the sweep of today's matmul
    # space records SPLIT_K 1 and TMA 0, which the bundled H200 table lacks.
    bundled = sorted((ROOT / "python" / "dr_kernel" / "data" / "h200").glob("*.jsonl"))
    for row, path in ((rows[0], matmul), (rows[1], softmax)):
        problem = json.loads(row["problem"])
        h200_rows = [r for table in bundled if table.name.startswith(problem["family"]) for r in rows_of(table)]
        h100_rows = rows_of(path)
        h200_best = best_ok([r for r in h200_rows if r.get("shape") == problem["shape"]
                             and r.get("dtype", "") == problem["dtype"]])
        there = [r for r in h100_rows if r.get("type") == "measure" and r["status"] == "ok"
                 and {k: v for k, v in r["config"].items() if (k, v) not in (("SPLIT_K", 1), ("TMA", 0))}
                 == h200_best["config"]]
        assert len(there) == 1
        assert row["h200_best_ms"] == h200_best["ms"]
        assert row["best_ms"] == best_ok(h100_rows)["ms"]
        assert row["h200_best_config_over_best"] == there[0]["ms"] / row["best_ms"] > 1
        # An H100 (SXM) has the H200's limits, so the cost model describes it as an H200: the same
        # sessions either way, both well under random search's median on these tables.
        assert row["ppo"] == row["ppo_as_h200"] < row["random"]


def test_a_table_of_the_h200_itself_is_refused_with_the_reason(tmp_path):
    table = tmp_path / "softmax_h200.jsonl"
    rows = rows_of(ROOT / "python" / "dr_kernel" / "data" / "h200" / "softmax.jsonl")
    table.write_text("".join(json.dumps(r) + "\n" for r in rows if r.get("shape") == rows[0]["shape"]))
    result = run(str(table), "--repeats", "1")
    assert result.returncode != 0
    assert f"{table}: its rows name the device 'NVIDIA H200'; give tables recorded on another GPU" in result.stderr


def test_bundled_h100_tables_are_whole_new_problems_listed_only_on_request():
    from dr_kernel import bundled_tables
    from dr_kernel.kernels import get

    h200, every = bundled_tables(), bundled_tables(every_device=True)
    assert every[:len(h200)] == h200 and all(p.parent.name == "h200" for p in h200)
    others = every[len(h200):]
    assert {p.parent.name for p in others} == {"h100"}
    h200_problems = {(r["family"], json.dumps(r["shape"]), r.get("dtype", "fp16"))
                     for p in h200 for r in rows_of(p) if r["type"] == "reference"}
    seen = set()
    for path in others:
        rows = rows_of(path)
        by_problem: dict = {}
        for r in rows:
            by_problem.setdefault((r["family"], json.dumps(r["shape"]), r.get("dtype", "fp16")), []).append(r)
        for problem, problem_rows in by_problem.items():
            refs = [r for r in problem_rows if r["type"] == "reference"]
            configs = [json.dumps(r["config"], sort_keys=True) for r in problem_rows if r["type"] == "measure"]
            measured = set(configs)
            assert len(configs) == len(measured), (path.name, problem, "a config recorded twice")
            assert [r["device"] for r in refs] == ["NVIDIA H100 80GB HBM3"], (path.name, problem)
            # Every config of the family's space recorded once: a replay never meets a hole.
            space = {json.dumps(c, sort_keys=True) for c in get(problem[0]).configs()}
            assert measured == space, (path.name, problem, len(measured), len(space))
            assert problem not in h200_problems, f"{path.name}: {problem} is an H200 table's twin"
            assert problem not in seen, f"{path.name}: {problem} recorded twice"
            seen.add(problem)
    # Swiglu, the family no H200 table has, and a new shape of each family the problem holdout fails on.
    assert {family for family, _, _ in seen} >= {"swiglu", "rmsnorm", "attention", "fp8_matmul", "layernorm_bwd"}
