"""The fused linear layer (linear_act: Y = act(X·Wᵀ + b)) and dr_kernel.ops.linear: results against
torch in Triton's interpreter (in a child process that sets TRITON_INTERPRET before importing
anything), the problem's own checks, and the compile for the H200."""

from __future__ import annotations

import json

import pytest
from dr_kernel.kernels import BUILTINS
from interpreted import run_interpreted

CHILD = """
import json, warnings
import torch
import torch.nn.functional as F
from dr_kernel import ops
from dr_kernel.kernels import BUILTINS

kernel = BUILTINS["linear_act"]
out = {"kernel": {}, "ops": {}}
# Tiles past every edge (M 40 of 48, N 72 of 96, K 56 of 64); each activation, fp16 and fp32 (the
# interpreter multiplies bf16 operands of tl.dot wrongly: test_kernels.py; bf16 compiles below).
config = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2, "num_warps": 4, "num_stages": 2}
for act in (0, 1, 2):
    for dtype in ("fp16", "fp32"):
        shape = {"M": 40, "N": 72, "K": 56, "ACT": act}
        inputs = kernel.make_inputs(shape, dtype, "cpu", 0)
        inputs["y"].fill_(float("nan"))
        kernel._launch(kernel.fn_for(config, shape), inputs, config)
        expected = kernel._reference(inputs).float()
        err = ((inputs["y"].float() - expected).norm() / expected.norm()).item()
        out["kernel"][f"{act} {dtype}"] = err

ops.configure(db="results.db", variants=("triton",), max_evals=2)
x = torch.randn(2, 20, 56, dtype=torch.float16)
w, b = (torch.rand(72, 56) * 0.2 - 0.1).half(), (torch.rand(72) * 0.2 - 0.1).half()
for name in (None, "gelu", "silu"):
    y = ops.linear(x, w, b, name)
    z = F.linear(x.float(), w.float(), b.float())
    expected = F.gelu(z) if name == "gelu" else F.silu(z) if name == "silu" else z
    choice = ops.decisions()[-1]
    out["ops"][str(name)] = {"err": ((y.float() - expected).norm() / expected.norm()).item(),
                             "shape": list(y.shape), "variant": choice.variant, "kernel": choice.kernel,
                             "problem": choice.shape}
tuned = len(ops.decisions())
# Calls the kernel does not cover: torch's own result, nothing tuned.
out["uncovered"] = {
    "no bias": torch.equal(ops.linear(x, w, None, "gelu"), F.gelu(F.linear(x, w))),
    "fp32": torch.equal(ops.linear(x.float(), w.float(), b.float()), F.linear(x.float(), w.float(), b.float())),
    # (Against torch's call on the same strided weight: a GEMM over another layout may round otherwise.)
    "transposed weight": torch.equal(ops.linear(x, w.t().contiguous().t(), b), F.linear(x, w.t().contiguous().t(), b)),
}
out["untouched"] = len(ops.decisions()) == tuned
# The race: torch's linear and activation win on the CPU, and serve with torch's result.
ops.configure(variants=("triton", "torch"), rounds=2, reps=3)
x2 = torch.randn(8, 64, dtype=torch.float16)
w2, b2 = (torch.rand(32, 64) * 0.2 - 0.1).half(), (torch.rand(32) * 0.2 - 0.1).half()
out["raced_equal"] = torch.equal(ops.linear(x2, w2, b2, "silu"), F.silu(F.linear(x2, w2, b2)))
out["raced_variant"] = ops.decisions()[-1].variant
try:
    ops.linear(x, w, b, "relu")
except ValueError as e:
    out["bad_activation"] = str(e)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    out = run_interpreted(["-c", CHILD], cwd=tmp_path_factory.mktemp("linear"))
    return json.loads(out.strip().splitlines()[-1])


def test_the_kernel_gives_torchs_linear_bias_and_activation_on_tiles_past_every_edge(interpreted):
    assert len(interpreted["kernel"]) == 6
    for case, err in interpreted["kernel"].items():
        # Outputs start as NaN: an element the kernel skipped would show. fp32 products are tf32's.
        assert err < 5e-3, (case, err)


def test_ops_linear_serves_each_activation_through_the_tuned_kernel_with_torchs_result(interpreted):
    for name, r in interpreted["ops"].items():
        assert r["variant"] == "triton" and r["kernel"] == "linear_act" and r["shape"] == [2, 20, 72], r
        assert r["problem"] == {"M": 40, "N": 72, "K": 56, "ACT": {"None": 0, "gelu": 1, "silu": 2}[name]}
        assert r["err"] < 5e-3, (name, r)


def test_ops_linear_leaves_what_the_kernel_does_not_cover_to_torch_and_races_it(interpreted):
    assert all(interpreted["uncovered"].values()) and interpreted["untouched"], interpreted["uncovered"]
    assert interpreted["raced_variant"] == "torch" and interpreted["raced_equal"]
    assert "activation='relu'" in interpreted["bad_activation"] and "'gelu' or 'silu'" in interpreted["bad_activation"]


def test_the_activation_is_part_of_the_problem_and_checked():
    kernel = BUILTINS["linear_act"]
    config = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
    with pytest.raises(ValueError, match="ACT must be 0 \\(none\\), 1 \\(gelu\\) or 2 \\(silu\\), not 3"):
        kernel.compile_source({"M": 64, "N": 64, "K": 64, "ACT": 3}, "fp16", config)
    # Matmul's tile space less its variants, and less the configs whose accumulator spills.
    assert "SPLIT_K" not in kernel.space and "TMA" not in kernel.space
    assert not kernel.satisfies({**config, "BLOCK_M": 256, "BLOCK_N": 256})


def test_it_compiles_for_the_h200_with_the_activation_in_the_epilogue():
    from dr_kernel.analysis import analyse

    kernel = BUILTINS["linear_act"]
    shape = {"M": 4096, "N": 11008, "K": 4096}
    config = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
    reports = {act: analyse(kernel, {**shape, "ACT": act}, "bf16", config) for act in (0, 1, 2)}
    for act, report in reports.items():
        assert report.valid and report.n_spills == 0, (act, report.reason)
        assert "ttng.warp_group_dot" in report.ttgir
    # GELU's erf and SiLU's exponential after the loop: three different binaries.
    assert "math.erf" in reports[1].ttgir and "math.exp" in reports[2].ttgir
    assert len({r.binary_hash for r in reports.values()}) == 3
    # Fusion costs registers: the tile matmul's best uses (128×256, 8 warps: 128 accumulators a
    # thread) spills with GELU's epilogue and not without it.
    big = {**config, "BLOCK_N": 256}
    assert analyse(kernel, {**shape, "ACT": 0}, "bf16", big).n_spills == 0
    assert analyse(kernel, {**shape, "ACT": 1}, "bf16", big).n_spills > 0
