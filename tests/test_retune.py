"""Hot keys re-tuned later (hot.py): launches counted into the store by every process, the hottest
keys listed, re-tuned with a larger budget in a run of the user's program, and the new winner picked
up by the next process. In Triton's interpreter, where a small block (many program instances run one
after another) is clearly slower than a large one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dr_kernel import _core, hot
from dr_kernel.cli import main

PROGRAM = Path(__file__).with_name("retune_program.py")
PYTHON_PATH = str(Path(__file__).resolve().parents[1] / "python")


def run_program(db: Path) -> dict:
    env = dict(os.environ, DR_KERNEL_DB=str(db), PYTHONPATH=PYTHON_PATH)
    done = subprocess.run([sys.executable, str(PROGRAM)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_the_hottest_key_is_retuned_in_a_run_of_the_program_and_the_next_process_takes_its_winner(tmp_path,
                                                                                                  monkeypatch):
    monkeypatch.setenv("PYTHONPATH", PYTHON_PATH)
    db = tmp_path / "results.db"
    first = run_program(db)
    # One evaluation each: the first block of the space, the slowest in the interpreter.
    assert first["hot"]["BLOCK"] == 16 and first["cold"]["BLOCK"] == 16
    listed = hot.hottest(5, str(db))
    assert [w["launches"] for w in listed] == [12, 2]  # Counted into the store when the program exited.
    assert "(4096," in listed[0]["label"] and listed[0]["evaluations"] == 1 and listed[0]["budget"] == 1

    results = hot.retune([sys.executable, str(PROGRAM)], top=1, budget=7, db=str(db))
    (r,) = results
    assert r["key"] == listed[0]["key"] and r["retuned"] and r["replaced"]
    assert r["before"]["config"]["BLOCK"] == 16 and r["after"]["config"]["BLOCK"] >= 256
    assert r["after"]["evaluations"] == 7 and r["after"]["ms"] < r["before"]["ms"] / 4
    # The cold key was not asked for: its winner is the first run's.
    store = _core.Store(str(db))
    cold = next(w for w in store.hottest_winners(5) if w["key"] != r["key"])
    assert cold["config"]["BLOCK"] == 16 and cold["evaluations"] == 1

    again = run_program(db)
    assert again["hot"]["BLOCK"] == r["after"]["config"]["BLOCK"] and again["cold"]["BLOCK"] == 16
    # The count survived the replacement and goes on: three runs of 12 launches.
    assert store.hottest_winners(1)[0]["launches"] == 36


def test_keys_the_program_does_not_reach_keep_their_winner_and_say_so(tmp_path, capsys):
    db = tmp_path / "results.db"
    run_program(db)
    before = {w["key"]: w for w in _core.Store(str(db)).hottest_winners(5)}
    code = main(["retune", "--top", "2", "--budget", "3", "--db", str(db), "--", sys.executable, "-c", "pass"])
    out = capsys.readouterr().out
    assert code == 0 and out.count("not reached by the program; the stored winner stands") == 2
    after = {w["key"]: w for w in _core.Store(str(db)).hottest_winners(5)}
    assert {k: (w["config"], w["created"]) for k, w in after.items()} == \
        {k: (w["config"], w["created"]) for k, w in before.items()}
    # Without a command it lists the hottest keys, the retune budget each would get.
    assert main(["retune", "--db", str(db), "--top", "1"]) == 0
    listing = capsys.readouterr().out
    assert "(4096," in listing and "(1024," not in listing and "100" in listing


def test_a_retune_stopped_by_sigterm_says_so_in_one_line_and_keeps_the_winners(tmp_path):
    # On the H200 `timeout` stopped a retune and the interrupt message itself raised (the program's
    # words were parsed into the subcommand's name): a traceback instead of one line.
    db = tmp_path / "results.db"
    run_program(db)
    before = _core.Store(str(db)).hottest_winners(5)
    stop_parent = "import os, signal, time; os.kill(os.getppid(), signal.SIGTERM); time.sleep(30)"
    env = dict(os.environ, PYTHONPATH=PYTHON_PATH)
    done = subprocess.run([sys.executable, "-m", "dr_kernel.cli", "retune", "--top", "1", "--db", str(db), "--",
                           sys.executable, "-c", stop_parent], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip().splitlines() == [
        "dr-kernel retune: interrupted; what the program re-tuned before it stopped is in the store"]
    assert _core.Store(str(db)).hottest_winners(5) == before


def test_mistakes_and_an_empty_store_get_one_line(tmp_path, capsys):
    assert main(["retune", "--top", "0", "--db", str(tmp_path / "a.db")]) == 2
    assert "--top 0: give at least 1" in capsys.readouterr().err
    assert main(["retune", "--db", str(tmp_path / "a.db")]) == 0
    assert "no tuned key in the store yet" in capsys.readouterr().out
    with pytest.raises(ValueError, match="needs the command"):
        hot.retune([], db=str(tmp_path / "a.db"))


def test_a_malformed_request_retunes_nothing_and_a_store_that_cannot_be_written_keeps_the_counts(tmp_path,
                                                                                                 monkeypatch):
    monkeypatch.setenv(hot.RETUNE_ENV, "{not json")
    with pytest.warns(UserWarning, match="is not what `dr-kernel retune` writes"):
        assert hot.retune_budget("k") is None
    assert hot.retune_budget("k") is None  # Said once: the variable is dropped.
    monkeypatch.setenv(hot.RETUNE_ENV, json.dumps({"keys": {"k": 40}}))
    assert hot.retune_budget("k") == 40 and hot.retune_budget("k") is None  # Once per process.
    assert hot.retune_budget("other") is None

    folder = tmp_path / "not-a-file"
    folder.mkdir()
    hot.count(str(folder), "k")
    with pytest.warns(UserWarning, match="could not be stored"):
        assert hot.flush_launch_counts() == 0
    assert hot._counts[(str(folder), "k")] == 1  # Kept for the next flush.
    hot._counts.clear()
