"""Scale, mask and softmax fused (masked_softmax: softmax(x · scale + mask)) and
dr_kernel.ops.masked_softmax: results against torch in Triton's interpreter (in a child process
that sets TRITON_INTERPRET before importing anything), the calls it leaves to torch, and the
compile for the H200."""

from __future__ import annotations

import json

import pytest
from dr_kernel.kernels import BUILTINS
from interpreted import run_interpreted

CHILD = """
import json, math
import torch
from dr_kernel import ops
from dr_kernel.kernels import BUILTINS
from dr_kernel.kernels.masked_softmax import causal_mask

kernel = BUILTINS["masked_softmax"]
out = {"kernel": {}, "ops": {}}
# Rows of 300 and 257 columns: chunks of 64 past the row's end, and one block of 512 wider than it;
# a causal mask repeated over 3 "heads" of 4 queries, one over 8 queries of 8 rows, and none.
for shape in ({"rows": 12, "cols": 300, "mask_rows": 4}, {"rows": 8, "cols": 257, "mask_rows": 8},
              {"rows": 6, "cols": 100, "mask_rows": 0}):
    for dtype in ("fp16", "fp32"):
        for block in (64, 512):
            config = {"BLOCK": block, "num_warps": 2, "num_stages": 1}
            inputs = kernel.make_inputs(shape, dtype, "cpu", 0)
            inputs["scale"] = 0.3
            inputs["y"].fill_(float("nan"))
            kernel._launch(kernel.fn_for(config, shape), inputs, config)
            x = inputs["x"].float() * 0.3
            if inputs["mask"] is not None:
                x = (x.view(-1, *inputs["mask"].shape) + inputs["mask"].float()).view(x.shape)
            expected = torch.softmax(x, -1)
            err = ((inputs["y"].float() - expected).norm() / expected.norm()).item()
            # Masked-out elements are exact zeros.
            zeros = bool((inputs["y"][expected == 0] == 0).all()) and bool((expected == 0).any() or
                                                                            not shape["mask_rows"])
            out["kernel"][f"{shape['rows']}x{shape['cols']}/{shape['mask_rows']} {dtype} {block}"] = [err, zeros]
# A row masked out entirely is NaN, as torch's softmax makes it, in chunks and in one block.
out["masked_row_nan"] = []
for block in (32, 64):
    inputs = kernel.make_inputs({"rows": 4, "cols": 64, "mask_rows": 2}, "fp32", "cpu", 0)
    inputs["mask"][1] = float("-inf")
    config = {"BLOCK": block, "num_warps": 1, "num_stages": 1}
    kernel._launch(kernel.fn_for(config, {"rows": 4, "cols": 64, "mask_rows": 2}), inputs, config)
    out["masked_row_nan"].append([bool(inputs["y"][r].isnan().all()) for r in range(4)])

ops.configure(db="results.db", variants=("triton",), max_evals=2)
x = torch.randn(2, 3, 5, 40, dtype=torch.float16)
causal = causal_mask(5, 40, torch.float16, "cpu")
for name, mask in (("causal", causal), ("causal 4-d", causal[None, None]), ("none", None),
                   ("per key", torch.randn(40, dtype=torch.float16))):
    y = ops.masked_softmax(x, mask, scale=0.25)
    expected = torch.softmax(x.float() * 0.25 + (0 if mask is None else mask.float()), -1)
    choice = ops.decisions()[-1]
    out["ops"][name] = {"err": ((y.float() - expected).norm() / expected.norm()).item(), "shape": list(y.shape),
                        "variant": choice.variant, "kernel": choice.kernel, "problem": choice.shape}
tuned = len(ops.decisions())
# Calls the kernel does not cover: torch's own chain, bit for bit, and nothing tuned.
chain = lambda x, mask, scale: torch.softmax(x * scale + mask, -1)
bool_mask = torch.ones(5, 40, dtype=torch.bool).tril()
per_batch = torch.randn(2, 1, 1, 40, dtype=torch.float16)
xg = x.float().requires_grad_(True)
out["uncovered"] = {
    "fp32 mask on fp16 scores": torch.equal(ops.masked_softmax(x, causal.float(), 0.25),
                                            chain(x, causal.float(), 0.25)),
    "bool mask": torch.equal(ops.masked_softmax(x, bool_mask, 0.25), chain(x, bool_mask, 0.25)),
    "mask per batch": torch.equal(ops.masked_softmax(x, per_batch, 0.25), chain(x, per_batch, 0.25)),
    "strided scores": torch.equal(ops.masked_softmax(x[..., ::2], causal[:, ::2].contiguous(), 0.25),
                                  chain(x[..., ::2], causal[:, ::2].contiguous(), 0.25)),
    "needs grad": torch.equal(ops.masked_softmax(xg, causal.float(), 0.25), chain(xg, causal.float(), 0.25)),
}
out["untouched"] = len(ops.decisions()) == tuned
# The race: torch's chain wins on the CPU, and serves with its own result.
ops.configure(variants=("triton", "torch"), rounds=2, reps=3)
x2 = torch.randn(4, 8, 64, dtype=torch.float16)
m2 = causal_mask(8, 64, torch.float16, "cpu")
out["raced_equal"] = torch.equal(ops.masked_softmax(x2, m2, 0.5), chain(x2, m2, 0.5))
out["raced_variant"] = ops.decisions()[-1].variant
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    out = run_interpreted(["-c", CHILD], cwd=tmp_path_factory.mktemp("masked_softmax"))
    return json.loads(out.strip().splitlines()[-1])


def test_the_kernel_gives_torchs_scaled_masked_softmax_in_chunks_and_in_one_block(interpreted):
    assert len(interpreted["kernel"]) == 12
    for case, (err, zeros) in interpreted["kernel"].items():
        # Outputs start as NaN: an element the kernel skipped would show.
        assert err < (2e-3 if "fp16" in case else 1e-5), (case, err)
        assert zeros, case
    assert interpreted["masked_row_nan"] == [[False, True, False, True]] * 2


def test_ops_masked_softmax_serves_masks_that_repeat_over_the_rows_through_the_fused_kernel(interpreted):
    problems = {"causal": 5, "causal 4-d": 5, "none": 0, "per key": 1}
    for name, r in interpreted["ops"].items():
        assert r["variant"] == "triton" and r["kernel"] == "masked_softmax" and r["shape"] == [2, 3, 5, 40], r
        assert r["problem"] == {"rows": 30, "cols": 40, "mask_rows": problems[name]}, (name, r)
        assert r["err"] < 2e-3, (name, r)


def test_ops_masked_softmax_leaves_what_the_kernel_does_not_cover_to_torch_and_races_it(interpreted):
    assert all(interpreted["uncovered"].values()) and interpreted["untouched"], interpreted["uncovered"]
    assert interpreted["raced_variant"] == "torch" and interpreted["raced_equal"]


def test_a_mask_whose_rows_do_not_divide_the_scores_is_refused_naming_it():
    with pytest.raises(ValueError, match="mask_rows must be 0 \\(no mask\\) or divide rows \\(10\\)"):
        BUILTINS["masked_softmax"].make_inputs({"rows": 10, "cols": 64, "mask_rows": 4}, "fp16", "cpu")


def test_it_compiles_for_the_h200_with_and_without_a_mask_in_one_pass_or_two():
    from dr_kernel.analysis import analyse

    kernel = BUILTINS["masked_softmax"]
    config = {"BLOCK": 2048, "num_warps": 8, "num_stages": 1}
    loads = {}
    for cols in (2048, 3000):  # A block holds the row (one pass), or not (two).
        for mask_rows in (0, 1024):
            report = analyse(kernel, {"rows": 32 * 1024, "cols": cols, "mask_rows": mask_rows}, "bf16", config)
            assert report.valid and report.n_spills == 0, (cols, mask_rows, report.reason)
            loads[cols, mask_rows] = report.ttgir.count("tt.load")
    # The mask's loads are in the binary only when there is one (HAS_MASK, a constexpr), and a row
    # a block holds is read once: x alone once, x and the mask once, then twice each in two passes.
    assert loads == {(2048, 0): 1, (2048, 1024): 2, (3000, 0): 2, (3000, 1024): 4}
