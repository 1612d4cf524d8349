"""Measuring workers: validation, timing, and surviving configs that crash or hang."""

import math
import os
import re
import time
from dataclasses import dataclass

import pytest
from dr_kernel.measure import BuiltinJob, Job, MeasurePool, MeasureSettings, WorkerError, timed_enough


@dataclass
class ToyJob(Job):
    """Writes 2*x into y; config "mode" picks a behaviour: ok, wrong, partial, abort, hang, raise."""

    n: int = 1000

    def setup(self, device):
        import torch

        x = torch.randn(self.n, generator=torch.Generator().manual_seed(0))
        return {"x": x, "y": torch.empty_like(x)}

    def launch(self, state, config):
        mode = config["mode"]
        if mode == "abort":
            os.abort()  # What an illegal address does to a CUDA process: it is gone.
        if mode == "hang":
            time.sleep(3600)
        if mode == "raise":
            raise RuntimeError("out of resource: shared memory, Required: 300000")
        y = state["y"]
        if mode == "partial":
            y[: self.n // 2] = 2 * state["x"][: self.n // 2]  # Leaves half of the poisoned output.
        else:
            y.copy_(state["x"] * (2.0 if mode == "ok" else 2.1))
        time.sleep(config.get("sleep", 0))

    def outputs(self, state):
        return [state["y"]]

    def expected(self, state):
        return [2 * state["x"]] if self.n != 999 else None


def test_crashes_and_hangs_cost_one_config_not_the_session():
    settings = MeasureSettings(reps=3, timeout_s=5)
    configs = [{"mode": m} for m in ("ok", "abort", "ok", "hang", "wrong", "partial", "raise", "ok")]
    with MeasurePool(ToyJob(), ["cpu"], settings) as pool:
        results = pool.measure(configs)
        assert pool.restarts == 2
    statuses = [m["status"] for m, _ in results]
    assert statuses == ["ok", "crashed", "ok", "crashed", "wrong", "wrong", "out_of_resources", "ok"]
    assert "died" in results[1][0]["error"] and "hung" in results[3][0]["error"]
    assert results[4][0]["relerr"] == pytest.approx(0.05, rel=1e-3)
    assert math.isinf(results[5][0]["relerr"]) or math.isnan(results[5][0]["relerr"])
    assert all(m["ms"] > 0 and m["reps"] == 3 for m, _ in results if m["status"] == "ok")


def test_without_a_reference_the_first_valid_config_is_the_reference():
    with MeasurePool(ToyJob(n=999), ["cpu"], MeasureSettings(reps=2)) as pool:
        results = pool.measure([{"mode": "partial"}, {"mode": "ok"}, {"mode": "wrong"}, {"mode": "ok"}])
    assert [m["status"] for m, _ in results] == ["wrong", "ok", "wrong", "ok"]


def test_timing_stops_early_for_configs_slower_than_the_best():
    with MeasurePool(ToyJob(), ["cpu"], MeasureSettings(reps=10, min_reps=3, stop_factor=2.0, settle=0.0)) as pool:
        fast = pool.measure([{"mode": "ok"}])[0][0]
        slow = pool.measure([{"mode": "ok", "sleep": 0.02}], best_ms=fast["ms"])[0][0]
    assert fast["reps"] == 10
    assert slow["reps"] == 3 and slow["ms"] > 20


def test_timing_stops_once_the_launches_add_up_to_the_budget():
    # A 20 ms launch: three of them pass a 50 ms budget; the cap of reps still holds without one.
    config = {"mode": "ok", "sleep": 0.02}
    with MeasurePool(ToyJob(), ["cpu"], MeasureSettings(reps=10, min_reps=3, budget_ms=50.0, settle=0.0)) as pool:
        capped = pool.measure([config])[0][0]
    with MeasurePool(ToyJob(), ["cpu"], MeasureSettings.exact(reps=5, min_reps=3)) as pool:
        full = pool.measure([config])[0][0]
    assert capped["reps"] == 3 and capped["ms"] > 20
    assert full["reps"] == 5


def test_timing_stops_once_the_launches_agree():
    # 30 ms launches agree within a few per cent on any machine: with a 50 % settle three of them
    # are enough, though the budget would allow ten; exact settings time all ten.
    config = {"mode": "ok", "sleep": 0.03}
    with MeasurePool(ToyJob(), ["cpu"], MeasureSettings(reps=10, min_reps=3, budget_ms=math.inf, settle=0.5)) as pool:
        settled = pool.measure([config])[0][0]
    with MeasurePool(ToyJob(), ["cpu"], MeasureSettings.exact(reps=10, min_reps=3)) as pool:
        full = pool.measure([config])[0][0]
    assert settled["reps"] == 3 and settled["ms"] > 30
    assert full["reps"] == 10


def test_a_config_is_timed_until_its_launches_agree_or_a_limit_is_met():
    settings = MeasureSettings(min_reps=3, stop_factor=1.3, budget_ms=50.0, settle=0.02)
    assert not timed_enough([3.0, 3.01], 3.0, settings)            # Fewer than min_reps.
    assert timed_enough([3.0, 3.01, 3.02], 3.0, settings)          # Within 2 %: its median is known.
    assert not timed_enough([3.0, 3.2, 3.1], 3.0, settings)        # 7 % apart: time it more ...
    assert timed_enough([3.0, 3.2, 3.1] * 6, 3.0, settings)        # ... until the budget is spent,
    assert timed_enough([5.0, 4.0, 4.5], 3.0, settings)            # or it is clearly slower than the best.
    assert not timed_enough([0.010, 0.011, 0.0105], 0.01, settings)  # A microsecond kernel's timer noise.
    exact = MeasureSettings.exact(min_reps=3)
    assert not timed_enough([3.0, 3.0, 3.0] * 10, 3.0, exact)


def test_a_job_that_cannot_set_up_is_one_clear_error():
    # A softmax shape without its "cols" key: the worker's set-up raises, the parent says so.
    with pytest.raises(WorkerError, match="could not set up"):
        with MeasurePool(BuiltinJob("softmax", {"rows": 4}, "fp16"), ["cpu"]) as pool:
            pool.measure([{"BLOCK": 256, "num_warps": 1, "num_stages": 1}])


@dataclass
class SlowSetupJob(ToyJob):
    """ToyJob whose set-up takes `setup_s` (as a GPU worker's CUDA start does) or raises."""

    setup_s: float = 0.0
    fail: bool = False

    def setup(self, device):
        time.sleep(self.setup_s)
        if self.fail:
            raise RuntimeError("no CUDA device")
        return super().setup(device)


def first_measurement_s(pool: MeasurePool, work_s: float = 0.0, ahead: bool = False) -> float:
    if ahead:
        began = time.perf_counter()
        pool.start()
        assert time.perf_counter() - began < 0.5, "start() waited for the set-up"
    time.sleep(work_s)  # The caller's own work (a session's first compiles).
    began = time.perf_counter()
    (m, _), = pool.measure([{"mode": "ok"}])
    assert m["status"] == "ok"
    return time.perf_counter() - began


def test_a_pool_started_ahead_sets_up_while_the_caller_works():
    # Started on demand, the first measurement waits for the whole set-up (a fresh interpreter,
    # its imports, 1.5 s of the job's own); started ahead, that overlaps the caller's 2 s of work.
    with MeasurePool(SlowSetupJob(setup_s=1.5), ["cpu"], MeasureSettings(reps=2)) as pool:
        on_demand = first_measurement_s(pool)
    with MeasurePool(SlowSetupJob(setup_s=1.5), ["cpu"], MeasureSettings(reps=2)) as pool:
        ahead = first_measurement_s(pool, work_s=2.0, ahead=True)
    assert on_demand > 1.5
    assert ahead < on_demand - 1.0, f"on demand {on_demand:.2f} s, started ahead {ahead:.2f} s"


def test_a_closed_pool_parks_its_worker_for_the_next_pool_on_the_device(monkeypatch):
    # A program tuning many keys starts one measuring process, not one per key: the second pool
    # takes the first's process (same pid) and skips the interpreter's start and its imports.
    from dr_kernel import measure

    monkeypatch.delenv("DR_KERNEL_FRESH_WORKERS", raising=False)
    measure._stop_parked()
    with MeasurePool(SlowSetupJob(), ["cpu"], MeasureSettings(reps=2)) as pool:
        cold = first_measurement_s(pool)
        pid = pool._workers[0].process.pid
    assert len(measure._PARKED["cpu"]) == 1
    with MeasurePool(SlowSetupJob(n=77), ["cpu"], MeasureSettings(reps=2)) as pool:
        warm = first_measurement_s(pool)  # A job of its own (n=77), set up in the parked process.
        assert pool._workers[0].process.pid == pid
    assert warm < cold - 0.5, f"fresh {cold:.2f} s, parked {warm:.2f} s"
    # A process a config crashed is not parked; a fresh one replaces it and is parked in turn.
    with MeasurePool(ToyJob(), ["cpu"], MeasureSettings(reps=2, timeout_s=5)) as pool:
        assert [m["status"] for m, _ in pool.measure([{"mode": "abort"}, {"mode": "ok"}])] == ["crashed", "ok"]
        survivor = pool._workers[0].process.pid
    assert survivor != pid and measure._PARKED["cpu"][0][0].pid == survivor
    # A process started with another environment (another Triton cache folder) is not taken; the
    # newer one is kept instead, and the older stops (cleanly: it says nothing on the way out).
    monkeypatch.setenv("TRITON_CACHE_DIR", "/tmp/dr_kernel_test_other_cache")
    older = measure._PARKED["cpu"][0][0]
    with MeasurePool(ToyJob(), ["cpu"], MeasureSettings(reps=2)) as pool:
        pool.measure([{"mode": "ok"}])
        newer = pool._workers[0].process.pid
        assert newer != survivor
    assert [p.pid for p, *_ in measure._PARKED["cpu"]] == [newer]
    assert older.wait(5) == 0
    monkeypatch.delenv("TRITON_CACHE_DIR")
    # DR_KERNEL_FRESH_WORKERS=1: every pool starts and stops its own.
    monkeypatch.setenv("DR_KERNEL_FRESH_WORKERS", "1")
    measure._stop_parked()
    with MeasurePool(ToyJob(), ["cpu"], MeasureSettings(reps=2)) as pool:
        pool.measure([{"mode": "ok"}])
    assert not measure._PARKED


@dataclass
class EnvJob(ToyJob):
    """ToyJob whose output is right only where DR_KERNEL_TEST_MARK reads `mark` and the import
    path holds `path`: what the tuning process had when it sent the job."""

    mark: str = ""
    path: str = ""

    def launch(self, state, config):
        import sys

        adopted = os.environ.get("DR_KERNEL_TEST_MARK") == self.mark and self.path in sys.path
        super().launch(state, {**config, "mode": "ok" if adopted else "wrong"})


def test_a_spare_started_ahead_is_taken_with_the_environment_its_job_brings(monkeypatch, tmp_path):
    # @optimize starts a spare at decoration (torch and Triton imported while the program goes
    # on); the program then sets its Triton cache folder or import path, and the spare still serves.
    from dr_kernel import measure

    monkeypatch.delenv("DR_KERNEL_FRESH_WORKERS", raising=False)
    monkeypatch.delenv("DR_KERNEL_TEST_MARK", raising=False)
    measure._stop_parked()
    assert measure.prestart("cpu")
    assert not measure.prestart("cpu")  # One per device.
    spare = measure._PARKED["cpu"][0][0]
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("DR_KERNEL_TEST_MARK", "set after the spare started")
    monkeypatch.syspath_prepend(str(tmp_path))
    job = EnvJob(mark="set after the spare started", path=str(tmp_path))
    with MeasurePool(job, ["cpu"], MeasureSettings(reps=2)) as pool:
        (m, _), = pool.measure([{"mode": "ok"}])
        assert pool._workers[0].process.pid == spare.pid
    assert m["status"] == "ok"
    # Once it has run a job it is a parked worker like any other: taken only with the same environment.
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "other"))
    with MeasurePool(ToyJob(), ["cpu"], MeasureSettings(reps=2)) as pool:
        pool.measure([{"mode": "ok"}])
        assert pool._workers[0].process.pid != spare.pid
    # A spare that no pool takes leaves by itself.
    measure._stop_parked()
    assert measure.prestart("cpu", idle_s=0.5)
    idle = measure._PARKED["cpu"][0][0]
    assert idle.wait(120) == 0
    with MeasurePool(ToyJob(), ["cpu"], MeasureSettings(reps=2)) as pool:
        assert pool.measure([{"mode": "ok"}])[0][0]["status"] == "ok"
        assert pool._workers[0].process.pid != idle.pid
    measure._stop_parked()


def test_the_spares_first_launch_kernel_runs_and_compiles_for_the_h200():
    # A spare's warm-up (first_launch.warm) launches this kernel on its GPU while it waits: run here in
    # Triton's interpreter, and compiled for sm_90 as the GPU machine's spare compiles it. Without a
    # GPU, and under the interpreter, warm() launches nothing and says so.
    import subprocess
    import sys

    from dr_kernel import first_launch
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    code = ("import torch; from dr_kernel import first_launch as f; x = torch.zeros(1, dtype=torch.int32); "
            "f._increment[(1,)](x); f._increment[(1,)](x); print(int(x.item()), f.warm())")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    assert run.stdout.split() == ["2", "False"], run.stderr[-2000:]
    assert not first_launch.warm()  # No GPU here.
    compiled = compile(ASTSource(fn=first_launch._increment, signature={"x_ptr": "*i32"}),
                       target=GPUTarget("cuda", 90, 32))
    assert "st.global" in compiled.asm["ptx"]


def test_a_start_ahead_that_fails_is_the_first_measurements_error():
    with pytest.raises(WorkerError, match="(?s)could not set up.*no CUDA device"):
        with MeasurePool(SlowSetupJob(fail=True), ["cpu"]) as pool:
            pool.start()
            pool.measure([{"mode": "ok"}])
    # A pool closed while its start is under way stops the start instead of waiting it out.
    pool = MeasurePool(SlowSetupJob(setup_s=60), ["cpu"])
    pool.start()
    time.sleep(0.5)
    began = time.perf_counter()
    pool.close()
    assert time.perf_counter() - began < 5


def test_builtin_softmax_in_the_interpreter_is_validated_against_torch():
    configs = [{"BLOCK": b, "num_warps": 4, "num_stages": 1} for b in (256, 1024)]
    with MeasurePool(BuiltinJob("softmax", {"rows": 4, "cols": 600}, "fp32"), ["cpu"], MeasureSettings(reps=2)) as pool:
        results = pool.measure(configs)
    for m, seconds in results:
        assert m["status"] == "ok" and m["relerr"] < 1e-5 and seconds > 0


def test_settings_without_a_timed_launch_are_refused_when_made():
    # reps=0 used to reach the worker, which stored every config as crashed (an IndexError).
    for reps in (0, -1, 2.5):
        message = f"MeasureSettings(reps={reps!r}): give at least 1 timed launch"
        with pytest.raises(ValueError, match=re.escape(message)):
            MeasureSettings(reps=reps)
    assert MeasureSettings(reps=1).reps == 1


def test_no_child_is_forked_while_a_measuring_process_is_being_started(monkeypatch):
    # On the H200 a tuning hung: the compile pool forked a worker while a background thread was
    # inside subprocess.Popen for the measuring process, the fork kept Popen's "has it started"
    # pipe open, and Popen waited for that worker to exit. Every start of a child, forked or not,
    # must hold spawning.START_LOCK; here both kinds run at once from two threads.
    import subprocess

    from dr_kernel import compile_pool
    from dr_kernel.spawning import START_LOCK

    starts = []
    real_fork, real_popen = os.fork, subprocess.Popen

    def fork():
        held = START_LOCK.locked()
        pid = real_fork()
        if pid:
            starts.append(("fork", held))
        return pid

    def popen(*args, **kwargs):
        starts.append(("popen", START_LOCK.locked()))
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(os, "fork", fork)
    monkeypatch.setattr(subprocess, "Popen", popen)
    with MeasurePool(ToyJob(), ["cpu"], MeasureSettings(reps=2)) as measuring:
        measuring.start()  # Its Popen runs in a background thread...
        with compile_pool.CompilePool(workers=2, task=pretend_task, fork=True) as compiling:
            assert compiling.map([1, 2, 3, 4]) == [2, 4, 6, 8]  # ...while this thread forks.
        (result, _), = measuring.measure([{"mode": "ok"}])
    assert result["status"] == "ok"
    assert {kind for kind, _ in starts} == {"fork", "popen"} and all(held for _, held in starts), starts


def pretend_task(n: int) -> int:
    return 2 * n
