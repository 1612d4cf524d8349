"""benchmarks/variant_compare.py on the sweeps of attention's TMA kernel and its refined variant
(benchmarks/results/h100-2026-12-06/sweeps): the figures docs/benchmarks.md quotes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "variant_compare.py"
SWEEPS = sorted((ROOT / "benchmarks" / "results" / "h100-2026-12-06" / "sweeps").glob("*.jsonl"))


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)


def test_the_refined_tma_kernel_beats_the_tma_kernel_on_every_recorded_problem():
    out = run(*SWEEPS, "--param", "TMA", "--values", 1, 2, "--json")
    assert out.returncode == 0, out.stderr
    rows = {r["problem"]: r for r in map(json.loads, out.stdout.splitlines())}
    assert len(rows) == 3 and all(r["best_speedup"] > 1.02 and r["pair_geomean"] > 1.01 for r in rows.values())
    causal = rows["attention_1x8x16384x128_causal_bf16_tma2"]
    # Four tiles of each value over the shared memory: 32 of the 36 configs ran with both.
    assert causal["pairs"] == 32 and round(causal["best_speedup"], 3) == 1.135
    assert round(causal["reference_over_best"]["1"], 2) == 0.78 and round(causal["reference_over_best"]["2"], 2) == 0.89


def test_a_broken_line_is_named_with_the_fix(tmp_path):
    broken = tmp_path / "broken.jsonl"
    broken.write_text(SWEEPS[0].read_text() + '{"type": "measure", "config": \n')
    out = run(broken, "--param", "TMA", "--values", 1, 2)
    assert out.returncode != 0 and f"{broken}:74: not a JSON line" in out.stderr and "fix or remove" in out.stderr
