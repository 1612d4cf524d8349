"""Hot keys re-tuned later (hot.py): launches counted into the store by every process, the hottest
keys listed, re-tuned with a larger budget in a run of the user's program, and the new winner picked
up by the next process. In Triton's interpreter, where a small block (many program instances run one
after another) is clearly slower than a large one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
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


BACKGROUND = Path(__file__).with_name("background_program.py")


def run_background(db: Path, mode: str, idle_s: float, busy_s: float = 12) -> dict:
    # Twelve seconds of launches: time enough for the re-tune to start its measuring process.
    env = dict(os.environ, DR_KERNEL_DB=str(db), PYTHONPATH=PYTHON_PATH, BUSY_S=str(busy_s))
    done = subprocess.run([sys.executable, str(BACKGROUND), mode, str(idle_s)], capture_output=True, text=True,
                          env=env, timeout=400)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_a_background_retune_times_nothing_while_the_program_launches_and_swaps_in_a_faster_winner(tmp_path):
    seen = run_background(tmp_path / "results.db", "isolate", idle_s=0.5)
    assert seen["first"]["BLOCK"] == 16  # One evaluation: the slowest config.
    # Launches back to back: the key's copy was taken, but nothing was timed.
    assert seen["busy"]["launches"] >= 5 and seen["busy"]["results"] == 0 and seen["busy"]["rows_added"] == 0
    (result,) = seen["results"]
    assert seen["handled"] and not seen["running"] and result["retuned"] and result["replaced"]
    assert result["before"]["evaluations"] == 1 and result["after"]["evaluations"] == 7
    assert result["after"]["ms"] < result["before"]["ms"] / 4
    # The program's next launch took the new winner, in the same process, and it is stored for the next.
    assert seen["after"]["BLOCK"] == result["after"]["config"]["BLOCK"] >= 256
    assert _core.Store(str(tmp_path / "results.db")).get_winner(result["key"])[0] == result["after"]["config"]


def test_without_waiting_for_idle_the_background_retune_times_while_the_program_launches(tmp_path):
    # The control of the test above: with idle_s=0 the gate lets batches through between launches.
    # Each of them is disturbed and timed again up to four times, beside a program that keeps a
    # core busy: 30 s of launches, so that more than the first has ended while they go on.
    seen = run_background(tmp_path / "results.db", "isolate", idle_s=0.0, busy_s=30)
    assert seen["busy"]["rows_added"] > 0


def test_an_interpreted_kernel_measured_in_the_program_is_not_retuned_in_the_background_and_says_why(tmp_path):
    seen = run_background(tmp_path / "results.db", "inprocess", idle_s=0.5)
    (result,) = seen["results"]
    assert not result["retuned"] and "interpreter" in result["reason"] and "dr-kernel retune" in result["reason"]
    assert seen["after"]["BLOCK"] == 16 and result["after"] == result["before"]


def test_a_tuning_of_the_program_that_waits_makes_the_background_retune_give_way(monkeypatch):
    background = hot.BackgroundRetune(top=1, budget=None, min_launches=10**9, idle_s=0.01, every_s=60.0,
                                      max_utilization=100.0, max_copy_bytes=0)
    monkeypatch.setattr(hot, "_background", background)  # As retune_in_background leaves it.
    entered = threading.Event()

    def first_call():
        with hot.foreground_tuning():
            entered.set()

    try:
        with hot._tuning:  # As a background re-tune holds it.
            program = threading.Thread(target=first_call)
            program.start()
            for _ in range(500):
                if hot._foreground_waiting:
                    break
                time.sleep(0.01)
            with pytest.raises(hot.GiveWay):
                background._gated("cpu", lambda: pytest.fail("a batch was timed while the program's tuning waited"))
            assert not entered.is_set()
        program.join(10)
        assert entered.is_set() and hot._foreground_waiting == 0
    finally:
        background.stop(5)
    assert not background.running


def test_arguments_over_the_copy_limit_are_not_copied_and_say_how_to_raise_it():
    import torch

    copy = hot.ArgumentCopy(max_bytes=1024)
    copy.take((torch.zeros(1024), 3), {})
    assert copy.ready.is_set() and copy.args == () and "4.0 KiB, over max_copy_bytes (1.0 KiB)" in copy.error
    small = hot.ArgumentCopy(max_bytes=1 << 20)
    x = torch.ones(8)
    small.take((x, 3), {"grid": (1,)})
    assert small.error is None and torch.equal(small.args[0], x) and small.args[0] is not x
    assert small.args[1] == 3 and small.kwargs == {"grid": (1,)}


def test_bad_background_options_are_refused_by_name():
    with pytest.raises(ValueError, match="top=0"):
        hot.retune_in_background(top=0)
    with pytest.raises(ValueError, match="idle_s"):
        hot.retune_in_background(idle_s=-1)


def test_the_environment_variable_starts_a_background_retune_or_says_what_to_give(monkeypatch):
    monkeypatch.setattr(hot, "_background", None)  # Put back after the test: later tests run without one.
    monkeypatch.setattr(hot, "_background_env_read", False)
    monkeypatch.setenv(hot.BACKGROUND_ENV, '{"top": 0}')
    with pytest.warns(UserWarning, match='cannot start a background re-tune .*top=0.*give 1, or a JSON object'):
        hot._start_from_env()
    assert hot._background is None
    monkeypatch.setattr(hot, "_background_env_read", False)
    monkeypatch.setenv(hot.BACKGROUND_ENV, '{"top": 2, "every_s": 60}')
    hot._start_from_env()
    try:
        assert hot._background.running and hot._background.top == 2 and hot._background.every_s == 60
    finally:
        hot._background.stop(5)
