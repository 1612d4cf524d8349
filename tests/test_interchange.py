"""Kernel Tuner cache files in and out of the store (`db import/export --format kernel_tuner`),
checked against Kernel Tuner itself: it tunes in simulation mode over a table dr_kernel exported,
and a file written by Kernel Tuner's own cache functions (left open, as an interrupted run leaves
it) imports into the store."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from dr_kernel import _core
from dr_kernel.cli import main
from dr_kernel.store import open_store

kernel_tuner = pytest.importorskip("kernel_tuner")  # scripts/setup installs it (the test extra).
DATA = Path(__file__).resolve().parents[1] / "python" / "dr_kernel" / "data" / "h200"


@pytest.mark.filterwarnings("ignore:None of the tunable parameters specify thread block dimensions")
def test_kernel_tuner_tunes_over_a_table_dr_kernel_exported(tmp_path, capsys):
    db = tmp_path / "r.db"
    open_store(db).import_tables(_core.read_tables([str(DATA / "attention.jsonl")]))
    assert main(["db", "export", "--format", "kernel_tuner", str(tmp_path / "caches"), "--db", str(db)]) == 0
    assert "exported 3 problems as Kernel Tuner cache files" in capsys.readouterr().out
    (path,) = sorted((tmp_path / "caches").glob("*CAUSALTrue*.json"))
    header = json.loads(path.read_text())
    problem = header["dr_kernel"]["problem"]
    stored = {json.dumps(c, sort_keys=True): m for c, m in open_store(db).rows(problem)}

    copy = tmp_path / "sim.json"  # Kernel Tuner opens a cache for appending: give it a copy.
    shutil.copy(path, copy)
    results, _ = kernel_tuner.tune_kernel(header["kernel_name"], "__global__ void k() {}", header["problem_size"], [],
                                          header["tune_params"], cache=str(copy), simulation_mode=True,
                                          strategy="random_sample", strategy_options={"max_fevals": 20},
                                          verbose=False, lang="CUDA", quiet=True)
    assert len(results) == 20
    for r in results:
        config = {k: r[k] for k in header["tune_params_keys"]}
        m = stored[json.dumps(config, sort_keys=True)]
        assert r["time"] == pytest.approx(m["ms"]) if m["status"] == "ok" else not isinstance(r["time"], float)


def test_a_cache_kernel_tuner_wrote_imports_once_and_a_broken_one_changes_nothing(tmp_path, capsys):
    from kernel_tuner.util import store_cache

    # A cache file as Kernel Tuner writes it while tuning: the header without its closing braces,
    # then one appended entry per config (this run was interrupted: never closed).
    path = tmp_path / "vector_add.json"
    header = {"device_name": "NVIDIA A100-SXM4-80GB", "kernel_name": "vector_add", "problem_size": 10_000_000,
              "tune_params_keys": ["block_size_x"], "tune_params": {"block_size_x": [128, 256, 512, 1024]},
              "objective": "time", "cache": {}}
    path.write_text(json.dumps(header, indent="")[:-3])
    cache: dict = {}
    for block, time in [(128, 0.31), (256, 0.27), (512, 0.29), (1024, "CompilationFailedConfig")]:
        entry = {"block_size_x": block, "time": time, "times": [time] * 3 if time != "CompilationFailedConfig" else [],
                 "compile_time": 120.0}
        store_cache(str(block), entry, str(path), cache)

    db = tmp_path / "r.db"
    assert main(["db", "import", "--format", "kernel_tuner", str(path), "--db", str(db)]) == 0
    assert "imported 4 rows" in capsys.readouterr().out
    (problem,) = open_store(db).problems()
    assert problem["family"] == "vector_add" and problem["shape"] == {"n0": 10_000_000}
    assert problem["device"] == "NVIDIA A100-SXM4-80GB"
    rows = {c["block_size_x"]: m for c, m in open_store(db).rows(problem)}
    assert rows[256]["status"] == "ok" and rows[256]["ms"] == pytest.approx(0.27)
    assert rows[1024]["status"] == "compile_error" and rows[256]["compile_s"] == pytest.approx(0.12)
    assert main(["db", "import", "--format", "kernel_tuner", str(path), "--db", str(db)]) == 0
    assert "imported 0 rows" in capsys.readouterr().out  # Imported before: nothing added.

    broken = tmp_path / "broken.json"
    broken.write_text('{"kernel_name": "k", "cache": {"1": {"time": 1.0}}}')  # No tune_params_keys.
    before = open_store(db).count()
    assert main(["db", "import", "--format", "kernel_tuner", str(path), str(broken), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert str(broken) in err and "tune_params_keys" in err and "nothing was imported" in err
    assert open_store(db).count() == before
