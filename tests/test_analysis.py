"""Tests of the static analyser against the recorded H200 tables and against hand-computed limits.

These compile for sm_90 in this process with the ptxas bundled in Triton's wheel; no GPU is used.
The recorded values (registers, spills, shared memory, out_of_resources) come from loading the
same kernels on a real H200, so agreeing with them shows the compile here is the compile there.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import triton
from dr_kernel.analysis import H200, DeviceLimits, StaticReport, analyse, launch_problem, occupancy
from dr_kernel.kernels import BUILTINS

DATA = Path(__file__).resolve().parents[1] / "python" / "dr_kernel" / "data" / "h200"


def recorded(family: str, shape: dict, config: dict) -> dict:
    """Returns the first recording's measure row of one configuration of one problem (matmul's in
    tests/data: the package has two of its problems recorded again)."""
    path = Path(__file__).parent / "data" / "matmul_first_recording.jsonl" if family == "matmul" \
        else DATA / f"{family}.jsonl"
    with open(path) as handle:
        rows = list(map(json.loads, handle))
    # Registers, spills and shared memory are the compiler's: another Triton compiles otherwise.
    compiler = next(row["triton"] for row in rows if "triton" in row)
    if compiler != triton.__version__:
        pytest.skip(f"{path.name} was compiled by Triton {compiler}; this is Triton {triton.__version__}")
    for row in rows:
        if row["type"] == "measure" and row["shape"] == shape and row["config"] == config:
            return row
    raise LookupError(f"no recorded row for {family} {shape} {config}")


MM_1K = {"M": 1024, "N": 1024, "K": 1024}
MM_4K = {"M": 4096, "N": 4096, "K": 4096}
MM_SKINNY = {"M": 16, "N": 4096, "K": 4096}
SOFTMAX = {"rows": 4096, "cols": 4096}
ATTN_LONG = {"Z": 2, "H": 16, "N_CTX": 8192, "HEAD_DIM": 128, "CAUSAL": False}
ATTN_CAUSAL = {"Z": 4, "H": 32, "N_CTX": 4096, "HEAD_DIM": 64, "CAUSAL": True}


def mm(bm, bn, bk, group, warps, stages):
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group,
            "num_warps": warps, "num_stages": stages}


def attn(bm, bn, warps, stages):
    return {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps, "num_stages": stages}


def sm(block, warps, stages):
    return {"BLOCK": block, "num_warps": warps, "num_stages": stages}


# Rows chosen to cover spills (matmul with 38 spilled words, softmax with 136, attention with 2),
# register-heavy tiles, shared memory near the limit, the skinny problem and a causal mask.
AGREEMENT_ROWS = [
    ("matmul", MM_1K, mm(16, 256, 128, 1, 2, 4)),
    ("matmul", MM_4K, mm(128, 256, 64, 8, 8, 3)),
    ("matmul", MM_SKINNY, mm(64, 64, 32, 8, 4, 3)),
    ("softmax", SOFTMAX, sm(4096, 1, 1)),
    ("softmax", SOFTMAX, sm(256, 2, 3)),
    ("attention", ATTN_LONG, attn(32, 16, 4, 3)),
    ("attention", ATTN_CAUSAL, attn(128, 64, 4, 2)),
]


@pytest.mark.parametrize("family,shape,config", AGREEMENT_ROWS,
                         ids=[f"{f}-{'-'.join(map(str, c.values()))}" for f, _, c in AGREEMENT_ROWS])
def test_registers_spills_and_shared_memory_agree_with_the_recorded_row(family, shape, config):
    row = recorded(family, shape, config)
    assert row["status"] == "ok"
    report = analyse(BUILTINS[family], shape, "fp16", config)
    assert report.valid, report.reason
    assert (report.n_regs, report.n_spills, report.shared) == (row["n_regs"], row["n_spills"], row["shared"])
    assert report.threads == config["num_warps"] * 32
    assert 0 < report.occupancy <= 1 and report.compile_s >= 0
    assert "ttg.num-warps" in report.ttgir and report.binary_hash


@pytest.mark.parametrize("family,shape,config", [
    ("attention", ATTN_LONG, attn(64, 128, 8, 4)),
    ("matmul", MM_1K, mm(16, 256, 128, 1, 2, 5)),
])
def test_a_recorded_out_of_resources_config_is_refused_with_its_shared_memory(family, shape, config):
    row = recorded(family, shape, config)
    assert row["status"] == "out_of_resources"
    required = int(row["error"].split("Required: ")[1].split(",")[0])
    report = analyse(BUILTINS[family], shape, "fp16", config)
    assert not report.valid
    assert report.shared == required
    assert report.reason == (f"needs {required} B of shared memory; the NVIDIA H200 allows 232448 B "
                             "per block: lower num_stages or the block sizes.")
    assert report.occupancy == 0 and report.limiter == "shared memory"


def test_occupancy_follows_the_register_and_shared_memory_arithmetic():
    # 220 registers → 7040 per warp → 9 warps per SM by registers → one block of 8 warps.
    assert occupancy(220, 147456, 8).blocks_per_sm == 1
    # 32 registers × 4 warps, no shared memory: registers allow 16 blocks, threads 16, so 64 warps.
    fit = occupancy(32, 0, 4)
    assert (fit.blocks_per_sm, fit.active_warps, fit.occupancy) == (16, 64, 1.0)
    # 41 registers × 32 threads = 1312 per warp, allocated as 1536 (six units of 256):
    # 65536 / 1536 = 42 warps → 10 blocks of 4. At 40 registers (1280, no rounding) it would be 12.
    fit = occupancy(41, 0, 4)
    assert (fit.blocks_per_sm, fit.limiter) == (10, "registers")
    fit = occupancy(40, 0, 4)
    assert (fit.blocks_per_sm, fit.limiter) == (12, "registers")
    fit = occupancy(41, 0, 4)
    assert (fit.blocks_per_sm, fit.limiter) == (10, "registers")
    # 100 KB per block plus the reserved 1 KB: two blocks fit in 228 KB.
    fit = occupancy(32, 100 * 1024, 4)
    assert (fit.blocks_per_sm, fit.limiter) == (2, "shared memory")
    # Tiny blocks are bounded by the 32 resident blocks an SM allows.
    fit = occupancy(16, 0, 1)
    assert (fit.blocks_per_sm, fit.active_warps, fit.limiter) == (32, 32, "blocks")


def test_launch_limits_name_the_resource_and_the_fix():
    assert launch_problem(64, 232448, 4) == ""
    assert "lower num_stages" in launch_problem(64, 232449, 4)
    assert launch_problem(32, 0, 64) == ("needs 2048 threads per block; the NVIDIA H200 allows 1024: "
                                         "lower num_warps.")
    assert "registers per block" in launch_problem(255, 0, 32)
    small = DeviceLimits(name="small GPU", shared_per_block=48 * 1024, shared_per_sm=64 * 1024)
    assert launch_problem(64, 65536, 4, small).startswith(
        "needs 65536 B of shared memory; the small GPU allows 49152")


def test_a_config_that_does_not_compile_is_reported_not_raised():
    # tl.arange needs a power of two; 96 is not one, so the front end rejects the kernel.
    report = analyse(BUILTINS["softmax"], SOFTMAX, "fp16", sm(96, 4, 1))
    assert isinstance(report, StaticReport)
    assert not report.valid
    assert report.reason.startswith("did not compile: CompilationError")
    assert "power of 2" in report.reason
    assert report.n_regs is None and report.binary_hash is None


def test_a_compile_error_keeps_its_cause_however_long_the_source_before_it():
    # matmul's source up to tl.arange(0, BLOCK_K) is longer than the summary: the cause comes last.
    config = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 48, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}
    report = analyse(BUILTINS["matmul"], {"M": 256, "N": 256, "K": 256}, "fp16", config)
    assert not report.valid and len(report.reason) < 300
    assert report.reason.startswith("did not compile: CompilationError: at ")
    assert "tl.arange(0, BLOCK_K)" in report.reason and report.reason.endswith("arange's range must be a power of 2")


def test_a_ptxas_error_keeps_the_line_that_names_it():
    from dr_kernel.analysis import _error_summary
    from triton.runtime.errors import PTXASError

    # As Triton raises it: the log of ptxas between its first line and the command that reruns it.
    log = "".join(f"ptxas info : line {i}: used {i} registers\n" for i in range(60))
    log += "ptxas /tmp/k.ptx, line 512; error   : Entry function 'k' uses too much shared data (0x40000 bytes)\n"
    error = PTXASError(f"Internal Triton PTX codegen error\n`ptxas` stderr:\n{log}\n"
                       f"Repro command: ptxas -lineinfo -v --gpu-name sm_90a /tmp/k.ptx {'-o /tmp/k.o ' * 40}\n")
    summary = _error_summary(error)
    assert len(summary) <= 700 and "Internal Triton PTX codegen error" in summary
    assert "error : Entry function 'k' uses too much shared data (0x40000 bytes)" in summary


def test_a_compile_error_whose_cause_is_only_in_its_chain_says_the_cause():
    from dr_kernel.analysis import _error_summary
    from triton.compiler.errors import CompilationError

    # As Triton 3.7 and later raise an error inside a function the kernel calls (a Gluon
    # partition): the place in the kernel, and the reason only as the exception's cause.
    try:
        try:
            raise RuntimeError("async_copy_shared_to_global has been removed; call async_store instead")
        except RuntimeError as cause:
            source = "def k():\n    gl.warp_specialize([])\n"
            raise CompilationError(source, ast.parse(source).body[0].body[0], None) from cause
    except CompilationError as error:
        summary = _error_summary(error)
    assert summary.startswith("CompilationError: ")
    assert summary.endswith("(caused by RuntimeError: async_copy_shared_to_global has been removed; "
                            "call async_store instead)")


def test_malformed_requests_raise_a_sentence_naming_the_input():
    with pytest.raises(ValueError, match="lacks GROUP_M"):
        analyse(BUILTINS["matmul"], MM_1K, "fp16", {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32,
                                                     "num_warps": 4, "num_stages": 2})
    with pytest.raises(TypeError, match="neither a BuiltinKernel nor a tuple"):
        analyse("matmul", MM_1K, "fp16", mm(16, 32, 32, 1, 4, 2))


@pytest.mark.parametrize("dtype,mlir", [("bf16", "bf16"), ("fp32", "f32")])
def test_other_dtypes_compile_with_their_own_element_type(dtype, mlir):
    shape = {"M": 1024, "N": 1024, "K": 1024}
    report = analyse(BUILTINS["matmul"], shape, dtype, mm(64, 64, 32, 8, 4, 3))
    assert report.valid, report.reason
    assert report.dtype == dtype
    # The output pointer, and hence the final cast, has the problem's element type.
    assert f"%c_ptr: !tt.ptr<{mlir}>" in report.ttgir
    fp16 = analyse(BUILTINS["matmul"], shape, "fp16", mm(64, 64, 32, 8, 4, 3))
    assert fp16.binary_hash != report.binary_hash
    if dtype == "fp32":
        # Twice the bytes per element means twice the shared memory per pipeline stage.
        assert report.shared == 2 * fp16.shared


def test_rmsnorm_and_bf16_attention_compile_for_the_h200():
    report = analyse(BUILTINS["rmsnorm"], {"rows": 4096, "cols": 4096}, "bf16", sm(1024, 4, 2))
    assert report.valid and report.n_regs > 0 and report.n_spills == 0
    report = analyse(BUILTINS["attention"], ATTN_CAUSAL, "bf16", attn(64, 32, 4, 2))
    assert report.valid, report.reason
    assert "bf16" in report.ttgir


def test_any_jit_function_can_be_analysed_from_its_signature():
    from dr_kernel.kernels.softmax import softmax_kernel

    signature = {"x_ptr": "*fp16", "y_ptr": "*fp16", "n_cols": "i32", "stride": "i32", "BLOCK": "constexpr"}
    divisible = {(i,): [["tt.divisibility", 16]] for i in range(4)}
    report = analyse((softmax_kernel, signature, {}, divisible), config=sm(256, 2, 3))
    row = recorded("softmax", SOFTMAX, sm(256, 2, 3))
    assert report.valid and report.kernel == "softmax_kernel"
    assert (report.n_regs, report.n_spills, report.shared) == (row["n_regs"], row["n_spills"], row["shared"])
    # The same kernel described by the built-in object compiles to the very same binary.
    assert report.binary_hash == analyse(BUILTINS["softmax"], SOFTMAX, "fp16", sm(256, 2, 3)).binary_hash


def test_the_h200_constant_describes_the_recording_device():
    assert (H200.sm_count, H200.shared_per_block, H200.shared_per_sm, H200.max_warps_per_sm) == \
        (132, 232448, 233472, 64)
    assert H200.target().arch == 90


def test_a_second_compile_of_the_same_config_is_served_from_tritons_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    first = analyse(BUILTINS["softmax"], SOFTMAX, "fp16", sm(512, 4, 1))
    second = analyse(BUILTINS["softmax"], SOFTMAX, "fp16", sm(512, 4, 1))
    assert (first.cache_hit, second.cache_hit) == (False, True)
    assert first.binary_hash == second.binary_hash and first.n_regs == second.n_regs
    assert any(tmp_path.iterdir())
