"""Progress of long operations: a bar on a terminal, nothing in a pipe or a log unless asked for.

The CLI is run under a pseudo-terminal (what a user's shell gives it) and through a pipe (what CI
and `| tee` give it); @optimize's opt-in bar is checked in Triton's interpreter."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest
from dr_kernel.progress import Progress

PYTHON_PATH = str(Path(__file__).resolve().parents[1] / "python")
TUNE = ["-m", "dr_kernel.cli", "tune", "--kernel", "softmax", "--shape", "rows=3,cols=200", "--precision", "fp32",
        "--interpret", "--workers", "1", "--reps", "2", "--budget", "4", "--strategy", "exhaustive",
        "--space", json.dumps({"BLOCK": [256], "num_warps": [1, 2, 4, 8], "num_stages": [1]})]


def test_a_bar_shows_the_count_and_the_best_time_and_nothing_reaches_a_pipe_unless_asked():
    quiet = io.StringIO()  # Not a terminal.
    with Progress(3, "tune k", stream=quiet) as p:
        p.trial({"status": "ok", "ms": 2.0})
    assert quiet.getvalue() == "" and not p.shown

    asked = io.StringIO()
    with Progress(3, "tune k", enabled=True, stream=asked) as p:
        p.trial({"status": "ok", "ms": 2.0})
        p.trial({"status": "compile_error"})
        p.trial({"status": "ok", "ms": 1.5}, {"BLOCK": 64})
        assert p.best_ms == 1.5
    text = asked.getvalue()
    assert "tune k" in text and "3/3" in text and "best=1.5 ms" in text and "BLOCK=64" in text

    with Progress(3, "tune k", enabled=False, stream=asked) as p:
        assert not p.shown


def run_in_terminal(args: list[str], env: dict, timeout: float = 240) -> tuple[int, str]:
    """Runs `python args` with stdout and stderr on a pseudo-terminal; returns its exit code and output."""
    leader, follower = pty.openpty()
    process = subprocess.Popen([sys.executable, *args], stdout=follower, stderr=follower, stdin=subprocess.DEVNULL,
                               env=env, close_fds=True)
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], timeout)
        if not ready:
            process.kill()
            pytest.fail(f"no output for {timeout} s: {b''.join(chunks)[-2000:]!r}")
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # The child closed the terminal: it is done.
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return process.wait(timeout), b"".join(chunks).decode(errors="replace")


def test_tune_shows_a_bar_on_a_terminal_and_none_through_a_pipe(tmp_path):
    env = dict(os.environ, PYTHONPATH=PYTHON_PATH)
    code, shown = run_in_terminal([*TUNE, "--db", str(tmp_path / "a.db")], env)
    assert code == 0, shown
    bars = re.findall(r"tune softmax: *\d+%\|.*?\| (\d)/4 .*?best=([\d.]+) ms", shown)
    assert bars and bars[-1][0] == "4", shown[-2000:]
    assert "tuned softmax" in shown  # The summary follows the bar.

    piped = subprocess.run([sys.executable, *TUNE, "--db", str(tmp_path / "b.db")], capture_output=True, text=True,
                           env=env, timeout=240)
    assert piped.returncode == 0, piped.stderr
    assert "tune softmax:" not in piped.stderr and "|" not in piped.stderr
    assert "tuned softmax" in piped.stdout


OPTIMIZE_PROGRAM = r"""
import os
os.environ["TRITON_INTERPRET"] = "1"
import sys
import torch, triton, triton.language as tl
from dr_kernel import optimize

@optimize(space={"BLOCK": [32, 64, 128]}, key=["n"], max_evals=3, strategy="exhaustive", isolate=False,
          static_checks=False, verbose={verbose})
@triton.jit
def double(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, 2 * tl.load(x + offs, mask=offs < n), mask=offs < n)

x = torch.randn(300)
y = torch.empty_like(x)
double[lambda meta: (triton.cdiv(300, meta["BLOCK"]),)](x, y, 300)
assert torch.allclose(y, 2 * x)
print("done")
"""


@pytest.mark.parametrize("verbose, env_value, shown", [
    ("True", None, True), ("None", None, False), ("None", "1", True), ("False", "1", False)])
def test_optimize_shows_its_tuning_only_when_asked(tmp_path, verbose, env_value, shown):
    env = dict(os.environ, PYTHONPATH=PYTHON_PATH, DR_KERNEL_DB=str(tmp_path / "r.db"))
    env.pop("DR_KERNEL_VERBOSE", None)
    if env_value is not None:
        env["DR_KERNEL_VERBOSE"] = env_value
    done = subprocess.run([sys.executable, "-c", OPTIMIZE_PROGRAM.replace("{verbose}", verbose)],
                          capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr[-2000:]
    if shown:
        # Off a terminal the bar is plain lines: the last says all three configs were measured.
        assert re.search(r"tune double \(300,.*3/3", done.stderr), done.stderr[-2000:]
    else:
        assert "tune double" not in done.stderr
