"""The ``dr-kernel`` command line."""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import bundled_tables


class UsageError(Exception):
    """A mistake in the command line or its inputs; printed as one line, exit status 2."""


def _parse_options(pairs: Sequence[str]) -> dict[str, float]:
    options = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        try:
            options[name] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name:
            raise UsageError(f"--option {pair!r}: write NAME=NUMBER, e.g. --option t0=0.2")
    return options


def _check_range(args: argparse.Namespace, **bounds: tuple[float, float]) -> None:
    """Raises one UsageError unless each named option (given, not None) lies in its (low, high) range;
    NaN and infinities lie in none. The option is named as on the command line."""
    for name, (low, high) in bounds.items():
        value = getattr(args, name)
        if value is not None and not low <= value <= high:
            span = f"at least {_shown(low)}" if high == MAX else f"from {_shown(low)} to {_shown(high)}"
            raise UsageError(f"--{name.replace('_', '-')} {value if isinstance(value, int) else _shown(value)}: "
                             f"give a number {span}")


def _shown(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else f"{value:,}"


MAX = sys.float_info.max  # The upper bound of _check_range for "any finite number".
SEED = (0, 2**63 - 1)  # Seeds are unsigned 64-bit numbers in the engine; runs use seed, seed + 1, ...
BUDGET = (1, 100_000)  # Evaluations: beyond any recorded space, and what replay's curves can hold.
MIN_TRAINING_ROWS = 200  # Fewer measured rows than this train a cost model and an agent on nothing.


def _read_tables(data: list[Path] | None) -> tuple[list[str], list]:
    """The paths and tables of --data (default: the bundled tables); a folder, a missing, empty or
    special file, or files without one recorded row are refused, each in one sentence."""
    from . import _core

    paths = data or bundled_tables()
    for p in paths:
        if p.is_dir():
            raise UsageError(f"--data {p} is a folder; give the tables in it, e.g. --data {p / '*.jsonl'}")
        problem = ("does not exist" if not p.exists() else "is not a regular file" if not p.is_file()
                   else "is empty" if p.stat().st_size == 0 else "")
        if problem:
            raise UsageError(f"--data {p} {problem}; give recorded tables (JSON lines, as dr-kernel sweep writes)")
    tables = _core.read_tables([str(p) for p in paths])
    if not tables:
        raise UsageError(f"--data {' '.join(map(str, paths))} holds no recorded rows; give tables as dr-kernel "
                         "sweep writes them")
    return [str(p) for p in paths], tables


def _label(problem: dict) -> str:
    return " ".join([problem["family"], *(f"{k}={v}" for k, v in problem["shape"].items()), problem["dtype"]]).strip()


def _strategy_names(text: str) -> list[str]:
    from . import _core

    available = [s[0] for s in _core.strategies()]
    names = available if text == "all" else [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if name not in available:
            raise UsageError(f"unknown strategy {name!r}; the available strategies are: {', '.join(available)}")
    return names


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def cmd_replay(args: argparse.Namespace) -> int:
    from . import POLICY_FILE, _core
    from .report import plot_replay

    def problem_key(problem: dict) -> str:
        return json.dumps({k: problem[k] for k in ("family", "shape", "dtype", "device")}, sort_keys=True)

    # `dr-kernel train` lists beside policy.bin the problems the agent was trained on (None: unknown).
    trained_on_file = POLICY_FILE.parent / "trained_on.json"
    trained_on = None
    if trained_on_file.exists():
        trained_on = {problem_key(p) for p in json.loads(trained_on_file.read_text())["problems"]}
    agent_strategies = ("ppo",)  # Strategies that use the trained agent.

    _check_range(args, budget=BUDGET, repeats=(1, 1000), within=(1.0, MAX), seed=SEED)
    _, tables = _read_tables(args.data)
    # A problem where nothing ran has no best to come near: replaying it would report success at once.
    unmeasured = [_label(t.problem) for t in tables if not math.isfinite(t.oracle_ms)]
    if unmeasured:
        tables = [t for t in tables if math.isfinite(t.oracle_ms)]
        if not tables:
            raise UsageError("no problem in --data has a config that ran correctly (an 'ok' row): nothing to replay")
        print(f"note: left out {len(unmeasured)} problem(s) where no config ran correctly: {'; '.join(unmeasured)}",
              file=sys.stderr)
    options = _parse_options(args.option)
    strategies = _strategy_names(args.strategy)
    if options and len(strategies) > 1:
        raise UsageError("--option applies to one strategy: name a single --strategy with it")

    # The agent is replayed only on tables it was not trained on: in-sample figures are no result.
    # With --holdout family it is trained anew for each family, on the others only.
    unseen = [t for t in tables if trained_on is None or problem_key(t.problem) not in trained_on]
    if args.holdout == "family":
        unseen = tables
    reports, held_back = {}, {}
    for name in strategies:
        replayed = unseen if name in agent_strategies else tables
        held_back[name] = len(tables) - len(replayed)
        if not replayed:
            continue
        if name in agent_strategies and args.holdout == "family":
            from .holdout import replay_held_out

            reports[name] = replay_held_out(replayed, name, args.budget, args.repeats, args.within, args.seed,
                                            options, progress=_say)
        else:
            reports[name] = _core.replay(replayed, name, args.budget, args.repeats, args.within, args.seed, options)
    if args.json:
        for name in strategies:
            if name in agent_strategies:
                out = json.loads(reports[name].to_json()) if name in reports else {"strategy": name, "problems": []}
                out["agent_training"] = ("leave-one-family-out" if args.holdout == "family" else
                                         "unknown" if trained_on is None else "none of these problems")
                out["in_sample_problems_left_out"] = held_back[name]
                print(json.dumps(out))
            else:
                print(reports[name].to_json())
    else:
        _print_replay(reports, args)
        for name in strategies:
            if name not in agent_strategies:
                continue
            if args.holdout == "family":
                print(f"\n{name}: each family's rows by an agent trained with the shipped recipe on the other "
                      "families' tables only (leave-one-family-out): kernels it has never seen, as a user's are")
            elif trained_on is None:
                print(f"\n{name}: the agent does not record what it was trained on ({trained_on_file.name} is "
                      "missing): its rows may be in-sample; leave-one-family-out figures are in benchmarks/agent.md")
            elif held_back[name] == len(tables):
                print(f"\n{name}: the shipped agent was trained on all {len(tables)} of these problems, so it is not "
                      "replayed on them (in-sample rows are no result); --holdout family replays it on each family "
                      "with an agent trained without that family")
            elif held_back[name]:
                print(f"\n{name}: shown only on problems the shipped agent was not trained on; {held_back[name]} of "
                      f"{len(tables)} are in its training data and left out (in-sample rows are no result). "
                      "Leave-one-family-out figures: benchmarks/agent.md")
    if args.plot and not reports:
        print("note: no strategy was replayed on any problem, so no plot was written", file=sys.stderr)
    elif args.plot:
        plot_replay({name: r.curves for name, r in reports.items()}, args.plot, args.within)
        if not args.json:
            print(f"\nplot: {args.plot}")
    return 0


def _say(text: str) -> None:
    print(text, file=sys.stderr)


def _print_replay(reports: dict, args: argparse.Namespace) -> None:
    checkpoints = [k for k in ("10", "20", "50", "100") if int(k) <= args.budget]
    print(
        f"replay: budget {args.budget} evaluations, {args.repeats} runs per problem, seed {args.seed}; "
        f"'evals' = median evaluations to within {args.within}x of the table's best (p25-p75), "
        f"{args.budget + 1} = never"
    )
    header = f"{'problem':<52} {'strategy':<11} {'evals':>16} " + " ".join(f"{'@' + k:>6}" for k in checkpoints)
    print(header + f" {'tune s':>8}")
    print("-" * (len(header) + 9))
    by_problem: dict[str, list] = {}
    for name, report in reports.items():
        for p, (problem, _) in zip(json.loads(report.to_json())["problems"], report.curves, strict=True):
            label = p["family"] + " " + " ".join(f"{k}={v}" for k, v in p["shape"].items())
            if problem["dtype"]:
                label += " " + problem["dtype"]
            by_problem.setdefault(label, []).append((name, p))
    for label, rows in by_problem.items():
        for name, p in rows:
            e = p["evals_to_within"]
            evals = f"{e['median']:.0f} ({e['p25']:.0f}-{e['p75']:.0f})"
            best = " ".join(f"{_fmt(p['best_over_oracle'].get(k)):>6}" for k in checkpoints)
            print(f"{label:<52} {name:<11} {evals:>16} {best} {_fmt(p['tuning_s_to_within'], 1):>8}")


def cmd_train(args: argparse.Namespace) -> int:
    import time

    from . import MODEL_FILE, POLICY_FILE, _core

    _check_range(args, ppo_steps=(1, 10**10), bc_episodes=(0, 10**7), synthetic=(0, 10**5), seed=SEED)
    paths, tables = _read_tables(args.data)
    measured = sum(m["status"] == "ok" for t in tables for _, m in t.rows())
    if measured < MIN_TRAINING_ROWS:
        raise UsageError(f"--data holds {measured} rows of configs that ran correctly; the cost model and the agent "
                         f"need at least {MIN_TRAINING_ROWS}: sweep more configs or problems")
    out = args.out
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give a folder for policy.bin, cost_model.bin and trained_on.json")
    out.mkdir(parents=True, exist_ok=True)
    print(f"training the cost model and the agent on {len(tables)} problems from {len(paths)} files", file=sys.stderr)
    start = time.perf_counter()

    def progress(steps: int, mean_return: float, mean_length: float) -> None:
        if sys.stderr.isatty():
            print(f"\r  PPO step {steps:>9,}  mean return {mean_return:7.3f}  episode length {mean_length:5.1f}",
                  end="", file=sys.stderr, flush=True)

    report = _core.train_agent(tables, args.ppo_steps, args.bc_episodes, args.synthetic, args.seed,
                               str(out / POLICY_FILE.name), str(out / MODEL_FILE.name), progress)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    report["seconds"] = time.perf_counter() - start
    # What the agent has seen, so that replay shows it only on what it has not.
    (out / "trained_on.json").write_text(json.dumps({
        "files": [Path(p).name for p in paths], "ppo_steps": args.ppo_steps, "bc_episodes": args.bc_episodes,
        "synthetic": args.synthetic, "seed": args.seed,
        "problems": [{k: t.problem[k] for k in ("family", "shape", "dtype", "device")} for t in tables],
    }, indent=1) + "\n")
    if args.json:
        print(json.dumps(report))
    else:
        print(f"cost model: {report['model_seconds']:.1f} s; behaviour cloning on {report['demonstrations']:,} expert "
              f"steps ({report['bc_accuracy']:.1%} agreement): {report['bc_seconds']:.1f} s; PPO "
              f"{report['ppo_steps']:,} simulated steps over {report['table_tasks']} recorded and "
              f"{report['synthetic_tasks']} synthetic problems: {report['ppo_seconds']:.1f} s")
        print(f"wrote {out / POLICY_FILE.name}, {out / MODEL_FILE.name} and {out / 'trained_on.json'}")
    return 0


def cmd_strategies(args: argparse.Namespace) -> int:
    from . import _core

    for name, description, options in _core.strategies():
        print(f"{name}: {description}")
        for opt, text, default in options:
            print(f"    {opt} (default {default:g}): {text}")
    return 0


def cmd_db(args: argparse.Namespace) -> int:
    from . import _core
    from .store import open_store

    store = open_store(args.db, read_only=args.action != "import")  # stats and export only read.
    if args.action == "import":
        if not args.files:
            raise UsageError("db import needs the recorded tables to import, e.g. dr-kernel db import sweep.jsonl")
        added = store.import_tables(_core.read_tables([str(f) for f in args.files]))
        print(f"imported {added} rows into {store.path} ({store.count()} in all)")
    elif args.action == "export":
        if len(args.files) != 1:
            raise UsageError("db export needs one output file, e.g. dr-kernel db export all.jsonl")
        tables = store.export_tables()
        _core.write_tables(tables, str(args.files[0]))
        print(f"exported {sum(len(t) for t in tables)} rows of {len(tables)} problems to {args.files[0]}")
    else:
        problems = store.problems()
        print(f"{store.path}: {store.count()} measurements of {len(problems)} problems")
        for p in problems:
            shape = " ".join(f"{k}={v}" for k, v in p["shape"].items())
            print(f"  {p['family']} {shape} {p['dtype']} {p['device']}: {len(store.rows(p))} rows")
    return 0


# ----- tuning real kernels --------------------------------------------------------------------

class Progress:
    """One status line on stderr that rewrites itself; silent when stderr is not a terminal."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.width = 0

    def show(self, text: str) -> None:
        if not self.enabled:
            return
        columns = shutil.get_terminal_size((100, 20)).columns - 1
        text = text[:columns]
        sys.stderr.write("\r" + text + " " * max(0, self.width - len(text)))
        sys.stderr.flush()
        self.width = len(text)

    def close(self) -> None:
        if self.enabled and self.width:
            sys.stderr.write("\n")
            sys.stderr.flush()
        self.width = 0


def _builtin(name: str):
    from .kernels import UnknownKernelError, get

    try:
        return get(name)
    except UnknownKernelError as e:
        raise UsageError(str(e)) from None


def _parse_value(text: str, like: Any) -> Any:
    lowered = text.strip().lower()
    if isinstance(like, bool) or lowered in ("true", "false"):
        if lowered in ("true", "1"):
            return True
        if lowered in ("false", "0"):
            return False
        raise ValueError(text)
    return int(text)


def _parse_shape(kernel, text: str | None) -> dict:
    if not text:
        return dict(kernel.shapes[0])
    like = kernel.shapes[0]
    shape = {}
    for pair in text.split(","):
        name, sep, value = pair.partition("=")
        name = name.strip()
        if name in shape:
            raise UsageError(f"--shape {text!r} gives {name} twice; give each key once")
        try:
            if not sep or not name:
                raise ValueError(pair)
            shape[name] = _parse_value(value, like.get(name))
        except ValueError:
            raise UsageError(f"--shape {text!r}: write KEY=INTEGER pairs separated by commas, e.g. "
                             + ",".join(f"{k}={v}" for k, v in like.items())) from None
        if not isinstance(shape[name], bool) and shape[name] < 1:
            raise UsageError(f"--shape {name}={shape[name]}: sizes are whole numbers of at least 1")
    try:
        return kernel.check_shape(shape)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _parse_json(text: str, flag: str, example: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise UsageError(f"{flag} is not valid JSON ({e}); write e.g. {flag} '{example}'") from None


def _parse_config(kernel, text: str) -> dict:
    example = json.dumps(next(iter(kernel.configs())))
    config = _parse_json(text, "--config", example)
    if not isinstance(config, dict):
        raise UsageError(f"--config must be a JSON object of parameter values, e.g. --config '{example}'")
    try:
        config = kernel.check_config(config)
    except ValueError as e:
        raise UsageError(str(e)) from None
    _check_values("--config", {k: [v] for k, v in config.items()}, f"--config '{example}'")
    return config


def _check_values(flag: str, values: dict[str, list], example: str) -> None:
    """Block sizes, warps and stages are whole numbers of at least 1: one UsageError naming the first other."""
    for name, listed in values.items():
        bad = [v for v in listed if isinstance(v, bool) or not isinstance(v, int) or v < 1]
        if bad:
            raise UsageError(f"{flag}: {name} = {json.dumps(bad[0])} is not a whole number of at least 1; "
                             f"write e.g. {example}")


def _parse_space(kernel, text: str | None):
    """The --space override: a JSON object of value lists over the kernel's parameters."""
    from .space import make_space

    if text is None:
        return None
    example = json.dumps({k: v[:2] for k, v in kernel.space.items()})
    space = _parse_json(text, "--space", example)
    if not isinstance(space, dict) or not all(isinstance(v, list) and v for v in space.values()):
        raise UsageError("--space must be a JSON object mapping each parameter to a list of values")
    _check_values("--space", space, f"--space '{example}'")
    try:
        kernel.check_config({k: v[0] for k, v in space.items()})
        return make_space(space, constraints=kernel.constraints)
    except ValueError as e:
        raise UsageError(f"--space: {e}") from None


def _gpu_available() -> bool:
    from .measure import visible_devices

    return visible_devices() != ["cpu"]


def _limits(gpu: bool):
    from .analysis import H200, device_limits

    return device_limits(0) if gpu else H200


def _named_limits(name: str):
    from .analysis import named_limits

    try:
        return named_limits(name)
    except ValueError as e:
        raise UsageError(f"--device: {e}") from None


def _memory_bytes(interpret: bool) -> int:
    """The memory a measured problem's tensors live in: this machine's (interpreter) or the GPU's."""
    if interpret:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    import torch

    return torch.cuda.get_device_properties(0).total_memory


def _check_size(kernel, shape: dict, dtype: str, interpret: bool, measuring: bool = True) -> None:
    """Refuses a problem to be measured whose tensors exceed the memory that would hold them, and
    notes a large one for the interpreter."""
    if measuring and kernel.bytes(shape, dtype) > _memory_bytes(interpret):
        where = "this machine's memory" if interpret else "the GPU's memory"
        raise UsageError(f"--shape {','.join(f'{k}={v}' for k, v in shape.items())}: its tensors take at least "
                         f"{kernel.bytes(shape, dtype) / 1e9:,.0f} GB, more than {where} "
                         f"({_memory_bytes(interpret) / 1e9:,.0f} GB); give a smaller --shape")
    # The interpreter runs a kernel as NumPy on the CPU, program by program: slow beyond toy sizes.
    if interpret and kernel.flops(shape) > 1e7:
        print(f"note: {kernel.name} {shape} has {kernel.flops(shape):.2g} FLOPs, a lot for Triton's interpreter; "
              "give a small --shape to finish in seconds", file=sys.stderr)


NO_GPU = ("measuring needs a GPU and none is visible; add --interpret to run the whole flow in Triton's "
          "interpreter on the CPU (small shapes only: its times order configs for testing, they are not GPU times)")
INTERPRETER_NOTE = "interpreter times (CPU): they order configs for testing; they are not GPU times"


def cmd_evaluate(args: argparse.Namespace) -> int:
    from .analysis import roofline_ms, throughput
    from .compile_pool import CompilePool, CompileRequest
    from .kernels import dtype_name

    kernel = _builtin(args.kernel)
    shape = _parse_shape(kernel, args.shape)
    config = _parse_config(kernel, args.config)
    dtype = dtype_name(args.precision)
    gpu = _gpu_available()
    limits = _limits(gpu)
    if args.device:
        limits = _named_limits(args.device)
        # A launch runs on the visible GPU: it is timed only when that is the device analysed for.
        if gpu and _limits(True).arch != limits.arch:
            gpu = False
            print(f"note: the visible GPU is not a {limits.name}: static analysis only", file=sys.stderr)
    # The device as this process names it; measuring workers name GPUs by their visible ids.
    device = "cpu" if args.interpret else "cuda:0" if gpu else None
    _check_size(kernel, shape, dtype, args.interpret, measuring=device is not None)
    with CompilePool(workers=1, timeout_s=args.timeout) as pool:
        report = pool.map([CompileRequest(kernel.name, config, shape, dtype, limits)])[0]
    flops, moved = kernel.flops(shape), kernel.bytes(shape, dtype)
    peak_tflops, peak_gbps = limits.peak_tflops(kernel.operand_dtype or dtype, kernel.tensor_cores), limits.peak_gbps
    static = {k: v for k, v in report.to_dict().items()
              if k not in ("kernel", "config", "shape", "dtype", "valid", "reason")}
    result = {"kernel": kernel.name, "shape": shape, "precision": dtype, "config": config, "device": limits.name,
              "valid": report.valid, "reason": report.reason, "static": static, "flops": flops, "bytes": moved,
              "roofline_ms": roofline_ms(flops, moved, peak_tflops, peak_gbps), "measured": False}
    if device is None:
        result["note"] = (f"{'' if args.device else 'no GPU: '}static analysis for the {limits.name} only "
                          "(no timing, no correctness check)")
    elif not report.valid:
        result["note"] = "not launched: static analysis refused the config"
    else:
        from .measure import BuiltinJob, MeasurePool, MeasureSettings, time_framework

        settings = MeasureSettings(timeout_s=args.timeout)
        from .measure import visible_devices

        worker_device = "cpu" if args.interpret else visible_devices()[0]
        with MeasurePool(BuiltinJob(kernel.name, shape, dtype), [worker_device], settings) as measurer:
            m, _ = measurer.measure([config])[0]
        result.update({"measured": True, "status": m["status"], "correct": m["status"] == "ok",
                       "relerr": m.get("relerr"), "error": m.get("error")})
        if m["status"] == "ok":
            result.update({"ms": m["ms"], "ms_p20": m["ms_p20"], "ms_p80": m["ms_p80"]})
            if not args.interpret:  # A CPU's times say nothing about the GPU's peaks.
                result.update(throughput(flops, moved, m["ms"], peak_tflops, peak_gbps))
            ref_ms = time_framework(kernel, shape, dtype, device, reps=settings.reps)
            result["reference"] = {"name": kernel.reference_name, "ms": ref_ms, "speedup": ref_ms / m["ms"]}
        else:
            result["valid"], result["reason"] = False, m.get("error") or m["status"]
        if args.interpret:
            result["note"] = INTERPRETER_NOTE
    if args.json:
        print(json.dumps(result, default=str))
    else:
        _print_evaluation(result)
    return 0


def _print_evaluation(r: dict) -> None:
    shape = " ".join(f"{k}={v}" for k, v in r["shape"].items())
    print(f"{r['kernel']} {shape} {r['precision']}  config {json.dumps(r['config'])}")
    s = r["static"]
    if s.get("n_regs") is not None:
        print(f"  static ({r['device']}): {s['n_regs']} registers, {s['n_spills']} spilled, "
              f"{s['shared']} B shared memory, occupancy {s['occupancy']:.2f} ({s['blocks_per_sm']} blocks/SM, "
              f"limited by {s['limiter']}), compiled in {s['compile_s']:.2f} s")
    print(f"  valid: {'yes' if r['valid'] else 'no: ' + r['reason']}")
    if r.get("roofline_ms"):
        print(f"  roofline: at the device's peaks this problem takes at least {r['roofline_ms']:.4g} ms")
    if r.get("ms") is not None:
        frac = r.get("fraction_of_peak")
        rates = f", {r['tflops']:.1f} TFLOP/s, {r['gbps']:.0f} GB/s" if r.get("tflops") is not None else ""
        print(f"  time {r['ms']:.4f} ms (p20 {r['ms_p20']:.4f}, p80 {r['ms_p80']:.4f}){rates}"
              + (f", {frac:.0%} of peak ({r['bound']}-bound)" if frac is not None else ""))
        print(f"  correct: relative error {r['relerr']:.2e}; {r['reference']['name']}: "
              f"{r['reference']['ms']:.4f} ms (this config runs at {r['reference']['speedup']:.2f}x its speed)")
    elif r.get("measured"):
        print(f"  launch: {r['status']}: {r.get('error') or ''}")
    if r.get("note"):
        print(f"  note: {r['note']}")


def cmd_tune(args: argparse.Namespace) -> int:
    from .analysis import throughput
    from .kernels import dtype_name
    from .measure import MeasureSettings, WorkerError, time_framework
    from .session import tune_builtin
    from .store import open_store

    kernel = _builtin(args.kernel)
    shape = _parse_shape(kernel, args.shape)
    dtype = dtype_name(args.precision)
    strategy = _strategy_names(args.strategy)
    if len(strategy) != 1:
        raise UsageError("--strategy takes one strategy name")
    options = _parse_options(args.option)
    space = _parse_space(kernel, args.space)
    _check_range(args, budget=BUDGET, reps=(1, 10**6), seed=SEED, confirm=(0, 10**6), confirm_within=(0.0, MAX),
                 workers=(1, 4096))
    if not args.seconds > 0:
        raise UsageError(f"--seconds {args.seconds}: give a positive number of seconds (default: no limit)")
    gpu = _gpu_available()
    if not gpu and not args.interpret:
        raise UsageError(NO_GPU)
    _check_size(kernel, shape, dtype, args.interpret)
    interpret = args.interpret
    if space is None:
        from .space import make_space

        space = make_space(kernel.space, constraints=kernel.constraints)
    store = open_store(args.db)
    progress = Progress(enabled=not args.json)
    total = min(args.budget, space.count_valid())
    count, best, started = [0], [math.inf], time.perf_counter()

    def on_trial(config: dict, m: dict, elapsed: float) -> None:
        count[0] += 1
        if m["status"] == "ok":
            best[0] = min(best[0], m["ms"])
        filled = min(20, int(20 * count[0] / total))
        best_text = f"best {best[0]:.4f} ms" if math.isfinite(best[0]) else "no valid config yet"
        progress.show(f"tune {kernel.name} [{'#' * filled}{'.' * (20 - filled)}] {count[0]}/{total}  "
                      f"{best_text}  last {m['status']}  {time.perf_counter() - started:.0f} s")

    settings = MeasureSettings(reps=args.reps, confirm=args.confirm, confirm_within=args.confirm_within)
    try:
        result = tune_builtin(kernel, shape, dtype, strategy=strategy[0], max_evals=args.budget,
                              max_seconds=args.seconds, seed=args.seed, options=options, interpret=interpret,
                              store=store, source="tune", workers=args.workers, compile_timeout_s=args.timeout,
                              settings=settings, on_trial=on_trial, space=space, resume=not args.fresh)
    except WorkerError as e:
        raise UsageError(f"the measuring worker failed: {e}") from None
    finally:
        progress.close()
    out = {"kernel": kernel.name, "shape": shape, "precision": dtype, "strategy": strategy[0],
           "device": "cpu (Triton interpreter)" if interpret else _core_device_name(),
           "interpreted": interpret, "evaluations": result.evaluations, "measured": result.measured,
           "refused": result.refused, "copied": result.copied, "statuses": result.statuses(),
           "tuning_s": result.history[-1][2] if result.history else 0.0, "wall_s": result.wall_s,
           "split_s": result.split_s,
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
    if args.json:
        out["history"] = [{"config": c, **{k: v for k, v in m.items() if v is not None and v == v and v != -1
                                           and v != ""}, "elapsed_s": e} for c, m, e in result.history]
        print(json.dumps(out, default=str))
        return 0 if result.best_config is not None else 1
    _print_tuning(out)
    return 0 if result.best_config is not None else 1


def _core_device_name() -> str:
    from .session import device_name

    return device_name(False)


def _print_tuning(o: dict) -> None:
    shape = " ".join(f"{k}={v}" for k, v in o["shape"].items())
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(o["statuses"].items()))
    print(f"tuned {o['kernel']} {shape} {o['precision']} on {o['device']} with {o['strategy']}: "
          f"{o['evaluations']} evaluations ({statuses})")
    print(f"  measured {o['measured']}, refused before launch {o['refused']}, same binary as another {o['copied']}; "
          f"wall {o['wall_s']:.1f} s, charged {o['tuning_s']:.1f} s (compile + measure per config)")
    print("  wall time: " + ", ".join(f"{part} {seconds:.1f} s" for part, seconds in o["split_s"].items()))
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
    if o.get("note"):
        print(f"  note: {o['note']}")
    print(f"  every result is in {o['db']}")


def cmd_sweep(args: argparse.Namespace) -> int:
    from .kernels import dtype_name
    from .measure import MeasureSettings, WorkerError
    from .store import open_store
    from .sweep import run_sweep

    kernel = _builtin(args.kernel)
    shape = _parse_shape(kernel, args.shape)
    dtype = dtype_name(args.precision)
    space = _parse_space(kernel, args.space)
    _check_range(args, limit=(1, MAX), reps=(1, 10**6), workers=(1, 4096))
    if not _gpu_available() and not args.interpret:
        raise UsageError(NO_GPU)
    _check_size(kernel, shape, dtype, args.interpret)
    configs = None
    if space is not None:
        configs = [c for c in space.configs(space.product_size)]
    store = open_store(args.db)
    progress = Progress()

    def show(r) -> None:
        total = r.total - r.skipped
        statuses = " ".join(f"{s} {n}" for s, n in sorted(r.statuses.items()))
        progress.show(f"sweep {kernel.name}: {r.recorded}/{total} recorded ({statuses})")

    try:
        result = run_sweep(kernel, shape, dtype, args.out, configs=configs, limit=args.limit,
                           interpret=args.interpret, compile_timeout_s=args.timeout, workers=args.workers,
                           settings=MeasureSettings(reps=args.reps), store=store, progress=show)
    except WorkerError as e:
        raise UsageError(f"the measuring worker failed: {e}") from None
    except KeyboardInterrupt:
        progress.close()
        print(f"interrupted: the rows measured so far are in {args.out}; run the same command again to go on",
              file=sys.stderr)
        return 130
    finally:
        progress.close()
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(result.statuses.items())) or "none"
    print(f"{args.out}: {result.recorded} new rows ({statuses}; {result.copied} copied from an identical binary), "
          f"{result.skipped} of {result.total} configs already recorded; {result.wall_s:.1f} s")
    if args.interpret:
        print(f"note: {INTERPRETER_NOTE}")
    return 0


def _kernel_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel", required=True, help="a built-in kernel: matmul, softmax, attention, rmsnorm")
    p.add_argument("--shape", help="the problem as KEY=VALUE pairs, e.g. M=4096,N=4096,K=4096 "
                   "(default: the kernel's first recorded problem)")
    p.add_argument("--precision", default="fp16", choices=["fp16", "bf16", "fp32"],
                   help="element type (default fp16)")


def cmd_report(args: argparse.Namespace) -> int:
    """The best config the store holds for each problem, with how it was found."""
    from collections import Counter

    from .store import open_store

    store = open_store(args.db, read_only=True)
    out = []
    for problem in store.problems():
        if args.family and problem["family"] != args.family:
            continue
        rows = store.rows(problem)
        statuses = Counter(m["status"] for _, m in rows)
        ok = [(m["ms"], c) for c, m in rows if m["status"] == "ok"]
        best_ms, best = min(ok, key=lambda t: t[0]) if ok else (None, None)
        out.append({"family": problem["family"], "shape": problem["shape"], "dtype": problem["dtype"],
                    "device": problem["device"], "measurements": len(rows), "statuses": dict(statuses),
                    "best_ms": best_ms, "best_config": best})
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{store.path}: {len(out)} problems")
    for r in out:
        shape = " ".join(f"{k}={v}" for k, v in r["shape"].items())
        best = f"{r['best_ms']:.4f} ms {json.dumps(r['best_config'])}" if r["best_config"] else "nothing ran"
        counts = ", ".join(f"{n} {s}" for s, n in sorted(r["statuses"].items()))
        print(f"  {r['family']} {shape} {r['dtype']} on {r['device'] or '?'}: {best} ({counts})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dr-kernel", description="Auto-tuning of Triton GPU kernels.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("replay", help="replay search strategies over recorded tuning tables")
    p.add_argument("--data", nargs="+", type=Path,
                   help="recorded tables (JSON lines); default: the bundled H200 tables")
    p.add_argument("--strategy", default="all", help="a strategy name, a comma-separated list, or 'all' (default)")
    p.add_argument("--budget", type=int, default=100, help="evaluations per run (default 100)")
    p.add_argument("--repeats", type=int, default=20, help="runs per problem, seeds S, S+1, ... (default 20)")
    p.add_argument("--within", type=float, default=1.05, help="'near the best' means <= F x the best (default 1.05)")
    p.add_argument("--seed", type=int, default=0, help="seed of the first run (default 0)")
    p.add_argument("--option", action="append", default=[], metavar="NAME=VALUE", help="a strategy option")
    p.add_argument("--json", action="store_true", help="print one JSON object per strategy")
    p.add_argument("--plot", type=Path, help="write a PNG of best-so-far / best against evaluations")
    p.add_argument("--holdout", choices=["none", "family"], default="none",
                   help="family: replay the agent on each family with an agent trained (shipped recipe, about 40 s "
                        "per family on 2 cores) on the other families only; none (default): only on tables the "
                        "shipped agent was not trained on")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("db", help="the results store: import or export recorded tables, or list what it holds")
    p.add_argument("action", choices=["stats", "import", "export"])
    p.add_argument("files", nargs="*", type=Path)
    p.add_argument("--db", type=Path, help="the database file (default: $DR_KERNEL_DB or the per-user cache)")
    p.set_defaults(func=cmd_db)

    p = sub.add_parser("train", help="pre-train the cost model and the PPO agent on recorded tables")
    p.add_argument("--data", nargs="+", type=Path, help="recorded tables; default: the bundled H200 tables")
    p.add_argument("--ppo-steps", type=int, default=200_000,
                   help="simulated PPO steps (default 200,000: on kernel families it has not seen, the agent did "
                        "better than with 1,000,000, which fit the training families)")
    p.add_argument("--bc-episodes", type=int, default=1500, help="expert episodes for behaviour cloning (default 1500)")
    p.add_argument("--synthetic", type=int, default=24,
                   help="synthetic problems between the recorded ones (default 24)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True,
                   help="folder for policy.bin, cost_model.bin and trained_on.json (the shipped agent is "
                        "python/dr_kernel/data/agent: name it to replace it)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("evaluate", help="analyse one config of a built-in kernel, and time it when a GPU is visible")
    _kernel_arguments(p)
    p.add_argument("--config", required=True, help='the config as JSON, e.g. \'{"BLOCK": 1024, "num_warps": 4, '
                   '"num_stages": 1}\'')
    p.add_argument("--timeout", type=float, default=300.0, help="seconds the compile may take (default 300)")
    p.add_argument("--interpret", action="store_true",
                   help="also run it in Triton's interpreter on the CPU (small shapes; not GPU times)")
    p.add_argument("--device", help="analyse for this GPU instead of the visible one: h200, a100, l40s, b200 "
                   "(or sm_90, sm_80, sm_89, sm_100); timed only if it is the visible GPU's architecture")
    p.add_argument("--json", action="store_true", help="print one JSON object (with 'valid' and 'reason')")
    p.set_defaults(func=cmd_evaluate)

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
    p.add_argument("--fresh", action="store_true",
                   help="measure every config anew; by default the configs the store holds for this problem (an "
                        "earlier or interrupted run) count as measured and are not measured again")
    p.add_argument("--json", action="store_true", help="print one JSON object, with every evaluation")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("sweep", help="record every config of a built-in kernel on one problem (resumable)")
    _kernel_arguments(p)
    p.add_argument("--out", type=Path, required=True, help="the JSON-lines file to append rows to")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one compile may take (default 300)")
    p.add_argument("--space", help="JSON object of value lists replacing the kernel's space")
    p.add_argument("--limit", type=int, help="record only the first N configs of the space")
    p.add_argument("--db", type=Path, help="the results store (default: $DR_KERNEL_DB or the per-user cache)")
    p.add_argument("--workers", type=int, help="compile processes (default: one per CPU core)")
    p.add_argument("--reps", type=int, default=20,
                   help="timed launches per config at most (default 20; fewer once a config is 1.3x slower than "
                        "the best, or its launches add up to 50 ms)")
    p.add_argument("--interpret", action="store_true",
                   help="measure in Triton's interpreter on the CPU (small shapes; not GPU times)")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("report", help="the best config the results store holds for each problem")
    p.add_argument("--db", type=Path, help="the database file (default: $DR_KERNEL_DB or the per-user cache)")
    p.add_argument("--family", help="only problems of this kernel family")
    p.add_argument("--json", action="store_true", help="print one JSON list")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("strategies", help="list the search strategies and their options")
    p.set_defaults(func=cmd_strategies)
    return parser


# What an interrupted command leaves behind, said when it is interrupted.
INTERRUPTED = {
    "tune": "every result measured so far is in the store",
    "evaluate": "every result measured so far is in the store",
    "replay": "nothing was written (a replay only reads its tables)",
    "train": "no agent file was written; those in --out are as they were",
    "report": "nothing was written",
}


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        # `timeout` and job schedulers stop a run with SIGTERM: unwind as for Ctrl-C, so that the
        # worker processes (and the ptxas they run) are stopped and the rows written are kept.
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(f"dr-kernel {args.command}: interrupted; {INTERRUPTED.get(args.command, 'what it wrote before is kept')}",
              file=sys.stderr)
        return 130
    except UsageError as e:
        print(f"dr-kernel {args.command}: {e}", file=sys.stderr)
        return 2
    except (ValueError, OSError) as e:  # The engine's errors about user input (data file, space, store).
        print(f"dr-kernel {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
