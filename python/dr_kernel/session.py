"""One tuning session on real kernels: the strategy proposes, the compile pool vets, the GPU measures.

`dr-kernel tune`, `dr-kernel sweep`'s measuring and `@optimize` all tune through run_session():

    strategy (C++) ── batch ──► static stage: compile every config of the batch in the compile pool
                                 │   invalid (over the device's limits, compile error, timeout)
                                 │       → returned at once as a measurement with the reason
                                 │   same binary as a config measured before → its result, copied
                                 ▼
                               measuring pool: one config per distinct binary, on the GPU(s)
                                 ▼
                               every result → the store; (measurement, cost seconds) → the strategy

When the search ends, the few best configs (those within a noise band of the best) are timed
again, in turns, and the winner is the one with the lowest median of those rounds: a config
measured once is picked partly for its luck, and GPU clocks drift between measurements taken
seconds apart. These re-timings are not evaluations; they go to the store like any other.

Each config of a batch is one evaluation whatever became of it, as in replay; its cost is its
compile seconds plus its measuring seconds, the accounting replay uses, so a session's seconds
budget is comparable with replayed ones. Compiles run in parallel (and for strategies that move
by one-step neighbours, ahead of need, while the GPU measures), so wall time is usually lower.
"""

from __future__ import annotations

import collections
import heapq
import math
import os
import statistics
import time
import warnings
import weakref
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .analysis import H200, DeviceLimits, StaticReport
from .compile_pool import CompilePool, CompileRequest, failed_report

# Strategies whose next proposal is usually a one-step neighbour of a config just measured: for
# them the static stage compiles those neighbours while the GPU measures.
NEIGHBOUR_STRATEGIES = frozenset({"anneal", "ppo"})

Measure = Callable[[list[dict], float], list[tuple[dict, float]]]

# The option by which a strategy proposes several configs per round, for several measuring GPUs.
PER_ROUND_OPTION = {"ppo": "walkers", "random": "batch"}
# Guessed compiles: the untried neighbours of the GUESS_LEADERS fastest configs measured, those
# within GUESS_NEAR of the best (ties that noise orders; ppo's stop_near is the same 1 %), go first.
GUESS_LEADERS, GUESS_NEAR = 3, 0.01
# Configs ranked by the cost model to order guesses (the rest come after them; 50 ms for matmul's 3,960).
GUESS_RANKED = 8192
# Spaces of fewer configs than this get no refits of the agent's cost model. In replay (leave-one-
# family-out, five training seeds) refits changed no problem of the bundled spaces under 64 configs
# (cross_entropy, layernorm, layernorm_bwd: 24-36) and saved 2 evaluations on cumsum's 71; on the
# H200 a refit took 0.25 s, and torchao's quantisers (45-config lists, 50 ms an evaluation) spent
# 0.5-1.4 s of each 1.1-2.3 s session refitting (benchmarks/agent.md, "Refits in small spaces").
REFIT_MIN_CONFIGS = 64


def _key(config: Mapping[str, Any]) -> tuple:
    return tuple(sorted(config.items()))


def static_fields(report: StaticReport) -> dict[str, Any]:
    """Returns what a static report adds to a measurement: compile seconds, registers, spills,
    shared memory and theoretical occupancy, in the store's field names (unknown values left out)."""
    fields = {"compile_s": report.compile_s, "n_regs": report.n_regs, "n_spills": report.n_spills,
              "shared": report.shared, "occupancy": report.occupancy}
    return {k: v for k, v in fields.items() if v is not None}


def refusal(report: StaticReport) -> dict[str, Any]:
    """Returns the measurement of a config that static analysis refused, with the reason as its
    error: compile_timeout, compile_error (did not compile, or its compile worker died), or
    out_of_resources (compiled, but over the device's limits)."""
    if report.reason.startswith("compile timed out"):
        status = "compile_timeout"
    elif report.binary_hash is None:
        status = "compile_error"
    else:
        status = "out_of_resources"
    return {"status": status, "error": report.reason, **static_fields(report)}


def measurable(report: StaticReport) -> bool:
    """Whether a config should go to the GPU: it compiled and fits the device, or it compiled and
    only its resource usage could not be read (then the GPU decides)."""
    return report.valid or (report.binary_hash is not None and report.n_regs is None)


# (kernel, dtype, config) whose compile overran its deadline in this process: a tile that spills by
# kilobytes keeps ptxas busy for minutes at every shape, and tune-many tunes many shapes of a kernel.
_TIMED_OUT: dict[tuple[str, str, tuple], str] = {}
# The stages open on each pool, and the answers one stage's poll received for another's tickets:
# a pool serves every stage of the process (tuner.shared_compile_pool), and with deferred tuning
# (tuner.py) several stages wait on it at once.
_OPEN: weakref.WeakSet = weakref.WeakSet()
_MAIL: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class StaticStage:
    """Compiles the configs of one problem in a CompilePool and remembers what each one needs.

    `describe(config)` returns the CompileRequest of a config. reports() blocks until every config
    asked for is compiled; guess() queues configs that may be asked for soon (the neighbours of
    the ones just measured), which compile on otherwise idle workers and are then ready, and in
    Triton's disk cache for the measuring process, when the strategy asks. Guesses that have not
    started are dropped when newer ones push the queue past `max_guesses`.
    """

    def __init__(self, pool: CompilePool, describe: Callable[[dict], CompileRequest],
                 max_guesses: int | None = None, own_pool: bool = True) -> None:
        self.pool = pool
        self.timeout_s: float | None = None  # Each compile's deadline from now on (None: adaptive, below).
        self.own_pool = own_pool  # False: the pool serves others too; close() only drops this stage's work.
        self.describe = describe
        self.max_guesses = max_guesses if max_guesses is not None else 4 * pool.workers
        self.reports: dict[tuple, StaticReport] = {}
        self._tickets: dict[tuple, int] = {}  # Submitted and not yet answered.
        self._keys: dict[int, tuple] = {}
        self._guesses: collections.deque[int] = collections.deque()  # Queued guesses, least recently guessed first.
        self._also: set[tuple] = set()  # Keys of compile_also() requests not yet answered.
        self.guessed = 0  # Guesses that finished compiling.
        # The configs asked for (reports_for) by what they were when asked: compiled already (a
        # guess that finished), still compiling (a guess not finished: part of a compile waited
        # for), or never guessed (a whole compile waited for).
        self.readiness = {"ready": 0, "compiling": 0, "cold": 0}
        self._adaptive: set[int] = set()  # Tickets given an adaptive deadline shorter than the pool's.
        _OPEN.add(self)

    def close(self) -> None:
        _OPEN.discard(self)
        if self.own_pool:
            self.pool.close()
            return
        mail = _MAIL.get(self.pool, {})
        for ticket in list(self._keys):
            self.pool.cancel(ticket)
            mail.pop(ticket, None)
        self._keys.clear()
        self._tickets.clear()
        self._guesses.clear()

    def _submit(self, config: dict, speculative: bool) -> None:
        key = _key(config)
        if key in self.reports:
            return
        ticket = self._tickets.get(key)
        if ticket is not None:
            if not speculative and ticket in self._guesses:
                # Needed now: urgent, and no longer a guess that newer guesses may cancel.
                self.pool.prioritise(ticket)
                self._guesses.remove(ticket)
            return
        request = self.describe(config)
        earlier = _TIMED_OUT.get((request.kernel_name, request.dtype, key)) if self.timeout_s is None else None
        if earlier is not None:  # Its compile hangs whatever the shape: do not wait for it again.
            self.reports[key] = failed_report(request, f"compile timed out before, in an earlier tuning of this kernel "
                                              f"in this process ({earlier}); not compiled again", 0.0)
            return
        deadline = self.deadline_s()
        ticket = self.pool.submit(request, speculative=speculative, timeout_s=deadline)
        self._tickets[key], self._keys[ticket] = ticket, key
        if deadline is not None and self.timeout_s is None and deadline < self.pool.timeout_s:
            self._adaptive.add(ticket)
        if speculative:
            self._guesses.append(ticket)

    # Once a few configs have compiled, a compile may take this many times their median (and at least
    # ADAPTIVE_FLOOR_S) before it counts as timed out; never longer than the pool's own deadline.
    ADAPTIVE_FACTOR, ADAPTIVE_FLOOR_S, ADAPTIVE_AFTER = 10.0, 20.0, 4

    def deadline_s(self) -> float | None:
        """The deadline of a compile submitted now: `timeout_s` when set; else, once a few configs
        have compiled, ADAPTIVE_FACTOR times their median compile (a config whose registers spill
        by kilobytes keeps ptxas busy for minutes while its siblings take a fraction of a second:
        on the H200 one such matmul tile stopped a re-tune for the pool's 120 s); else the pool's."""
        if self.timeout_s is not None:
            return self.timeout_s
        times = sorted(r.compile_s for r in self.reports.values()
                       if r.compile_s and not r.reason.startswith("compile timed out"))
        if len(times) < self.ADAPTIVE_AFTER:
            return None
        median = times[len(times) // 2]
        return min(self.pool.timeout_s, max(self.ADAPTIVE_FLOOR_S, self.ADAPTIVE_FACTOR * median))

    def _poll(self, timeout: float | None) -> list[tuple[int, StaticReport]]:
        """The pool's answers to this stage's tickets (waiting at most `timeout` seconds, None: until
        one comes); answers to another open stage's tickets are kept for it, others dropped."""
        mail = _MAIL.setdefault(self.pool, {})
        mine = [(t, mail.pop(t)) for t in [t for t in mail if t in self._keys]]
        if mine:
            return mine
        for ticket, report in self.pool.poll(timeout):
            if ticket in self._keys:
                mine.append((ticket, report))
            elif any(ticket in s._keys for s in _OPEN if s.pool is self.pool):
                mail[ticket] = report
        return mine

    def ready(self, config: Mapping[str, Any]) -> StaticReport | None:
        """The static report of a config whose compile has finished, else None; never waits (it
        collects the answers that have come in, as every poll of the pool does)."""
        key = _key(config)
        if key not in self.reports:
            self._take(self._poll(0))
        return self.reports.get(key)

    def settled(self) -> bool:
        """Whether every config queued (guessed or asked for) has its report; returns at once,
        starting queued compiles on workers that are free (the pool dispatches only when polled)."""
        self._take(self._poll(0))
        return not any(key[:1] != ("compile_also",) for key in self._tickets)

    def queue(self, configs: Sequence[dict]) -> None:
        """Queues configs as needed (ahead of every guess) without waiting for them."""
        for config in configs:
            try:
                self._submit(config, speculative=False)
            except RuntimeError:
                continue
        self._take(self._poll(0))

    def _take(self, finished: list[tuple[int, StaticReport]]) -> None:
        known = not finished or self.deadline_s() is not None
        for ticket, report in finished:
            key = self._keys.pop(ticket, None)
            if key is None:
                continue
            del self._tickets[key]
            if report.reason.startswith("compile timed out after"):
                _TIMED_OUT[(report.kernel, report.dtype, key)] = report.reason
            if ticket in self._adaptive:
                self._adaptive.discard(ticket)
                if report.reason.startswith("compile timed out"):
                    report.reason += (f" ({self.ADAPTIVE_FACTOR:g}x this session's median compile; the other "
                                      "configs compile far faster. compile_timeout= sets how long to wait at most)")
            self.reports[key] = report
        if not known and (deadline := self.deadline_s()) is not None and deadline < self.pool.timeout_s:
            # The compiles submitted before the adaptive deadline was known (the session's first
            # configs) get it too, counted from their start: on the H200 one of tune-many's first
            # matmul configs held its key for the pool's 120 s while its siblings compiled in 1-2 s.
            for ticket, key in self._keys.items():
                if key[:1] != ("compile_also",) and ticket not in self._adaptive:
                    self.pool.shorten(ticket, deadline)
                    self._adaptive.add(ticket)

    def reports_for(self, configs: Sequence[dict], then_guess: Sequence[dict] = ()) -> list[StaticReport]:
        """Returns the static report of every config, compiling those not compiled yet (and
        waiting for what compile_also() queued). `then_guess` are guessed (guess()) once the
        configs are queued and before waiting for them, so that they compile beside them."""
        for config in configs:
            key = _key(config)
            self.readiness["ready" if key in self.reports else "compiling" if key in self._tickets else "cold"] += 1
            self._submit(config, speculative=False)
        if then_guess:
            self.guess(then_guess)
        wanted = {_key(c) for c in configs} | self._also
        while not wanted <= self.reports.keys():
            self._take(self._poll(None))
        self._also.clear()
        return [self.reports[_key(c)] for c in configs]

    def compile_also(self, requests: Sequence[CompileRequest]) -> None:
        """Queues requests that are not configs (kernels the checks launch) ahead of every config;
        the next reports_for() waits for them too, so that no launch here compiles them itself."""
        for request in requests:
            ticket = self.pool.submit(request)
            key = ("compile_also", ticket)
            self._tickets[key], self._keys[ticket] = ticket, key
            self._also.add(key)

    def guess(self, configs: Sequence[dict]) -> None:
        """Queues configs that may be asked for soon, ahead of every earlier guess not started yet
        (the newest guesses are the likeliest to be asked for), in the given order; returns at once.
        A config that cannot be described to the compiler is left out (reports_for() says why, if
        it is asked for)."""
        for config in configs:
            try:
                self._submit(config, speculative=True)
            except RuntimeError:
                continue
        queued = set(self._guesses)
        fresh = list(dict.fromkeys(t for c in configs if (t := self._tickets.get(_key(c))) in queued))
        self.pool.promote(fresh)
        # The cap below drops the guesses least recently asked for.
        renewed = set(fresh)
        self._guesses = collections.deque([*(t for t in self._guesses if t not in renewed), *fresh])
        while len(self._guesses) > self.max_guesses:
            ticket = self._guesses.popleft()
            if self.pool.cancel(ticket):
                del self._tickets[self._keys.pop(ticket)]
        self._guesses = collections.deque(t for t in self._guesses if t in self._keys)
        self._take(self._poll(0))


@dataclass
class SessionResult:
    """What one tuning session did. `history` holds (config, measurement, elapsed cost seconds)
    per evaluation, in order; `measured` counts configs timed on the device, `refused` those the
    static stage returned without measuring, `copied` those that shared a binary with a measured
    one; `wall_s` is the session's wall-clock time, confirmation included. `confirmed` holds
    (config, milliseconds of each confirmation round) for the configs timed again at the end, in
    the order of their first measurement's time; a round that failed is NaN. `split_s` says where
    the wall time went: waiting for compiles (`compile`), the first launch of each measured config
    (`load`: the binary loaded, the check), timing (`measure`: the rest of measuring), re-timing
    the best (`confirm`) and the rest (`search`: the strategy, the store, prefetching)."""

    history: list[tuple[dict, dict, float]] = field(default_factory=list)
    confirmed: list[tuple[dict, list[float]]] = field(default_factory=list)
    best_config: dict | None = None
    best_ms: float = math.inf
    wall_s: float = 0.0
    measured: int = 0
    refused: int = 0
    copied: int = 0
    static: bool = False
    split_s: dict[str, float] = field(default_factory=dict)
    # The configs the session asked the compile stage for, by what they were when asked
    # (StaticStage.readiness): "ready", "compiling" or "cold"; empty without a compile stage.
    compile_readiness: dict[str, int] = field(default_factory=dict)
    copied_from: dict[tuple, dict] = field(default_factory=dict)  # Copied config (sorted items) → its leader.
    # Config (sorted items) → the ids of the store rows the session added for it (Store.rejudge).
    stored_rows: dict[tuple, list[int]] = field(default_factory=dict)
    # The options the strategy ran with: the caller's, and the session's defaults for the rest.
    strategy_options: dict[str, float] = field(default_factory=dict)
    # What the compile stage answered the strategy about configs not measured (ppo's `static`),
    # (config, answer or None) in the order asked: the one input of a session that depends on
    # timing (which compiles had finished), kept so that a replay can give the same answers.
    observed: list[tuple[dict, dict | None]] = field(default_factory=list)

    @property
    def evaluations(self) -> int:
        return len(self.history)

    def confirmed_json(self) -> list[dict]:
        """The confirmation rounds as JSON: one {"config", "ms"} per candidate, failed rounds null."""
        return [{"config": c, "ms": [t if math.isfinite(t) else None for t in times]} for c, times in self.confirmed]

    def statuses(self) -> dict[str, int]:
        counts: dict[str, int] = collections.Counter(m["status"] for _, m, _ in self.history)
        return dict(counts)

    def best_so_far(self) -> list[float]:
        """The best time after each evaluation (inf until one ran correctly)."""
        best, out = math.inf, []
        for _, m, _ in self.history:
            if m["status"] == "ok" and m.get("ms") is not None:
                best = min(best, m["ms"])
            out.append(best)
        return out

    def plot(self, ax=None):
        """Draws the session with matplotlib: each measured time and the best so far against
        evaluations; returns the Axes (a new figure's unless `ax` is given)."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(6, 3.2))
        ok = [(i + 1, m["ms"]) for i, (_, m, _) in enumerate(self.history) if m["status"] == "ok"]
        if ok:
            ax.scatter(*zip(*ok, strict=True), s=12, alpha=0.6, label="measured")
        curve = [(i + 1, b) for i, b in enumerate(self.best_so_far()) if math.isfinite(b)]
        if curve:
            ax.step(*zip(*curve, strict=True), where="post", linewidth=1.6, label="best so far")
        ax.set_xlabel("evaluation")
        ax.set_ylabel("ms")
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        return ax

    def _repr_html_(self) -> str:
        import html
        import json

        best = f"{self.best_ms:.4g} ms {html.escape(json.dumps(self.best_config))}" if self.best_config else "none"
        statuses = ", ".join(f"{n} {s}" for s, n in sorted(self.statuses().items()))
        rows = []
        for i, (config, m, _) in enumerate(self.history):
            ms = f"{m['ms']:.4g}" if m.get("ms") is not None else "-"
            rows.append(f"<tr><td>{i + 1}</td><td><code>{html.escape(json.dumps(config))}</code></td>"
                        f"<td>{html.escape(m['status'])}</td><td style='text-align:right'>{ms}</td></tr>")
        rows = "".join(rows)
        return (f"<div class='dr-kernel-session'><p>{self.evaluations} evaluations ({statuses}) in "
                f"{self.wall_s:.1f} s; best {best}</p><table><tr><th>#</th><th>config</th><th>status</th>"
                f"<th>ms</th></tr>{rows}</table></div>")


def run_session(problem: Mapping[str, Any], space, measure: Measure, *, static: StaticStage | None = None,
                strategy: str = "ppo", max_evals: int = 100, max_seconds: float = math.inf, seed: int = 0,
                options: Mapping[str, float] | None = None, store=None, source: str = "tune",
                on_trial: Callable[[dict, dict, float], None] | None = None, trust_compile_errors: bool = True,
                launch_key: Callable[[dict], Hashable] | None = None, prefetch: bool | None = None,
                confirm: int = 0, confirm_rounds: int = 3, confirm_within: float = 0.10,
                parallel: int = 1, known: Mapping[tuple, dict] | None = None,
                in_process: bool = False, first: Sequence[dict] = (),
                observe: Callable[[dict], dict | None] | None = None, opening: Sequence[dict] = ()) -> SessionResult:
    """Tunes one problem and returns what happened.

    `measure(configs, best_ms)` validates and times configs on the device and returns one
    (measurement, seconds) per config (MeasurePool.measure has this contract). `static` vets each
    batch first; without it every config is measured. `trust_compile_errors=False` measures configs
    that failed to compile statically anyway (for user kernels, whose compile description is
    inferred from their arguments); if one of them then runs, the description was wrong and static
    refusals stop for the rest of the session, with one warning. `launch_key(config)` is what
    besides the binary makes two launches differ (a user kernel's grid). `prefetch` compiles the
    neighbours of measured configs ahead of need (default: for strategies in NEIGHBOUR_STRATEGIES).
    Every result is added to `store` with `source`.

    `parallel` is how many configs `measure` times at once (one per measuring GPU): strategies
    that can propose several configs per round are asked for that many, unless `options` says
    otherwise (ppo's walkers, random's batch; exhaustive and genetic rounds are larger anyway,
    annealing proposes one config at a time).

    `confirm` > 1 times the best `confirm` distinct binaries again at the end, those within
    `confirm_within` of the best, `confirm_rounds` times each in turns (see confirm_winner()).

    `in_process`: `measure` times configs in this process, so each is measured and stored before
    the next (a config that crashes the process takes only itself with it).

    `observe(config)` answers the strategy's questions about configs it has not measured, in place
    of the compile stage (a replay: the answers a recorded session had, `SessionResult.observed`).

    `known` maps configs (as sorted item tuples) measured before (in an earlier session over a
    smaller space, or the store's rows of a run that is resumed) to their measurements: a proposal
    of one of them counts as an evaluation but costs nothing and is not measured again.

    `first` are configs measured before the strategy's first proposal, as one batch (a stored
    winner being re-tuned, so that what replaces it is measured beside it): they head the history
    and are known to the strategy from then on (proposing one costs nothing), so the history holds
    at most len(first) more evaluations than `max_evals`.

    `opening` are configs the strategy's evaluator measures before the strategy proposes anything,
    within `max_evals`, so that the strategy finds them in its history (BuiltinKernel.opening).
    """
    from . import _core

    result = SessionResult(static=static is not None)
    writer = _StoreWriter(store, problem, result.stored_rows)
    if prefetch is None:
        prefetch = strategy in NEIGHBOUR_STRATEGIES
    by_binary: dict[Hashable, tuple[dict, dict]] = {}  # Binary (and launch) → (config, measurement).
    copies: set[tuple] = set()  # Configs whose result is another config's: never re-timed.
    best = [math.inf]
    trusted = [True]
    started = time.perf_counter()
    split = collections.Counter({"compile": 0.0, "load": 0.0, "measure": 0.0, "confirm": 0.0})
    predicted_rank: dict[tuple, int] = {}  # Config → its place in the cost model's predicted order.
    fastest: list[tuple[float, int, dict]] = []  # (ms, order, config) of every config measured here that ran.

    def binary_of(config: dict, report: StaticReport | None) -> Hashable | None:
        if report is None or not report.valid or not report.binary_hash:
            return None
        return (report.binary_hash, launch_key(config)) if launch_key else report.binary_hash

    def neighbours_ahead(batch: list[dict]) -> list[dict]:
        """What to compile before it is asked for: the neighbours of the fastest configs so far
        (ppo's climbs and its checks before stopping measure those: 59 % of the configs its H200
        sessions asked for, against 24 % that were neighbours of the config measured just before),
        then the batch's; each group in the cost model's predicted order when it ranked them."""
        ranked = (lambda configs: sorted(configs, key=lambda c: predicted_rank.get(_key(c), len(predicted_rank)))) \
            if predicted_rank else list
        leaders = [c for ms, _, c in heapq.nsmallest(GUESS_LEADERS, fastest) if ms <= best[0] * (1 + GUESS_NEAR)]
        return [*ranked([n for c in leaders for n in space.neighbours(c)]),
                *ranked([n for c in batch for n in space.neighbours(c)])]

    def step(batch: list[dict]) -> list[tuple[dict, float]]:
        reports: list[StaticReport | None] = [None] * len(batch)
        # Configs measured before (`known`) are neither compiled nor measured again.
        new = [i for i, c in enumerate(batch) if not (known and _key(c) in known)]
        if static is not None and trusted[0] and new:
            waited = time.perf_counter()
            # What the strategy may ask next (the neighbours of the best configs and of the batch)
            # compiles beside the batch, so that a step finds its binary ready instead of waiting.
            ahead = neighbours_ahead(batch) if prefetch else []
            try:
                for i, report in zip(new, static.reports_for([batch[i] for i in new], then_guess=ahead), strict=True):
                    reports[i] = report
            except RuntimeError as error:  # The compile workers cannot start: measure without them.
                trusted[0] = False
                warnings.warn(f"{problem.get('family')}: static checks are off for this session ({error})",
                              stacklevel=2)
            split["compile"] += time.perf_counter() - waited
        compile_s = [(r.compile_s or 0.0) if r is not None else 0.0 for r in reports]
        out: list[tuple[dict, float] | None] = [None] * len(batch)
        leaders: dict[Hashable, int] = {}  # Binary → position in the batch of the config measured for it.
        followers: list[tuple[int, Hashable]] = []
        to_measure: list[int] = []
        for i, (config, report) in enumerate(zip(batch, reports, strict=True)):
            if known and _key(config) in known:
                out[i] = (dict(known[_key(config)]), 0.0)
                continue
            if report is not None and not measurable(report):
                refused = refusal(report)
                if trust_compile_errors or refused["status"] != "compile_error":
                    out[i] = (refused, compile_s[i])
                    result.refused += 1
                    continue
            binary = binary_of(config, report)
            if binary is not None and (binary in by_binary or binary in leaders):
                followers.append((i, binary))
                continue
            if binary is not None:
                leaders[binary] = i
            to_measure.append(i)
        if static is not None and prefetch and trusted[0] and not new:
            # A batch of known configs compiled nothing: its neighbours are guessed here.
            static.guess(neighbours_ahead(batch))
        stored: set[int] = set()  # Positions in the batch already in the store.
        # Measured in this process (as triton.autotune measures), configs go one at a time, each
        # stored before the next: a crash of the process loses the config that crashed, not the
        # batch. A measuring pool takes the batch at once (a crash costs it only its worker).
        chunk = 1 if in_process else max(1, len(to_measure))
        for start in range(0, len(to_measure), chunk):
            part = to_measure[start:start + chunk]
            timing = time.perf_counter()
            measured = measure([batch[i] for i in part], best[0])
            spent = time.perf_counter() - timing
            loaded = min(spent, sum(float(m.get("load_s") or 0.0) for m, _ in measured))
            split["load"] += loaded
            split["measure"] += spent - loaded
            for i, (m, seconds) in zip(part, measured, strict=True):
                m, report = dict(m), reports[i]
                if report is not None:
                    m.update(static_fields(report))
                    if not measurable(report) and m["status"] == "ok" and trusted[0]:
                        # It failed to compile from its description, yet it ran: the description
                        # is wrong, and so would be the rest of its verdicts.
                        trusted[0] = False
                        warnings.warn(f"{problem.get('family')}: a config that failed to compile from the "
                                      "description of its arguments ran on the device, so that description "
                                      "is wrong; static checks are off for the rest of this session.",
                                      stacklevel=2)
                out[i] = (m, compile_s[i] + seconds)
                result.measured += 1
                binary = binary_of(batch[i], report)
                if binary is not None:
                    by_binary[binary] = (batch[i], m)
                if m["status"] == "ok":
                    best[0] = min(best[0], m["ms"])
                    fastest.append((m["ms"], len(fastest), batch[i]))
                if store is not None:
                    writer.add(dict(problem), batch[i], _storable(m), source)
                    stored.add(i)
        for i, binary in followers:
            leader, measured_m = by_binary[binary]
            copy = {k: v for k, v in measured_m.items() if k not in ("compile_s", "load_s")}
            copy.update(static_fields(reports[i]))
            copy["same_binary_as"] = leader
            copies.add(_key(batch[i]))
            result.copied_from[_key(batch[i])] = leader
            out[i] = (copy, compile_s[i])
            result.copied += 1
        for i, (config, (m, _)) in enumerate(zip(batch, out, strict=True)):
            if m["status"] == "ok":
                best[0] = min(best[0], m["ms"])
            if (known and _key(config) in known) or i in stored:
                continue  # Stored when it was measured.
            if store is not None:
                writer.add(dict(problem), config, _storable(m), source)
        return out  # type: ignore[return-value]

    def asked(config: dict) -> dict | None:
        """The strategy's question: answered by `observe` when given, else by the compile stage,
        whose answers depend on which compiles have finished, so they are kept in the result for a
        replay of the session to give again."""
        if observe is not None:
            return observe(config)
        answer = stage_knows(config)
        if static is not None:
            result.observed.append((dict(config), answer))
        return answer

    def stage_knows(config: dict) -> dict | None:
        """What the compile stage already knows of a config, for the strategy to weigh before it
        proposes it (ppo's `static`): "ok" when it compiled within the device's limits, with its
        binary's identity (configs of one binary share one measurement: the strategy does not ask
        for a second), else the refusal; None while it is not compiled (this never waits for a
        compile) or when the stage's verdicts are not trusted."""
        if static is None or not trusted[0]:
            return None
        try:
            report = static.ready(config)
        except RuntimeError:  # The compile workers are gone: the next step says so and goes on without them.
            return None
        if report is None:
            return None
        if measurable(report):
            binary = binary_of(config, report)
            identity = {"binary": (hash(binary) & 0xFFFF_FFFF_FFFF_FFFF) or 1} if binary is not None else {}
            return {"status": "ok", **static_fields(report), **identity}
        refused = refusal(report)
        if not trust_compile_errors and refused["status"] == "compile_error":
            return None  # Compiled from an inferred description: the device may still run it.
        return refused

    def trial(config: dict, measurement: dict, elapsed_s: float) -> None:
        if on_trial is not None:
            on_trial(config, measurement, elapsed_s)

    if static is not None and prefetch and trusted[0] and strategy == "ppo":
        # The agent's first measurements jump to what its cost model ranks best: compile those on
        # every idle compile worker at once, while the measuring process starts.
        try:
            ranked = _core.predicted_order(dict(problem), space, GUESS_RANKED)
        except (RuntimeError, ValueError):  # No trained model, or a space too large to rank whole.
            ranked = []
        # The agent moves towards what its cost model predicts fast, so a step's neighbours are
        # guessed in that order: on the H200 the workers could not compile every neighbour of
        # every step in time, and half the configs asked for were guesses still compiling.
        predicted_rank.update((_key(c), i) for i, c in enumerate(ranked))
        # The opening is measured before anything the agent ranks: its compiles go first.
        first_up = [dict(c) for c in opening] + ranked
        static.guess([c for c in first_up[:static.pool.workers] if not (known and _key(c) in known)])
    options = dict(options or {})
    per_round = PER_ROUND_OPTION.get(strategy)
    if per_round is not None and parallel > 1:
        options.setdefault(per_round, parallel)
    if strategy == "ppo":
        # On a GPU a measurement of a large space's config (its compile mostly) costs about as
        # much as a refit (0.25 s on the H200's host), so the agent's copy of the cost model is
        # refitted with the session's measurements every 8 of them, and every 4 while its
        # predictions rank the measurements badly (trust below 0.5); replays leave both off. Under
        # leave-one-family-out (seed 0's agents, benchmarks/agent.md) the pair took the geomean of
        # evaluations to 1.05x from 6.1 to 5.4 and the worst problem from 43.5 to 29.5. Small
        # spaces get none (REFIT_MIN_CONFIGS). Each refit runs while the next config is compiled
        # and measured (ppo's refit_async), so the session does not wait for it.
        small = space.product_size < REFIT_MIN_CONFIGS or (
            space.product_size <= 100 * REFIT_MIN_CONFIGS and space.count_valid() < REFIT_MIN_CONFIGS)
        options.setdefault("refit", 0 if small else 8)
        options.setdefault("doubt_refit", 0 if small else 4)
    result.strategy_options = dict(options)
    try:
        ahead: list[tuple[dict, dict, float]] = []
        if first:
            batch = list(dict.fromkeys(_key(c) for c in first))
            configs = [dict(k) for k in batch]
            spent = 0.0
            for config, (m, seconds) in zip(configs, step(configs), strict=True):
                spent += seconds
                ahead.append((config, m, spent))
                trial(config, m, spent)
            known = {**(known or {}), **{_key(c): m for c, m, _ in ahead}}
        history = _core.tune(dict(problem), space, step, strategy, max_evals, max_seconds, seed, options, trial,
                             asked, [dict(c) for c in opening])
        offset = ahead[-1][2] if ahead else 0.0
        seen = {_key(c) for c, _, _ in ahead}
        result.history = ahead + [(c, m, s + offset) for c, m, s in history if _key(c) not in seen]
        ok = [(m["ms"], c) for c, m, _ in result.history if m["status"] == "ok"]
        if ok:
            result.best_ms, result.best_config = min(ok, key=lambda t: t[0])
        if confirm > 1 and ok:
            measured = {_key(c): m for c, m, _ in result.history}

            def remeasure(configs: list[dict]) -> list[dict]:
                measurements = [dict(m) for m, _ in measure(configs, math.inf)]
                for config, m in zip(configs, measurements, strict=True):
                    # The binary is the one compiled before: its resource usage is known.
                    m.update({k: measured[_key(config)][k] for k in ("n_regs", "n_spills", "shared", "occupancy")
                              if k in measured[_key(config)]})
                    if store is not None:
                        writer.add(dict(problem), config, _storable(m), source)
                return measurements

            own = [(c, m, s) for c, m, s in result.history if _key(c) not in copies]
            confirming = time.perf_counter()
            try:
                winner = confirm_winner(own, remeasure, candidates=confirm, rounds=confirm_rounds,
                                        within=confirm_within)
            except Exception as error:  # noqa: BLE001 - the search's results must survive a failed re-timing.
                warnings.warn(f"{problem.get('family')}: timing the best configs again failed ({error}); the "
                              "session's first measurements stand", stacklevel=2)
                winner = None
            split["confirm"] += time.perf_counter() - confirming
            if winner is not None:
                result.best_config, result.best_ms, result.confirmed = winner
    finally:
        writer.close()
    result.wall_s = time.perf_counter() - started
    result.split_s = {**split, "search": max(0.0, result.wall_s - sum(split.values()))}
    if static is not None:
        result.compile_readiness = dict(static.readiness)
    return result


def confirm_winner(history: Sequence[tuple[dict, dict, float]], remeasure: Callable[[list[dict]], list[dict]], *,
                   candidates: int = 3, rounds: int = 3, within: float = 0.10
                   ) -> tuple[dict, float, list[tuple[dict, list[float]]]] | None:
    """Times the best configs of a session again and returns (winner, its median ms, every
    candidate's round times), or None when fewer than two configs are close enough to need it.

    `history` holds (config, measurement, seconds) of configs measured on their own (a config
    whose result was copied from another with the same binary would only time that one again).
    Candidates are its `candidates` fastest configs within `within` of the fastest. Each of
    `rounds` rounds times every candidate still in the running once, the order rotating from round
    to round so that none is always first after the pause; the winner has the lowest median over
    its rounds. A candidate that fails a round (wrong results, a crash: a flaky kernel) is out: the
    winner must have run correctly every time. A candidate is also timed no more once its rounds so
    far prove that its median cannot come under another's, whatever the rounds left would measure
    (the least median its times allow is above the greatest another's allow: with three rounds,
    after two, both its times above both of another's); once one candidate is left, the rounds
    stop. The winner is the one all the rounds would have chosen from the same times, and where
    the rivals are clearly slower each candidate is timed twice instead of three times. If every
    candidate fails, the session's device is in trouble and the first measurements stand (None).
    """
    measured = sorted(((m["ms"], c) for c, m, _ in history
                       if m["status"] == "ok" and math.isfinite(m["ms"])),
                      key=lambda t: t[0])
    chosen: list[dict] = []
    for ms, config in measured:
        if len(chosen) == candidates or ms > measured[0][0] * (1.0 + within):
            break
        if config not in chosen:
            chosen.append(config)
    if len(chosen) < 2:
        return None
    rounds = max(1, rounds)
    times: list[list[float]] = [[] for _ in chosen]
    running = list(range(len(chosen)))
    for r in range(rounds):
        order = [running[(r + i) % len(running)] for i in range(len(running))]
        for i, m in zip(order, remeasure([chosen[i] for i in order]), strict=True):
            times[i].append(float(m["ms"]) if m.get("status") == "ok" and m.get("ms") is not None else math.nan)
        running = [i for i in running if all(math.isfinite(x) for x in times[i])]
        if running:
            bounds = {i: _median_bounds(times[i], rounds) for i in running}
            least_greatest = min(high for _, high in bounds.values())
            running = [i for i in running if bounds[i][0] <= least_greatest]
        if len(running) <= 1:
            break
    finished = [(statistics.median(t), i) for i, t in enumerate(times) if all(math.isfinite(x) for x in t)]
    if not finished:
        warnings.warn(f"none of the {len(chosen)} best configs ran correctly when timed again; the session's "
                      "first measurements stand, but check the device", stacklevel=3)
        return None
    best_ms, best = min(finished)
    return chosen[best], best_ms, [(c, t) for c, t in zip(chosen, times, strict=True)]


def _median_bounds(known: Sequence[float], total: int) -> tuple[float, float]:
    """The least and the greatest value statistics.median can give for `total` measurements of
    which `known` are measured, whatever the others turn out to be."""
    known, unknown = sorted(known), total - len(known)

    def kth(k: int) -> tuple[float, float]:  # The k-th smallest (from 1) of all `total`.
        return (known[k - 1 - unknown] if k > unknown else -math.inf, known[k - 1] if k <= len(known) else math.inf)

    if total % 2:
        return kth((total + 1) // 2)
    (low_a, high_a), (low_b, high_b) = kth(total // 2), kth(total // 2 + 1)
    return (low_a + low_b) / 2, (high_a + high_b) / 2


class _StoreWriter:
    """Adds a session's measurements to the store, keeping those it cannot write (another process
    holding the write lock past its timeout, a full disk) to try again with the next one and at the
    end: a store that fails never ends the session nor loses what it measured, and what could not
    be written in the end is said once, with the reason."""

    def __init__(self, store, problem: Mapping[str, Any], ids: dict[tuple, list[int]] | None = None) -> None:
        self.store, self.problem = store, problem
        self.pending: list[tuple] = []
        self.error: OSError | None = None
        self.ids = ids if ids is not None else {}  # Config (sorted items) → the ids of the rows written.

    def add(self, problem: dict, config: dict, measurement: dict, source: str) -> None:
        self.pending.append((problem, config, measurement, source))
        self._flush()

    def _flush(self) -> None:
        while self.pending:
            try:
                row = self.store.add(*self.pending[0])
            except OSError as error:
                self.error = error
                return
            self.ids.setdefault(_key(self.pending.pop(0)[1]), []).append(row)

    def close(self) -> None:
        self._flush()
        if self.pending:
            warnings.warn(f"{self.problem.get('family')}: {len(self.pending)} of this session's measurements could "
                          f"not be written to the results store ({self.error}); the session's result stands and "
                          "they are in its history, but a later process will not see them", stacklevel=3)


def _storable(measurement: dict) -> dict:
    # The store takes the recorded-table fields; NaN and inf are stored as unknown.
    return {k: v for k, v in measurement.items()
            if not (isinstance(v, float) and not math.isfinite(v)) and not isinstance(v, dict)}


# ----- built-in kernels ------------------------------------------------------------------------------

def builtin_problem(kernel, shape: Mapping[str, Any], dtype: str, device: str) -> dict:
    """The problem dict of a built-in kernel: fp16 problems carry no dtype, as in the recorded
    tables, so that live results and imported recordings of one problem are one problem."""
    return {"family": kernel.family, "shape": kernel.check_shape(shape), "device": device,
            "dtype": "" if dtype == "fp16" else dtype}


def builtin_describer(kernel, shape: Mapping[str, Any], dtype: str, device: DeviceLimits = H200):
    """Returns describe(config) → CompileRequest for a built-in kernel's problem."""
    shape = dict(shape)

    def describe(config: dict) -> CompileRequest:
        return CompileRequest(kernel.name, dict(config), shape, dtype, device)

    return describe


def device_name(interpret: bool) -> str:
    """The name results are filed under: the GPU's, or the interpreter's."""
    if interpret:
        return "cpu (Triton interpreter)"
    import torch

    return torch.cuda.get_device_name(0)


def tune_builtin(kernel, shape: Mapping[str, Any], dtype: str = "fp16", *, strategy: str = "ppo",
                 max_evals: int = 100, max_seconds: float = math.inf, seed: int = 0,
                 options: Mapping[str, float] | None = None, interpret: bool = False, store=None,
                 source: str = "tune", workers: int | None = None, compile_timeout_s: float = 120.0,
                 settings=None, on_trial=None, space=None, limits: DeviceLimits | None = None,
                 prefetch: bool | None = None, measure_pool=None, resume: bool = False,
                 isolate: bool = True, compile_pool=None) -> SessionResult:
    """Tunes a built-in kernel on one problem: the flow @optimize runs, on the kernel's own space
    (or `space`), measuring on every visible GPU, or on the CPU in Triton's interpreter when
    `interpret` (those times order configs for testing; they are not GPU times). Static analysis
    is for `limits` (default: the visible GPU's, or the H200's under the interpreter). `resume`
    takes the configs `store` holds for this problem as measured: they count as evaluations and
    are not measured again, so that a session stopped part-way goes on where it stopped.
    `isolate=False` measures in this process on the first device, as triton.autotune does: no
    measuring process to start (seconds of a short session), and a config that crashes the GPU
    context ends this process. `compile_pool` is a pool that serves others too (the process's
    shared one): the session uses it and leaves it running."""
    from .analysis import device_limits
    from .measure import BuiltinJob, MeasurePool, in_process, visible_devices

    shape = kernel.check_shape(shape)
    if interpret and not isolate and type(kernel.fn).__name__ != "InterpretedFunction":
        raise ValueError(f"{kernel.name} was decorated without Triton's interpreter, so it cannot run on the CPU "
                         "in this process: set TRITON_INTERPRET=1 before dr_kernel's kernels are imported, or "
                         "measure in a worker process (isolate=True)")
    devices = ["cpu"] if interpret else visible_devices()
    if devices == ["cpu"] and not interpret:
        raise RuntimeError("measuring needs a GPU and none is visible")
    workers = workers or compile_workers(len(devices))
    if limits is None:
        limits = H200 if interpret else device_limits(0)
    if space is None:
        space = kernel.space_for(shape, limits, interpret)
    problem = builtin_problem(kernel, shape, dtype, device_name(interpret))
    settings = settings or _settings()
    job = BuiltinJob(kernel.name, dict(shape), dtype)
    own_pool = measure_pool is None and isolate
    pool = measure_pool or (MeasurePool(job, devices, settings) if isolate else None)
    if pool is not None:
        pool.start()  # Its set-up overlaps the compile pool's start and the first compiles.
        measure, parallel = pool.measure, len(devices)
    if compile_pool is None:
        stage = StaticStage(CompilePool(workers=workers, timeout_s=compile_timeout_s),
                            builtin_describer(kernel, shape, dtype, limits))
    else:
        stage = StaticStage(compile_pool, builtin_describer(kernel, shape, dtype, limits), own_pool=False)
    try:
        if pool is None:  # The compile workers are forked by now; this process's CUDA start overlaps them.
            measure, parallel = in_process(job, job.setup(devices[0]), settings, devices[0]), 1
        known = stored_measurements(store, problem, space) if resume and store is not None else None
        # The agent's prior cannot rank a variant no table holds: its opening is measured first.
        opening = [c for c in kernel.opening(shape, limits, interpret) if space.is_valid(c)
                   ] if strategy == "ppo" else []
        return run_session(problem, space, measure, static=stage, strategy=strategy, max_evals=max_evals,
                           max_seconds=max_seconds, seed=seed, options=options, store=store, source=source,
                           on_trial=on_trial, prefetch=prefetch, parallel=parallel, confirm=settings.confirm,
                           confirm_rounds=settings.confirm_rounds, confirm_within=settings.confirm_within,
                           known=known, in_process=pool is None, opening=opening)
    finally:
        stage.close()
        if own_pool:
            pool.close()


def stored_measurements(store, problem: Mapping[str, Any], space) -> dict[tuple, dict]:
    """The measurement the store holds for each config of `space` on `problem`: the median time
    of its `ok` repeats (re-timings, earlier sessions), or its last failure when none ran."""
    rows: dict[tuple, list[dict]] = collections.defaultdict(list)
    for config, m in store.rows(dict(problem)):
        if set(config) == set(space.names) and space.is_valid(config):
            rows[_key(config)].append(m)
    out = {}
    for key, ms in rows.items():
        ok = [m for m in ms if m["status"] == "ok"]
        out[key] = sorted(ok, key=lambda m: m["ms"])[(len(ok) - 1) // 2] if ok else ms[-1]
    return out


def compile_workers(measuring: int) -> int:
    """Compile processes by default: one per CPU core, less one per measuring process, whose
    launches should not wait for a core."""
    return max(1, (os.cpu_count() or 2) - measuring)


def _settings():
    from .measure import MeasureSettings

    return MeasureSettings()
