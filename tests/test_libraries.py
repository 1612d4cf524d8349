"""The drop-in on real libraries installed from PyPI by scripts/setup: every kernel each decorates
with triton.autotune is taken over (counted against stock's decorations), and some of their ops,
tuned by dr_kernel in Triton's interpreter, match the library's reference or torch. Each library
runs in child processes (tests/library_takeover.py): the switch must precede the library's import."""

import json
from pathlib import Path

from interpreted import run_interpreted

HERE = Path(__file__).parent


def _library(mode, tmp_path, library="liger-fla"):
    out = run_interpreted([str(HERE / "library_takeover.py"), mode, library], cwd=tmp_path,
                          env={"DR_KERNEL_DB": str(tmp_path / "results.db")})
    return json.loads(out.strip().splitlines()[-1])


def test_real_libraries_every_autotuned_kernel_is_taken_over_and_ops_agree(tmp_path):
    """Liger-Kernel and flash-linear-attention (fla-core), installed from PyPI by scripts/setup:
    every kernel they decorate with triton.autotune is taken over, and their ops, tuned by
    dr_kernel in the interpreter, match torch."""
    counted = _library("count", tmp_path)
    ours = _library("ours", tmp_path)
    assert counted["failed_imports"] == ours["failed_imports"]
    liger = [k for k in counted["decorated"] if k.startswith("liger_kernel.")]
    fla = [k for k in counted["decorated"] if k.startswith("fla.")]
    # fla builds some of its kernels' autotuners with its own decorator (fla_cache_autotune: a
    # subclass of Triton's Autotuner, never through triton.autotune): counted as they are built.
    own = [k for k in fla if k.endswith("(fla.ops.utils.cache.CachedAutotuner)")]
    assert len(liger) >= 8 and len(fla) >= 150 and len(own) >= 50, (len(liger), len(fla), len(own))
    assert ours["taken_over"] == counted["decorated"] and ours["kept"] == []
    assert ours["rms_norm"]["forward"] < 1e-5 and ours["rms_norm"]["backward"] < 1e-4
    assert ours["cumsum"] < 1e-4
    assert ours["evaluations"] > 0  # The norm kernels were tuned, not just launched.
    # fla's L2 norm, forward and backward: two kernels of its own autotuner, tuned by dr_kernel.
    assert ours["l2norm"]["forward"] < 1e-5 and ours["l2norm"]["backward"] < 1e-5
    assert ours["l2norm"]["evaluations"] == [25, 25]  # Each list of 25 measured whole.


def test_torchao_every_autotuned_kernel_is_taken_over_and_its_int8_gemm_agrees(tmp_path):
    """torchao (installed from PyPI by scripts/setup; its C++ extensions do not load on this torch,
    its Triton kernels do): every kernel of its modules decorated with triton.autotune is taken over,
    and its INT8 GEMM, tuned by dr_kernel in the interpreter, gives the exact product."""
    counted = _library("count", tmp_path, "torchao")
    ours = _library("ours", tmp_path, "torchao")
    assert counted["failed_imports"] == ours["failed_imports"]
    assert len(counted["decorated"]) >= 30 and all(k.startswith("torchao.") for k in counted["decorated"])
    assert ours["taken_over"] == counted["decorated"] and ours["kept"] == []
    assert ours["int8_mm"] < 1e-6
    assert ours["evaluations"] == 25  # Its list of 27 is measured whole, the two listed twice once.


def test_cut_cross_entropy_every_autotuned_kernel_is_taken_over(tmp_path):
    """Apple's Cut Cross-Entropy (installed from PyPI by scripts/setup) with CCE_AUTOTUNE=1: its three
    kernels, each under @triton.heuristics with prune_configs_by (early_config_prune, a perf_model
    given as functools.partial, top_k) and restore_value or reset_to_zero, are all taken over. They
    call libdevice, which the interpreter lacks: the GPU runs them (benchmarks/library_bench.py)."""
    counted = _library("count", tmp_path, "cce")
    ours = _library("ours", tmp_path, "cce")
    assert counted["failed_imports"] == ours["failed_imports"] == []
    assert len(counted["decorated"]) == 3 and all(k.startswith("cut_cross_entropy.") for k in counted["decorated"])
    assert ours["taken_over"] == counted["decorated"] and ours["kept"] == []


def test_gemlite_every_autotuned_kernel_is_taken_over_and_again_when_it_reloads_its_modules(tmp_path):
    """GemLite (installed from PyPI by scripts/setup), imported as on an sm_90 machine: its 23
    autotuned kernels (GEMMs and GEMVs stacked over @triton.heuristics with early_config_prune
    lambdas, activation quantisers) are all taken over, and so are the 9 that its own
    set_autotune("max") decorates anew by reloading its modules with lists of up to 2,000 configs."""
    counted = _library("count", tmp_path, "gemlite")
    ours = _library("ours", tmp_path, "gemlite")
    assert counted["failed_imports"] == ours["failed_imports"]
    assert all(name.startswith("gemlite.vllm") for name in ours["failed_imports"])  # vLLM is not installed.
    assert len(counted["decorated"]) >= 20 and all(k.startswith("gemlite.") for k in counted["decorated"])
    assert ours["taken_over"] == counted["decorated"] and ours["kept"] == []
    assert counted["reloaded"]["type"] == "triton.runtime.autotuner"
    assert ours["reloaded"] == {**counted["reloaded"], "type": "dr_kernel.dropin"}
    assert ours["reloaded"]["decorated_again"] >= 5 and ours["reloaded"]["gemm_list"] > 100


def test_mamba_ssm_every_autotuned_kernel_is_taken_over_and_mamba2s_scan_agrees(tmp_path):
    """mamba-ssm (installed from PyPI by scripts/setup without its CUDA extensions): all 43 kernels
    it decorates with triton.autotune are taken over, its Mamba3 kernels' lists among them (some
    configs cap registers with maxnreg, some leave it unset), and Mamba2's chunked scan, forward
    and backward, tuned by dr_kernel in the interpreter (14 kernels), matches the library's own
    reference in torch, with no config judged wrong."""
    counted = _library("count", tmp_path, "mamba")
    ours = _library("ours", tmp_path, "mamba")
    assert counted["failed_imports"] == ours["failed_imports"]
    # What needs the CUDA extensions, transformers, CuTe or TileLang, none installed.
    assert all(name.startswith(("mamba_ssm.models", "mamba_ssm.modules", "mamba_ssm.utils", "mamba_ssm.ops.cute",
                                "mamba_ssm.ops.tilelang", "mamba_ssm.ops.selective_scan"))
               for name in ours["failed_imports"]), ours["failed_imports"]
    assert len(counted["decorated"]) >= 40 and all(k.startswith("mamba_ssm.") for k in counted["decorated"])
    assert ours["taken_over"] == counted["decorated"] and ours["kept"] == []
    assert ours["ssd"]["forward"] < 1e-4 and ours["ssd"]["backward"] < 1e-4, ours["ssd"]
    assert len(ours["tuned_kernels"]) == 14
    # Its backward kernels whose partial sums the library reads by best_config lose no config (on
    # an H100 they lost 5 of 6, and 11.6 % of the op's GPU time, before checking.py knew them).
    assert ours["wrong"] == {}, ours["wrong"]


def test_real_library_deferred_tuning_tunes_on_later_calls_and_every_call_agrees(tmp_path):
    """fla's RMSNorm under install(defer=True): its first forward and backward launch the lists'
    first configs and leave their keys pending; later calls tune them, and every call matches torch."""
    ours = _library("defer", tmp_path)
    assert ours["kept"] == [] and ours["pending_after_first"] >= 2
    assert ours["pending_at_end"] == 0 and ours["calls"] >= 2
    assert ours["rms_norm"]["forward"] < 1e-5 and ours["rms_norm"]["backward"] < 1e-4
    assert ours["evaluations"] > 0
