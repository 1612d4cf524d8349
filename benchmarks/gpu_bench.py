"""GPU benchmark: dr_kernel's tuning against triton.autotune and torch, and the cost of a launch.

For each problem it measures
  (a) dr_kernel: the tuning session @optimize runs (compile pool, static refusals, one
      measurement per binary, measuring worker), on the built-in kernel's whole space with
      --evals evaluations (50) and --strategy (anneal): the tuned kernel's time and the tuning's
      wall time;
  (b) triton.autotune over a short hand-picked list (below, with sources): the tuned kernel's time
      and the wall time of the first call, which is when triton.autotune tunes;
  (c) the framework operator (cuBLAS through torch.matmul, torch.softmax, torch's
      scaled_dot_product_attention);
and once, on a tiny softmax, (d) the microseconds one launch takes through @optimize (stored
winner), through triton.autotune (cached winner) and through the bare @triton.jit kernel.

All kernel times in the summary are re-measured with one method, triton.testing.do_bench (L2
cleared before each launch, median), in turns (ROUNDS rounds, each contender once per round, the
median kept), so that the three columns compare like with like; the times
each tuner saw while tuning are kept in the result files too. Each tuner starts from an empty
Triton cache of its own, so neither profits from the other's compiles.

Results go to one JSON file per problem under --out, written when the problem is done; a problem
whose file exists is skipped, so an interrupted run (or one stopped by --deadline) resumes where it
stopped. Every measurement of the tuning sessions also goes to --out/results.db (dr-kernel db).

Run from the repository root on the GPU machine (dr_kernel need not be installed; its _core
extension must be built in python/dr_kernel):

    PYTHONPATH=python python3 benchmarks/gpu_bench.py --out $OUT
    PYTHONPATH=python python3 benchmarks/gpu_bench.py --out $OUT --problems matmul-4096,softmax-4096
    PYTHONPATH=python python3 benchmarks/gpu_bench.py --out $OUT --strategy ppo
    PYTHONPATH=python python3 benchmarks/gpu_bench.py --list
    PYTHONPATH=python python3 benchmarks/gpu_bench.py --smoke --out /tmp/smoke   # CPU check, no GPU
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if importlib.util.find_spec("dr_kernel") is None:
    # Not installed and PYTHONPATH=python forgotten: use the repository's package (its _core built
    # in place). The worker processes inherit this path.
    sys.path.insert(0, str(ROOT / "python"))

ROUNDS = 4  # Turns of the closing timings: each contender timed once per turn, the median kept.

# name → (built-in kernel, shape). The shapes of the recorded H200 tables, plus an odd N (no tile
# divides it, and its strides are not multiples of 16, so loads cannot be vectorised as widely).
PROBLEMS = {
    "matmul-4096": ("matmul", {"M": 4096, "N": 4096, "K": 4096}),
    "matmul-8192x2048x1024": ("matmul", {"M": 8192, "N": 2048, "K": 1024}),
    "matmul-16x4096x4096": ("matmul", {"M": 16, "N": 4096, "K": 4096}),
    "matmul-4096x4095x4096": ("matmul", {"M": 4096, "N": 4095, "K": 4096}),
    "softmax-4096": ("softmax", {"rows": 4096, "cols": 4096}),
    "attention-4x32x4096x64": ("attention", {"Z": 4, "H": 32, "N_CTX": 4096, "HEAD_DIM": 64, "CAUSAL": False}),
    "attention-4x32x4096x64-causal": ("attention", {"Z": 4, "H": 32, "N_CTX": 4096, "HEAD_DIM": 64,
                                                    "CAUSAL": True}),
    # Shapes no recorded table holds (issue 10): skinny, deep-K and odd matmuls, a vocabulary-wide
    # softmax whose row no power of two divides, and a long causal attention with wide heads.
    "matmul-8x8192x8192": ("matmul", {"M": 8, "N": 8192, "K": 8192}),
    "matmul-512x512x32768": ("matmul", {"M": 512, "N": 512, "K": 32768}),
    "matmul-3000x5000x1000": ("matmul", {"M": 3000, "N": 5000, "K": 1000}),
    "softmax-1000x50257": ("softmax", {"rows": 1000, "cols": 50257}),
    "attention-1x8x16384x128-causal": ("attention", {"Z": 1, "H": 8, "N_CTX": 16384, "HEAD_DIM": 128,
                                                     "CAUSAL": True}),
}
LAUNCH = "launch-overhead"  # The launch microbenchmark, selectable like a problem.
QUICK = ["matmul-4096", "softmax-4096", "attention-4x32x4096x64", LAUNCH]

# --smoke runs the whole flow on the CPU in Triton's interpreter, on tiny problems and a tiny space:
# its times mean nothing; it shows that the script runs before it costs GPU time.
SMOKE_SHAPES = {"matmul": {"M": 40, "N": 33, "K": 64}, "softmax": {"rows": 3, "cols": 300},
                "attention": {"Z": 1, "H": 2, "N_CTX": 64, "HEAD_DIM": 16, "CAUSAL": True}}
SMOKE = {"on": False, "device": "cuda"}


# ----- (b) the hand-picked lists triton.autotune gets ------------------------------------------------

def autotune_configs(family: str, shape: dict) -> list[dict]:
    """Returns the configs triton.autotune tunes over, as dicts of our kernels' parameter names.

    matmul: the eight fp16 configs of get_cuda_autotune_config() in Triton's matmul tutorial,
        python/tutorials/03-matrix-multiplication.py (triton-lang/triton, e.g. commit 7649d87c),
        the configs before its "Good config for fp8 inputs" entries. Its kernel is ours (same
        grouped order, wrap-around offsets, K masks); only BLOCK_SIZE_M → BLOCK_M etc. differ.
    attention: the list of Triton's fused-attention tutorial, python/tutorials/06-fused-attention.py
        (commit dc6ee3ed): BLOCK_M {64, 128} × BLOCK_N {32, 64} × num_stages {3, 4, 7} ×
        num_warps {4, 8}, less the configs its keep() drops (8 warps with BLOCK_M·BLOCK_N below
        128·128): twelve configs, all with 4 warps.
    softmax: Triton's softmax tutorial (python/tutorials/02-fused-softmax.py) does not autotune; it
        takes BLOCK = next power of two ≥ the row, 8 warps, 2 stages. The list is that choice and
        the neighbours a user would try by hand: BLOCK {row/4, row/2, row} × num_warps {4, 8, 16},
        num_stages 2: nine configs.
    """
    if family == "matmul":
        tiles = [(128, 256, 64, 3, 8), (64, 256, 32, 4, 4), (128, 128, 32, 4, 4), (128, 64, 32, 4, 4),
                 (64, 128, 32, 4, 4), (128, 32, 32, 4, 4), (64, 32, 32, 5, 2), (32, 64, 32, 5, 2)]
        return [{"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8, "num_stages": s, "num_warps": w}
                for m, n, k, s, w in tiles]
    if family == "attention":
        configs = [{"BLOCK_M": bm, "BLOCK_N": bn, "num_stages": s, "num_warps": w}
                   for bm in (64, 128) for bn in (32, 64) for s in (3, 4, 7) for w in (4, 8)]
        return [c for c in configs if not (c["BLOCK_M"] * c["BLOCK_N"] < 128 * 128 and c["num_warps"] == 8)]
    if family == "softmax":
        row = 1 << max(0, shape["cols"] - 1).bit_length()
        return [{"BLOCK": b, "num_warps": w, "num_stages": 2} for b in (row // 4, row // 2, row) for w in (4, 8, 16)]
    raise ValueError(f"no hand-picked list for {family}")


def autotuned_launcher(kernel, configs: list[dict], do_bench=None):
    """Returns launch(inputs) for triton.autotune(configs) over the built-in kernel's function,
    with the grid each family's launcher computes from the config's block sizes."""
    import triton
    from dr_kernel.space import to_triton_config

    key = {"matmul": ["M", "N", "K"], "softmax": ["n_cols"], "attention": ["N_CTX", "HEAD_DIM"]}[kernel.family]
    # A JITFunction of its own: the built-in kernel's keeps the binaries of earlier problems in memory
    # (the same specialisation serves every 16-aligned matmul), and autotune would start warm.
    fn = triton.jit(kernel.fn.fn) if isinstance(kernel.fn, triton.runtime.JITFunction) else kernel.fn
    tuned = triton.autotune(configs=[to_triton_config(c) for c in configs], key=key, do_bench=do_bench)(fn)
    cdiv = triton.cdiv
    if kernel.family == "matmul":
        def launch(i):
            a, b, c = i["a"], i["b"], i["c"]
            (M, K), N = a.shape, b.shape[1]
            grid = lambda meta: (cdiv(M, meta["BLOCK_M"]) * cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
            tuned[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    elif kernel.family == "softmax":
        def launch(i):
            x, y = i["x"], i["y"]
            tuned[(x.shape[0],)](x, y, x.shape[1], x.stride(0))
    else:
        def launch(i):
            q, k, v, o = i["q"], i["k"], i["v"], i["o"]
            Z, H, N, D = q.shape
            grid = lambda meta: (cdiv(N, meta["BLOCK_M"]), Z * H)  # noqa: E731
            tuned[grid](q, k, v, o, i["sm_scale"], q.stride(0), q.stride(1), q.stride(2), H, N,
                        HEAD_DIM=D, CAUSAL=i["causal"])
    return tuned, launch


# ----- measuring -------------------------------------------------------------------------------------

def bench_ms(fn, quick: bool) -> float:
    """Median ms of fn with Triton's do_bench (it clears the L2 before every launch)."""
    import triton

    if SMOKE["on"]:
        return cpu_bench(fn)
    return float(triton.testing.do_bench(fn, warmup=25, rep=50 if quick else 60, return_mode="median"))


def cpu_bench(fn, reps: int = 2) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[len(times) // 2]


def synchronize() -> None:
    import torch

    if not SMOKE["on"]:
        torch.cuda.synchronize()


def relative_error(out, ref) -> float:
    return float((out.float() - ref.float()).norm() / ref.float().norm())


def use_cache(root: Path, *parts: str) -> None:
    """Points Triton (and the worker processes started after this) at an empty cache of its own,
    emptied first, so that a problem run again after an interruption also starts cold."""
    folder = root.joinpath(*parts)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    os.environ["TRITON_CACHE_DIR"] = str(folder)


def run_problem(name: str, args, store) -> dict:
    import torch
    import triton
    from dr_kernel import kernels
    from dr_kernel.analysis import H200, device_limits, throughput
    from dr_kernel.session import tune_builtin
    from dr_kernel.space import make_space

    family, shape = PROBLEMS[name]
    kernel = kernels.get(family)
    smoke, device = SMOKE["on"], SMOKE["device"]
    if smoke:
        shape = SMOKE_SHAPES[family]
    limits = H200 if smoke else device_limits(0)
    result = {"problem": name, "kernel": family, "shape": shape, "dtype": "fp16",
              "device": "cpu (Triton interpreter)" if smoke else torch.cuda.get_device_name(0),
              "triton": triton.__version__, "torch": torch.__version__}
    evals = args.evals
    # A program's first @optimize decoration starts a spare measuring process (torch and Triton
    # imported while the program goes on): here at the problem's start, so that triton.autotune's
    # run below stands for the program's own work between its imports and its first call. The
    # previous problem's measuring process is stopped first: no problem inherits a warm one.
    prestarted = None
    if not args.in_process and not args.no_prestart and not smoke:
        from dr_kernel import measure

        measure._stop_parked()
        prestarted = time.perf_counter() if measure.prestart() else None

    # (b) first, in this process, before anything here has launched the kernel: triton.autotune
    # tunes on the first call, compiling each config in turn.
    inputs = kernel.make_inputs(shape, "fp16", device, seed=0)
    launch = None
    if not args.no_autotune:
        use_cache(args.cache, name, "autotune")
        configs = autotune_configs(family, shape)
        cpu_do_bench = (lambda fn, quantiles: [cpu_bench(fn, 1)] * len(quantiles)) if smoke else None
        tuned, launch = autotuned_launcher(kernel, configs, cpu_do_bench)
        synchronize()
        start = time.perf_counter()
        launch(inputs)
        synchronize()
        at_wall = time.perf_counter() - start
        at_best = dict(tuned.best_config.all_kwargs())
        result["autotune"] = {"configs": len(configs), "tuning_wall_s": at_wall, "best_config": at_best,
                              "relerr": relative_error(kernel.output(inputs), kernel.reference(inputs))}
        print(f"  triton.autotune: {len(configs)} configs in {at_wall:.1f} s", flush=True)

    # (a) the dr_kernel sessions, one per stop rule, each from a cold cache of its own.
    from dr_kernel import _core
    from dr_kernel.tuner import stop_options

    def strategy_defaults(strategy: str) -> dict:
        return {name: default for name, _, default in {s[0]: s for s in _core.strategies()}[strategy][2]}

    values, constraints = (({k: v[:2] for k, v in kernel.space.items()}, []) if smoke
                           else kernel.space_parts(shape, limits))
    space = make_space(values, constraints=constraints)
    sessions = {}
    for stop in args.stops.split(","):
        use_cache(args.cache, name, "dr_kernel" if stop == "auto" else f"dr_kernel_{stop}")
        options = {**stop_options(stop, args.strategy), **parse_options(args.option)}
        session = tune_builtin(kernel, shape, "fp16", strategy=args.strategy, max_evals=evals, seed=args.seed,
                               store=store, source=f"gpu_bench:{stop}", options=options,
                               compile_timeout_s=args.compile_timeout, interpret=smoke, space=space,
                               isolate=not args.in_process)
        sessions[stop] = session
        head_start = None
        if prestarted is not None:  # Only the first session can take the spare.
            head_start, prestarted = time.perf_counter() - session.wall_s - prestarted, None
        loads = [m["load_s"] for _, m, _ in session.history if m["status"] == "ok" and m["load_s"] == m["load_s"]]
        result["dr_kernel" if stop == "auto" else f"dr_kernel_{stop}"] = {
            "strategy": args.strategy, "stop": stop, "in_process": args.in_process, "max_evals": evals,
            # Every option of the strategy as this session ran it (defaults change between versions;
            # session_replay.py replays a session with the options it ran with): the defaults, then
            # what run_session gave the strategy (the options above, and the refits it sets by the
            # space's size).
            "options": {**strategy_defaults(args.strategy), **session.strategy_options},
            "options_as_run": True,
            # The space searched (the kernel's space for this problem on this GPU, which changes
            # between versions): session_replay.py searches it again.
            "space": {"values": values, "constraints": constraints},
            "spare_head_start_s": head_start,
            "evaluations": session.evaluations,
            "measured": session.measured, "refused": session.refused, "copied": session.copied,
            "statuses": session.statuses(), "tuning_wall_s": session.wall_s, "split_s": session.split_s,
            "compile_readiness": session.compile_readiness,
            "tuning_charged_s": session.history[-1][2] if session.history else 0.0,
            "best_config": session.best_config, "best_ms_while_tuning": session.best_ms,
            "confirmed": session.confirmed_json(),
            # Mean first-launch seconds of the measured configs: near 0 when the measuring worker found
            # the compile pool's binaries in Triton's cache, seconds when it compiled again.
            "mean_load_s": sum(loads) / len(loads) if loads else None,
            "history": [{"config": c, "status": m["status"], "ms": m["ms"] if m["ms"] == m["ms"] else None,
                         "elapsed_s": e, "why": m.get("why")} for c, m, e in session.history],
            # The compile stage's answers to the strategy, in the order asked (None: not compiled
            # yet): session_replay.py gives them again, so that a session with `static` replays.
            "observed": [[c, None if a is None else {k: v for k, v in a.items() if v == v}]
                         for c, a in session.observed],
        }
        print(f"  dr_kernel {args.strategy} stop={stop}: {session.evaluations} evaluations in {session.wall_s:.1f} s "
              f"(measured {session.measured}, refused {session.refused}, copied {session.copied})", flush=True)

    # (c) and the winners, all timed alike: in turns (the median of ROUNDS rounds of all of them),
    # so that a drift of the clocks, or a busy host, weighs on each alike.
    flops, moved = kernel.flops(shape), kernel.bytes(shape, "fp16")
    peak = limits.peak_tflops("fp16", kernel.tensor_cores), limits.peak_gbps
    contenders = {"torch": lambda: kernel.framework(inputs)}
    if launch is not None:
        contenders["autotune"] = lambda: launch(inputs)
    for stop, session in sessions.items():
        if session.best_config is None:
            continue
        who = "dr_kernel" if stop == "auto" else f"dr_kernel_{stop}"
        best = session.best_config
        kernel.launch(inputs, best)
        synchronize()
        result[who]["relerr"] = relative_error(kernel.output(inputs), kernel.reference(inputs))
        contenders[who] = lambda best=best: kernel.launch(inputs, best)
    rounds = {who: [] for who in contenders}
    for _ in range(1 if smoke or args.quick else ROUNDS):
        for who, fn in contenders.items():
            rounds[who].append(bench_ms(fn, args.quick))
    timed = {who: statistics.median(ms) for who, ms in rounds.items()}
    result["timing_rounds_ms"] = rounds
    result["torch"] = {"name": kernel.reference_name}
    for who, ms in timed.items():
        result[who]["ms"] = ms
        result[who].update({k: v for k, v in throughput(flops, moved, ms, *peak).items()
                            if k in ("tflops", "gbps", "fraction_of_peak")})
    return result


def run_launch_overhead(args, store) -> dict:
    """µs per launch of a tiny softmax (4 rows × 256): the GPU work takes a few µs, so the wall
    time of many back-to-back calls is the launch path's own cost on the CPU."""
    import torch
    import triton
    from dr_kernel import optimize
    from dr_kernel.kernels.softmax import softmax_kernel
    from dr_kernel.space import config_dict, to_triton_config

    use_cache(args.cache, LAUNCH)
    calls = 20 if SMOKE["on"] else 2000 if args.quick else 20000
    x = torch.randn((4, 256), device=SMOKE["device"], dtype=torch.float16)
    y = torch.empty_like(x)
    space = {"BLOCK": [256], "num_warps": [1, 2], "num_stages": [1]}
    opt = optimize(max_evals=2, key=["n_cols"], space=space, strategy="exhaustive",
                   db=str(args.out / "results.db"))(softmax_kernel)
    opt[(4,)](x, y, 256, 256)  # Tunes (two configs) and stores the winner.
    winner = config_dict(opt.cache[next(iter(opt.cache))])
    do_bench = (lambda fn, quantiles: [cpu_bench(fn, 1)] * len(quantiles)) if SMOKE["on"] else None
    tuned = triton.autotune(configs=[to_triton_config({"BLOCK": 256, "num_warps": w, "num_stages": 1})
                                     for w in (1, 2)], key=["n_cols"], do_bench=do_bench)(softmax_kernel)
    # A fresh wrapper over the same store: its first call reads the stored winner (no tuning).
    again = optimize(max_evals=2, key=["n_cols"], space=space, strategy="exhaustive",
                     db=str(args.out / "results.db"))(softmax_kernel)

    paths = {
        "bare": lambda: softmax_kernel[(4,)](x, y, 256, 256, **winner),
        "triton.autotune": lambda: tuned[(4,)](x, y, 256, 256),
        "@optimize": lambda: again[(4,)](x, y, 256, 256),
    }
    result = {"problem": LAUNCH, "calls": calls, "winner": winner, "us_per_call": {}}
    for name, call in paths.items():
        for _ in range(2 if SMOKE["on"] else 100):  # Compile, tune or find the winner; warm the path.
            call()
        synchronize()
        best = math.inf
        for _ in range(3):  # Best of three, to stay clear of one-off interruptions.
            start = time.perf_counter()
            for _ in range(calls):
                call()
            synchronize()
            best = min(best, (time.perf_counter() - start) / calls * 1e6)
        result["us_per_call"][name] = best
        print(f"  {name}: {best:.2f} µs per call", flush=True)
    result["optimize_evaluations_on_reuse"] = again.evaluations
    return result


# ----- the command line -------------------------------------------------------------------------------

def parse_problems(text: str | None, quick: bool) -> list[str]:
    """Returns the problems to run: the comma-separated names given, else all (or QUICK)."""
    everything = [*PROBLEMS, LAUNCH]
    if not text:
        return list(QUICK if quick else everything)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in everything]
    if unknown:
        raise ValueError(f"unknown problem {', '.join(unknown)}; choose from {', '.join(everything)}")
    return names


def parse_options(pairs: list[str]) -> dict[str, float]:
    options = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        options[key] = float(value)
    return options


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="folder for the result files (created; reused to resume)")
    p.add_argument("--problems", help="comma-separated problem names (default: all; see --list)")
    p.add_argument("--strategy", default="ppo", help="dr_kernel's strategy (default ppo)")
    p.add_argument("--option", action="append", default=[], metavar="NAME=VALUE", help="a strategy option")
    p.add_argument("--in-process", action="store_true",
                   help="measure dr_kernel's configs in this process, as triton.autotune does (no measuring "
                        "process to start; a config that crashes the GPU context ends the run)")
    p.add_argument("--no-prestart", action="store_true",
                   help="no spare measuring process started at each problem's start: the session starts its own")
    p.add_argument("--no-autotune", action="store_true",
                   help="skip triton.autotune's first call (its wall time is then absent from the results)")
    p.add_argument("--stops", default="auto",
                   help="comma-separated stop rules, one dr_kernel session each from a cold cache (default auto; "
                        "auto,budget also runs the whole budget, to compare the quality stopping keeps)")
    p.add_argument("--evals", type=int, default=None, help="dr_kernel's evaluations per problem (default 50; 20 quick)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compile-timeout", type=float, default=30.0,
                   help="seconds one dr_kernel compile may take (default 30; the largest matmul tiles make "
                        "ptxas spill for minutes, and a tuner cannot wait for them)")
    p.add_argument("--quick", action="store_true",
                   help="fewer problems (unless --problems), 20 evaluations, shorter timing")
    p.add_argument("--deadline", type=float, default=540.0,
                   help="start no new problem after this many seconds (default 540: fits a 10-minute call)")
    p.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "gpu_bench_triton_cache",
                   help="folder for the tuners' Triton caches, kept out of --out (default: in the temp folder)")
    p.add_argument("--list", action="store_true", help="list the problems and exit")
    p.add_argument("--smoke", action="store_true",
                   help="run the flow on the CPU in Triton's interpreter (tiny problems, meaningless times), "
                        "to check the script before spending GPU time")
    return p


def summary(out: Path) -> str:
    rows = []
    header = (f"{'problem':<31} {'dr_kernel':>9} {'autotune':>9} {'torch':>9} {'dr/at':>6} {'dr/torch':>8} "
              f"{'dr tune s':>9} {'at tune s':>9} {'evals (refused, copied)':>24} {'budget ms':>9} {'budget s':>8}")
    for name in PROBLEMS:
        path = out / f"{name}.json"
        if not path.exists():
            continue
        r = json.loads(path.read_text())
        autotune, full = r.get("autotune", {}), r.get("dr_kernel_budget", {})
        # A run with --stops budget alone has no stop=auto session: its columns show the budget one's.
        d = r.get("dr_kernel") or full
        dr, at, torch_ms = d.get("ms"), autotune.get("ms"), r["torch"]["ms"]
        fmt = lambda v: f"{v:9.4f}" if v is not None else f"{'-':>9}"  # noqa: E731
        ratio = lambda a, b: f"{a / b:6.2f}" if a and b else f"{'-':>6}"  # noqa: E731
        evals = f"{d['evaluations']} ({d['refused']}, {d['copied']})" if d else "-"
        rows.append(f"{name:<31} {fmt(dr)} {fmt(at)} {fmt(torch_ms)} {ratio(dr, at)} {ratio(dr, torch_ms):>8} "
                    f"{d.get('tuning_wall_s', float('nan')):9.1f} {autotune.get('tuning_wall_s', float('nan')):9.1f} "
                    f"{evals:>24} {fmt(full.get('ms'))} {full.get('tuning_wall_s', float('nan')):8.1f}")
    text = ["kernel ms (do_bench median, L2 cleared); dr/at and dr/torch < 1 mean dr_kernel's winner is faster; "
            "budget: the session with stop=budget, when run",
            header, "-" * len(header), *rows]
    launch = out / f"{LAUNCH}.json"
    if launch.exists():
        us = json.loads(launch.read_text())["us_per_call"]
        text.append("launch overhead, µs per call: " + ", ".join(f"{k} {v:.2f}" for k, v in us.items()))
    return "\n".join(text)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    # `timeout` stops a run with SIGTERM: unwind as for Ctrl-C, so that the compile and measuring
    # workers are stopped; finished problems are already in their files.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        problems = parse_problems(args.problems, args.quick)
    except ValueError as e:
        print(f"gpu_bench: {e}", file=sys.stderr)
        return 2
    if args.list:
        for name in [*PROBLEMS, LAUNCH]:
            family, shape = PROBLEMS.get(name, ("softmax", {"rows": 4, "cols": 256}))
            print(f"{name}: {family} {' '.join(f'{k}={v}' for k, v in shape.items())}")
        return 0
    if args.out is None:
        print("gpu_bench: give --out FOLDER for the results", file=sys.stderr)
        return 2
    if args.smoke:
        # Before anything imports the kernels: triton.jit decides at decoration time.
        os.environ["TRITON_INTERPRET"] = "1"
        SMOKE.update(on=True, device="cpu")
    import torch

    if not args.smoke and not torch.cuda.is_available():
        print("gpu_bench: no CUDA GPU is visible; this benchmark times kernels on a GPU "
              "(--smoke runs its flow on the CPU)", file=sys.stderr)
        return 2
    args.evals = args.evals or (3 if args.smoke else 20 if args.quick else 50)
    args.out.mkdir(parents=True, exist_ok=True)
    from dr_kernel.store import open_store

    store = open_store(args.out / "results.db")
    started = time.perf_counter()
    for name in problems:
        path = args.out / f"{name}.json"
        if path.exists():
            print(f"{name}: done before, skipped ({path})", flush=True)
            continue
        if time.perf_counter() - started > args.deadline:
            print(f"{name}: not started, past --deadline {args.deadline:g} s; run again to go on", flush=True)
            continue
        print(f"{name}:", flush=True)
        t0 = time.perf_counter()
        result = run_launch_overhead(args, store) if name == LAUNCH else run_problem(name, args, store)
        result["bench_s"] = time.perf_counter() - t0
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result, indent=1, default=str))
        tmp.replace(path)  # Whole or absent: a killed run never leaves half a result.
        print(f"  done in {result['bench_s']:.0f} s", flush=True)
    print(summary(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
