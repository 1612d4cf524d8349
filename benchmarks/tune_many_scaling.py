"""tune-many's wall time against its number of measuring workers, on a local multi-node Ray cluster
(ray.cluster_utils.Cluster: one node per worker, one CPU and one nominal GPU each, so one measuring
actor per node) and on the local process pool, in Triton's interpreter.

    python benchmarks/tune_many_scaling.py --out benchmarks/results/tune-many-scaling

The work list is collected once (`dr-kernel collect`) from benchmarks/tune_many_block.py's
transformer block, forward and backward, at toy sizes for two token counts. Each run tunes all of
it from an empty store and an empty Triton cache (so each compiles as a first tuning would), and
its wall time counts from the call to the last result: the workers' start (importing torch and
Triton), the compiles (for the H200, Ray tasks on the nodes' CPUs, or each pool worker's share
of the cores) and the interpreter's measurements. Interpreter times on a small machine say how
the work spreads, not what a GPU costs: on 2 cores, more than 2 workers only share them.
Writes tune_many_scaling.json and tune_many_scaling.png.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def collect(out: Path, tokens: str) -> Path:
    work = out / "work.jsonl"
    if not work.exists():
        env = dict(os.environ, TRITON_INTERPRET="1", TUNE_MANY_BLOCK_MODE="tuned",
                   DR_KERNEL_DB=str(out / "collect.db"), PYTHONPATH=str(HERE))
        subprocess.run([sys.executable, "-m", "dr_kernel", "collect", "-o", str(work), "--", sys.executable,
                        str(HERE / "tune_many_gpu.py"), "--run", "tuned", "--interpret", "--tokens", tokens,
                        "--dim", "64", "--heads", "2", "--ffn", "96", "--vocab", "200", "--steps", "1",
                        "--warmup", "0"], env=env, check=True, capture_output=True)
    return work


def one_run(work: Path, backend: str, workers: int, budget: int) -> dict:
    import ray
    from dr_kernel.tune_many import tune_many

    with tempfile.TemporaryDirectory(prefix="dr_kernel-scaling-") as folder:
        os.environ["TRITON_CACHE_DIR"] = str(Path(folder) / "triton")  # Every worker starts with none.
        cluster = None
        if backend == "ray":
            from ray.cluster_utils import Cluster

            cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
            for _ in range(workers):
                cluster.add_node(num_cpus=1, num_gpus=1)
            ray.init(address=cluster.address, log_to_driver=False)
            cluster.wait_for_nodes()
        try:
            started = time.perf_counter()
            report = tune_many(work, db=Path(folder) / "results.db", backend=backend, measurers=workers,
                               budget=budget)
            wall = time.perf_counter() - started
        finally:
            if cluster is not None:
                ray.shutdown()
                cluster.shutdown()
    assert not report.failed, report.failed
    return {"backend": backend, "workers": workers, "wall_s": wall, "keys": len(report.tuned), "rows": report.rows,
            "requeued": report.engine.requeued, "by_host": dict(report.engine.hosts)}


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for backend, marker in (("ray", "o"), ("pool", "s")):
        points = sorted((r["workers"], r["wall_s"]) for r in runs if r["backend"] == backend)
        if points:
            ax.plot(*zip(*points, strict=True), marker=marker, label=f"{backend} (measured)")
            one = points[0][1] * points[0][0]
            ax.plot([w for w, _ in points], [one / w for w, _ in points], linestyle=":", color="grey")
    ax.set_xlabel("measuring workers")
    ax.set_ylabel("wall time (s)")
    ax.set_title(f"tune-many, {runs[0]['keys']} keys, Triton interpreter, {os.cpu_count()} cores", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, title="dotted: 1/workers", title_fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--workers", default="1,2,3,4", help="worker counts, comma-separated (default 1,2,3,4)")
    p.add_argument("--backends", default="ray,pool", help="ray, pool or both (default ray,pool)")
    p.add_argument("--budget", type=int, default=3, help="evaluations per key (default 3)")
    p.add_argument("--tokens", default="16,32", help="the block's token counts (default 16,32)")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    work = collect(args.out, args.tokens)
    runs = []
    for backend in args.backends.split(","):
        for workers in (int(w) for w in args.workers.split(",")):
            runs.append(one_run(work, backend, workers, args.budget))
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    entries = sum(1 for line in work.read_text().splitlines() if line.strip())
    result = {"entries": entries, "budget": args.budget, "cores": os.cpu_count(), "interpreted": True, "runs": runs}
    (args.out / "tune_many_scaling.json").write_text(json.dumps(result, indent=1))
    plot(runs, args.out / "tune_many_scaling.png")
    for r in runs:
        print(f"{r['backend']:>4} {r['workers']} workers: {r['wall_s']:6.1f} s ({r['keys']} keys, {r['rows']} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
