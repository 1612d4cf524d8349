"""Runs every pattern of autotune_kernels under stock triton.autotune and under dr_kernel's, in
Triton's interpreter, and prints one JSON object of what a caller sees (test_autotune.py reads it).

The dr_kernel copy is the module `autotune_kernels` imported while dr_kernel is installed (so that
compile workers can import it by name); the stock copy is the same file loaded under another name.
"""

import importlib.util
import json
import os
import sys
import warnings

os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dr_kernel  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402

# PATTERNS_ISOLATE=1: dr_kernel measures in a measuring process wherever a kernel can go there
# (isolate=None; the kernels with hooks of the caller's stay in this process).
with dr_kernel.installed(widen=False, isolate=None if os.environ.get("PATTERNS_ISOLATE") else False):
    import autotune_kernels as ours  # noqa: E402
spec = importlib.util.spec_from_file_location("autotune_kernels_stock", ours.__file__)
stock = importlib.util.module_from_spec(spec)
spec.loader.exec_module(stock)


def wall_clock_bench(fn, quantiles):
    # Stock autotune asks the GPU driver for its benchmarker; the interpreter has none.
    import time

    start = time.perf_counter()
    fn()
    ms = (time.perf_counter() - start) * 1e3
    return [ms] * len(quantiles)


triton.runtime.autotuner.Autotuner.do_bench = staticmethod(wall_clock_bench)

out = {"taken_over": dr_kernel.taken_over(), "kept": dr_kernel.kept(),
       "stock_type": type(stock.heuristics_below).__name__, "our_type": type(ours.heuristics_below).__name__}


def grid1(n):
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


def statuses(kernel):
    while not hasattr(kernel, "last_session"):
        kernel = kernel.fn
    return kernel.last_session.statuses() if kernel.last_session else {}


def both(name, call):
    """Runs call(module) for each module; returns (stock result, our result) as lists."""
    results = []
    for module in (stock, ours):
        torch.manual_seed(0)
        results.append(call(module))
    return results


n = 200
x = torch.randn(n, generator=torch.Generator().manual_seed(1))


def above(m):
    y = torch.empty(n)
    m.heuristics_above[grid1(n)](x, y, n)
    return y


def below(m):
    y = torch.empty(n)
    m.heuristics_below[grid1(n)](x, y, n)
    return y


for name, fn, expected in (("above", above, 3 * x), ("below", below, x + 1)):
    s, o = both(name, fn)
    out[name] = {"stock_ok": bool(torch.allclose(s, expected)), "ours_ok": bool(torch.allclose(o, expected)),
                 "statuses": statuses(getattr(ours, "heuristics_" + name))}
out["below"]["best_config"] = str(ours.heuristics_below.best_config)

N = 40
a = torch.randn(N, N, generator=torch.Generator().manual_seed(2))


def tril(m):
    y = torch.zeros(N, N)
    m.tril_blocks[lambda meta: (triton.cdiv(N, meta["BLOCK"]), triton.cdiv(N, meta["BLOCK"]))](a, y, N)
    return y


s, o = both("tril", tril)
blocks = ours.tril_blocks.best_config.kwargs["BLOCK"]
out["tril"] = {"same_as_stock_for_winner": None, "statuses": statuses(ours.tril_blocks), "winner_block": blocks,
               "upper_zero": bool((o.triu(blocks)[: N - blocks] == 0).all()) if blocks < N else True,
               "lower_written": bool(torch.equal(o.tril(), (2 * a).tril()))}


def atomic(m):
    acc = torch.zeros(1)
    m.atomic_sum[grid1(n)](x, acc, n)
    first = acc.clone()
    m.atomic_sum[grid1(n)](x, acc, n)  # A cached call: no reset, as in Triton.
    return torch.stack([first[0], acc[0]])


s, o = both("atomic", atomic)
out["atomic"] = {"stock": s.tolist(), "ours": o.tolist(), "sum": float(x.sum()),
                 "statuses": statuses(ours.atomic_sum)}


def inplace(m):
    y = torch.ones(n)
    m.inplace_add[grid1(n)](x, y, n)
    return y


s, o = both("inplace", inplace)
out["inplace"] = {"stock_ok": bool(torch.allclose(s, 1 + x)), "ours_ok": bool(torch.allclose(o, 1 + x)),
                  "statuses": statuses(ours.inplace_add)}


def hooked(m):
    m.HOOK_CALLS.update(config=0, autotune=0)
    acc = torch.full((4,), 100.0)
    m.hooked[grid1(n)](x, acc, n)
    return acc, dict(m.HOOK_CALLS)


(s, s_calls), (o, o_calls) = both("hooked", hooked)
expected = torch.stack([x[i::4].sum() for i in range(4)])
out["hooked"] = {"stock_ok": bool(torch.allclose(s, expected, atol=1e-5)),
                 "ours_ok": bool(torch.allclose(o, expected, atol=1e-5)), "stock_calls": s_calls,
                 "our_calls": o_calls, "statuses": statuses(ours.hooked)}


def pruned(m):
    del m.PRUNE_CALLS[:]
    y = torch.empty(20)
    small = x[:20].contiguous()
    m.pruned[grid1(20)](small, y, 20)
    return y, list(m.PRUNE_CALLS)


(s, s_calls), (o, o_calls) = both("pruned", pruned)
out["pruned"] = {"ours_ok": bool(torch.allclose(o, x[:20] - 1)), "stock_prune_calls": s_calls,
                 "our_prune_calls": o_calls,
                 "measured": sorted(c["BLOCK"] for c, m, _ in ours.pruned.history),
                 "stock_best": stock.pruned.best_config.kwargs["BLOCK"],
                 "our_best": ours.pruned.best_config.kwargs["BLOCK"]}


s, o = both("block_sums", lambda m: m.sum_by_blocks(x))
out["block_sums"] = {"stock": float(s), "ours": float(o), "sum": float(x.sum()),
                     "statuses": statuses(ours.block_sums), "notes": ours.block_sums.notes,
                     "checked_alike": ours.tril_blocks._reads_config is False}


def recorded(m):
    sums, acc = [], torch.zeros(1)
    for size in (n, n, 160):  # Tuned, then launched again (no reset, as in Triton), then the recorded key.
        if size == 160:
            acc = torch.zeros(1)
        m.recorded_sum[grid1(size)](x, acc, None, size, HAS_MAX=False)
        sums.append(float(acc[0]))
    return sums, m.recorded_sum.best_config.kwargs["BLOCK"]


(s, s_block), (o, o_block) = both("recorded", recorded)
tuner = getattr(ours.recorded_sum, "_dr_kernel", None)
out["recorded"] = {"stock": s, "ours": o, "sums": [float(x.sum()), 2 * float(x.sum()), float(x[:160].sum())],
                   "stock_block": s_block, "our_block": o_block,
                   "evaluations": tuner.evaluations if tuner is not None else None,
                   "statuses": tuner.last_session.statuses() if tuner is not None else None,
                   "stock_taken": hasattr(stock.recorded_sum, "_dr_kernel")}


def error_name(launch):
    """The name of the exception a launch raises, or None."""
    try:
        launch()
    except Exception as error:  # noqa: BLE001
        return type(error).__name__
    return None


def both_warned(name, call):
    """both(), with the dr_kernel warnings the calls gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s, o = both(name, call)
    return s, o, [str(w.message) for w in caught if "dr_kernel" in str(w.message)]


s, o, said = both_warned("bad", lambda m: error_name(lambda: m.bad_argument[grid1(n)](x.tolist(), torch.empty(n), n)))
out["bad"] = {"stock": s, "ours": o, "warnings": said, "kept": dr_kernel.kept()}
# The same user's error on a library's own autotuner: handed back to it.
s, o, said = both_warned("recorded_bad", lambda m: error_name(
    lambda: m.recorded_sum[grid1(n + 1)](x.tolist(), torch.zeros(1), None, n + 1, HAS_MAX=False)))
out["recorded_bad"] = {"stock": s, "ours": o, "warnings": said,
                       "kept": [k for k, _ in dr_kernel.kept() if "recorded_sum" in k],
                       "taken": [k for k in dr_kernel.taken_over() if "recorded_sum" in k]}


def measured_in_another_process(kernel):
    while not hasattr(kernel, "last_session"):
        kernel = kernel.fn
    return kernel._isolated()


out["isolated"] = sorted(name for name in ("heuristics_above", "heuristics_below", "tril_blocks", "atomic_sum",
                                           "inplace_add", "hooked", "pruned", "block_sums")
                         if measured_in_another_process(getattr(ours, name)))
if tuner is not None and tuner._isolated():
    out["isolated"] = sorted([*out["isolated"], "recorded_sum"])
print(json.dumps(out))
