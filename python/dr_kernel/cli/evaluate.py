"""`dr-kernel evaluate`: one config's static analysis, and its time where it can be measured."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..profiling import format_counters
from . import common
from .common import (
    INTERPRETER_NOTE,
    UsageError,
    _builtin,
    _check_size,
    _kernel_arguments,
    _limits,
    _named_limits,
    _parse_config,
    _parse_shape,
)


def cmd_evaluate(args: argparse.Namespace) -> int:
    from ..analysis import roofline_ms, throughput
    from ..compile_pool import CompilePool, CompileRequest
    from ..kernels import dtype_name

    kernel = _builtin(args.kernel)
    shape = _parse_shape(kernel, args.shape)
    config = _parse_config(kernel, args.config)
    dtype = dtype_name(args.precision)
    gpu = common._gpu_available()
    limits = _limits(gpu)
    if args.device:
        limits = _named_limits(args.device)
        # A launch runs on the visible GPU: it is timed only when that is the device analysed for.
        if gpu and _limits(True).arch != limits.arch:
            gpu = False
            print(f"note: the visible GPU is not a {limits.name}: static analysis only", file=sys.stderr)
    # The device as this process names it; measuring workers name GPUs by their visible ids.
    device = "cpu" if args.interpret else "cuda:0" if gpu else None
    _check_size(kernel, shape, dtype, args.interpret, measuring=device is not None, limits=limits)
    if args.profile:
        from ..profiling import ProfileError, find_ncu

        if device is None or args.interpret:
            raise UsageError("--profile reads the counters of a launch on a GPU: it needs a visible GPU of the "
                             "device analysed for, and no --interpret")
        try:
            find_ncu()
        except ProfileError as error:
            raise UsageError(str(error)) from None
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
        from ..measure import BuiltinJob, MeasurePool, MeasureSettings, time_framework, visible_devices

        # One config, asked for by name: time all its launches (no early stop against a best).
        settings = MeasureSettings.exact(timeout_s=args.timeout)

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
            if args.profile:
                from ..profiling import ProfileError, profile

                try:
                    result["counters"] = profile(kernel.name, shape, dtype, config, timeout_s=args.timeout)
                except ProfileError as error:
                    result["counters"] = {"error": str(error)}
        else:
            result["valid"], result["reason"] = False, m.get("error") or m["status"]
        result["db"] = _store_measurement(args, kernel, shape, dtype, config, m, result.get("counters"))
        if args.interpret:
            result["note"] = INTERPRETER_NOTE
    if args.json:
        print(json.dumps(result, default=str))
    else:
        _print_evaluation(result)
    return 0


def _store_measurement(args, kernel, shape: dict, dtype: str, config: dict, m: dict, counters: dict | None) -> str:
    """Adds the measurement (with its counters when profiled) to the results store, as a tuning's
    measurements are, and returns the store's path; a store that cannot be written costs only the
    row, with one line saying why."""
    from ..profiling import stored_counters
    from ..session import _storable, builtin_problem, device_name
    from ..store import open_store

    row = _storable(m)
    if counters and "error" not in counters:
        row["counters"] = stored_counters(counters)
    try:
        store = open_store(args.db)
        store.add(builtin_problem(kernel, shape, dtype, device_name(args.interpret)), config, row, "evaluate")
    except (OSError, ValueError, RuntimeError) as error:
        print(f"note: the measurement was not stored ({error})", file=sys.stderr)
        return ""
    return str(store.path)


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
    if r.get("counters"):
        print("  " + format_counters(r["counters"]))
    if r.get("db"):
        print(f"  stored in {r['db']}")
    if r.get("note"):
        print(f"  note: {r['note']}")


def add_parser(sub) -> None:
    p = sub.add_parser("evaluate", help="analyse one config of a built-in kernel, and time it when a GPU is visible")
    _kernel_arguments(p)
    p.add_argument("--config", required=True, help='the config as JSON, e.g. \'{"BLOCK": 1024, "num_warps": 4, '
                   '"num_stages": 1}\'')
    p.add_argument("--timeout", type=float, default=300.0, help="seconds the compile may take (default 300)")
    p.add_argument("--interpret", action="store_true",
                   help="also run it in Triton's interpreter on the CPU (small shapes; not GPU times)")
    p.add_argument("--device", help="analyse for this GPU instead of the visible one: h200, h100, h100-pcie, a100, "
                   "l40s, b200 (or sm_90, sm_80, sm_89, sm_100); timed only if it is the visible GPU's architecture")
    p.add_argument("--profile", action="store_true",
                   help="also read the launch's hardware counters with Nsight Compute (ncu): occupancy, L2 hit "
                   "rate, DRAM and SM throughput, stall reasons (about 10 s); stored with the measurement")
    p.add_argument("--db", type=Path, help="the results store a measurement is added to (default: $DR_KERNEL_DB "
                   "or the per-user cache)")
    p.add_argument("--json", action="store_true", help="print one JSON object (with 'valid' and 'reason')")
    p.set_defaults(func=cmd_evaluate)
