"""dr_kernel.autotune as a drop-in for triton.autotune, on the patterns libraries write
(tests/autotune_kernels.py), in Triton's interpreter against stock triton.autotune."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def _run(args, tmp_path, **env):
    env = dict(os.environ, TRITON_INTERPRET="1", DR_KERNEL_DB=str(tmp_path / "results.db"),
               PYTHONPATH=os.pathsep.join([str(HERE), *sys.path]), **env)
    out = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-4000:]
    return out


# Every pattern twice: measured in the program's process, as triton.autotune measures (the
# drop-in's default), and in a measuring process wherever the kernel can go (isolate=None, what
# the notebook magic asks for): the caller must see the same results either way.
@pytest.fixture(scope="module", params=["here", "isolated"])
def patterns(request, tmp_path_factory):
    env = {"PATTERNS_ISOLATE": "1"} if request.param == "isolated" else {}
    out = _run([str(HERE / "autotune_patterns.py")], tmp_path_factory.mktemp("patterns"), **env)
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "mode": request.param}


def test_with_isolate_none_every_kernel_without_the_callers_hooks_is_measured_in_another_process(patterns):
    # Kernels with heuristics above or below, reset_to_zero, restore_value and prune_configs_by
    # travel (by module name, the tuner found below whatever wraps it); pre-hooks are the
    # caller's functions and run where the caller runs.
    expected = ["atomic_sum", "block_sums", "heuristics_above", "heuristics_below", "inplace_add", "pruned",
                "recorded_sum", "tril_blocks"]
    assert patterns["isolated"] == (expected if patterns["mode"] == "isolated" else [])


def test_every_decorated_kernel_is_taken_over_and_stays_an_autotuner(patterns):
    assert len(patterns["taken_over"]) == 10
    assert patterns["our_type"] == "Autotuner" and patterns["stock_type"] == "Autotuner"


@pytest.mark.parametrize("stacking", ["above", "below"])
def test_heuristics_above_or_below_autotune(patterns, stacking):
    result = patterns[stacking]
    assert result["stock_ok"] and result["ours_ok"]
    assert result["statuses"] == {"ok": 6}  # Every config ran and agreed with the first.


def test_a_librarys_own_autotuner_subclass_is_taken_over_and_its_recorded_configs_kept(patterns):
    # Built by the library's decorator, not triton.autotune (fla's fla_cache_autotune): its list is
    # tuned by dr_kernel, the reset of an optional output that is None skipped (the subclass's own
    # hook does the same for Triton), and the config it recorded for a key launched untimed.
    result = patterns["recorded"]
    assert "autotune_kernels.recorded_sum (autotune_kernels.RecordedAutotuner)" in patterns["taken_over"]
    assert result["evaluations"] == 3 and result["statuses"] == {"ok": 3}
    assert result["ours"] == pytest.approx(result["stock"], rel=1e-5)
    assert result["ours"] == pytest.approx(result["sums"], rel=1e-4)  # One sum, then two, then the recorded key's.
    assert result["our_block"] == result["stock_block"] == 64  # The recorded config, not a tuned one.
    assert not result["stock_taken"]  # Made after uninstall(): Triton's.
    # A user's error on it: raised as its own autotuner raises it, which tunes the kernel from then on.
    bad = patterns["recorded_bad"]
    assert bad["ours"] == bad["stock"] == "InterpreterError"
    assert len(bad["warnings"]) == 1 and "is tuned by its own autotuner from now on" in bad["warnings"][0]
    assert bad["kept"] == ["autotune_kernels.recorded_sum (autotune_kernels.RecordedAutotuner)"] and bad["taken"] == []


def test_an_output_laid_out_by_the_configs_tiles_is_not_compared_where_the_library_reads_the_config(patterns):
    # One partial sum per block, summed by the library as far as block_sums.best_config's blocks go
    # (mamba-ssm's backward kernels): larger blocks write fewer sums, none of them wrong.
    result = patterns["block_sums"]
    assert result["statuses"] == {"ok": 3}
    assert result["ours"] == pytest.approx(result["sum"], rel=1e-5) and result["stock"] == pytest.approx(result["sum"],
                                                                                                          rel=1e-5)
    assert len(result["notes"]) == 1 and "block_sums.best_config" in result["notes"][0]
    assert result["checked_alike"]  # A kernel whose config nobody reads is compared as before.


def test_partial_writes_compare_only_what_both_configs_define(patterns):
    # Lower-triangular blocks of a torch.zeros output: larger tiles than the reference's (the list's
    # first, BLOCK=8) write more of the diagonal blocks' upper part; none is judged wrong for it.
    result = patterns["tril"]
    assert result["statuses"] == {"ok": 3}
    assert result["lower_written"] and result["upper_zero"]


def test_reset_to_zero_accumulates_once_like_triton(patterns):
    result = patterns["atomic"]
    assert result["ours"] == pytest.approx(result["stock"], rel=1e-5)
    assert result["ours"][0] == pytest.approx(result["sum"], rel=1e-4)   # Tuning call: one sum, not two.
    assert result["ours"][1] == pytest.approx(2 * result["sum"], rel=1e-4)  # Cached call: no reset.
    assert result["statuses"] == {"ok": 3}


def test_restore_value_in_place_update_applies_once(patterns):
    assert patterns["inplace"]["stock_ok"] and patterns["inplace"]["ours_ok"]


def test_config_and_autotune_pre_hooks_run_around_launches(patterns):
    result = patterns["hooked"]
    assert result["stock_ok"] and result["ours_ok"]
    # Both hooks run before every launch: checked and timed ones, and the real one.
    assert result["our_calls"]["config"] == result["our_calls"]["autotune"] > 2


def test_prune_configs_by_prunes_as_triton_does(patterns):
    result = patterns["pruned"]
    assert result["ours_ok"]
    assert result["our_prune_calls"] == result["stock_prune_calls"] == [20]
    # early_config_prune keeps BLOCK <= 20 (8, 16); perf_model's top_k=2 keeps both.
    assert result["measured"] == [8, 16]


def test_a_users_error_is_raised_as_triton_raises_it_with_one_warning(patterns):
    result = patterns["bad"]
    assert result["ours"] == result["stock"] == "InterpreterError"
    assert len(result["warnings"]) == 1 and "bad_argument" in result["warnings"][0]
    assert result["kept"][0][0] == "autotune_kernels.bad_argument"


def test_exceptions_are_classified_as_tritons_autotuner_does():
    from dr_kernel.checking import classify
    from triton.compiler.errors import CompileTimeAssertionFailure
    from triton.runtime.errors import OutOfResources, PTXASError

    assert classify(OutOfResources(300000, 232448, "shared memory"))["status"] == "out_of_resources"
    assert classify(PTXASError("ptxas failed"))["status"] == "compile_error"
    assert classify(CompileTimeAssertionFailure(None, None, "BLOCK too large"))["status"] == "compile_error"
    failure = classify(IndexError("list index out of range"))
    assert failure["status"] == "launch_error" and "IndexError" in failure["error"]


SCRIPT = """
import sys, torch, triton
import autotune_kernels as k
import dr_kernel
kind = type(k.heuristics_below).__module__
if kind == "dr_kernel.dropin":  # Stock autotune cannot time in the interpreter: run ours only.
    n = 100
    x = torch.randn(n)
    y = torch.empty(n)
    k.heuristics_below[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, n)
    assert torch.allclose(y, x + 1)
print(kind, len(dr_kernel.taken_over()), getattr(k.heuristics_below, "widen", None),
      getattr(k.heuristics_below, "isolate", "-"), getattr(k.heuristics_below, "defer", "-"), sys.argv[1:])
"""


def test_environment_variable_switches_a_program_without_editing_it(tmp_path):
    (tmp_path / "prog.py").write_text(SCRIPT)
    out = _run(["prog.py", "a"], tmp_path, DR_KERNEL_AUTOTUNE="1")
    # Within the lists and in the program's process by default.
    assert out.stdout.split() == ["dr_kernel.dropin", "10", "False", "False", "False", "['a']"]
    out = _run(["prog.py", "a"], tmp_path, DR_KERNEL_AUTOTUNE="widen,isolate,defer")
    assert out.stdout.split() == ["dr_kernel.dropin", "10", "True", "None", "True", "['a']"]
    out = _run(["prog.py", "a"], tmp_path)
    assert out.stdout.split()[:2] == ["triton.runtime.autotuner", "0"]


def test_python_m_dr_kernel_run_switches_a_script(tmp_path):
    (tmp_path / "prog.py").write_text(SCRIPT)
    out = _run(["-m", "dr_kernel", "run", "prog.py", "--flag"], tmp_path)
    assert out.stdout.split() == ["dr_kernel.dropin", "10", "False", "False", "False", "['--flag']"]
    out = _run(["-m", "dr_kernel", "run", "--isolate", "--widen", "--defer", "prog.py", "--flag"], tmp_path)
    assert out.stdout.split() == ["dr_kernel.dropin", "10", "True", "None", "True", "['--flag']"]


SET_UP_PACKAGE = """
import builtins
if not getattr(builtins, "program_set_up", False):
    raise ImportError("this package is set up by its program")
"""

SET_UP_KERNEL = """
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (32, 64)], key=["n"])
@triton.jit
def double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offsets, 2 * tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)
"""

SET_UP_PROGRAM = """
import builtins, json, warnings, torch, triton, dr_kernel
builtins.program_set_up = True
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    dr_kernel.install(isolate=None)
    from setup_pkg.kernels import double
    x = torch.arange(100, dtype=torch.float32)
    y = torch.empty_like(x)
    double[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](x, y, 100)
print(json.dumps({"right": bool(torch.equal(y, 2 * x)), "kept": dr_kernel.kept(), "evaluations": double.evaluations,
                  "warnings": [str(w.message) for w in caught]}))
"""


def test_a_kernel_a_measuring_process_cannot_import_is_measured_in_the_program_not_handed_back(tmp_path):
    # install(isolate=None) measures where a kernel can go, importing its module by name there; a
    # package that only its program can import (mamba-ssm without its CUDA extension, imported as
    # tests/library_takeover.py does) must still be tuned by dr_kernel, in the program's process.
    (tmp_path / "setup_pkg").mkdir()
    (tmp_path / "setup_pkg" / "__init__.py").write_text(SET_UP_PACKAGE)
    (tmp_path / "setup_pkg" / "kernels.py").write_text(SET_UP_KERNEL)
    (tmp_path / "prog.py").write_text(SET_UP_PROGRAM)
    result = json.loads(_run(["prog.py"], tmp_path).stdout.strip().splitlines()[-1])
    assert result["right"] and result["kept"] == [] and result["evaluations"] == 2
    assert [w for w in result["warnings"] if "a measuring process could not set the kernel up" in w
            and "this package is set up by its program" in w and "measured in this process" in w], result["warnings"]
    assert not [w for w in result["warnings"] if "tuned by triton.autotune from now on" in w]


OVERRUN_SCRIPT = """
import json, torch, triton, triton.language as tl, dr_kernel


# A partial sum per block, into a buffer its caller sizes for blocks of at least 64 (as mamba-ssm's
# chunk scan backward sizes one for its list's smallest block): a block of 32 writes past its end.
@dr_kernel.autotune(configs=[triton.Config({"BLOCK": b}) for b in (32, 64)], key=["n"])
@triton.jit
def partial_sums(x_ptr, sums_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(sums_ptr + tl.program_id(0), tl.sum(tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)))


n = 4096
x = torch.ones(n)
sums = torch.zeros(triton.cdiv(n, 64))
partial_sums[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, sums, n)
rows = {str(c["BLOCK"]): m for c, m, _ in partial_sums.last_session.history}
print(json.dumps({"best": partial_sums.best_config.kwargs, "sum": float(sums.sum()), "rows": rows}))
"""


def test_a_config_that_writes_past_its_arguments_memory_is_never_chosen(tmp_path):
    # Every measured launch runs on copies followed by guard bytes: a config that changes them
    # wrote outside its arguments (unguarded, into whatever memory follows: in the interpreter the
    # heap, which aborted the program on mamba-ssm's scan widened), and is excluded.
    (tmp_path / "overrun.py").write_text(OVERRUN_SCRIPT)
    result = json.loads(_run(["overrun.py"], tmp_path).stdout.strip().splitlines()[-1])
    assert result["best"] == {"BLOCK": 64} and result["sum"] == 4096.0
    assert result["rows"]["32"]["status"] == "wrong" and "writes past the end of sums" in result["rows"]["32"]["error"]
    assert result["rows"]["64"]["status"] == "ok"


def test_widen_searches_past_the_list_and_checks_each_config(tmp_path):
    script = """
import json, torch, triton, dr_kernel
with dr_kernel.installed(widen=True):
    import autotune_kernels as k
n = 256
x = torch.randn(n)
y = torch.empty(n)
k.heuristics_below[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, n)
history = k.heuristics_below.history
print(json.dumps({"ok": bool(torch.allclose(y, x + 1)), "configs": [c for c, m, _ in history],
                  "statuses": sorted({m["status"] for c, m, _ in history})}))
"""
    (tmp_path / "widen.py").write_text(script)
    result = json.loads(_run(["widen.py"], tmp_path).stdout.strip().splitlines()[-1])
    assert result["ok"] and result["statuses"] == ["ok"]
    blocks = {c["BLOCK"] for c in result["configs"]}
    listed = {16, 32, 64}
    assert blocks & listed and blocks - listed <= {8, 128}
    assert len(result["configs"]) > 6  # The 6 listed, then beyond them.


DEFERRED_SCRIPT = """
import json, time, torch, triton, dr_kernel
with dr_kernel.installed(defer=True):
    import autotune_kernels as k
n = 200
x = torch.randn(n)
y = torch.empty(n)
out = torch.zeros(1)
grid = lambda m: (triton.cdiv(n, m["BLOCK"]),)
first = {}
class Caching(triton.KernelInterface):  # A wrapper that keeps the first launch (as FlagGems' LibEntry does).
    def __init__(self, fn):
        self.fn, self.arg_names = fn, fn.arg_names

    def run(self, *args, **kwargs):
        return self.fn.run(*args, **kwargs)


k.heuristics_below[grid](x, y, n)
k.atomic_sum[grid](x, out, n)
square = lambda m: (triton.cdiv(16, m["BLOCK"]), triton.cdiv(16, m["BLOCK"]))
Caching(k.tril_blocks)[square](torch.randn(256), torch.zeros(256), 16)
first = {"wrapped_tuned": len(k.tril_blocks.cache), "wrapped_note": any("LibEntry" in t for t in k.tril_blocks.notes),
         "pending": sorted(name for name, _ in dr_kernel.pending_tunings()),
         "cached": len(k.heuristics_below.cache) + len(k.atomic_sum.cache),
         "evaluations": k.heuristics_below.evaluations + k.atomic_sum.evaluations,
         "block": k.heuristics_below.best_config.kwargs["BLOCK"],
         "right": bool(torch.allclose(y, x + 1)) and bool(torch.allclose(out, x.sum(), rtol=1e-4))}
calls, right, deadline = 1, True, time.monotonic() + 300
while dr_kernel.pending_tunings() and time.monotonic() < deadline:
    y.zero_()
    out.zero_()
    k.heuristics_below[grid](x, y, n)
    k.atomic_sum[grid](x, out, n)
    calls += 1
    right = right and bool(torch.allclose(y, x + 1)) and bool(torch.allclose(out, x.sum(), rtol=1e-4))
sessions = [s for s in (k.heuristics_below.last_session, k.atomic_sum.last_session) if s is not None]
print(json.dumps({"first": first, "calls": calls, "right": right, "pending": dr_kernel.pending_tunings(),
                  "evaluations": [k.heuristics_below.evaluations, k.atomic_sum.evaluations],
                  "statuses": [s.statuses() for s in sessions],
                  "waits": [s.split_s["compile"] for s in sessions],
                  "deferred_s": k.heuristics_below.deferred_s + k.atomic_sum.deferred_s}))
"""


def test_deferred_tuning_launches_the_first_config_then_tunes_a_later_call(tmp_path):
    (tmp_path / "deferred.py").write_text(DEFERRED_SCRIPT)
    result = json.loads(_run(["deferred.py"], tmp_path).stdout.strip().splitlines()[-1])
    first = result["first"]
    # The first call tunes nothing: each kernel launches its list's first config, right, and waits.
    assert first["pending"] == ["atomic_sum", "heuristics_below"]
    # Under a wrapper that may keep the first launch's config, the key is tuned on its first call.
    assert first["wrapped_tuned"] == 1 and first["wrapped_note"]
    assert first["cached"] == 0 and first["evaluations"] == 0 and first["block"] == 16 and first["right"]
    # Two kernels' compiles shared the pool; each key was tuned on a later call, measuring its
    # whole list, with every compile done before (the session waited for none), and every call's
    # result, reset_to_zero's accumulation included, was right.
    assert result["pending"] == [] and result["calls"] >= 2 and result["right"]
    assert result["evaluations"] == [6, 3]
    assert result["statuses"] == [{"ok": 6}, {"ok": 3}]
    assert max(result["waits"]) < 0.05 and len(result["deferred_s"]) == 2
    # The winners are stored: a new process launches them on its first call, with nothing deferred.
    again = json.loads(_run(["deferred.py"], tmp_path).stdout.strip().splitlines()[-1])
    assert again["first"]["pending"] == [] and again["first"]["cached"] == 2 and again["first"]["evaluations"] == 0
