"""Static analysis for GPUs other than the H200 (issue 8, point 3): the limits of sm_80 (A100),
sm_89 (L40S) and sm_100 (B200), compiles for each of them without a GPU, and the choice of device
in `dr-kernel evaluate`."""

from __future__ import annotations

import json

import pytest
from dr_kernel import cli
from dr_kernel.analysis import A100, B200, H100, H100_PCIE, H200, KNOWN_DEVICES, L40S, analyse, named_limits, occupancy
from dr_kernel.kernels import BUILTINS

MATMUL = {"M": 4096, "N": 4096, "K": 4096}
# A pipeline that needs 180 KiB of shared memory on sm_80 (which buffers num_stages - 1 tiles) and
# 216 KiB on sm_90 (num_stages tiles): over the A100's 163 KiB per block, under the H200's 227 KiB.
DEEP_PIPELINE = {"BLOCK_M": 256, "BLOCK_N": 32, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 6}


def test_named_limits_take_the_model_or_the_architecture_and_refuse_an_unknown_name():
    from triton.backends.compiler import GPUTarget

    for names, limits, arch in ((("a100", "sm_80", "SM80", "sm-80"), A100, 80), (("l40s", "sm_89"), L40S, 89),
                                (("h200", "sm_90"), H200, 90), (("B200", "sm_100", "sm100"), B200, 100),
                                (("h100", "H100"), H100, 90), (("h100-pcie", "H100_PCIE"), H100_PCIE, 90)):
        for name in names:
            assert named_limits(name) is limits, name
        assert limits.target() == GPUTarget("cuda", arch, 32)
    assert set(KNOWN_DEVICES.values()) == {A100, L40S, H200, H100, H100_PCIE, B200}
    with pytest.raises(ValueError, match=r"no limits are known for the device 'v100'; use one of h200, .*sm_100\."):
        named_limits("v100")


def test_each_architecture_has_its_own_limits_and_they_set_occupancy():
    assert (A100.sm_count, L40S.sm_count, H200.sm_count, B200.sm_count) == (108, 142, 132, 148)
    # Shared memory per block (opt-in maximum) and per SM: 163/164 KiB, 99/100 KiB, 227/228 KiB.
    assert (A100.shared_per_block, A100.shared_per_sm) == (163 * 1024, 164 * 1024)
    assert (L40S.shared_per_block, L40S.shared_per_sm) == (99 * 1024, 100 * 1024)
    assert (B200.shared_per_block, B200.shared_per_sm) == (H200.shared_per_block, H200.shared_per_sm)
    assert all(d.registers_per_sm == 65536 and d.warp_size == 32 and d.max_threads_per_block == 1024
               for d in (A100, L40S, H200, B200))
    # Ada holds 1536 threads per SM, the data-centre parts 2048.
    assert (L40S.max_threads_per_sm, L40S.max_warps_per_sm) == (1536, 48)
    assert A100.max_threads_per_sm == B200.max_threads_per_sm == 2048
    # A block of 40 KiB of shared memory (plus the reserved 1 KiB): 2 fit on an L40S's SM, 4 on an
    # A100's, 5 on an H200's; small blocks of 4 warps are bounded by threads: 12 on the L40S.
    assert [occupancy(32, 40 * 1024, 4, d).blocks_per_sm for d in (L40S, A100, H200)] == [2, 4, 5]
    small = occupancy(32, 0, 4, L40S)
    assert (small.blocks_per_sm, small.occupancy, small.limiter) == (12, 1.0, "threads")
    # Peaks are the data sheets' dense figures: the B200 doubles the H200's fp16 tensor rate; fp8
    # runs at twice the fp16 rate from Ada on, and not at all on Ampere.
    assert B200.peak_tflops("fp16", True) > 2 * H200.peak_tflops("fp16", True) > 6 * A100.peak_tflops("fp16", True)
    for device in (L40S, H200, B200):
        assert device.peak_tflops("fp8", True) == pytest.approx(2 * device.peak_tflops("fp16", True), rel=0.02)
    assert A100.peak_tflops("fp8", True) == 0


@pytest.mark.parametrize("name, mma", [("sm_80", "versionMajor = 2"), ("sm_89", "versionMajor = 2"),
                                       ("sm_100", "ttng.tc_gen5_mma")])
def test_a_matmul_config_compiles_offline_for_each_target(name, mma):
    limits = named_limits(name)
    config = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}
    report = analyse(BUILTINS["matmul"], MATMUL, "fp16", config, device=limits)
    assert report.valid, report.reason
    assert f'ttg.target = "cuda:{limits.arch}"' in report.ttgir
    # Each architecture's own tensor-core instruction: mma.sync on Ampere and Ada, tcgen05 on Blackwell.
    assert mma in report.ttgir and "warp_group_dot" not in report.ttgir
    assert 0 < report.n_regs <= 255 and 0 < report.shared <= limits.shared_per_block
    assert report.occupancy == occupancy(report.n_regs, report.shared, 4, limits).occupancy


def test_shared_memory_over_the_a100s_limit_is_refused_there_and_accepted_on_the_h200():
    a100 = analyse(BUILTINS["matmul"], MATMUL, "fp16", DEEP_PIPELINE, device=A100)
    h200 = analyse(BUILTINS["matmul"], MATMUL, "fp16", DEEP_PIPELINE, device=H200)
    assert a100.binary_hash and a100.shared > 164 * 1024
    assert not a100.valid
    assert a100.reason == (f"needs {a100.shared} B of shared memory; the NVIDIA A100-SXM4-80GB allows 166912 B per "
                           "block: lower num_stages or the block sizes.")
    assert h200.valid, h200.reason
    assert 164 * 1024 < h200.shared <= H200.shared_per_block


def test_fp8_compiles_from_ada_on_and_is_refused_on_ampere():
    config = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}
    shape = {"M": 4096, "N": 4096, "K": 4096}
    ampere = analyse(BUILTINS["fp8_matmul"], shape, "bf16", config, device=A100)
    assert not ampere.valid and ampere.binary_hash is None
    assert ampere.reason.startswith("did not compile") and "fp8e4nv not supported" in ampere.reason
    ada = analyse(BUILTINS["fp8_matmul"], shape, "bf16", config, device=L40S)
    assert ada.valid, ada.reason


def test_evaluate_analyses_for_the_named_device(capsys):
    argv = ["evaluate", "--kernel", "matmul", "--config", json.dumps(DEEP_PIPELINE), "--json"]
    assert cli.main([*argv, "--device", "sm_80"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["device"] == A100.name and result["valid"] is False
    assert "allows 166912 B per block" in result["reason"] and result["measured"] is False
    assert result["note"].startswith("static analysis for the NVIDIA A100-SXM4-80GB only")
    # The fp8 GEMM is held to the named device's fp8 peak, not to that of its bf16 output.
    fp8_config = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
    assert cli.main(["evaluate", "--kernel", "fp8_matmul", "--precision", "bf16", "--device", "b200", "--config",
                     json.dumps(fp8_config), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["valid"] and result["device"] == B200.name
    assert result["roofline_ms"] == pytest.approx(result["flops"] / 4500e12 * 1e3)
    assert cli.main([*argv, "--device", "pascal"]) == 2
    assert capsys.readouterr().err.strip() == (
        "dr-kernel evaluate: --device: no limits are known for the device 'pascal'; use one of h200, sm_90, h100, "
        "h100_pcie, a100, sm_80, l40s, sm_89, b200, sm_100.")


def test_each_target_holds_its_memory_and_evaluate_refuses_a_problem_too_large_for_it(capsys, monkeypatch):
    # Issue 9, point 5, without a GPU: a shape no such GPU can hold gets one line, not an analysis.
    assert H200.memory_bytes == 150_109_880_320  # torch's total_memory on the project's H200.
    assert L40S.memory_bytes < A100.memory_bytes == 80 * 2**30 < H200.memory_bytes < B200.memory_bytes
    softmax = '{"BLOCK": 1024, "num_warps": 4, "num_stages": 1}'
    big = ["evaluate", "--kernel", "softmax", "--shape", "rows=100000,cols=250000", "--config", softmax, "--json"]
    for device in ("a100", "l40s"):
        assert cli.main([*big, "--device", device]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err
        assert err == (f"dr-kernel evaluate: --shape rows=100000,cols=250000: its tensors take at least 100 GB, "
                       f"more than the memory of the {named_limits(device).name} "
                       f"({named_limits(device).memory_bytes / 1e9:.0f} GB); give a smaller --shape")
    # 100 GB fit on the H200 (the default) and the B200: their analysis is given.
    for device in ([], ["--device", "b200"]):
        assert cli.main([*big, *device]) == 0
        assert json.loads(capsys.readouterr().out)["measured"] is False
    assert cli.main(["evaluate", "--kernel", "matmul", "--shape", "M=1000000,N=1000000,K=1000000", "--config",
                     json.dumps(DEEP_PIPELINE)]) == 2
    assert "6,000 GB, more than the memory of the NVIDIA H200 (150 GB)" in capsys.readouterr().err

    # On a GPU, the device's own total: an H200 of another size, and a GPU no table knows.
    from types import SimpleNamespace

    import torch
    from dr_kernel.analysis import device_limits

    def props(name, major, minor, memory):
        return SimpleNamespace(name=name, major=major, minor=minor, multi_processor_count=132, total_memory=memory)

    for name, arch, memory in (("NVIDIA H200", (9, 0), H200.memory_bytes), ("NVIDIA H200 NVL", (9, 0), 149 * 10**9),
                               ("NVIDIA A100-SXM4-40GB", (8, 0), 40 * 2**30), ("NVIDIA H100 80GB HBM3", (9, 0),
                                                                               85 * 10**9)):
        given = props(name, *arch, memory)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda _d, given=given: given)
        limits = device_limits(0)
        assert limits.memory_bytes == memory and limits.name == name.removesuffix(" NVL")
    # The H100 is a model this project knows: its data sheet's HBM3 bandwidth and the H200's compute.
    assert (limits.arch, limits.peak_gbps, limits.peak_tflops("fp16", True)) == (90, 3350.0, 989.0)
    given = props("NVIDIA GH100 engineering sample", 9, 0, 80 * 10**9)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda _d: given)
    limits = device_limits(0)  # A GPU no table knows: its own figures, peaks unknown.
    assert (limits.name, limits.arch, limits.peak_gbps, limits.memory_bytes) == (given.name, 90, 0, 80 * 10**9)
