"""The Gluon probes of benchmarks/ (issue 11) compile for sm_90 on the CPU as warp-specialised
kernels: what a device session would otherwise find out only after paying for a machine."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

H200_SHARED = 232_448  # Bytes of shared memory a block may use on sm_90.


def partitions(ptx: str) -> list[int]:
    """The register counts the kernel's partitions are set to (setmaxnreg)."""
    return [int(n) for n in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", ptx)]


@pytest.mark.parametrize("pipe", [False, True])
def test_the_attention_probe_compiles_into_a_load_warp_and_two_consumer_warpgroups(pipe):
    import gluon_attention_probe as probe

    kernel = probe.compile_for_sm90(128, 128, 2, causal=True, pipe=pipe)
    ptx = kernel.asm["ptx"]
    assert kernel.metadata.num_warps == 12 and kernel.metadata.shared <= H200_SHARED
    assert 24 in partitions(ptx) and 240 in partitions(ptx)
    assert len(re.findall(r"wgmma\.mma_async", ptx)) > 0 and "cp.async.bulk.tensor" in ptx
    # With PIPE a warpgroup waits for its QK^T alone while its PV product runs on.
    waits = set(re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx))
    assert waits == ({"0", "1"} if pipe else {"0"})


def test_the_matmul_probe_compiles_into_a_load_warp_and_two_consumer_warpgroups():
    import gluon_matmul_probe as probe

    kernel = probe.compile_for_sm90({"BM": 128, "BN": 128, "BK": 64, "GROUP_M": 8, "STAGES": 2})
    ptx = kernel.asm["ptx"]
    assert kernel.metadata.num_warps == 12 and kernel.metadata.shared <= H200_SHARED
    assert 24 in partitions(ptx) and 240 in partitions(ptx)
    # One MMA stays in flight while the next stage is waited for.
    assert "1" in re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx)
