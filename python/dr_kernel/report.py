"""Figures and pages: replay curves as PNG or SVG, and a store's self-contained HTML report."""

from __future__ import annotations

import math
from pathlib import Path
from typing import IO


def plot_replay(curves: dict[str, list[tuple[dict, list[float]]]], path: Path | str | IO[bytes], within: float,
                fmt: str | None = None) -> None:
    """Writes one panel per problem: median best-so-far / table's best against evaluations, one line
    per strategy. ``curves`` maps a strategy name to its (problem, median curve) pairs. ``path`` may
    be a binary file object, with ``fmt`` naming the format ("svg", "png")."""
    import matplotlib

    matplotlib.use("Agg")  # Files only: no display on CI or the GPU machine.
    import matplotlib.pyplot as plt

    # Strategies may cover different problems (the agent only those it did not train on): panels
    # follow the union, in first-seen order, and each strategy draws where it has a curve.
    def key(problem: dict) -> str:
        return repr(sorted((k, repr(v)) for k, v in problem.items()))

    problems: list[dict] = []
    for pairs in curves.values():
        for problem, _ in pairs:
            if key(problem) not in {key(p) for p in problems}:
                problems.append(problem)
    by_problem = {name: {key(p): c for p, c in pairs} for name, pairs in curves.items()}
    cols = min(4, len(problems))
    rows = math.ceil(len(problems) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False)
    for i, problem in enumerate(problems):
        ax = axes[i // cols][i % cols]
        for name in curves:
            curve = by_problem[name].get(key(problem))
            if curve is None:
                continue
            xs = [x + 1 for x, y in enumerate(curve) if math.isfinite(y)]
            ys = [y for y in curve if math.isfinite(y)]
            ax.plot(xs, ys, label=name, linewidth=1.4)
        ax.axhline(within, color="grey", linestyle=":", linewidth=1)
        shape = " ".join(f"{k}={v}" for k, v in problem["shape"].items())
        ax.set_title(f"{problem['family']} {shape} {problem.get('dtype') or ''}".strip(), fontsize=8)
        ax.set_xscale("log")
        ax.set_ylim(0.98, 2.0)
        ax.set_xlabel("evaluations", fontsize=8)
        ax.set_ylabel("best so far / table's best", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, which="both", alpha=0.3)
    for j in range(len(problems), rows * cols):
        axes[j // cols][j % cols].axis("off")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("median over runs of best-so-far relative to the recorded optimum" if cols > 1 else
                 "median best-so-far / recorded optimum", fontsize=10 if cols > 1 else 8)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format=fmt)
    plt.close(fig)


# ----- the store's HTML report ---------------------------------------------------------------------

REPLAY_STRATEGIES = ("random", "anneal", "ppo")
MIN_REPLAY_ROWS = 24  # A problem needs this many measured configs before a replay over them means much.


def _svg(fig) -> str:
    import io

    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    fig.savefig(buffer, format="svg")
    plt.close(fig)
    return _inline(buffer.getvalue())


def _inline(svg: str) -> str:
    return svg[svg.index("<svg"):]  # Without the XML prolog and doctype, to sit inside a page.


def _tuning_curve_svg(rows: list[tuple[dict, dict]], label: str) -> str:
    """Best time so far against measurements, in the order they were stored."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    best, xs, ys, fails = math.inf, [], [], []
    for i, (_, m) in enumerate(rows, start=1):
        if m["status"] == "ok" and m["ms"] is not None and math.isfinite(m["ms"]):
            best = min(best, m["ms"])
        else:
            fails.append(i)
        if math.isfinite(best):
            xs.append(i)
            ys.append(best)
    fig, ax = plt.subplots(figsize=(4.6, 2.6))
    ax.step(xs, ys, where="post", linewidth=1.4)
    ax.set_xlabel("measurements, in the order stored", fontsize=8)
    ax.set_ylabel("best so far, ms", fontsize=8)
    ax.set_title(label, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return _svg(fig)


def _counters_table(profiled: list[tuple[dict, dict, dict]], esc) -> str:
    """The measurements stored with Nsight Compute's counters (evaluate/tune --profile,
    @optimize(profile=True), the recorded tables' probes): the rates and the top stall reasons."""
    import json

    from .profiling import RATES, read_stored_counters

    out = ["<h2>Hardware counters</h2><table id='counters'><tr><th>kernel family</th><th>shape</th><th>config</th>"
           "<th class='num'>ms</th>" + "".join(f"<th class='num'>{label} %</th>" for _, label in RATES)
           + "<th>warps stalled per issue (top 3)</th></tr>"]
    for p, config, m in profiled:
        c = read_stored_counters(m["counters"])
        shape = " ".join(f"{k}={v}" for k, v in p["shape"].items())
        role = f" (probe {c['probe']:g})" if "probe" in c else ""
        ms = f"{m['ms']:.4f}" if m.get("ms") is not None and math.isfinite(m["ms"]) else "-"
        stalls = ", ".join(f"{r.replace('_', ' ')} {v:.2f}" for r, v in list(c.get("stalls", {}).items())[:3])
        out.append(f"<tr><td>{esc(p['family'])}</td><td>{esc(shape)}</td><td><code>{esc(json.dumps(config))}</code>"
                   f"{esc(role)}</td><td class='num'>{ms}</td>"
                   + "".join(f"<td class='num'>{c[name]:.0f}</td>" if name in c else "<td class='num'>-</td>"
                             for name, _ in RATES)
                   + f"<td>{esc(stalls)}</td></tr>")
    out.append("</table>")
    return "\n".join(out)


def html_report(store, title: str | None = None, *, replay_budget: int = 50, replay_repeats: int = 5) -> str:
    """A self-contained HTML page of a results store: its problems with their best configs and
    measurements, the hardware counters stored with some of them, each problem's tuning curve, the
    stored winners of @optimize and the drop-in (with launch counts), and a comparison of search
    strategies replayed over the problems with at least MIN_REPLAY_ROWS measured configs (the agent
    only where it was not trained on them)."""
    import collections
    import datetime
    import html
    import io
    import json

    from . import __version__, _core
    from .holdout import problem_key, shipped_agent_trained_on

    esc = html.escape
    problems = store.problems()
    title = title or f"dr_kernel report: {store.path}"
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(title)}</title>",
             "<style>body{font-family:sans-serif;margin:2em;max-width:80em}table{border-collapse:collapse;"
             "margin:1em 0}td,th{border:1px solid #ccc;padding:.25em .5em;font-size:.9em;text-align:left}"
             "th{background:#f3f3f3}.num{text-align:right}figure{display:inline-block;margin:.5em}"
             "code{font-size:.85em}</style></head><body>",
             f"<h1>{esc(title)}</h1>",
             f"<p id='summary'>{len(problems)} problems, {store.count()} measurements; dr_kernel {esc(__version__)}, "
             f"written {datetime.datetime.now().isoformat(timespec='seconds')}.</p>"]
    if not problems:
        parts.append("<p id='empty'>The store holds no measurement yet: tune a kernel (dr-kernel tune, "
                     "@optimize) and write the report again.</p>")
    rows_of = {problem_key(p): store.rows(p) for p in problems}
    parts.append("<h2>Problems</h2><table id='problems'><tr><th>kernel family</th><th>shape</th><th>dtype</th>"
                 "<th>device</th><th class='num'>measured</th><th>statuses</th><th class='num'>best ms</th>"
                 "<th>best config</th></tr>")
    for p in problems:
        rows = rows_of[problem_key(p)]
        statuses = collections.Counter(m["status"] for _, m in rows)
        ok = [(m["ms"], c) for c, m in rows if m["status"] == "ok"]
        best_ms, best = min(ok, key=lambda t: t[0]) if ok else (None, None)
        shape = " ".join(f"{k}={v}" for k, v in p["shape"].items())
        parts.append(f"<tr><td>{esc(p['family'])}</td><td>{esc(shape)}</td><td>{esc(p['dtype'] or 'fp16')}</td>"
                     f"<td>{esc(p['device'] or '?')}</td><td class='num'>{len(rows)}</td>"
                     f"<td>{esc(', '.join(f'{n} {s}' for s, n in sorted(statuses.items())))}</td>"
                     f"<td class='num'>{f'{best_ms:.4f}' if best_ms is not None else '-'}</td>"
                     f"<td><code>{esc(json.dumps(best)) if best else 'nothing ran'}</code></td></tr>")
    parts.append("</table>")

    profiled = [(p, c, m) for p in problems for c, m in rows_of[problem_key(p)] if m.get("counters")]
    if profiled:
        parts.append(_counters_table(profiled, esc))

    if problems:
        parts.append("<h2>Tuning curves</h2><div id='curves'>")
        for p in problems:
            rows = rows_of[problem_key(p)]
            shape = " ".join(f"{k}={v}" for k, v in p["shape"].items())
            label = f"{p['family']} {shape} {p['dtype'] or ''}".strip()
            if any(m["status"] == "ok" for _, m in rows):
                parts.append(f"<figure>{_tuning_curve_svg(rows, label)}</figure>")
        parts.append("</div>")

    winners = store.hottest_winners(10_000)
    parts.append("<h2>Stored winners</h2>")
    if winners:
        parts.append("<table id='winners'><tr><th>kernel and key</th><th>config</th><th class='num'>ms</th>"
                     "<th class='num'>evaluations</th><th class='num'>launches</th></tr>")
        for w in winners:
            ms = f"{w['ms']:.4f}" if w.get("ms") is not None and math.isfinite(w["ms"]) else "-"
            parts.append(f"<tr><td>{esc(w.get('label') or w['key'])}</td><td><code>{esc(json.dumps(w['config']))}"
                         f"</code></td><td class='num'>{ms}</td><td class='num'>{w['evaluations']}</td>"
                         f"<td class='num'>{w['launches']}</td></tr>")
        parts.append("</table>")
    else:
        parts.append("<p>None: winners are stored by @optimize, dr_kernel.autotune and the drop-in.</p>")

    tables = [t for t in store.export_tables()
              if sum(m["status"] == "ok" for _, m in t.rows()) >= MIN_REPLAY_ROWS and math.isfinite(t.oracle_ms)]
    parts.append("<h2>Search strategies replayed over the measured configs</h2>")
    if tables:
        trained_on = shipped_agent_trained_on()
        curves, notes = {}, []
        for name in REPLAY_STRATEGIES:
            replayed = tables
            if name == "ppo":
                replayed = [t for t in tables if trained_on is not None and problem_key(t.problem) not in trained_on]
                if len(replayed) < len(tables):
                    notes.append(f"ppo is left out on {len(tables) - len(replayed)} of {len(tables)} problems: the "
                                 "shipped agent was trained on them, so its replay there is no result.")
            if replayed:
                report = _core.replay(replayed, name, replay_budget, replay_repeats, 1.05, 0, {})
                curves[name] = report.curves
        buffer = io.BytesIO()
        plot_replay(curves, buffer, 1.05, fmt="svg")
        text = buffer.getvalue().decode()
        parts.append(f"<p>{len(tables)} problems with at least {MIN_REPLAY_ROWS} measured configs; each strategy "
                     f"searches only those configs, {replay_repeats} runs of {replay_budget} evaluations. "
                     f"{esc(' '.join(notes))}</p><figure id='strategies'>{_inline(text)}</figure>")
    else:
        parts.append(f"<p>No problem has {MIN_REPLAY_ROWS} measured configs yet (a sweep records them all: "
                     "dr-kernel sweep).</p>")
    parts.append("</body></html>")
    return "\n".join(parts)
