"""Tests of the compile pool: deadlines that kill stuck workers, lost workers, and binary groups.

Most tests inject their own task, a module-level function of this file that the spawned workers
import, so that they control exactly how long a "compile" takes or how it fails. One test times
out a real compile: a matmul tile that makes ptxas spill for minutes, in an empty Triton cache.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from dr_kernel.analysis import StaticReport
from dr_kernel.compile_pool import CompilePool, CompileRequest, function_reference, group_by_binary


def pretend_compile(request: CompileRequest) -> StaticReport:
    """A task that behaves as the request's config tells it: sleep, crash, raise, or start a child."""
    config = request.config
    if "child_pid_file" in config:
        # Stands in for ptxas: a child process that outlives any sensible deadline.
        child = subprocess.Popen(["sleep", "120"])
        # And leaves a temporary folder behind, as a compile killed at its deadline would.
        scratch = tempfile.mkdtemp()
        Path(config["child_pid_file"]).write_text(f"{os.getpid()} {child.pid} {scratch}")
    if config.get("exit"):
        os._exit(config["exit"])
    if config.get("raise"):
        raise ValueError(config["raise"])
    time.sleep(config.get("sleep", 0.0))
    return StaticReport(kernel=request.kernel_name, config=config, valid=True, binary_hash=config.get("hash"),
                        n_regs=os.getpid())


def request(**config) -> CompileRequest:
    return CompileRequest(kernel="fake", config=config)


def process_is_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A killed child of a killed worker is reaped by init; until then it is a zombie, which is gone
    # for every purpose that matters here.
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("fork", [False, True], ids=["fresh", "forked"])
def test_a_stuck_task_times_out_alone_and_its_worker_and_child_are_killed(tmp_path, fork):
    pid_file = tmp_path / "pids"
    requests = [request(sleep=0.1, hash="a"), request(child_pid_file=str(pid_file), sleep=60),
                request(sleep=0.2, hash="b"), request(sleep=0.1, hash="c"), request(sleep=0.1, hash="d")]
    with CompilePool(workers=2, timeout_s=1.5, task=pretend_compile, fork=fork) as pool:
        start = time.monotonic()
        reports = pool.map(requests)
        elapsed = time.monotonic() - start
        # The stuck request cost its deadline, not its 60 seconds.
        assert elapsed < 15
        assert [r.valid for r in reports] == [True, False, True, True, True]
        assert reports[1].reason == "compile timed out after 1.5 s"
        assert reports[1].compile_s == 1.5 and reports[1].config["sleep"] == 60
        assert [r.binary_hash for r in reports if r.valid] == ["a", "b", "c", "d"]
        worker_pid, child_pid, scratch = pid_file.read_text().split()
        worker_pid, child_pid = int(worker_pid), int(child_pid)
        assert process_is_gone(worker_pid)
        # Its temporary files were in a folder of its own, removed with it.
        assert Path(scratch).parent.name.startswith("dr_kernel_worker_") and not Path(scratch).parent.exists()
        # The worker was waited for; its child dies of the same signal, but asynchronously.
        deadline = time.monotonic() + 10
        while not process_is_gone(child_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process_is_gone(child_pid)
        # The pool replaced the killed worker and still serves a later batch.
        again = pool.map([request(sleep=0.0, hash="e")] * 3)
        assert all(r.valid for r in again)
        assert worker_pid not in {r.n_regs for r in again}
        folders = [Path(worker.scratch) for worker in pool._pool]
        assert folders and all(f.is_dir() for f in folders)
    # Closing the pool removes its workers' folders too.
    assert not any(f.exists() for f in folders)


def test_a_request_may_have_a_shorter_deadline_than_the_pool():
    # Configs beyond a library's list get a few times the listed ones' compile time, not the pool's.
    with CompilePool(workers=2, timeout_s=30, task=pretend_compile, fork=True) as pool:
        short = pool.submit(request(sleep=5, hash="long"), timeout_s=0.5)
        usual = pool.submit(request(sleep=0.7, hash="usual"))
        start, done = time.monotonic(), {}
        while len(done) < 2:
            done.update(pool.poll(None))
        assert time.monotonic() - start < 4
    assert done[short].reason == "compile timed out after 0.5 s" and not done[short].valid
    assert done[usual].valid  # Took longer than the short deadline, within the pool's.


@pytest.mark.parametrize("fork", [False, True], ids=["fresh", "forked"])
def test_a_crashing_or_raising_task_costs_only_its_own_request(fork):
    requests = [request(hash="a"), request(exit=3), request(hash="b"), request(**{"raise": "bad tile"}),
                request(hash="c")]
    with CompilePool(workers=2, timeout_s=30, task=pretend_compile, fork=fork) as pool:
        reports = pool.map(requests)
    assert [r.valid for r in reports] == [True, False, True, False, True]
    assert reports[1].reason == "compile worker died (exit code 3)"
    assert reports[3].reason == "compile worker raised ValueError: bad tile"


def test_results_stream_as_they_finish_and_workers_can_be_recycled():
    requests = [request(sleep=1.0, hash="slow"), request(sleep=0.0, hash="fast")]
    with CompilePool(workers=2, timeout_s=30, task=pretend_compile, max_tasks_per_worker=1) as pool:
        order = [index for index, _ in pool.run(requests)]
        assert order == [1, 0]
        pids = {r.n_regs for r in pool.map([request(hash=str(i)) for i in range(4)])}
    # One task per worker: four tasks ran in four different processes.
    assert len(pids) == 4


def test_group_by_binary_collects_identical_valid_binaries():
    reports = [StaticReport("k", {}, valid=valid, binary_hash=digest)
               for valid, digest in [(True, "x"), (True, "y"), (False, "x"), (True, "x")]]
    assert group_by_binary(reports) == {"x": [0, 3], "y": [1]}


def test_bad_pool_arguments_are_refused():
    with pytest.raises(ValueError, match="timeout_s=0 is not positive"):
        CompilePool(timeout_s=0)

    def local_kernel():
        pass

    with pytest.raises(ValueError, match="not defined at the top level of a module"):
        function_reference(local_kernel)


def test_real_compiles_time_out_group_and_agree_with_direct_analysis(tmp_path, monkeypatch):
    # An empty cache makes every compile real; the workers inherit the variable at spawn.
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    slow = {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 2, "num_stages": 3}
    softmax = [{"BLOCK": 1024, "num_warps": 4, "num_stages": stages} for stages in (1, 2)]
    softmax.append({"BLOCK": 2048, "num_warps": 4, "num_stages": 1})
    requests = [CompileRequest("matmul", slow, {"M": 4096, "N": 4096, "K": 4096})]
    requests += [CompileRequest("softmax", c, {"rows": 4096, "cols": 4096}) for c in softmax]
    # Each worker's first compile hashes Triton's own files (triton_key); read once here, they are in
    # the page cache, so that a cold disk after a build does not spend the softmax compiles' 4 s.
    from triton.runtime.cache import triton_key

    triton_key()
    # The slow tile gets 4 s; the softmax compiles the pool's own deadline, generous enough for a
    # loaded 2-core machine (under load they took more than 4 s each).
    with CompilePool(workers=2, timeout_s=120) as pool:
        tickets = [pool.submit(requests[0], timeout_s=4)] + [pool.submit(r) for r in requests[1:]]
        answers: dict = {}
        while pool.pending:
            answers.update(pool.poll(None))
    reports = [answers[t] for t in tickets]
    # The recorded sweep never finished this tile either (its row is compile_timeout).
    assert not reports[0].valid and reports[0].reason == "compile timed out after 4 s"
    assert reports[0].kernel == "matmul"
    assert all(r.valid for r in reports[1:]), [r.reason for r in reports[1:]]
    # num_stages changes nothing in a kernel without pipelined loads, so those two compile to one
    # binary and need one measurement; another BLOCK is another binary.
    groups = group_by_binary(reports)
    assert sorted(groups.values()) == [[1, 2], [3]]
    assert reports[1].binary_hash == reports[2].binary_hash != reports[3].binary_hash


def test_urgent_requests_overtake_guesses_and_queued_guesses_can_be_dropped():
    with CompilePool(workers=2, timeout_s=30, task=pretend_compile) as pool:
        slow = [pool.submit(request(sleep=1.5, hash=str(i)), speculative=True) for i in range(3)]
        # The promoted request takes a little longer than the urgent one: both start before any
        # guess, on the two workers or one after the other, and which of two equally quick
        # compiles answers first would be a race.
        promoted = pool.submit(request(sleep=0.3, hash="p"), speculative=True)
        urgent = pool.submit(request(sleep=0.0, hash="u"))
        assert pool.cancel(slow[2]) and pool.pending == 4
        pool.prioritise(promoted)
        order = []
        while pool.pending:
            order += [ticket for ticket, _ in pool.poll(5.0)]
    # Urgent requests start before any guess, in the order they became urgent, so both finish
    # before the 1.5 s guesses.
    assert order[:2] == [urgent, promoted]
    assert sorted(order[2:]) == slow[:2]
    assert not pool.cancel(slow[0])  # Answered requests cannot be cancelled.


def test_promoted_guesses_start_before_older_ones():
    # Two workers: guesses run on one of them, one after another, in the queue's order.
    with CompilePool(workers=2, timeout_s=30, task=pretend_compile) as pool:
        old = [pool.submit(request(sleep=0.2, hash=f"old{i}"), speculative=True) for i in range(2)]
        new = [pool.submit(request(sleep=0.2, hash=f"new{i}"), speculative=True) for i in range(2)]
        pool.promote(new)
        order = []
        while pool.pending:
            order += [ticket for ticket, _ in pool.poll(10.0)]
    assert order == [*new, *old]


def test_guesses_never_hold_every_worker():
    with CompilePool(workers=2, timeout_s=30, task=pretend_compile) as pool:
        workers_seen: set[int] = set()  # Process ids: a worker that answered is up.
        for _ in range(20):
            workers_seen |= {r.n_regs for r in pool.map([request(sleep=0.5, hash="warm-up")] * 2)}
            if len(workers_seen) == 2:
                break
        assert len(workers_seen) == 2
        guesses = [pool.submit(request(sleep=3.0, hash=str(i)), speculative=True) for i in range(2)]
        assert pool.poll(0.0) == []  # Starts what may start: one guess, on one worker.
        start = time.monotonic()
        urgent = pool.submit(request(hash="u"))
        answered = []
        while urgent not in answered:
            answered += [ticket for ticket, _ in pool.poll(10.0)]
        # Had both guesses started, the urgent request would have waited 3 s for a worker.
        assert time.monotonic() - start < 1.5
        assert answered == [urgent]
        while pool.pending:
            answered += [ticket for ticket, _ in pool.poll(10.0)]
        assert answered[1:] == guesses


def test_workers_compile_even_when_the_caller_interprets(tmp_path, monkeypatch):
    # Under TRITON_INTERPRET=1 triton.language's own @jit helpers are interpreter functions and no
    # kernel that calls them compiles; workers must not inherit the setting.
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    config = {"BLOCK": 512, "num_warps": 4, "num_stages": 1}
    with CompilePool(workers=1, timeout_s=120) as pool:
        report = pool.map([CompileRequest("softmax", config, {"rows": 8, "cols": 300}, "fp16")])[0]
    assert report.valid, report.reason
