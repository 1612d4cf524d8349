"""Figures: replay curves as PNG."""

from __future__ import annotations

import math
from pathlib import Path


def plot_replay(curves: dict[str, list[tuple[dict, list[float]]]], path: Path | str, within: float) -> None:
    """Writes one panel per problem: median best-so-far / table's best against evaluations, one line
    per strategy. ``curves`` maps a strategy name to its (problem, median curve) pairs."""
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
    fig.suptitle("median over runs of best-so-far relative to the recorded optimum", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
