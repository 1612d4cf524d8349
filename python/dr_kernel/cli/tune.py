"""`dr-kernel tune`: one problem of a built-in kernel, tuned on the GPU or in the interpreter."""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from ..progress import Progress
from . import common
from .common import (
    BUDGET,
    INTERPRETER_NOTE,
    MAX,
    NO_GPU,
    SEED,
    UsageError,
    _builtin,
    _check_range,
    _check_size,
    _core_device_name,
    _kernel_arguments,
    _limits,
    _parse_options,
    _parse_shape,
    _parse_space,
    _strategy_names,
)


def cmd_tune(args: argparse.Namespace) -> int:
    from ..analysis import throughput
    from ..kernels import dtype_name
    from ..measure import MeasureSettings, WorkerError, time_framework
    from ..session import tune_builtin
    from ..store import open_store

    kernel = _builtin(args.kernel)
    shape = _parse_shape(kernel, args.shape)
    dtype = dtype_name(args.precision)
    strategy = _strategy_names(args.strategy)
    if len(strategy) != 1:
        raise UsageError("--strategy takes one strategy name")
    from ..tuner import stop_options

    options = {**stop_options(args.stop, strategy[0]), **_parse_options(args.option)}
    space = _parse_space(kernel, args.space)
    _check_range(args, budget=BUDGET, reps=(1, 10**6), seed=SEED, confirm=(0, 10**6), confirm_within=(0.0, MAX),
                 workers=(1, 4096))
    if not args.seconds > 0:
        raise UsageError(f"--seconds {args.seconds}: give a positive number of seconds (default: no limit)")
    gpu = common._gpu_available()
    if not gpu and not args.interpret:
        raise UsageError(NO_GPU)
    _check_size(kernel, shape, dtype, args.interpret)
    if args.profile:
        from ..profiling import ProfileError, find_ncu

        if args.interpret:
            raise UsageError("--profile reads the counters of launches on a GPU: leave out --interpret")
        try:
            find_ncu()
        except ProfileError as error:
            raise UsageError(str(error)) from None
    interpret = args.interpret
    if space is None:  # The kernel's space for this problem, on this GPU (the H200's in the interpreter).
        from ..analysis import device_limits

        space = kernel.space_for(shape, None if interpret else device_limits(0), interpret)
    store = open_store(args.db)
    progress = Progress(min(args.budget, space.count_valid()), f"tune {kernel.name}",
                        enabled=False if args.json else None)

    def on_trial(config: dict, m: dict, elapsed: float) -> None:
        progress.trial(m)

    settings = MeasureSettings(reps=args.reps, confirm=args.confirm, confirm_within=args.confirm_within)
    try:
        result = tune_builtin(kernel, shape, dtype, strategy=strategy[0], max_evals=args.budget,
                              max_seconds=args.seconds, seed=args.seed, options=options, interpret=interpret,
                              store=store, source="tune", workers=args.workers, compile_timeout_s=args.timeout,
                              settings=settings, on_trial=on_trial, space=space, resume=not args.fresh,
                              isolate=not args.in_process)
    except ValueError as e:
        raise UsageError(str(e)) from None
    except WorkerError as e:
        raise UsageError(f"the measuring worker failed: {e}") from None
    finally:
        progress.close()
    out = {"kernel": kernel.name, "shape": shape, "precision": dtype, "strategy": strategy[0],
           "device": "cpu (Triton interpreter)" if interpret else _core_device_name(),
           "interpreted": interpret, "evaluations": result.evaluations, "measured": result.measured,
           "refused": result.refused, "copied": result.copied, "statuses": result.statuses(),
           "tuning_s": result.history[-1][2] if result.history else 0.0, "wall_s": result.wall_s,
           "split_s": result.split_s, "compile_readiness": result.compile_readiness, "in_process": args.in_process,
           "best_config": result.best_config, "best_ms": result.best_ms if result.best_config else None,
           "confirmed": result.confirmed_json(),
           "db": str(store.path)}
    if interpret:
        out["note"] = INTERPRETER_NOTE
    if result.best_config is not None:
        if not interpret:  # A CPU's times say nothing about the GPU's peaks.
            limits = _limits(True)
            out.update(throughput(kernel.flops(shape), kernel.bytes(shape, dtype), result.best_ms,
                                  limits.peak_tflops(dtype, kernel.tensor_cores), limits.peak_gbps))
        ref_ms = time_framework(kernel, shape, dtype, "cpu" if interpret else "cuda:0", reps=args.reps)
        out["reference"] = {"name": kernel.reference_name, "ms": ref_ms, "speedup": ref_ms / result.best_ms}
        if args.profile:
            out["counters"] = profile_tuning(kernel, shape, dtype, space, result, store, timeout_s=args.timeout)
    if args.json:
        out["history"] = [{"config": c, **{k: v for k, v in m.items() if v is not None and v == v and v != -1
                                           and v != ""}, "elapsed_s": e} for c, m, e in result.history]
        print(json.dumps(out, default=str))
        return 0 if result.best_config is not None else 1
    _print_tuning(out)
    return 0 if result.best_config is not None else 1

def profile_tuning(kernel, shape: dict, dtype: str, space, result, store, *, timeout_s: float = 120.0,
                   ncu: str | None = None) -> dict:
    """--profile: Nsight Compute's counters of the winner and of the problem's probe (the space's
    middle config, profiling.probe_config: what the cost model's counter features describe a
    problem by) in one ncu process, each stored with its measurement in the results store (the
    probe's marked `"probe": 0.5`, as in the recorded tables). A probe the session did not measure
    has no measurement to store its counters with: it is reported, not stored."""
    from ..profiling import ProfileError, probe_config, profile_many, stored_counters
    from ..session import _storable, builtin_problem, device_name

    probe = probe_config(space.configs())
    roles = [("winner", result.best_config)] + ([("probe", probe)] if probe != result.best_config else [])
    try:
        read = profile_many([{"kernel": kernel.name, "shape": shape, "dtype": dtype, "config": config}
                             for _, config in roles], ncu=ncu, timeout_s=timeout_s * len(roles))
    except ProfileError as error:
        read = [{"error": str(error)}] * len(roles)
    measured = {json.dumps(c, sort_keys=True): m for c, m, _ in result.history if m.get("status") == "ok"}
    problem = builtin_problem(kernel, shape, dtype, device_name(False))
    out: dict = {}
    for (role, config), counters in zip(roles, read, strict=True):
        out[role] = {"config": config, **counters}
        m = measured.get(json.dumps(config, sort_keys=True))
        if "error" in counters or m is None:
            continue
        row = _storable(m)
        row["counters"] = {**({"probe": 0.5} if config == probe else {}), **stored_counters(counters)}
        store.add(problem, config, row, "tune --profile")
    if probe == result.best_config:
        out["probe"] = out["winner"]
    return out


def _print_tuning(o: dict) -> None:
    shape = " ".join(f"{k}={v}" for k, v in o["shape"].items())
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(o["statuses"].items()))
    print(f"tuned {o['kernel']} {shape} {o['precision']} on {o['device']} with {o['strategy']}: "
          f"{o['evaluations']} evaluations ({statuses})")
    print(f"  measured {o['measured']}, refused before launch {o['refused']}, same binary as another {o['copied']}; "
          f"wall {o['wall_s']:.1f} s, charged {o['tuning_s']:.1f} s (compile + measure per config)")
    print("  wall time: " + ", ".join(f"{part} {seconds:.1f} s" for part, seconds in o["split_s"].items()))
    if o.get("compile_readiness"):
        r = o["compile_readiness"]
        print(f"  compiles asked for: {r['ready']} ready (guessed in time), {r['compiling']} still compiling, "
              f"{r['cold']} not guessed")
    if o["best_config"] is None:
        print("  no config ran correctly")
    else:
        print(f"  best: {json.dumps(o['best_config'])}  {o['best_ms']:.4f} ms")
        if o["confirmed"]:
            print(f"  the {len(o['confirmed'])} best configs timed again, median of the rounds:")
            for c in o["confirmed"]:
                done = [t for t in c["ms"] if t is not None]
                median = f"{statistics.median(done):.4f} ms" if len(done) == len(c["ms"]) else "failed a round"
                print(f"    {json.dumps(c['config'])}  {median}")
        if o.get("tflops") is not None:
            frac = o.get("fraction_of_peak")
            print(f"  {o['tflops']:.1f} TFLOP/s, {o['gbps']:.0f} GB/s"
                  + (f", {frac:.0%} of peak ({o['bound']}-bound)" if frac is not None else ""))
        if o.get("reference"):
            print(f"  {o['reference']['name']}: {o['reference']['ms']:.4f} ms "
                  f"(the tuned kernel runs at {o['reference']['speedup']:.2f}x its speed)")
    if o.get("counters"):
        from ..profiling import format_counters

        for role, c in o["counters"].items():
            if role == "probe" and c is o["counters"].get("winner"):
                continue
            print(f"  {role} {json.dumps(c['config'])}: {format_counters(c)}")
    if o.get("note"):
        print(f"  note: {o['note']}")
    print(f"  every result is in {o['db']}")


def add_parser(sub) -> None:
    p = sub.add_parser("tune", help="tune a built-in kernel on one problem (GPU, or --interpret on the CPU)")
    _kernel_arguments(p)
    p.add_argument("--strategy", default="ppo", help="the search strategy (default ppo, the pre-trained agent)")
    p.add_argument("--budget", type=int, default=100, help="evaluations (default 100)")
    p.add_argument("--seconds", type=float, default=math.inf,
                   help="tuning seconds, counted as compile + measuring seconds per config (default: no limit)")
    p.add_argument("--seed", type=int, default=0, help="seed of the strategy (default 0)")
    p.add_argument("--option", action="append", default=[], metavar="NAME=VALUE", help="a strategy option")
    p.add_argument("--space", help="JSON object of value lists replacing the kernel's space")
    p.add_argument("--db", type=Path, help="the results store (default: $DR_KERNEL_DB or the per-user cache)")
    p.add_argument("--workers", type=int, help="compile processes (default: one per CPU core)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds one compile may take (default 120)")
    p.add_argument("--reps", type=int, default=20,
                   help="timed launches per config at most (default 20; fewer once a config is 1.3x slower than "
                        "the best, or its launches add up to 50 ms)")
    p.add_argument("--confirm", type=int, default=3,
                   help="time the best N configs (within 10%% of the best) 3 more times each at the end and keep the "
                        "lowest median (default 3; 0: keep the fastest first measurement)")
    p.add_argument("--confirm-within", type=float, default=0.10,
                   help="how close to the best a config must be to be timed again, as a fraction (default 0.10; "
                        "wider on a noisy machine)")
    p.add_argument("--interpret", action="store_true",
                   help="measure in Triton's interpreter on the CPU (small shapes; not GPU times)")
    p.add_argument("--stop", choices=["auto", "budget"], default="auto",
                   help="auto (default): the agent ends the search once no untried config is likely (20%%) to be "
                        "5%% faster and no neighbour of the best is faster, or once the best gained under 2%% in 24 "
                        "measurements; budget: use the whole budget")
    p.add_argument("--fresh", action="store_true",
                   help="measure every config anew; by default the configs the store holds for this problem (an "
                        "earlier or interrupted run) count as measured and are not measured again")
    p.add_argument("--in-process", action="store_true",
                   help="measure in this process, as triton.autotune does: no measuring process to start (seconds "
                        "of a short search), but a config that crashes the GPU context ends the run")
    p.add_argument("--profile", action="store_true",
                   help="after tuning, read Nsight Compute's counters (ncu) of the winner and of the problem's probe "
                        "config, and store them with their measurements")
    p.add_argument("--json", action="store_true", help="print one JSON object, with every evaluation")
    p.set_defaults(func=cmd_tune)
