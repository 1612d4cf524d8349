"""dr_kernel's own copy and compare kernels (device_ops.py), which check configs on the GPU where a
library may have replaced PyTorch's operators. Run here in Triton's interpreter on CPU tensors, they
must give checking.py's PyTorch verdicts exactly; compiled for the H200, they must compile."""

from __future__ import annotations

import json
import math

import pytest
import torch
from interpreted import run_interpreted


def _case(dtype, scenario, n=5000):
    g = torch.Generator().manual_seed(1)
    if dtype == torch.bool:
        pristine = torch.zeros(n, dtype=dtype)
        ref = pristine.clone()
        ref[:100] = True
    elif dtype.is_floating_point:
        pristine = torch.randn(n, generator=g).to(dtype)
        ref = pristine.clone()
        ref[:3000] = torch.randn(3000, generator=g).to(dtype)  # The reference defines the first 3000.
    else:
        pristine = torch.randint(0, 100, (n,), generator=g).to(dtype)
        ref = pristine.clone()
        ref[:3000] += 1
    if scenario.startswith("whole"):  # The reference defines every element: checking's one-wait path.
        ref = pristine.clone().logical_not() if dtype == torch.bool else \
            (pristine.double() + 1.5).to(dtype) if dtype.is_floating_point else pristine + 1
    out = ref.clone()
    if not scenario.startswith("whole"):
        out[4000:] = 7 if dtype != torch.bool else True  # Beyond what the reference defines: not compared.
    if scenario in ("rounding", "whole") and dtype.is_floating_point:
        out[10:20] = (out[10:20].double() * 1.001).to(dtype)
    elif scenario == "nan" and dtype.is_floating_point:
        out[5] = float("nan")
    elif scenario == "whole, far" and dtype.is_floating_point:
        out[:100] = -out[:100]  # Differences far beyond rounding, summed exactly as the other path sums them.
    elif scenario in ("inf", "whole, inf"):
        if dtype.is_floating_point:
            ref[7], out[7] = float("inf"), -float("inf")
    elif scenario == "unwritten":
        out[:50] = pristine[:50]  # A config that left part of what the reference wrote untouched.
    return out, ref, pristine


DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32, torch.int64, torch.uint8,
          torch.bool]


SCENARIOS = ["same", "rounding", "nan", "inf", "unwritten", "whole", "whole, far", "whole, inf"]


@pytest.fixture(scope="module")
def verdicts():
    """Each case's verdicts, ours and PyTorch's, from a child process that runs the kernels in
    Triton's interpreter (which must be chosen before Triton's own helpers are defined)."""
    return json.loads(run_interpreted([__file__]).splitlines()[-1])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_compare_gives_the_verdicts_of_torch(verdicts, dtype, scenario):
    ours, theirs, changed, unchanged = verdicts[f"{dtype} {scenario}"]
    # The torch path sums half-precision squares in float32, the kernels in float64: they agree to
    # about 1e-6 (1e-8 where few elements differ), while the verdict compares against tolerances of 1e-3 and more.
    assert ours == pytest.approx(theirs, rel=1e-5) or (math.isinf(ours) and math.isinf(theirs))
    if scenario == "unwritten" and dtype != torch.bool:
        assert ours > 0  # Untouched elements the reference wrote are a difference, not a pass.
    if scenario in ("nan", "inf", "whole, inf") and dtype.is_floating_point:
        assert math.isinf(ours) and math.isinf(theirs)
    if scenario in ("rounding", "whole") and dtype in (torch.float16, torch.bfloat16, torch.float32):
        from dr_kernel.checking import tolerance

        assert theirs < tolerance(dtype)  # Rounding passes.
        assert theirs > 0 or dtype.itemsize == 2  # 1.001 may round back to the same half-precision value.
    if scenario == "whole, far" and dtype.is_floating_point:
        assert theirs > 0.1
    assert changed and not unchanged


def test_copy_bytes_flip_bytes_and_an_empty_comparison(verdicts):
    assert verdicts["copy"] is True
    assert verdicts["flip"] is True  # Every bit inverted, as torch's bitwise_not inverts it.
    assert verdicts["empty"] == 0.0  # FlagGems' `all` divides by zero on this.


def _verdicts() -> dict:
    from dr_kernel import checking, device_ops

    results = {}
    for dtype in DTYPES:
        for scenario in SCENARIOS:
            out, ref, pristine = _case(dtype, scenario)
            results[f"{dtype} {scenario}"] = [device_ops.relative_difference(out, ref, pristine),
                                              checking.difference(out, ref, pristine),
                                              device_ops.any_changed(ref, pristine),
                                              device_ops.any_changed(pristine, pristine.clone())]
    source = torch.randint(0, 256, (100_003,), dtype=torch.uint8)
    target = torch.empty_like(source)
    device_ops.copy_bytes(target, source)
    results["copy"] = bool(torch.equal(target, source))
    flipped = source.clone()
    device_ops.flip_bytes(flipped)
    results["flip"] = bool(torch.equal(flipped, source.bitwise_not()))
    empty = torch.empty(0, dtype=torch.bfloat16)
    results["empty"] = device_ops.relative_difference(empty, empty, empty)
    return results


def test_every_kernel_compiles_for_the_h200(monkeypatch, tmp_path):
    from dr_kernel import device_ops
    from dr_kernel.analysis import analyse
    from dr_kernel.launch import launch_source
    from test_launch import _StandInDriver
    from triton.runtime import driver

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setattr(driver, "_active", _StandInDriver())
    sources = device_ops.warm_up_sources("cpu", {torch.bfloat16, torch.float32, torch.int64, torch.bool})
    assert len(sources) == 2 + 4  # Copy, reduce, and one comparison per dtype.
    flip = launch_source(device_ops._flip, {"data": torch.empty(16, dtype=torch.uint8), "n": 16,
                                            "BLOCK": device_ops._COPY_BLOCK})
    sources.append(flip)  # Poisoning outputs: launched only where outputs held their result already.
    for source in sources:
        report = analyse(source)
        assert report.valid, report.reason


if __name__ == "__main__":
    print(json.dumps(_verdicts(), default=float))


def test_own_kernels_serve_only_while_a_library_replaces_torch_operators():
    from types import SimpleNamespace

    from dr_kernel.checking import uses_own_ops

    on_gpu = SimpleNamespace(device=torch.device("cuda", 0))
    assert not uses_own_ops(on_gpu)  # PyTorch's own CUDA operators: nothing to compile.
    assert not uses_own_ops(torch.zeros(1))
    library = torch.library.Library("aten", "IMPL")  # As FlagGems' use_gems() does, for ~400 operators.
    try:
        library.impl("eq.Tensor", lambda a, b: a, "CUDA")
        assert uses_own_ops(on_gpu)
    finally:
        library._destroy()
    assert not uses_own_ops(on_gpu)  # The library's context has ended.
