"""Describing a launch to the compiler exactly as Triton's JIT would compile it (launch.py).

These tests compile for the H200 on the CPU: Triton's JIT needs a driver only to name the current
device, stream and target, which a stand-in provides. A kernel compiled from the captured
description must be the one the launch then finds in Triton's disk cache (a cache hit), through
@triton.heuristics, do_not_specialize and dr_kernel.autotune's static stage.
"""

from __future__ import annotations

import threading

import launch_kernels
import pytest
import torch
from dr_kernel.analysis import LaunchSource, analyse


class _StandInDriver:
    """The three questions Triton's JIT asks of a driver before it compiles."""

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)


@pytest.fixture
def jit_on_cpu(monkeypatch, tmp_path):
    """A fresh Triton cache, the stand-in driver, and a record of every compile the JIT makes."""
    from triton import knobs
    from triton.runtime import driver

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setattr(driver, "_active", _StandInDriver())
    from dr_kernel import tuner

    for kernel in (launch_kernels.scale_shift_jit, launch_kernels.copy_rows):
        kernel.device_caches.clear()  # No binary held in memory from another test.
    tuner._close_shared_pool()  # Its workers were forked with another test's cache directory.
    compiles = []
    monkeypatch.setattr(knobs.compilation, "listener", lambda **kw: compiles.append(kw["cache_hit"]))
    yield compiles
    tuner._close_shared_pool()


def _arguments(n=4096, block=256, shift=1):
    x = torch.randn(n, dtype=torch.float16)
    return {"x_ptr": x, "y_ptr": torch.empty_like(x), "n": n, "shift": shift, "scale": 2.0, "BLOCK": block,
            "num_warps": 4}


def _launch(arguments):
    # What the real launch does before it runs: find or compile the binary (warm-up mode stops there).
    launch_kernels.scale_shift.run(**arguments, grid=None, warmup=True)


def test_the_captured_launch_compiles_to_the_binary_the_launch_loads(jit_on_cpu):
    from dr_kernel.launch import launch_source

    arguments = _arguments()
    source = launch_source(launch_kernels.scale_shift, arguments)
    assert isinstance(source, LaunchSource)
    assert source.constexprs[(6,)] is True  # The heuristic's value, added on the way down.
    assert source.signature["shift"] == "i32"  # do_not_specialize: 1 stays an integer argument.
    assert jit_on_cpu == []  # Capturing compiled nothing.
    report = analyse(source, config={"BLOCK": 256, "num_warps": 4})
    assert report.valid and report.n_regs > 0 and not report.cache_hit
    _launch(arguments)
    assert jit_on_cpu == [True]  # The launch loads what analyse() compiled (its own compile is not listed).


def test_a_launch_the_process_compiled_already_is_described_as_the_binary_it_holds(jit_on_cpu):
    # Another key of a kernel often launches a binary compiled for an earlier one: its description
    # must find that binary in the cache rather than be compiled anew by rules that may differ.
    from dr_kernel.launch import launch_source

    arguments = _arguments(n=1000)
    _launch(arguments)
    assert jit_on_cpu == [False]
    report = analyse(launch_source(launch_kernels.scale_shift, arguments), config={})
    assert report.valid and report.cache_hit


def test_other_threads_compile_as_usual_while_a_launch_is_captured(jit_on_cpu, monkeypatch):
    from dr_kernel import launch

    seen = []
    original = launch_kernels.scale_shift.run

    def run_with_a_neighbour(*args, **kwargs):
        # While this thread's compile is intercepted, another thread launches another config.
        neighbour = threading.Thread(target=lambda: seen.append(original(**_arguments(block=512), grid=None,
                                                                         warmup=True)))
        neighbour.start()
        neighbour.join()
        return original(*args, **kwargs)

    monkeypatch.setattr(launch_kernels.scale_shift, "run", run_with_a_neighbour)
    assert launch.launch_source(launch_kernels.scale_shift, _arguments()) is not None
    # The neighbour's kernel was compiled (the JIT returns it), not captured.
    assert len(seen) == 1 and seen[0] is not None and jit_on_cpu == [False]


def test_configs_that_an_early_prune_rewrites_are_described_as_the_call_launches_them(jit_on_cpu, tmp_path):
    # GemLite's pruner returns new configs with a constexpr its listed ones lack (NUM_STAGES): the
    # static stage must describe the call's configs, not the list's, or every config compiles in
    # the program one after another (its GEMM's 13 configs at 8192 tokens: 9.7 s of a first call on an H100).
    import warnings

    import dr_kernel
    import triton

    def add_block(configs, named_args, **kwargs):
        return [triton.Config({"BLOCK": 128 * c.num_warps}, num_warps=c.num_warps) for c in configs]

    listed = [triton.Config({}, num_warps=w) for w in (1, 2)]
    tuned = dr_kernel.autotune(configs=listed, key=["n"], prune_configs_by={"early_config_prune": add_block},
                               db=str(tmp_path / "results.db"))(launch_kernels.scale_shift)
    x = torch.randn(3000, dtype=torch.float16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(Exception, match="launcher_cls"):  # The stand-in driver launches nothing.
            tuned[(1,)](x, torch.empty_like(x), 3000, 1, 2.0)
    assert not [w for w in caught if "every config is measured" in str(w.message)]
    assert tuned.described == {"exact": 2}
    # The reference's launch loads the binary the pool compiled: a cache hit, not a compile.
    assert jit_on_cpu == [True]


def test_the_autotune_static_stage_compiles_what_each_config_launches(jit_on_cpu, tmp_path):
    import dr_kernel
    import triton

    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b in (128, 256) for w in (2, 4)]
    tuned = dr_kernel.autotune(configs=configs, key=["n"], db=str(tmp_path / "results.db"))(
        launch_kernels.scale_shift)
    arguments = _arguments(n=3000)
    nargs = {k: v for k, v in arguments.items() if k not in ("BLOCK", "num_warps")}
    stage = tuned._static_stage(nargs, {})
    try:
        wanted = [{"BLOCK": 128, "num_warps": 2}, {"BLOCK": 256, "num_warps": 4}]
        requests = [stage.describe(c) for c in wanted]
        reports = stage.reports_for(wanted)
    finally:
        stage.close()
    assert all(r.valid for r in reports), [r.reason for r in reports]
    assert tuned.described == {"exact": 4}
    # One C launcher serves every config: built once, alongside, not by each config's worker.
    assert [r.kernel.with_launcher for r in requests] == [False, False]
    launchers = [r for key, r in stage.reports.items() if key[0] == "compile_also"]
    assert [r.kernel for r in launchers] == ["launcher"]
    assert launchers[0].valid or "launcher was not built ahead" in launchers[0].reason  # No CUDA driver here.
    for config in wanted:
        _launch({**nargs, **config})
    assert jit_on_cpu[-2:] == [True, True]


def test_a_list_that_caps_registers_in_some_configs_only_is_tuned_as_one_space(jit_on_cpu, tmp_path):
    # mamba-ssm's Mamba3 kernels list maxnreg None (no cap), 128 and 256: the configs without a
    # cap must stay uncapped, and each config compile to what its launch loads.
    import dr_kernel
    import triton
    from dr_kernel.space import NO_MAXNREG

    configs = [triton.Config({"BLOCK": 256}, num_warps=4, maxnreg=r) for r in (None, 32)]
    tuned = dr_kernel.autotune(configs=configs, key=["n"], db=str(tmp_path / "results.db"))(
        launch_kernels.scale_shift)
    assert tuned.space.names == ["BLOCK", "num_warps", "num_stages", "maxnreg"]
    arguments = _arguments(n=3000)
    nargs = {k: v for k, v in arguments.items() if k not in ("BLOCK", "num_warps")}
    wanted = [{"BLOCK": 256, "num_warps": 4, "num_stages": 3, "maxnreg": r} for r in (NO_MAXNREG, 32)]
    assert tuned._candidates(nargs, {}) == wanted
    assert [tuned._to_config(c) for c in wanted] == configs  # The listed configs themselves.
    stage = tuned._static_stage(nargs, {})
    try:
        reports = stage.reports_for(wanted)
    finally:
        stage.close()
    assert all(r.valid for r in reports), [r.reason for r in reports]
    assert tuned.described == {"exact": 2}
    assert reports[0].binary_hash != reports[1].binary_hash  # The cap reached the compiler, for one.
    _launch({**nargs, "BLOCK": 256, "num_warps": 4})
    _launch({**nargs, "BLOCK": 256, "num_warps": 4, "maxnreg": 32})
    assert jit_on_cpu[-2:] == [True, True]  # Both binaries were the pool's.


def test_descriptor_kernels_are_described_with_the_block_shape_their_pre_hook_sets(jit_on_cpu, tmp_path):
    import dr_kernel
    import triton
    from triton.tools.tensor_descriptor import TensorDescriptor

    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": 64}, num_warps=4, pre_hook=launch_kernels.set_block_shape)
               for m in (32, 64)]
    tuned = dr_kernel.autotune(configs=configs, key=[], db=str(tmp_path / "results.db"))(launch_kernels.copy_rows)
    x = torch.randn(256, 64, dtype=torch.float16)
    nargs = {"in_desc": TensorDescriptor.from_tensor(x, [1, 1]),
             "out_desc": TensorDescriptor.from_tensor(torch.empty_like(x), [1, 1])}
    stage = tuned._static_stage(nargs, {})
    assert stage is not None  # The rules alone refused these arguments, and every config went unvetted.
    try:
        request = stage.describe({"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4})
        assert request.kernel.signature["in_desc"] == "tensordesc<fp16[64, 64]>"
        # A TMA descriptor's launcher code depends on the compiled kernel: each config builds its own.
        assert request.kernel.with_launcher and not stage._also
        assert nargs["in_desc"].block_shape == [1, 1]  # The hook ran on a copy of the caller's descriptor.
        report, = stage.reports_for([{"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4}])
    finally:
        stage.close()
    assert report.valid, report.reason
    launch_args = {**nargs, "BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4}
    launch_kernels.set_block_shape(launch_args)
    launch_kernels.copy_rows.run(**launch_args, grid=None, warmup=True)
    assert jit_on_cpu[-1] is True  # The launch loaded what the pool compiled.
