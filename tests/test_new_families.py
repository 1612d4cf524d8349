"""Tests of the kernel families added for issue 8 (layernorm forward and backward, cross-entropy,
SwiGLU, cumulative sum, grouped GEMM, fp8 GEMM): their spaces and problems, their results under
Triton's interpreter against the torch references, and their offline compiles for the H200.

As in test_kernels.py, the interpreted runs happen in a child process that sets TRITON_INTERPRET
before importing anything (one child for all families, which prints one JSON line per case); the
pytest process keeps compiled kernels for the static analysis.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
from dr_kernel import kernels
from dr_kernel.kernels import BUILTINS
from interpreted import run_interpreted

NEW_FAMILIES = ["layernorm", "layernorm_bwd", "cross_entropy", "swiglu", "cumsum", "grouped_matmul", "fp8_matmul"]

# Tiny problems whose sizes are not multiples of the blocks, so that every mask is exercised, and
# two or three configs each: one block narrower than the row (several chunks or tiles) and one
# wider (a single masked one). The configs are small versions of the spaces' (the interpreter runs
# a 64-wide block as fast as a 4096-wide one, but these sizes make the loops go round).
CASES = {
    "layernorm": [({"rows": 5, "cols": 300}, {"BLOCK_SIZE": 128, "num_warps": 1}),
                  ({"rows": 3, "cols": 100}, {"BLOCK_SIZE": 512, "num_warps": 4})],
    "layernorm_bwd": [({"rows": 7, "cols": 100}, {"ROWS_PER_PROGRAM": 2, "num_warps": 4}),
                      ({"rows": 9, "cols": 64}, {"ROWS_PER_PROGRAM": 16, "num_warps": 8}),
                      ({"rows": 4, "cols": 33}, {"ROWS_PER_PROGRAM": 1, "num_warps": 4})],
    "cross_entropy": [({"tokens": 9, "vocab": 1000}, {"BLOCK_V": 256, "num_warps": 2}),
                      ({"tokens": 4, "vocab": 333}, {"BLOCK_V": 512, "num_warps": 1})],
    "swiglu": [({"tokens": 7, "ffn": 300}, {"BLOCK_T": 4, "BLOCK_D": 128, "num_warps": 1}),
               ({"tokens": 3, "ffn": 100}, {"BLOCK_T": 1, "BLOCK_D": 256, "num_warps": 2})],
    "cumsum": [({"rows": 5, "cols": 700}, {"BLOCK_ROWS": 2, "BLOCK_COLS": 256, "num_warps": 1}),
               ({"rows": 3, "cols": 200}, {"BLOCK_ROWS": 4, "BLOCK_COLS": 512, "num_warps": 4})],
    "grouped_matmul": [({"G": 3, "M": 70, "N": 40, "K": 48},
                        {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "PROGRAMS_PER_SM": 1, "num_warps": 4,
                         "num_stages": 2}),
                       ({"G": 5, "M": 37, "N": 24, "K": 40},
                        {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 32, "PROGRAMS_PER_SM": 2, "num_warps": 4,
                         "num_stages": 3})],
    "fp8_matmul": [({"M": 40, "N": 72, "K": 96}, {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8,
                                                  "num_warps": 4, "num_stages": 2}),
                   ({"M": 17, "N": 20, "K": 48}, {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 64, "GROUP_M": 1,
                                                  "num_warps": 4, "num_stages": 3})],
}

# Triton 3.6's interpreter multiplies bf16 operands of tl.dot as raw 16-bit integers (see
# test_kernels.py), so the grouped GEMM is checked there in fp16 and fp32 only; the fp8 GEMM's
# operands are e4m3 whatever the output type, so both output types are checked.
DTYPES = {name: ["fp16", "bf16"] for name in NEW_FAMILIES}
DTYPES["grouped_matmul"] = ["fp16", "fp32"]

# The recorded tables' bound for half precision; fp32 results here are exact fp32 products.
TOLERANCE = {"fp16": 2e-2, "bf16": 2e-2, "fp32": 1e-4}


@pytest.fixture(scope="module")
def interpreted():
    """Runs every case in one interpreting child process; returns its rows by family."""
    rows: dict[str, list[dict]] = {}
    for line in run_interpreted([__file__], timeout=300).splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            rows.setdefault(row["kernel"], []).append(row)
    return rows


@pytest.mark.parametrize("name", NEW_FAMILIES)
def test_family_matches_its_torch_reference_under_the_interpreter(interpreted, name):
    cases = interpreted.get(name, [])
    assert len(cases) == len(CASES[name]) * len(DTYPES[name])
    for case in cases:
        assert case["interpreted"], "the child process compiled instead of interpreting"
        assert case["dtype_kept"], case
        # The output was NaN before the launch: a kernel that skipped an element could not match.
        assert math.isfinite(case["relerr"]) and case["relerr"] < TOLERANCE[case["dtype"]], case
        assert case["reference_norm"] > 0
        assert case["framework_relerr"] < 5e-2, case
        for extra, error in case["extras"].items():
            assert error < 1e-3, (extra, case)


def test_a_wrong_kernel_result_is_caught_by_the_reference(interpreted):
    # The child also runs layernorm_bwd with dy scaled by 2 after the launch: the reference then
    # differs from what the kernel computed, and the comparison must say so.
    (row,) = interpreted["layernorm_bwd-perturbed"]
    assert row["relerr"] > 0.3


# ----- spaces and problems --------------------------------------------------------------------

@pytest.mark.parametrize("name", NEW_FAMILIES)
def test_spaces_and_problems_are_realistic_and_describe_themselves(name):
    kernel = BUILTINS[name]
    configs = list(kernel.configs())
    # Sized for the recording's time budget: enough configs to tune over, few enough to sweep.
    assert 20 <= len(configs) <= 250, len(configs)
    assert kernel.family == name and kernel.description and kernel.reference_name
    # Parameters of their own, not only the matmul names.
    assert set(kernel.space) - {"BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages"}
    assert 2 <= len(kernel.shapes) <= 3
    # LLM-sized problems (at least a million elements of output work), at least one of them odd.
    odd = False
    for shape in kernel.shapes:
        assert kernel.check_shape(shape) == shape
        assert kernel.flops(shape) > 10**6 and kernel.bytes(shape, "bf16") > 10**6
        odd |= any(isinstance(v, int) and v % 16 for v in shape.values())
    assert odd, f"{name} has no problem with an odd size"
    # Every config of the space is one the kernel takes.
    for config in configs[:3] + configs[-3:]:
        assert kernel.check_config(config) == config


def test_constraints_remove_configs_that_only_spill_or_idle_lanes():
    ce, swiglu, fp8 = BUILTINS["cross_entropy"], BUILTINS["swiglu"], BUILTINS["fp8_matmul"]
    assert not ce.satisfies({"BLOCK_V": 512, "num_warps": 32})          # 0.5 logits per thread
    assert not ce.satisfies({"BLOCK_V": 32768, "num_warps": 1})         # 1024 logits per thread
    assert ce.satisfies({"BLOCK_V": 4096, "num_warps": 4})
    assert not swiglu.satisfies({"BLOCK_T": 32, "BLOCK_D": 4096, "num_warps": 16})
    # Five stages of 128×256×256 e4m3 tiles need 480 KiB of shared memory.
    assert not fp8.satisfies({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 256, "GROUP_M": 8, "num_warps": 8,
                              "num_stages": 5})
    assert fp8.satisfies({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8,
                          "num_stages": 3})


def test_counts_of_work_follow_the_problem():
    fp8 = BUILTINS["fp8_matmul"]
    shape = {"M": 64, "N": 32, "K": 16}
    # e4m3 operands are one byte each whatever the output type; the output's size follows it.
    assert fp8.bytes(shape, "bf16") == 64 * 16 + 32 * 16 + 64 * 32 * 2 + 4 * (64 + 32)
    assert fp8.bytes(shape, "fp32") - fp8.bytes(shape, "fp16") == 64 * 32 * 2
    grouped = BUILTINS["grouped_matmul"]
    assert grouped.flops({"G": 4, "M": 100, "N": 8, "K": 2}) == 2 * 100 * 8 * 2
    assert grouped.bytes({"G": 4, "M": 100, "N": 8, "K": 2}, "fp16") == (100 * 2 + 4 * 2 * 8 + 100 * 8) * 2
    assert BUILTINS["cross_entropy"].bytes({"tokens": 2, "vocab": 1000}, "bf16") == 2 * 1000 * 2 + 16 * 2


def test_grouped_matmul_splits_tokens_unevenly_but_completely():
    from dr_kernel.kernels.grouped_matmul import group_sizes

    sizes = group_sizes(64, 16384, seed=0)
    assert sum(sizes) == 16384 and min(sizes) >= 1 and max(sizes) > 1.2 * min(sizes)
    assert group_sizes(64, 16384, seed=0) == sizes and group_sizes(64, 16384, seed=1) != sizes
    assert sum(group_sizes(6, 6)) == 6 and min(group_sizes(6, 6)) == 1
    with pytest.raises(ValueError, match="M \\(tokens\\) must be at least G"):
        BUILTINS["grouped_matmul"].make_inputs({"G": 8, "M": 4, "N": 16, "K": 16}, "fp16", "cpu")


def test_layernorm_bwd_refuses_a_row_wider_than_it_can_hold_in_one_sentence():
    kernel = BUILTINS["layernorm_bwd"]
    config = {"ROWS_PER_PROGRAM": 4, "num_warps": 8}
    assert kernel.compile_source({"rows": 8, "cols": 65536}, "bf16", config)[1]["BLOCK_N"] == 65536
    with pytest.raises(ValueError, match="cols must be between 1 and 65536, not 65537"):
        kernel.compile_source({"rows": 8, "cols": 65537}, "bf16", config)
    with pytest.raises(ValueError, match="cols must be between 1 and 65536, not 70000"):
        kernel.make_inputs({"rows": 1, "cols": 70000}, "fp16", "cpu")


QUANTISE = """
import json, torch
from dr_kernel.kernels.fp8_matmul import quantise, quantise_columns, quantise_rows
g = torch.Generator().manual_seed(0)
out = {}


def agree(q, ref):
    # The fraction of e4m3 values equal to torch's. Triton 3.6's interpreter converts fp32 to e4m3
    # approximately (ties away from zero, no carry into the exponent: 124.3 becomes 64, not 128;
    # subnormals apart); the GPU converts as torch does. The scales, computed alike, must agree.
    return (q.float() == ref.float()).float().mean().item()


for name, x in (("rows whole", torch.randn(5, 300, generator=g).half()),
                ("rows chunked", (torch.randn(3, 5000, generator=g) * 40).to(torch.bfloat16)),
                ("rows strided", torch.randn(4, 512, generator=g).half()[:, :300])):
    q, scale = quantise_rows(x)
    q_ref, scale_ref = quantise(x)
    back = q.float() * scale[:, None]
    out[name] = [torch.equal(scale, scale_ref), agree(q, q_ref), q.shape == x.shape and q.is_contiguous(),
                 ((back - x.float()).norm() / x.float().norm()).item()]
b = torch.randn(300, 70, generator=g).half()
q, scale = quantise_columns(b)
q_ref, scale_ref = quantise(b.t())
back = q.float().t() * scale[None, :]
out["columns"] = [torch.equal(scale, scale_ref), agree(q, q_ref), q.shape == (70, 300) and q.is_contiguous(),
                  ((back - b.float()).norm() / b.float().norm()).item()]
zero = torch.zeros(2, 64).half()
out["zero row"] = torch.equal(quantise_rows(zero)[0].float(), zero.float())
print(json.dumps(out))
"""


def test_fp8_quantisation_kernels_give_torchs_scales_and_e4m3_values_in_one_pass():
    env = dict(os.environ, TRITON_INTERPRET="1")
    run = subprocess.run([sys.executable, "-c", QUANTISE], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    for name in ("rows whole", "rows chunked", "rows strided", "columns"):
        same_scale, same_values, layout, error = out[name]
        # Torch's scales, its e4m3 values (but the interpreter's conversion), whatever the layout,
        # and the operand back within a few per cent (e4m3 keeps 3 bits of mantissa; the
        # interpreter's halved values add to it).
        assert same_scale and same_values > 0.95 and layout and error < 0.1, (name, out[name])
    assert out["zero row"]


def test_fp8_matmul_refuses_an_unaligned_k_in_one_sentence():
    with pytest.raises(ValueError, match="K must be a multiple of 16"):
        BUILTINS["fp8_matmul"].make_inputs({"M": 4, "N": 4, "K": 40}, "bf16", "cpu")


# ----- offline compiles for the H200 ----------------------------------------------------------

# One config of each family, compiled for sm_90a without a GPU, on its first recorded problem.
H200_CONFIGS = {
    "layernorm": {"BLOCK_SIZE": 4096, "num_warps": 8},
    "layernorm_bwd": {"ROWS_PER_PROGRAM": 16, "num_warps": 8},
    "cross_entropy": {"BLOCK_V": 8192, "num_warps": 8},
    "swiglu": {"BLOCK_T": 4, "BLOCK_D": 1024, "num_warps": 4},
    "cumsum": {"BLOCK_ROWS": 4, "BLOCK_COLS": 1024, "num_warps": 4},
    "grouped_matmul": {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "PROGRAMS_PER_SM": 1, "num_warps": 8,
                       "num_stages": 3},
    "fp8_matmul": {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 3},
}


@pytest.mark.parametrize("name", NEW_FAMILIES)
def test_family_compiles_for_the_h200_without_a_gpu(name):
    from dr_kernel.analysis import analyse

    kernel = BUILTINS[name]
    config = H200_CONFIGS[name]
    assert kernel.satisfies(config)
    report = analyse(kernel, kernel.shapes[0], "bf16", config)
    assert report.valid, report.reason
    assert 0 < report.n_regs <= 255 and report.n_spills == 0
    assert report.threads == 32 * config["num_warps"] and 0 < report.occupancy <= 1
    if kernel.tensor_cores:
        # Hopper's asynchronous warp-group MMA, fed from a multi-stage shared-memory pipeline.
        assert "ttng.warp_group_dot" in report.ttgir
        assert report.shared > 32 * 1024
    if name == "fp8_matmul":
        assert "f8E4M3FN" in report.ttgir


# Shapes with both sizes divisible by 16 and sizes that are not, so that the launch's divisibility
# attributes are exercised on both sides.
SPECIALISATION_SHAPES = {
    "layernorm": {"rows": 5, "cols": 320}, "layernorm_bwd": {"rows": 7, "cols": 96},
    "cross_entropy": {"tokens": 3, "vocab": 1001}, "swiglu": {"tokens": 3, "ffn": 48},
    "cumsum": {"rows": 2, "cols": 160}, "grouped_matmul": {"G": 2, "M": 17, "N": 32, "K": 48},
    "fp8_matmul": {"M": 5, "N": 48, "K": 64},
}


@pytest.mark.parametrize("name", NEW_FAMILIES)
def test_offline_compile_describes_the_launch_the_measuring_process_makes(name):
    # The compile pool compiles compile_source(); the measuring process then launches the kernel
    # and finds that binary in Triton's cache only if the launch specialises exactly the same way
    # (otherwise every config compiles a second time, at launch, and a sweep takes twice as long).
    # The launch's arguments are captured and classified by Triton's own launcher function.
    import inspect

    from dr_kernel.kernels.base import _is_constexpr, python_function
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    class Capture:
        def __getitem__(self, grid):
            return self.call

        def call(self, *args, **kwargs):
            self.args, self.kwargs = args, kwargs

    kernel, shape = BUILTINS[name], SPECIALISATION_SHAPES[name]
    config = next(iter(kernel.configs()))
    capture = Capture()
    kernel._launch(capture, kernel.make_inputs(shape, "bf16", "cpu"), config)
    options = {k: capture.kwargs.pop(k) for k in ("num_warps", "num_stages") if k in capture.kwargs}
    assert options == {k: v for k, v in config.items() if k in options}
    fn = python_function(kernel.fn)
    launched = inspect.signature(fn).bind(*capture.args, **capture.kwargs).arguments
    signature, constexprs, attrs = {}, {}, {}
    for index, param in enumerate(inspect.signature(fn).parameters.values()):
        value = launched[param.name]
        kind, attribute = ("constexpr", value) if _is_constexpr(param) else \
            native_specialize_impl(BaseBackend, value, False, True, True)
        signature[param.name] = kind
        if kind == "constexpr":
            constexprs[param.name] = attribute
        elif isinstance(attribute, str):
            attrs[(index,)] = BaseBackend.parse_attr(attribute)
    ours = kernel.compile_source(shape, "bf16", config)
    assert ours[0] == signature and ours[1] == constexprs
    assert str(ours[2]) == str(attrs)  # Triton's cache key hashes the text, order included.


# ----- the device script ----------------------------------------------------------------------

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks", "sweep_families.sh")


def test_the_device_scripts_schedule_names_real_problems_within_its_budget():
    import re

    from dr_kernel.kernels import dtype_name

    text = open(SCRIPT).read()
    assert subprocess.run(["bash", "-n", SCRIPT], capture_output=True).returncode == 0
    schedule = re.findall(r"^sweep (\w+) +(\S+) +(\w+)$", text, flags=re.MULTILINE)
    caps = {k: int(v) for k, v in re.findall(r"\[(\w+)\]=(\d+)", text.split("declare -A cap=")[1].split(")")[0])}
    budget = int(re.search(r"SWEEP_BUDGET_S:-(\d+)", text).group(1))
    assert sorted(caps) == sorted(NEW_FAMILIES) and sum(caps.values()) <= budget
    # Rounds: every family's first problem before any family's second.
    assert [family for family, _, _ in schedule[:len(NEW_FAMILIES)]] == NEW_FAMILIES
    for name in NEW_FAMILIES:
        problems = [(shape, precision) for family, shape, precision in schedule if family == name]
        assert 2 <= len(problems) <= 3 and {p for _, p in problems} == {"fp16", "bf16"}, name
        shapes = []
        for shape, precision in problems:
            dtype_name(precision)
            values = {k: int(v) for k, v in (pair.split("=") for pair in shape.split(","))}
            shapes.append(BUILTINS[name].check_shape(values))
        # The problems are the family's own, and not twice the same.
        assert sorted(map(str, shapes)) == sorted(map(str, BUILTINS[name].shapes)), name


# ----- the child process ----------------------------------------------------------------------

def _relerr(out, ref) -> float:
    return ((out.float() - ref.float()).norm() / ref.float().norm()).item()


def _extras(name: str, inputs) -> dict[str, float]:
    # What a kernel writes besides its checked output: the saved statistics of the layernorm
    # forward, the logsumexp of the cross-entropy.
    import torch

    if name == "layernorm":
        x = inputs["x"].float()
        return {"mean": _relerr(inputs["mean"], x.mean(dim=1)),
                "rstd": _relerr(inputs["rstd"], torch.rsqrt(x.var(dim=1, unbiased=False) + inputs["eps"]))}
    if name == "cross_entropy":
        return {"lse": _relerr(inputs["lse"], torch.logsumexp(inputs["logits"].float(), dim=1))}
    return {}


def _run_all() -> None:
    import torch
    import triton
    from test_kernels import _numpy_index_fix

    _numpy_index_fix()
    for name in NEW_FAMILIES:
        kernel = kernels.get(name)
        for shape, config in CASES[name]:
            for dtype in DTYPES[name]:
                inputs = kernel.make_inputs(shape, dtype, "cpu", seed=1)
                kernel.output(inputs).fill_(float("nan"))
                kernel.launch(inputs, config)
                output, reference = kernel.output(inputs), kernel.reference(inputs)
                framework = kernel.framework(inputs)
                if isinstance(framework, tuple):  # native_layer_norm_backward: (dx, dw, db)
                    framework = torch.cat([framework[0], framework[1][None], framework[2][None]])
                print(json.dumps({"kernel": name, "dtype": dtype, "shape": shape, "relerr": _relerr(output, reference),
                                  "framework_relerr": _relerr(framework.float(), reference),
                                  "reference_norm": reference.float().norm().item(), "extras": _extras(name, inputs),
                                  "dtype_kept": output.dtype == reference.dtype and (
                                      name == "cross_entropy" or output.dtype == kernels.torch_dtype(dtype)),
                                  "interpreted": triton.knobs.runtime.interpret}), flush=True)
    kernel = kernels.get("layernorm_bwd")
    shape, config = CASES["layernorm_bwd"][0]
    inputs = kernel.make_inputs(shape, "fp16", "cpu", seed=1)
    kernel.launch(inputs, config)
    inputs["dy"] *= 2
    print(json.dumps({"kernel": "layernorm_bwd-perturbed",
                      "relerr": _relerr(kernel.output(inputs), kernel.reference(inputs))}), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    _run_all()
