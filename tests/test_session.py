"""The tuning session: static refusals before measuring, one measurement per binary, the store.

Most tests use a pretend compiler (a module-level task of this file, which the compile workers
import) and a counting benchmarker, so that they control every verdict; two compile real kernels
for the H200 to show the refusal and the deduplication on the compiler's own findings.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest
from dr_kernel.analysis import StaticReport
from dr_kernel.compile_pool import CompilePool, CompileRequest
from dr_kernel.kernels import BUILTINS
from dr_kernel.session import StaticStage, builtin_describer, measurable, refusal, run_session
from dr_kernel.space import make_space
from dr_kernel.store import open_store


def pretend_compile(request: CompileRequest) -> StaticReport:
    """X=3 needs too much shared memory, X=4 times out, X=5 fails to compile; binaries are X // 2
    except for X=7, whose resource usage cannot be read; registers are 10 * X, occupancy 1 / (X + 1)."""
    x = request.config["X"]
    report = StaticReport(kernel="fake", config=dict(request.config), compile_s=0.5)
    if x == 4:
        report.reason = "compile timed out after 9 s"
    elif x == 5:
        report.reason = "did not compile: CompilationError: at 3:4: bad"
    elif x == 7:
        report.binary_hash, report.reason = "seven", "compiled, but its resource usage could not be read: ?"
    else:
        report.binary_hash, report.n_regs, report.n_spills, report.shared = f"b{x // 2}", 10 * x, 0, 1000 * x
        report.occupancy = 1 / (x + 1)
        report.valid = x != 3
        report.reason = "" if report.valid else "needs 300000 B of shared memory; the NVIDIA H200 allows 232448 B"
    return report


class Counter:
    """A benchmarker that records what it was asked to measure; X=5 runs fine on the device."""

    def __init__(self):
        self.seen: list[dict] = []

    def __call__(self, configs, best_ms):
        self.seen.extend(configs)
        return [({"status": "ok", "ms": 1.0 + c["X"], "ms_p20": 1.0, "ms_p80": 1.0, "relerr": 0.0,
                  "load_s": 0.1}, 0.25) for c in configs]


PROBLEM = {"family": "fake", "shape": {"n": 1}, "device": "test", "dtype": ""}


def pretend_stage(workers: int = 2) -> StaticStage:
    pool = CompilePool(workers=workers, timeout_s=30, task=pretend_compile)
    return StaticStage(pool, lambda config: CompileRequest("fake", dict(config)))


def test_refused_configs_are_not_measured_and_identical_binaries_are_measured_once(tmp_path):
    space = make_space({"X": [0, 1, 2, 3, 4, 5, 6, 7]})
    stage, measure = pretend_stage(), Counter()
    store = open_store(tmp_path / "r.db")
    try:
        result = run_session(PROBLEM, space, measure, static=stage, strategy="exhaustive", max_evals=8,
                             store=store, options={"batch": 8})
    finally:
        stage.close()
    # The history holds elapsed seconds; each evaluation's cost is the step between neighbours.
    elapsed = [0.0] + [e for _, _, e in result.history]
    by_x = {c["X"]: (m, elapsed[i + 1] - elapsed[i]) for i, (c, m, _) in enumerate(result.history)}
    assert len(by_x) == 8 and result.evaluations == 8
    # Measured: one config per binary (X=0 and 1 share one), and X=7, whose resource usage is
    # unknown, so the GPU decides; X=3, 4 and 5 are refused.
    assert sorted(c["X"] for c in measure.seen) == [0, 2, 6, 7]
    assert (result.measured, result.refused, result.copied) == (4, 3, 1)
    assert {x: by_x[x][0]["status"] for x in (3, 4, 5)} == {3: "out_of_resources", 4: "compile_timeout",
                                                             5: "compile_error"}
    assert by_x[3][0]["error"].startswith("needs 300000 B") and by_x[3][0]["shared"] == 3000
    assert by_x[3][0]["n_regs"] == 30 and by_x[3][1] == pytest.approx(0.5)  # Cost: its compile only.
    # X=1 shares X=0's binary: its result is X=0's, with its own compile facts; it costs its compile.
    assert by_x[1][0]["ms"] == by_x[0][0]["ms"] == 1.0 and by_x[1][0]["n_regs"] == 10
    assert by_x[1][1] == pytest.approx(0.5)
    assert by_x[0][1] == pytest.approx(0.75) and by_x[0][0]["compile_s"] == pytest.approx(0.5)
    assert result.best_config == {"X": 0} and result.best_ms == 1.0
    assert elapsed[-1] == pytest.approx(3 * 0.5 + 4 * 0.75 + 0.5)
    rows = store.rows({**PROBLEM})
    assert len(rows) == 8 and {m["status"] for _, m in rows} >= {"ok", "out_of_resources", "compile_timeout"}


def slow_compile(request: CompileRequest) -> StaticReport:
    """A compile that takes 0.4 s of the session's wall time."""
    import time

    time.sleep(0.4)
    return StaticReport(kernel="fake", config=dict(request.config), compile_s=0.4, valid=True,
                        binary_hash=str(request.config["X"]))


def test_the_session_says_where_its_wall_time_went():
    import time

    def measure(configs, best_ms):  # 0.2 s a config, of which its first launch (load) took 0.05 s.
        time.sleep(0.2 * len(configs))
        return [({"status": "ok", "ms": 1.0 + c["X"], "load_s": 0.05}, 0.2) for c in configs]

    stage = StaticStage(CompilePool(workers=2, timeout_s=30, task=slow_compile),
                        lambda config: CompileRequest("fake", dict(config)))
    try:
        result = run_session(PROBLEM, make_space({"X": [0, 1]}), measure, static=stage, strategy="exhaustive",
                             max_evals=2, options={"batch": 2})
    finally:
        stage.close()
    split = result.split_s
    assert set(split) == {"compile", "load", "measure", "confirm", "search"}
    assert split["compile"] >= 0.4 and split["load"] == pytest.approx(0.1) and split["measure"] >= 0.3
    assert sum(split.values()) == pytest.approx(result.wall_s)


class FlakyStore:
    """A store whose writes fail as a locked or full database does (OSError), `failures` times."""

    def __init__(self, failures: float):
        self.failures, self.rows = failures, []

    def add(self, problem, config, measurement, source):
        if self.failures > 0:
            self.failures -= 1
            raise OSError("r.db: the database is locked by another process")
        self.rows.append(config["X"])


def test_a_store_that_cannot_be_written_loses_no_measurement_and_ends_no_session():
    # Issue 9, point 14: a write lock held past its timeout ended the session with what it measured.
    space = make_space({"X": [0, 1, 2, 3, 4, 5]})
    store = FlakyStore(failures=3)
    result = run_session(PROBLEM, space, Counter(), strategy="exhaustive", max_evals=6, store=store)
    assert result.evaluations == 6 and sorted(store.rows) == [0, 1, 2, 3, 4, 5]  # Kept, written later.
    store = FlakyStore(failures=math.inf)
    with pytest.warns(UserWarning, match="6 of this session's measurements could not be written"):
        result = run_session(PROBLEM, space, Counter(), strategy="exhaustive", max_evals=6, store=store)
    assert result.evaluations == 6 and result.best_config == {"X": 0}


def test_user_kernels_measure_static_compile_errors_and_stop_trusting_a_wrong_description():
    space = make_space({"X": [5, 3, 0]})
    stage, measure = pretend_stage(workers=1), Counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = run_session(PROBLEM, space, measure, static=stage, strategy="exhaustive", max_evals=3,
                                 trust_compile_errors=False, options={"batch": 1})
    finally:
        stage.close()
    # X=5 failed to compile from its description yet ran: later verdicts are not trusted, so X=3,
    # over the limits by the same description, is measured too.
    assert [c["X"] for c in measure.seen] == [5, 3, 0]
    assert [m["status"] for _, m, _ in result.history] == ["ok", "ok", "ok"]
    assert any("description" in str(w.message) for w in caught)


def test_a_session_without_static_checks_measures_everything():
    measure = Counter()
    result = run_session(PROBLEM, make_space({"X": [3, 4]}), measure, strategy="random", max_evals=2, seed=1)
    assert sorted(c["X"] for c in measure.seen) == [3, 4] and not result.static


def test_neighbours_are_compiled_ahead_for_one_step_strategies():
    space = make_space({"X": [0, 1, 2, 6]})
    stage, measure = pretend_stage(), Counter()
    try:
        run_session(PROBLEM, space, measure, static=stage, strategy="anneal", max_evals=1, seed=0)
        guessed = set(stage.reports) | set(stage._tickets)
    finally:
        stage.close()
    first = measure.seen[0]
    neighbours = {tuple(sorted(n.items())) for n in space.neighbours(first)}
    assert neighbours and neighbours <= guessed


class RecordingPool:
    """A pool whose compiles finish when it is waited on (polled without a time limit), and that
    records what it was asked, in order."""

    workers, timeout_s = 4, 30.0

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.queued: dict[int, CompileRequest] = {}

    def submit(self, request, speculative=False, timeout_s=None):
        ticket = len(self.events)
        self.events.append(("guess" if speculative else "compile", request.config["X"]))
        self.queued[ticket] = request
        return ticket

    def poll(self, timeout=None):
        self.events.append(("wait", timeout))
        if timeout is not None:
            return []
        done, self.queued = self.queued, {}
        return [(t, StaticReport(kernel="fake", config=dict(r.config), valid=True, binary_hash=str(r.config)))
                for t, r in done.items()]

    def prioritise(self, ticket): pass
    def promote(self, tickets): pass
    def cancel(self, ticket): return False
    def close(self): pass


def test_a_walks_next_steps_compile_beside_its_current_one():
    # A one-step walk waits a compile per step unless the neighbours of the config it measures
    # compile beside that config: they must be queued before the session first waits for it.
    pool, measure = RecordingPool(), Counter()
    stage = StaticStage(pool, lambda config: CompileRequest("fake", dict(config)))
    run_session(PROBLEM, make_space({"X": [0, 1, 2, 3, 4]}), measure, static=stage, strategy="anneal",
                max_evals=1, seed=0)
    first = measure.seen[0]["X"]
    compiled = pool.events.index(("compile", first))
    waited = next(i for i, e in enumerate(pool.events) if e == ("wait", None) and i > compiled)
    guessed_before = {x for kind, x in pool.events[compiled:waited] if kind == "guess"}
    assert guessed_before == {x for x in (first - 1, first + 1) if 0 <= x <= 4}


def test_the_session_says_whether_its_compiles_were_guessed_in_time():
    # A one-step walk's first config is compiled cold; every later step is a neighbour guessed
    # beside the step before, compiled by the time it is asked for (this pool finishes everything
    # queued whenever it is waited on). The next H200 run reads where compile waits come from here.
    pool, measure = RecordingPool(), Counter()
    stage = StaticStage(pool, lambda config: CompileRequest("fake", dict(config)))
    result = run_session(PROBLEM, make_space({"X": [0, 1, 2, 3, 4]}), measure, static=stage, strategy="anneal",
                         max_evals=3, seed=0)
    steps = [m["X"] for m in measure.seen]
    guessed = [any(abs(x - earlier) == 1 for earlier in steps[:i]) for i, x in enumerate(steps)]
    assert len(steps) == 3 and guessed == [False, True, True], steps  # Each step a neighbour of one before.
    assert result.compile_readiness == {"ready": 2, "compiling": 0, "cold": 1}
    # Without a compile stage there is nothing to say.
    assert run_session(PROBLEM, make_space({"X": [0, 1]}), Counter(), strategy="random", max_evals=1,
                       seed=0).compile_readiness == {}


class VerdictPool(RecordingPool):
    """A recording pool whose compiles say what pretend_compile says."""

    def poll(self, timeout=None):
        self.events.append(("wait", timeout))
        if timeout is not None:
            return []
        done, self.queued = self.queued, {}
        return [(t, pretend_compile(r)) for t, r in done.items()]


def test_ppo_never_measures_a_config_the_compile_stage_had_already_refused(monkeypatch):
    # ppo asks the stage what it knows of the neighbours of each config measured (StaticStage.ready:
    # never waiting); what it was told does not compile within the limits, it never proposes.
    told: dict[tuple, int] = {}  # Refused config -> evaluations measured when the stage said so.
    measured: list[tuple] = []
    ready = StaticStage.ready

    def recording_ready(self, config):
        report = ready(self, config)
        if report is not None and not measurable(report):
            told.setdefault(tuple(sorted(config.items())), len(measured))
        return report

    monkeypatch.setattr(StaticStage, "ready", recording_ready)
    space = make_space({"X": list(range(8)), "Y": [0, 1, 2]})
    for seed in range(6):
        told.clear()
        measured.clear()
        stage = StaticStage(VerdictPool(), lambda config: CompileRequest("fake", dict(config)))
        result = run_session(PROBLEM, space, Counter(), static=stage, strategy="ppo", max_evals=10, seed=seed,
                             on_trial=lambda c, m, s: measured.append(tuple(sorted(c.items()))))
        # A session may end before its budget: with binaries told, nothing may be left but copies
        # and refusals (seeds 3 and 4 with the agent shipped on the sixth session of 2026-12-05).
        assert result.evaluations == len(measured) and 8 <= len(measured) <= 10
        assert told, "the stage was never asked"
        for config, when in told.items():
            assert config not in measured[when:], (seed, config)


def test_ppo_never_measures_a_config_whose_binary_the_stage_had_told_it_was_measured(monkeypatch):
    # pretend_compile gives X=0 and X=1 one binary whatever Y (Y changes nothing that is compiled):
    # a config of a binary measured before is a copy, an evaluation that tells nothing new. The
    # stage tells ppo which binary each compiled config is (StaticStage.ready, never waiting): a
    # copy is measured only when the stage had not said so yet (the first steps, before their
    # compiles finish), never after. (An aggregate count, fewer copies with the stage's answers
    # than without, held for the agents shipped until the fifth session of 2026-12-05 and not for
    # the sixth's: 57 against 56 in 20 sessions; copies come from what was not told yet.)
    told: dict[tuple, int] = {}  # Config -> configs measured when the stage first named its binary.
    measured: list[tuple] = []
    ready = StaticStage.ready

    def recording_ready(self, config):
        report = ready(self, config)
        if report is not None and measurable(report):
            told.setdefault(tuple(sorted(config.items())), len(measured))
        return report

    monkeypatch.setattr(StaticStage, "ready", recording_ready)
    copies = 0
    for seed in range(20):
        told.clear()
        measured.clear()
        stage = StaticStage(VerdictPool(), lambda config: CompileRequest("fake", dict(config)))
        result = run_session(PROBLEM, make_space({"X": list(range(8)), "Y": [0, 1, 2, 3]}), Counter(),
                             static=stage, strategy="ppo", max_evals=12, seed=seed,
                             on_trial=lambda c, m, s: measured.append(tuple(sorted(c.items()))))
        assert result.evaluations <= 12  # With the binaries told, a session may end early: nothing left but copies.
        for j, key in enumerate(measured):
            leader = result.copied_from.get(key)
            if leader is None:
                continue
            copies += 1
            i = measured.index(tuple(sorted(leader.items())))
            # Told of this config's binary when its leader had been measured, before it was measured: a defect.
            assert not (key in told and i < told[key] <= j), (seed, key, leader)
    assert copies > 0  # The first steps do measure copies: the check above had something to check.

def test_the_compile_stages_answers_are_kept_and_a_replay_given_them_follows_the_same_path():
    # What the stage tells ppo depends on which compiles have finished: the one input of a session
    # that a replay cannot recompute. The session keeps the answers in the order asked; a session
    # without a stage, given them through `observe` and the recorded measurements, asks the same
    # questions and measures the same configs. Given no answers, some sessions take another path.
    space = make_space({"X": list(range(8)), "Y": [0, 1, 2, 3]})
    differed = 0
    for seed in range(6):
        stage = StaticStage(VerdictPool(), lambda config: CompileRequest("fake", dict(config)))
        try:
            live = run_session(PROBLEM, space, Counter(), static=stage, strategy="ppo", max_evals=12, seed=seed)
        finally:
            stage.close()
        assert live.observed and any(answer is not None for _, answer in live.observed)
        recorded = {tuple(sorted(c.items())): m for c, m, _ in live.history}

        def measure(configs, best_ms, recorded=recorded):
            return [(recorded.get(tuple(sorted(c.items())), {"status": "ok", "ms": 99.0}), 0.0) for c in configs]

        answers = iter(live.observed)

        def observe(config, answers=answers):
            asked, answer = next(answers)
            assert asked == config, (asked, config)
            return answer

        again = run_session(PROBLEM, space, measure, strategy="ppo", max_evals=12, seed=seed, observe=observe)
        assert [c for c, _, _ in again.history] == [c for c, _, _ in live.history], seed
        assert next(answers, None) is None  # Every answer was asked for again, none more.
        blind = run_session(PROBLEM, space, measure, strategy="ppo", max_evals=12, seed=seed)
        differed += [c for c, _, _ in blind.history] != [c for c, _, _ in live.history]
    assert differed > 0


def test_a_compile_stage_that_fails_when_asked_is_no_verdict_and_ends_no_session(monkeypatch):
    def gone(self, config):
        raise RuntimeError("the compile workers exited")

    monkeypatch.setattr(StaticStage, "ready", gone)
    stage = StaticStage(VerdictPool(), lambda config: CompileRequest("fake", dict(config)))
    result = run_session(PROBLEM, make_space({"X": list(range(8)), "Y": [0, 1, 2]}), Counter(), static=stage,
                         strategy="ppo", max_evals=10, seed=0)
    assert result.evaluations == 10 and result.best_config is not None


def test_the_compile_stage_answers_for_what_it_has_compiled_without_waiting():
    stage = StaticStage(VerdictPool(), lambda config: CompileRequest("fake", dict(config)))
    assert stage.ready({"X": 3}) is None
    stage.guess([{"X": 3}])
    assert stage.ready({"X": 3}) is None  # Queued, not compiled: ready() does not wait.
    stage.reports_for([{"X": 2}])
    assert stage.ready({"X": 2}).valid
    assert refusal(stage.ready({"X": 3}))["status"] == "out_of_resources"


def compile_any(request: CompileRequest) -> StaticReport:
    """Every config compiles, each to a binary of its own."""
    report = StaticReport(kernel="matmul", config=dict(request.config), compile_s=0.1, valid=True)
    report.binary_hash = str(sorted(request.config.items()))
    return report


def matmul_guessing_stage(workers: int):
    """A matmul problem on the H200, a space of its tiles, and a static stage whose every config
    compiles at once: for tests of what a ppo session queues for compiling."""
    problem = {"family": "matmul", "shape": {"M": 4096, "N": 4096, "K": 4096}, "device": "NVIDIA H200",
               "dtype": "fp16"}
    space = make_space({"BLOCK_M": [16, 32, 64, 128, 256], "BLOCK_N": [16, 32, 64, 128, 256],
                        "BLOCK_K": [32, 64, 128], "num_warps": [2, 4, 8], "num_stages": [2, 3, 4]})
    stage = StaticStage(CompilePool(workers=workers, timeout_s=30, task=compile_any),
                        lambda config: CompileRequest("matmul", dict(config)))
    return problem, space, stage


def test_the_agents_first_jumps_are_compiled_at_once_on_every_compile_worker():
    # ppo measures what its cost model ranks best first: the session queues the top-ranked configs
    # (one per compile worker) before the first measurement, not only the neighbours after it.
    from dr_kernel import _core

    problem, space, stage = matmul_guessing_stage(workers=4)
    seen = []

    def measure(configs, best_ms):
        seen.extend(configs)
        return [({"status": "ok", "ms": 1.0, "ms_p20": 1.0, "ms_p80": 1.0, "relerr": 0.0}, 0.1) for _ in configs]

    try:
        run_session(problem, space, measure, static=stage, strategy="ppo", max_evals=1, seed=0)
        queued = set(stage.reports) | set(stage._tickets)
    finally:
        stage.close()
    top = [tuple(sorted(c.items())) for c in _core.predicted_order(problem, space, 4)]
    first = seen[0]
    assert tuple(sorted(first.items())) == top[0]
    near = {tuple(sorted(n.items())) for n in space.neighbours(first)}
    assert set(top[1:]) - near, "the ranked configs are all neighbours: the test cannot tell the two apart"
    assert set(top) <= queued


def test_the_best_configs_neighbours_then_a_steps_are_guessed_in_the_predicted_order():
    # The workers cannot compile every neighbour of every step in time (on the H200 half the
    # configs asked for were guesses still compiling, and most were neighbours of the fastest
    # configs so far, not of the config measured just before): those go first, then the step's,
    # each in the cost model's predicted order.
    from dr_kernel import _core

    problem, space, stage = matmul_guessing_stage(workers=2)
    guessed: list[list[dict]] = []
    guess = stage.guess
    stage.guess = lambda configs: (guessed.append(list(configs)), guess(configs))[1]
    measured: list[dict] = []

    def measure(configs, best_ms):
        measured.extend(configs)
        # The first config measured stays the fastest.
        return [({"status": "ok", "ms": 1.0 if len(measured) == 1 else 2.0, "ms_p20": 1.0, "ms_p80": 1.0,
                  "relerr": 0.0}, 0.1) for _ in configs]

    try:
        run_session(problem, space, measure, static=stage, strategy="ppo", max_evals=2, seed=0)
    finally:
        stage.close()
    order = {tuple(sorted(c.items())): i for i, c in enumerate(_core.predicted_order(problem, space, 10**6))}

    def ranks(configs):
        return [order[tuple(sorted(c.items()))] for c in configs]

    # guessed[0]: the top-ranked configs, queued before the first measurement; [1]: the first
    # step's neighbours alone (nothing measured yet); [2]: the best's neighbours, then the step's.
    first, second = measured[0], measured[1]
    assert ranks(guessed[1]) == sorted(ranks(guessed[1])) and len(guessed[1]) >= 5
    plain = ranks(space.neighbours(first))
    assert plain != sorted(plain), "the space's own order is the predicted one: the test cannot tell them apart"
    best_part, step_part = guessed[2][:len(plain)], guessed[2][len(plain):]
    assert ranks(best_part) == sorted(plain)
    assert ranks(step_part) == sorted(ranks(space.neighbours(second)))


def test_real_compiles_refuse_an_over_limit_matmul_and_share_softmax_binaries(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    seen: list[dict] = []

    def fake(configs, best_ms):  # A benchmarker that records what reached the "GPU".
        seen.extend(configs)
        return [({"status": "ok", "ms": 1.0}, 0.1) for _ in configs]

    def tune(kernel, shape, configs):
        stage = StaticStage(CompilePool(workers=2, timeout_s=120), builtin_describer(kernel, shape, "fp16"))
        problem = {"family": kernel.family, "shape": shape, "device": "NVIDIA H200", "dtype": ""}
        try:
            return run_session(problem, make_space(configs=configs), fake, static=stage, strategy="exhaustive",
                               max_evals=len(configs), options={"batch": len(configs)})
        finally:
            stage.close()

    # 256×256 tiles of 128 in five stages need 655360 B of shared memory: refused, never launched.
    big = {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 5}
    small = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}
    result = tune(BUILTINS["matmul"], {"M": 4096, "N": 4096, "K": 4096}, [big, small])
    assert seen == [small]
    verdict = {c["BLOCK_M"]: m for c, m, _ in result.history}
    assert verdict[256]["status"] == "out_of_resources" and verdict[256]["shared"] == 655360
    assert "needs 655360 B of shared memory" in verdict[256]["error"]
    assert verdict[64]["status"] == "ok" and verdict[64]["n_regs"] > 0

    # num_stages changes nothing in a kernel without pipelined loads: one binary, one measurement.
    seen.clear()
    result = tune(BUILTINS["softmax"], {"rows": 4096, "cols": 4096},
                  [{"BLOCK": 1024, "num_warps": 4, "num_stages": s} for s in (1, 2, 3)])
    assert len(seen) == 1 and (result.measured, result.copied) == (1, 2)
    assert all(m["status"] == "ok" and m["n_regs"] > 0 for _, m, _ in result.history)


def test_refusal_statuses_follow_the_reason():
    base = {"kernel": "k", "config": {}}
    assert refusal(StaticReport(**base, reason="compile timed out after 3 s"))["status"] == "compile_timeout"
    assert refusal(StaticReport(**base, reason="compile worker died (exit code 9)"))["status"] == "compile_error"
    over = refusal(StaticReport(**base, reason="needs 2048 threads", binary_hash="h", n_regs=32, shared=0))
    assert over == {"status": "out_of_resources", "error": "needs 2048 threads", "n_regs": 32, "shared": 0}


class Noisy:
    """A benchmarker whose first measurement of each config is the config's `first` time and
    whose later ones are its `true` time: X=0 got lucky once, X=6 is the fast one."""

    first = {0: 1.00, 2: 1.04, 6: 1.06, 7: 1.30}
    true = {0: 1.20, 2: 1.05, 6: 1.02, 7: 1.30}

    def __init__(self, crash_later: frozenset = frozenset()):
        self.calls: list[tuple[list[int], float]] = []
        self.crash_later = crash_later

    def __call__(self, configs, best_ms):
        self.calls.append(([c["X"] for c in configs], best_ms))
        out = []
        for c in configs:
            x = c["X"]
            again = sum(x in xs for xs, _ in self.calls) > 1
            if again and x in self.crash_later:
                out.append(({"status": "crashed", "error": "the measuring process died (exit code -11)"}, 0.1))
            else:
                out.append(({"status": "ok", "ms": (self.true if again else self.first)[x]}, 0.1))
        return out


def confirmed_session(measure, store=None, **options):
    # pretend_compile: X=1 compiles to X=0's binary, so its result is a copy and never a candidate.
    stage = pretend_stage()
    try:
        return run_session(PROBLEM, make_space({"X": [0, 1, 2, 6, 7]}), measure, static=stage,
                           strategy="exhaustive", max_evals=5, store=store, options={"batch": 5}, **options)
    finally:
        stage.close()


def test_the_best_configs_are_timed_again_and_the_lowest_median_wins(tmp_path):
    measure, store = Noisy(), open_store(tmp_path / "r.db")
    result = confirmed_session(measure, store, confirm=3, confirm_rounds=3)
    assert sorted(measure.calls[0][0]) == [0, 2, 6, 7] and result.evaluations == 5
    # Within 10 % of the lucky 1.00: X=0, 2 and 6, each timed once per round, in full (no best to
    # stop its launches early against). After two rounds both of X=6's times are under both of each
    # rival's: no third round can change the medians' order, so there is none.
    rounds = measure.calls[1:]
    assert [sorted(xs) for xs, _ in rounds] == [[0, 2, 6]] * 2 and all(b == math.inf for _, b in rounds)
    assert [xs[0] for xs, _ in rounds] == [0, 2]  # Turns rotate: none always goes first.
    assert result.best_config == {"X": 6} and result.best_ms == pytest.approx(1.02)
    assert result.confirmed == [({"X": 0}, [1.20] * 2), ({"X": 2}, [1.05] * 2), ({"X": 6}, [1.02] * 2)]
    # Re-timings are stored like other results, with the binary's resource usage.
    rows = [m for c, m in store.rows(dict(PROBLEM)) if c == {"X": 6}]
    assert [m["ms"] for m in rows] == [1.06, 1.02, 1.02]
    assert all(m["n_regs"] == 60 and m["occupancy"] == pytest.approx(1 / 7) for m in rows)


class Rounds:
    """A benchmarker that answers each config's first measurement with `first` and its re-timings
    with the next of its `rounds`, recording which configs each round timed."""

    first = {0: 1.00, 2: 1.03, 6: 1.05, 7: 1.30}
    rounds = {0: [1.10, 1.00, 1.00], 2: [1.02, 1.06, 1.20], 6: [1.30, 1.31, 1.32]}

    def __init__(self):
        self.calls: list[list[int]] = []
        self.seen: dict[int, int] = {}

    def __call__(self, configs, best_ms):
        self.calls.append([c["X"] for c in configs])
        out = []
        for c in configs:
            n = self.seen[c["X"]] = self.seen.get(c["X"], -1) + 1
            out.append(({"status": "ok", "ms": self.first[c["X"]] if n == 0 else self.rounds[c["X"]][n - 1]}, 0.1))
        return out


def test_a_candidate_the_rounds_so_far_put_out_of_reach_is_not_timed_again():
    measure = Rounds()
    result = confirmed_session(measure, confirm=3, confirm_rounds=3)
    # After two rounds X=6 (1.30, 1.31) is slower than X=2 could be (at most 1.06 whatever its third
    # time): out. X=0 (1.10, 1.00) and X=2 (1.02, 1.06) could each still win: a third round for both.
    assert [sorted(xs) for xs in measure.calls[1:]] == [[0, 2, 6], [0, 2, 6], [0, 2]]
    assert result.best_config == {"X": 0} and result.best_ms == pytest.approx(1.00)
    assert result.confirmed == [({"X": 0}, [1.10, 1.00, 1.00]), ({"X": 2}, [1.02, 1.06, 1.20]),
                                ({"X": 6}, [1.30, 1.31])]


def test_the_bounds_of_a_median_not_all_measured_yet():
    from dr_kernel.session import _median_bounds

    assert _median_bounds([1.0], 3) == (-math.inf, math.inf)
    assert _median_bounds([2.0, 1.0], 3) == (1.0, 2.0)
    assert _median_bounds([3.0, 1.0, 2.0], 3) == (2.0, 2.0)
    assert _median_bounds([1.0, 4.0], 4) == (-math.inf, math.inf)  # Two unknown: either middle one.
    assert _median_bounds([1.0, 4.0, 2.0], 4) == (1.5, 3.0)  # (1+2)/2 at least, (2+4)/2 at most.
    assert _median_bounds([5.0], 1) == (5.0, 5.0)


def test_a_candidate_that_fails_when_timed_again_cannot_win():
    result = confirmed_session(Noisy(crash_later=frozenset({6})), confirm=2, confirm_rounds=2)
    # Two candidates: X=0 (1.00 then 1.20) and X=2; X=6 is not one of them.
    assert [c for c, _ in result.confirmed] == [{"X": 0}, {"X": 2}]
    assert result.best_config == {"X": 2}
    result = confirmed_session(Noisy(crash_later=frozenset({6})), confirm=3, confirm_rounds=2)
    assert result.confirmed[2][0] == {"X": 6} and all(math.isnan(t) for t in result.confirmed[2][1])
    assert result.best_config == {"X": 2} and result.best_ms == pytest.approx(1.05)


def test_without_confirmation_or_a_close_rival_the_first_measurements_stand():
    measure = Noisy()
    result = confirmed_session(measure, confirm=0)
    assert len(measure.calls) == 1 and result.best_config == {"X": 0} and result.best_ms == 1.00
    measure = Noisy()
    result = confirmed_session(measure, confirm=3, confirm_within=0.01)  # Nobody within 1 % of X=0.
    assert len(measure.calls) == 1 and result.best_config == {"X": 0} and not result.confirmed


@pytest.mark.parametrize("strategy", ["ppo", "random"])
def test_with_two_measuring_gpus_the_strategy_proposes_two_configs_a_round(strategy):
    space = make_space({"BLOCK": [256, 512, 1024, 2048, 4096], "num_warps": [1, 2, 4, 8], "num_stages": [1, 2]})
    problem = {"family": "softmax", "shape": {"rows": 4096, "cols": 4096}, "device": "test", "dtype": ""}
    sizes: list[int] = []

    def measure(configs, best_ms):
        sizes.append(len(configs))
        return [({"status": "ok", "ms": 1.0 + c["BLOCK"] / 4096 + c["num_warps"] / 100}, 0.1) for c in configs]

    result = run_session(problem, space, measure, strategy=strategy, max_evals=8, parallel=2)
    # 8 configs in 4 rounds, one per GPU: walkers whose beliefs pick the same config (the agent's
    # first guess, a jump target) do not leave a GPU idle.
    assert result.evaluations == sum(sizes) == 8 and sizes == [2, 2, 2, 2]
    # A caller's own choice stands.
    sizes.clear()
    option = {"ppo": "walkers", "random": "batch"}[strategy]
    run_session(problem, space, measure, strategy=strategy, max_evals=8, parallel=2, options={option: 4})
    assert sum(sizes) == 8 and 2 < max(sizes) <= 4


def test_the_agents_cost_model_is_refitted_in_large_spaces_only():
    problem = {"family": "softmax", "shape": {"rows": 4096, "cols": 4096}, "device": "test", "dtype": ""}

    def measure(configs, best_ms):
        return [({"status": "ok", "ms": 1.0 + c["BLOCK"] / 4096 + c["num_warps"] / 100}, 0.1) for c in configs]

    def options(space, **kwargs):
        return run_session(problem, space, measure, strategy="ppo", max_evals=4, **kwargs).strategy_options

    # 40 configs: a refit would cost more than the measurements it could save.
    small = make_space({"BLOCK": [256, 512, 1024, 2048, 4096], "num_warps": [1, 2, 4, 8], "num_stages": [1, 2]})
    assert (options(small)["refit"], options(small)["doubt_refit"]) == (0, 0)
    large = make_space({"BLOCK": [256, 512, 1024, 2048, 4096, 8192], "num_warps": [1, 2, 4, 8, 16],
                        "num_stages": [1, 2, 3]})
    assert (options(large)["refit"], options(large)["doubt_refit"]) == (8, 4)
    # A product of 90 whose constraint leaves 60 counts as small; a caller's own choice stands.
    constrained = make_space({"BLOCK": [256, 512, 1024, 2048, 4096, 8192], "num_warps": [1, 2, 4, 8, 16],
                              "num_stages": [1, 2, 3]}, constraints=["BLOCK * num_stages <= 4096"])
    assert constrained.count_valid() < 64 and options(constrained)["refit"] == 0
    assert options(small, options={"refit": 2})["refit"] == 2


def test_a_failure_while_timing_again_keeps_the_search_result():
    calls = []

    def measure(configs, best_ms):
        calls.append(len(configs))
        if len(calls) > 1:
            raise RuntimeError("the measuring worker on cuda:0 could not set up the kernel")
        return [({"status": "ok", "ms": 1.0 + c["X"] / 100}, 0.1) for c in configs]

    with pytest.warns(UserWarning, match="timing the best configs again failed"):
        result = run_session(PROBLEM, make_space({"X": [0, 1, 2]}), measure, strategy="exhaustive", max_evals=3,
                             options={"batch": 3}, confirm=3)
    assert calls == [3, 3] and result.best_config == {"X": 0} and result.best_ms == 1.0 and not result.confirmed


def spilling_compile(request: CompileRequest) -> StaticReport:
    """X=9 is the tile whose registers spill by kilobytes: ptxas runs for a minute; the rest 0.05 s."""
    import time

    time.sleep(60 if request.config["X"] == 9 else 0.05)
    return StaticReport(kernel="fake", config=dict(request.config), compile_s=0.05, valid=True,
                        binary_hash=f"b{request.config['X']}")


def test_a_compile_far_slower_than_the_sessions_others_times_out_early(monkeypatch):
    # On the H200 a re-tune waited the pool's 120 s for one matmul tile that spilled, while its
    # other configs compiled in 0.2 s. Once a few configs have compiled, a compile may take ten
    # times their median (here at least 1 s instead of 20 s, to keep the test short).
    import time

    monkeypatch.setattr(StaticStage, "ADAPTIVE_FLOOR_S", 1.0)
    stage = StaticStage(CompilePool(workers=2, timeout_s=120, task=spilling_compile),
                        lambda config: CompileRequest("fake", dict(config)))
    try:
        assert stage.deadline_s() is None  # Nothing compiled yet: the pool's 120 s.
        start = time.monotonic()
        result = run_session(PROBLEM, make_space({"X": [0, 1, 2, 3, 9, 5]}), Counter(), static=stage,
                             strategy="exhaustive", max_evals=6, prefetch=False, options={"batch": 1})
        took = time.monotonic() - start
    finally:
        stage.close()
    assert stage.deadline_s() == 1.0
    statuses = {c["X"]: m["status"] for c, m, _ in result.history}
    assert statuses == {0: "ok", 1: "ok", 2: "ok", 3: "ok", 9: "compile_timeout", 5: "ok"}
    error = next(m["error"] for c, m, _ in result.history if c["X"] == 9)
    assert "compile timed out after 1 s" in error and "median compile" in error and "compile_timeout=" in error
    assert took < 30, f"the session waited {took:.0f} s for the spilling config"


def test_a_slow_compile_among_the_first_gets_the_deadline_once_it_is_known(monkeypatch):
    # tune-many on the H200: a spilling matmul tile among a key's first configs had the pool's
    # 120 s (no median yet when it was submitted) and held the key that long. Once four others
    # have compiled, the one still running gets their deadline, counted from its own start.
    import time

    monkeypatch.setattr(StaticStage, "ADAPTIVE_FLOOR_S", 1.0)
    stage = StaticStage(CompilePool(workers=3, timeout_s=120, task=spilling_compile),
                        lambda config: CompileRequest("fake", dict(config)))
    try:
        start = time.monotonic()
        reports = stage.reports_for([{"X": x} for x in (9, 0, 1, 2, 3, 5)])
        took = time.monotonic() - start
    finally:
        stage.close()
    assert [r.valid for r in reports] == [False, True, True, True, True, True]
    assert "compile timed out after 1 s" in reports[0].reason and "median compile" in reports[0].reason
    assert took < 30, f"the first config's compile held the session {took:.0f} s"
    # Another problem of the kernel in this process (tune-many's next key) does not wait for it again.
    stage = StaticStage(CompilePool(workers=3, timeout_s=120, task=spilling_compile),
                        lambda config: CompileRequest("fake", dict(config), shape={"n": 2}))
    try:
        start = time.monotonic()
        (report,) = stage.reports_for([{"X": 9}])
        took = time.monotonic() - start
    finally:
        stage.close()
    assert not report.valid and report.reason.startswith("compile timed out before, in an earlier tuning") and took < 1


class Valley:
    """A benchmarker whose one optimum, X=6 and Y=3, lies in a corner the fake family's prior knows
    nothing of: time grows with the steps away from it."""

    def __init__(self):
        self.seen: list[dict] = []

    def __call__(self, configs, best_ms):
        self.seen.extend(configs)
        return [({"status": "ok", "ms": 1.0 + abs(c["X"] - 6) + abs(c["Y"] - 3), "ms_p20": 1.0, "ms_p80": 1.0,
                  "relerr": 0.0, "load_s": 0.1}, 0.25) for c in configs]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_an_opening_is_measured_first_within_the_budget_and_the_agent_climbs_from_it(seed):
    # attention's warp-specialised variant is in no table, so its opening configs are measured
    # before the agent proposes anything (BuiltinKernel.opening); the agent finds them in its history.
    space = make_space({"X": list(range(8)), "Y": [0, 1, 2, 3]})
    valley = Valley()
    result = run_session(PROBLEM, space, valley, strategy="ppo", max_evals=6, seed=seed,
                         opening=[{"X": 6, "Y": 3}, {"X": 6, "Y": 3}, {"X": 0, "Y": 0}])
    configs = [c for c, _, _ in result.history]
    why = [m["why"] for _, m, _ in result.history]
    assert configs[:2] == [{"X": 6, "Y": 3}, {"X": 0, "Y": 0}]  # Once each, in one batch, counted.
    assert why[:2] == ["opening: a variant the cost model has no rows of"] * 2
    assert len(configs) == len(valley.seen) == 6 and len({tuple(c.values()) for c in configs}) == 6
    assert result.best_config == {"X": 6, "Y": 3}
    # On a family its cost model never saw the agent climbs from the best measured config at once:
    # the opening's.
    assert why[2] == "climb" and abs(configs[2]["X"] - 6) + abs(configs[2]["Y"] - 3) == 1


def test_an_openings_compiles_are_queued_before_the_agents_first_choices(monkeypatch):
    # The opening is measured first: its configs take the first compile workers, the agent's
    # top-ranked configs the rest.
    from dr_kernel import _core

    problem, space, stage = matmul_guessing_stage(workers=4)
    guessed: list[list[dict]] = []
    guess = StaticStage.guess

    def recording_guess(self, configs):
        guessed.append([dict(c) for c in configs])
        return guess(self, configs)

    monkeypatch.setattr(StaticStage, "guess", recording_guess)
    ranked = [dict(c) for c in _core.predicted_order(problem, space, space.count_valid())]
    opening = ranked[-2:]  # What the cost model ranks last.

    def measure(configs, best_ms):
        return [({"status": "ok", "ms": 1.0, "ms_p20": 1.0, "ms_p80": 1.0, "relerr": 0.0}, 0.1) for _ in configs]

    try:
        result = run_session(problem, space, measure, static=stage, strategy="ppo", max_evals=3, seed=0,
                             opening=opening)
    finally:
        stage.close()
    assert guessed[0] == opening + ranked[:2]
    assert [c for c, _, _ in result.history][:2] == opening
