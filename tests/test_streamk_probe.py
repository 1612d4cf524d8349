"""benchmarks/streamk_probe.py (issue 11): its stream-K matmul is right under the interpreter, shared
tiles and the workspace's reset between launches included, and compiles for sm_90 into TMA copies,
wgmma and fp32 atomic adds, before a device session pays to time it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

def test_the_stream_k_probe_matches_fp32_under_the_interpreter(tmp_path):
    environment = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "streamk_probe.py"), "--out", str(tmp_path),
                             "--interpret"], capture_output=True, text=True, env=environment, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads((tmp_path / "streamk.json").read_text())
    # Three problems whose tiles do not fill 5 programs evenly: every variant on every tile, checked.
    assert len(rows) == 3 and all(len(row["configs"]) == 4 * 2 for row in rows)
    for row in rows:
        for entry in row["configs"]:
            assert "error" not in entry and entry["relerr"] < 2e-2, entry
        # The last wave's tiles shared, three launches in a row on fresh inputs: the workspace came
        # back to zeros after each.
        assert row["streamk_repeat_worst_relerr"] < 2e-2


def test_the_stream_k_kernel_compiles_for_hopper_into_tma_wgmma_and_vector_atomics():
    import streamk_probe as probe
    from dr_kernel.analysis import H200, binary_resources

    kernel = probe.compile_for_sm90((128, 256, 64, 8, 3))
    ptx = kernel.asm["ptx"]
    assert "cp.async.bulk.tensor" in ptx and "wgmma.mma_async" in ptx
    # Shared tiles summed four floats an atomic (a reduction, `red`, where Triton 3.7 and later see
    # that the old values are unused); the tile's counter an acquire-release add.
    assert re.search(r"\b(atom|red)\.global\.gpu\.relaxed\.add\.v4\.f32", ptx)
    assert "atom.global.gpu.acq_rel.add.u32" in ptx
    assert "atom.global.gpu.relaxed.exch.b32" in ptx  # The counter's reset.
    assert kernel.metadata.shared <= H200.shared_per_block
    assert binary_resources(kernel.asm["cubin"], ptx)[1] == 0  # No spills.
