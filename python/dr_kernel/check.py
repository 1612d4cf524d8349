"""A performance gate for CI: the tuned kernels' times against a committed baseline.

A baseline file lists problems of built-in kernels (kernel, shape, precision) with the winner's
config and time when it was written, and the device it was measured on:

    {"format": "dr_kernel check baseline", "version": 1, "threshold": 0.05,
     "entries": [{"kernel": "matmul", "shape": {"M": 4096, "N": 4096, "K": 4096}, "precision": "fp16",
                  "device": "NVIDIA H200", "config": {...}, "ms": 0.2012}]}

check() takes each entry's current winner (the store's best measured config for that problem, as
a tuned program would launch it; tuned anew where the store has none, or always with `tune=True`),
times it again (three rounds, the median), and compares: a time more than `threshold` above the
baseline's is a regression. A new compiler, driver, kernel change or tuner change shows up as a
regression (or as a winner that changed). `update()` writes the current figures back.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

FORMAT = "dr_kernel check baseline"
VERSION = 1
DEFAULT_THRESHOLD = 0.05
ROUNDS = 3  # Timings of the winner per check; the median decides.


class BaselineError(ValueError):
    """A baseline file that cannot be used: names the file and what to fix."""


@dataclass
class Entry:
    kernel: str
    shape: dict
    precision: str = "fp16"
    device: str | None = None
    config: dict | None = None
    ms: float | None = None

    def label(self) -> str:
        shape = ",".join(f"{k}={v}" for k, v in self.shape.items())
        return f"{self.kernel} {shape} {self.precision}"

    def to_json(self) -> dict:
        out = {"kernel": self.kernel, "shape": self.shape, "precision": self.precision}
        if self.ms is not None:
            out.update({"device": self.device, "config": self.config, "ms": self.ms})
        return out


@dataclass
class Baseline:
    path: Path
    entries: list[Entry] = field(default_factory=list)
    threshold: float = DEFAULT_THRESHOLD

    def write(self) -> None:
        text = json.dumps({"format": FORMAT, "version": VERSION, "threshold": self.threshold,
                           "entries": [e.to_json() for e in self.entries]}, indent=1)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(text + "\n")
        tmp.replace(self.path)  # Whole or not at all: a killed update leaves the old baseline.


def read_baseline(path: Path | str, missing_ok: bool = False) -> Baseline:
    """Reads and checks a baseline file; BaselineError names the file and the fix."""
    from .kernels import UnknownKernelError, dtype_name, get

    path = Path(path)
    if not path.exists():
        if missing_ok:
            return Baseline(path)
        raise BaselineError(f"{path}: no such baseline; write one with --update (and --add KERNEL:SHAPE[:PRECISION])")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BaselineError(f"{path}: not a baseline file ({error}); write it again with --update") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries"), list):
        raise BaselineError(f"{path}: not a dr_kernel check baseline (it needs \"format\": \"{FORMAT}\" and a list "
                            "\"entries\"); write one with --update")
    if data.get("version") != VERSION:
        raise BaselineError(f"{path}: baseline version {data.get('version')!r}; this dr_kernel reads version "
                            f"{VERSION}: write it again with --update")
    threshold = data.get("threshold", DEFAULT_THRESHOLD)
    if not isinstance(threshold, (int, float)) or not 0 < threshold < 10:
        raise BaselineError(f"{path}: threshold {threshold!r} must be a fraction above 0 (0.05 is 5 %)")
    entries = []
    for i, raw in enumerate(data["entries"]):
        where = f"{path}: entry {i + 1}"
        if not isinstance(raw, dict) or not isinstance(raw.get("kernel"), str) or not isinstance(raw.get("shape"),
                                                                                                  dict):
            raise BaselineError(f"{where} needs \"kernel\" (a built-in kernel's name) and \"shape\" (an object)")
        try:
            kernel = get(raw["kernel"])
            shape = kernel.check_shape(raw["shape"])
            precision = dtype_name(raw.get("precision", "fp16"))
        except (UnknownKernelError, ValueError, KeyError) as error:
            raise BaselineError(f"{where}: {error}") from None
        ms = raw.get("ms")
        if ms is not None and (not isinstance(ms, (int, float)) or not math.isfinite(ms) or ms <= 0):
            raise BaselineError(f"{where}: ms {ms!r} is not a time; write it again with --update")
        config = raw.get("config")
        if ms is not None and not isinstance(config, dict):
            raise BaselineError(f"{where}: a time without its config; write it again with --update")
        entries.append(Entry(kernel.name, shape, precision, raw.get("device"), config, ms))
    return Baseline(path, entries, float(threshold))


@dataclass
class Outcome:
    entry: Entry
    verdict: str  # ok, regressed, faster, new, failed
    ms: float | None = None
    config: dict | None = None
    source: str = ""  # "store" or "tuned"
    device: str = ""
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.ms is None or self.entry.ms is None:
            return None
        return self.ms / self.entry.ms

    def to_json(self) -> dict:
        return {"problem": self.entry.label(), "verdict": self.verdict, "baseline_ms": self.entry.ms, "ms": self.ms,
                "ratio": self.ratio, "config": self.config, "baseline_config": self.entry.config,
                "winner_changed": self.entry.config is not None and self.config is not None
                and self.config != self.entry.config, "source": self.source, "device": self.device,
                "note": self.note}


def current_winner(entry: Entry, store, *, interpret: bool, tune: bool, budget: int) -> tuple[dict | None, str, str]:
    """The config the store holds fastest for this problem (tuning it first when `tune`, or when
    the store has none), and where it came from."""
    from .analysis import device_limits
    from .kernels import get
    from .session import builtin_problem, device_name, stored_measurements, tune_builtin

    kernel = get(entry.kernel)
    device = device_name(interpret)
    problem = builtin_problem(kernel, entry.shape, entry.precision, device)
    # The space tune_builtin searches.
    space = kernel.space_for(entry.shape, None if interpret else device_limits(0), interpret)

    def stored_winner() -> dict | None:
        # The session's rule for a config's time: the median of its repeats (the confirmation
        # rounds re-time the closest candidates), not its luckiest one. One rule for the baseline
        # written after tuning and for the checks that read the store later, so that an unchanged
        # store never reads as a changed winner.
        ok = [(m["ms"], dict(k)) for k, m in stored_measurements(store, problem, space).items()
              if m["status"] == "ok"]
        return min(ok, key=lambda t: t[0])[1] if ok else None

    if not tune and (config := stored_winner()) is not None:
        return config, "store", device
    result = tune_builtin(kernel, entry.shape, entry.precision, max_evals=budget, interpret=interpret, store=store,
                          source="check")
    return stored_winner() or result.best_config, "tuned", device


def time_config(entry: Entry, config: dict, *, interpret: bool) -> dict:
    """Times one config ROUNDS times in a measuring process; the median of the rounds' medians.
    Every round times all its launches: a gate compares steady times, not the tuner's early stops."""
    from .measure import BuiltinJob, MeasurePool, MeasureSettings, visible_devices

    device = "cpu" if interpret else visible_devices()[0]
    job = BuiltinJob(entry.kernel, dict(entry.shape), entry.precision)
    with MeasurePool(job, [device], settings=MeasureSettings.exact()) as pool:
        results = [m for m, _ in pool.measure([config] * ROUNDS)]
    bad = next((m for m in results if m["status"] != "ok"), None)
    if bad is not None:
        return bad
    return {"status": "ok", "ms": statistics.median(m["ms"] for m in results)}


def check(baseline: Baseline, store, *, interpret: bool = False, tune: bool = False, budget: int = 50,
          threshold: float | None = None, on_outcome=None) -> list[Outcome]:
    """Measures every entry's current winner and judges it against the baseline."""
    from .session import device_name

    threshold = baseline.threshold if threshold is None else threshold
    here = device_name(interpret)

    def judge(entry: Entry) -> Outcome:
        if entry.device is not None and entry.ms is not None and entry.device != here:
            return Outcome(entry, "failed", device=here,
                           note=f"the baseline was measured on {entry.device}, this is {here}: keep a baseline "
                                "per GPU (write this one with --update)")
        config, source, device = current_winner(entry, store, interpret=interpret, tune=tune, budget=budget)
        if config is None:
            return Outcome(entry, "failed", source=source, device=device, note="no config ran correctly")
        m = time_config(entry, config, interpret=interpret)
        if m["status"] != "ok":
            return Outcome(entry, "failed", config=config, source=source, device=device,
                           note=f"the winner did not run: {m['status']} {m.get('error') or ''}".strip())
        outcome = Outcome(entry, "new", m["ms"], config, source, device)
        if entry.ms is not None:
            ratio = m["ms"] / entry.ms
            # Faster by as much as a regression is slower (1 / (1 + threshold)): worth a new baseline.
            outcome.verdict = "regressed" if ratio > 1 + threshold else \
                "faster" if ratio < 1 / (1 + threshold) else "ok"
        return outcome

    outcomes = []
    for entry in baseline.entries:
        outcomes.append(judge(entry))
        if on_outcome is not None:
            on_outcome(outcomes[-1])
    return outcomes


def updated(baseline: Baseline, outcomes: list[Outcome]) -> Baseline:
    """The baseline with every measured entry's figures replaced by this check's."""
    entries = []
    for o in outcomes:
        e = o.entry
        if o.ms is not None:
            e = Entry(e.kernel, e.shape, e.precision, o.device, o.config, o.ms)
        entries.append(e)
    return Baseline(baseline.path, entries, baseline.threshold)


def table(outcomes: list[Outcome], threshold: float) -> str:
    rows = [f"{'problem':<44} {'baseline ms':>12} {'now ms':>10} {'now/base':>9}  verdict"]
    for o in outcomes:
        base = f"{o.entry.ms:.4g}" if o.entry.ms is not None else "-"
        now = f"{o.ms:.4g}" if o.ms is not None else "-"
        ratio = f"{o.ratio:.3f}" if o.ratio is not None else "-"
        changed = " (winner changed)" if o.to_json()["winner_changed"] else ""
        note = f": {o.note}" if o.note else ""
        rows.append(f"{o.entry.label():<44} {base:>12} {now:>10} {ratio:>9}  {o.verdict}{changed}{note}")
    worst = [o for o in outcomes if o.verdict in ("regressed", "failed")]
    rows.append(f"{len(outcomes)} problems, threshold {threshold:.0%}: "
                + (f"{len(worst)} regressed or failed" if worst else "no regression"))
    return "\n".join(rows)


def merge(baseline: Baseline, extra: list[Entry]) -> Baseline:
    """The baseline with entries added (an entry already there is kept once)."""
    seen = {(e.kernel, json.dumps(e.shape, sort_keys=True), e.precision) for e in baseline.entries}
    entries = list(baseline.entries)
    for e in extra:
        k = (e.kernel, json.dumps(e.shape, sort_keys=True), e.precision)
        if k not in seen:
            seen.add(k)
            entries.append(e)
    return Baseline(baseline.path, entries, baseline.threshold)

