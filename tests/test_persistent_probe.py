"""benchmarks/persistent_probe.py (issue 11): the persistent TMA matmul's variants are right under the
interpreter, and its warp-specialised tile loop really is split into Triton's Hopper partitions when
compiled for sm_90 (and where it is not), before a device session pays to time it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_the_persistent_variants_match_fp32_under_the_interpreter(tmp_path):
    environment = {**os.environ, "TRITON_INTERPRET": "1"}
    variants = "built_in,tma_persistent_halves,tma_persistent_ws"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "persistent_probe.py"), "--out", str(tmp_path),
                             "--interpret", "--variants", variants, "--problems", "40,72,48,fp16;70,96,80,fp16",
                             "--tiles", "16,32,16,4,2;32,32,16,4,2"],
                            capture_output=True, text=True, env=environment, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads((tmp_path / "persistent.json").read_text())
    # Both problems leave a partial tile at the edge and more tiles than the 3 programs. (fp16 only:
    # Triton 3.6's interpreter multiplies bf16 operands of tl.dot as raw integers, test_kernels.py.)
    assert [(r["M"], r["N"], r["K"], r["dtype"]) for r in rows] == [(40, 72, 48, "fp16"), (70, 96, 80, "fp16")]
    for row in rows:
        assert len(row["configs"]) == 3 * 2
        for entry in row["configs"]:
            assert "error" not in entry and entry["relerr"] < 2e-2, entry


def test_a_malformed_tile_list_is_refused_with_the_form_it_wants(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "persistent_probe.py"), "--out", str(tmp_path),
                             "--interpret", "--tiles", "128,128,64,4"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "BLOCK_M,BLOCK_N,BLOCK_K,num_warps,num_stages" in result.stderr


def _compile(config, warp_specialize: bool):
    from dr_kernel.analysis import compile_kernel
    from dr_kernel.kernels.matmul import matmul_tma_persistent_kernel

    bm, bn, bk, warps, stages = config
    signature = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32",
                 "programs": "i32", **{name: "constexpr" for name in (
                     "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "EPILOGUE_HALVES", "FLATTEN", "WARP_SPECIALIZE")}}
    constexprs = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "EPILOGUE_HALVES": 1,
                  "FLATTEN": False, "WARP_SPECIALIZE": warp_specialize}
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(3)}
    return compile_kernel(matmul_tma_persistent_kernel, signature, constexprs, attrs,
                          {"num_warps": warps, "num_stages": stages})[0]


@pytest.mark.parametrize("config", [(128, 256, 64, 4, 3), (128, 128, 64, 4, 4)])
def test_the_warp_specialised_loop_compiles_for_hopper_into_a_producer_and_two_consumers(config):
    from dr_kernel.analysis import H200, binary_resources

    kernel = _compile(config, warp_specialize=True)
    ptx = kernel.asm["ptx"]
    # The 4 warps asked for become the producer, which issues the TMA copies and gives its
    # registers up (down to 40), and two more 4-warp consumer groups of 232 registers each run the
    # products and store C: 12 warps in the launch, two warpgroup MMAs where the plain loop has one.
    assert kernel.metadata.num_warps == 12
    assert "setmaxnreg.dec.sync.aligned.u32 \t40" in ptx and "setmaxnreg.inc.sync.aligned.u32 \t232" in ptx
    assert "requestedRegisters = array<i32: 232, 232>" in kernel.asm["ttgir"]
    assert kernel.asm["ttgir"].count("ttng.warp_group_dot ") == 2
    assert "cp.async.bulk.tensor" in ptx and "wgmma.mma_async" in ptx
    assert kernel.metadata.shared <= H200.shared_per_block
    assert binary_resources(kernel.asm["cubin"], ptx)[1] == 0  # No spills.
    # Without the flag the same tile compiles as the one 4-warp loop it was.
    plain = _compile(config, warp_specialize=False)
    assert plain.metadata.num_warps == 4 and "setmaxnreg" not in plain.asm["ptx"]


def test_with_eight_warps_the_loop_is_not_split():
    # What the probe's rows of 8-warp tiles measure as tma_persistent_ws: the unflattened loop.
    kernel = _compile((128, 256, 64, 8, 3), warp_specialize=True)
    assert kernel.metadata.num_warps == 8 and "setmaxnreg" not in kernel.asm["ptx"]
