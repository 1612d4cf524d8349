"""Tests of the built-in kernels: their descriptions, and their results under Triton's interpreter.

The numerical tests run each kernel on small CPU tensors in Triton's interpreter. triton.jit
decides between compiling and interpreting when a function is decorated, from TRITON_INTERPRET,
so those tests run in a child process that sets the variable before importing anything; the
pytest process itself keeps compiled kernels for the analysis tests. The child is this file run
as a script (see the bottom), which prints one JSON line per case.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dr_kernel import kernels
from dr_kernel.kernels import BUILTINS, Pointer, UnknownKernelError, specialise
from interpreted import SPLIT_K_INTERPRETS

DATA = Path(__file__).resolve().parents[1] / "python" / "dr_kernel" / "data" / "h200"


def recorded_rows(family: str, kind: str, every_file: bool = False) -> list[dict]:
    """The rows of the family's first recording (`family`.jsonl), or of every file of the family
    (its later recordings, `family`_SHAPE.jsonl, some of which re-record a shape of the first)."""
    paths = [DATA / f"{family}.jsonl"]
    if every_file:
        paths += sorted(p for p in DATA.glob(f"{family}_*.jsonl") if p.stem.split("_")[1][:1].isdigit())
    rows = []
    for path in paths:
        with open(path) as handle:
            rows += [row for row in map(json.loads, handle) if row["type"] == kind]
    return rows


# ----- descriptions ------------------------------------------------------------------------------

def test_registry_holds_every_family_and_get_names_them_on_a_miss():
    assert set(BUILTINS) == {"matmul", "softmax", "attention", "rmsnorm", "layernorm", "layernorm_bwd",
                             "cross_entropy", "swiglu", "cumsum", "grouped_matmul", "fp8_matmul", "add_rmsnorm",
                             "linear_act", "masked_softmax"}
    assert kernels.get("softmax") is BUILTINS["softmax"]
    with pytest.raises(UnknownKernelError) as caught:
        kernels.get("conv2d")
    message = str(caught.value)
    assert "'conv2d'" in message and "add_rmsnorm, attention, cross_entropy, cumsum, fp8_matmul" in message


def test_spaces_keep_the_recorded_parameter_names_and_values():
    # The recorded parameters, then the variants the tables lack (SPLIT_K 1 and TMA 0 unless a
    # space asks).
    assert list(BUILTINS["matmul"].space) == ["BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M",
                                              "num_warps", "num_stages", "SPLIT_K", "TMA"]
    assert list(BUILTINS["softmax"].space) == ["BLOCK", "num_warps", "num_stages"]
    assert list(BUILTINS["attention"].space) == ["BLOCK_M", "BLOCK_N", "num_warps", "num_stages", "TMA"]
    assert BUILTINS["softmax"].space["BLOCK"] == [256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
    assert len(list(BUILTINS["matmul"].configs())) == 5 * 4 * 3 * 2 * 3 * 4
    assert len(list(BUILTINS["attention"].configs())) == 192
    assert len(list(BUILTINS["softmax"].configs())) == 192


@pytest.mark.parametrize("family", ["matmul", "softmax", "attention"])
def test_every_recorded_config_and_shape_belongs_to_the_kernel(family):
    # Each of the kernel's shapes has a recorded table, and the first recording holds no other shape.
    kernel = BUILTINS[family]
    first = {str(kernel.check_shape(r["shape"])) for r in recorded_rows(family, "reference")}
    recorded = {str(kernel.check_shape(r["shape"])) for r in recorded_rows(family, "reference", every_file=True)}
    assert first <= set(map(str, kernel.shapes)) <= recorded
    for row in recorded_rows(family, "measure", every_file=True):
        config = kernel.check_config(row["config"])
        assert all(config[p] in values for p, values in kernel.space.items()), config
        assert kernel.satisfies(config)


@pytest.mark.parametrize("family", ["matmul", "softmax", "attention"])
def test_flops_and_bytes_match_the_recorded_reference_rows(family):
    kernel = BUILTINS[family]
    rows = recorded_rows(family, "reference")
    assert rows
    for row in rows:
        assert kernel.flops(row["shape"]) == row["flops"], row["shape"]
        assert kernel.bytes(row["shape"], "fp16") == row["bytes"], row["shape"]


def test_bytes_scale_with_the_element_size_and_rmsnorm_counts_its_weight():
    shape = {"M": 64, "N": 32, "K": 16}
    assert BUILTINS["matmul"].bytes(shape, "fp32") == 2 * BUILTINS["matmul"].bytes(shape, "bf16")
    assert BUILTINS["rmsnorm"].bytes({"rows": 8, "cols": 100}, "fp16") == (2 * 8 * 100 + 100) * 2
    assert BUILTINS["rmsnorm"].flops({"rows": 8, "cols": 100}) == 4 * 8 * 100
    causal = {"Z": 1, "H": 2, "N_CTX": 64, "HEAD_DIM": 16, "CAUSAL": True}
    assert BUILTINS["attention"].flops(causal) * 2 == BUILTINS["attention"].flops({**causal, "CAUSAL": False})


def test_bad_configs_shapes_and_dtypes_are_refused_with_a_sentence_naming_them():
    matmul = BUILTINS["matmul"]
    good = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}
    with pytest.raises(ValueError, match=r"lacks BLOCK_K; give exactly the parameters"):
        matmul.check_config({k: v for k, v in good.items() if k != "BLOCK_K"})
    with pytest.raises(ValueError, match=r"has unknown BLOCK_Q"):
        matmul.check_config({**good, "BLOCK_Q": 1})
    with pytest.raises(ValueError, match=r"shape .* lacks K"):
        matmul.flops({"M": 1, "N": 2})
    with pytest.raises(ValueError, match=r"dtype 'int8' is not supported .* use one of fp16, bf16, fp32\."):
        matmul.bytes({"M": 1, "N": 2, "K": 3}, "int8")


def test_split_k_is_a_variant_and_split_k_1_is_the_recorded_kernel():
    from dr_kernel.kernels.matmul import matmul_kernel, matmul_splitk_kernel

    matmul = BUILTINS["matmul"]
    recorded = {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}
    # A config of the recorded tables (no SPLIT_K) means 1, and compiles the recorded kernel with
    # the recorded constexprs: the binary that was timed.
    assert matmul.check_config(recorded)["SPLIT_K"] == 1
    assert matmul.fn_for(matmul.check_config(recorded), {"M": 16, "N": 4096, "K": 4096}) is matmul_kernel
    assert matmul.compile_source({"M": 16, "N": 4096, "K": 4096}, "fp16", recorded) == \
        matmul.compile_source({"M": 16, "N": 4096, "K": 4096}, "fp16", {**recorded, "SPLIT_K": 1})
    split = {**recorded, "SPLIT_K": 8}
    assert matmul.fn_for(split, {"M": 512, "N": 512, "K": 32768}) is matmul_splitk_kernel
    assert matmul.compile_source({"M": 512, "N": 512, "K": 32768}, "fp16", split)[1]["SPLIT_K"] == 8
    # It compiles for the H200 (ptxas, atomics included), with a binary of its own.
    from dr_kernel.analysis import analyse

    deep_k = {"M": 512, "N": 512, "K": 32768}
    plain, splitting = analyse(matmul, deep_k, "bf16", recorded), analyse(matmul, deep_k, "bf16", split)
    assert plain.valid and splitting.valid, (plain.reason, splitting.reason)
    assert plain.binary_hash != splitting.binary_hash and splitting.n_regs > 0


def test_the_tma_attention_kernel_copies_through_descriptors_and_masks_only_its_last_key_loop():
    from dr_kernel.analysis import compile_kernel
    from dr_kernel.kernels.attention import attn_fwd_kernel, attn_fwd_tma_kernel

    attention = BUILTINS["attention"]
    config = attention.check_config({"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2})
    assert config["TMA"] == 0 and attention.fn_for(config, None) is attn_fwd_kernel  # The recorded one.
    config["TMA"] = 1
    assert attention.fn_for(config, None) is attn_fwd_tma_kernel
    for causal in (False, True):
        shape = {"Z": 1, "H": 2, "N_CTX": 1000, "HEAD_DIM": 64, "CAUSAL": causal}
        compiled, _ = compile_kernel(attn_fwd_tma_kernel, *attention.compile_source(shape, "fp16", config),
                                     {"num_warps": 4, "num_stages": 2})
        # Two key loops (below the diagonal or the sequence's end, then across it), one masked;
        # Q, K, V and O through the tensor memory accelerator, the products on wgmma.
        assert compiled.asm["ttir"].count("scf.for") == 2 and compiled.asm["ttir"].count("arith.select") == 1
        ptx = compiled.asm["ptx"]
        assert "cp.async.bulk.tensor" in ptx and "wgmma.mma_async" in ptx and "cp.async.cg" not in ptx
    # TMA = 2, the same kernel REFINED: the scale inside the exponent's argument turns each score's
    # multiply and subtraction into one multiply-add.
    shape = {"Z": 1, "H": 2, "N_CTX": 1000, "HEAD_DIM": 64, "CAUSAL": True}
    ptx = {tma: compile_kernel(attn_fwd_tma_kernel, *attention.compile_source(shape, "fp16", {**config, "TMA": tma}),
                               {"num_warps": 4, "num_stages": 2})[0].asm["ptx"] for tma in (1, 2)}
    assert attention.fn_for({**config, "TMA": 2}, None) is attn_fwd_tma_kernel
    assert ptx[2].count("sub.f32") < ptx[1].count("sub.f32") // 4
    assert ptx[2].count("fma.rn.f32") > ptx[1].count("fma.rn.f32")


def test_the_tma_matmul_kernel_copies_tiles_through_descriptors_and_refuses_unaligned_rows():
    from dr_kernel.analysis import compile_kernel
    from dr_kernel.kernels.matmul import matmul_tma_kernel

    matmul = BUILTINS["matmul"]
    config = matmul.check_config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8,
                                  "num_stages": 3})
    assert config["TMA"] == 0
    config["TMA"] = 1
    shape = {"M": 4000, "N": 4096, "K": 1000}  # K a multiple of 8, not of 16 or of BLOCK_K.
    assert matmul.fn_for(config, shape) is matmul_tma_kernel
    compiled, _ = compile_kernel(matmul_tma_kernel, *matmul.compile_source(shape, "bf16", config),
                                 {"num_warps": 8, "num_stages": 3})
    # A and B through the tensor memory accelerator, C stored by it, the products on wgmma; no
    # per-element masks in the loop.
    ptx, ttir = compiled.asm["ptx"], compiled.asm["ttir"]
    assert "cp.async.bulk.tensor" in ptx and "wgmma.mma_async" in ptx and "cp.async.cg" not in ptx
    assert "arith.select" not in ttir and "tt.load" not in ttir
    with pytest.raises(ValueError, match="N and K multiples of 8.*N=4095, K=4096: search TMA = 0"):
        matmul.compile_source({"M": 64, "N": 4095, "K": 4096}, "fp16", config)


def test_the_persistent_tma_matmul_kernel_walks_tiles_in_one_pipelined_loop_and_is_searched_on_hopper():
    from dr_kernel.analysis import A100, H200, compile_kernel
    from dr_kernel.kernels.matmul import PERSISTENT_RULE, matmul_tma_persistent_kernel

    matmul = BUILTINS["matmul"]
    config = matmul.check_config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8,
                                  "num_stages": 4, "TMA": 2})
    shape = {"M": 3000, "N": 5000, "K": 1000}  # K a multiple of 8, not of 16 or of BLOCK_K.
    assert matmul.fn_for(config, shape) is matmul_tma_persistent_kernel
    source = matmul.compile_source(shape, "fp16", config)
    compiled, _ = compile_kernel(matmul_tma_persistent_kernel, *source, {"num_warps": 8, "num_stages": 4})
    signature, constexprs, attrs = source
    whole, _ = compile_kernel(matmul_tma_persistent_kernel, signature, {**constexprs, "EPILOGUE_HALVES": 1}, attrs,
                              {"num_warps": 8, "num_stages": 4})
    ptx = compiled.asm["ptx"]
    assert "cp.async.bulk.tensor" in ptx and "wgmma.mma_async" in ptx and "cp.async.cg" not in ptx
    # C's staging buffer cannot reuse the pipeline's (the next tile's copies are in flight while it
    # is stored): in two halves, four stages of 128x64 and 64x256 tiles and it fit in an H200's
    # 227 KB; whole, they do not (the H100 run refused that config for shared memory).
    assert compiled.metadata.shared <= H200.shared_per_block < whole.metadata.shared
    # The program count is a plain argument, not specialised: one binary for every GPU's SM count.
    assert source[0]["programs"] == "i32" and (6,) not in source[2]
    # A live tuning on Hopper searches it beside the pointer kernels, on tiles of one or two
    # warpgroups, never split; before compute capability 9.0, or with rows not 16-byte aligned, not.
    live = list(matmul.space_for(shape, H200).configs())
    persistent = [c for c in live if c["TMA"] == 2]
    assert {c["TMA"] for c in live} == {0, 2} and PERSISTENT_RULE
    assert persistent and all(c["SPLIT_K"] == 1 and c["BLOCK_M"] >= 64 and c["BLOCK_N"] >= 64
                              and c["num_warps"] >= 4 for c in persistent)
    assert {c["TMA"] for c in matmul.space_for(shape, A100).configs()} == {0}
    assert {c["TMA"] for c in matmul.space_for({"M": 3000, "N": 5001, "K": 1000}, H200).configs()} == {0}
    # Nor below two waves of 128×128 tiles (264 on 132 SMs), where a program has one tile to walk:
    # 2048² has 256, 6144×1000 has 384.
    assert {c["TMA"] for c in matmul.space_for({"M": 2048, "N": 2048, "K": 2048}, H200).configs()} == {0}
    assert {c["TMA"] for c in matmul.space_for({"M": 6144, "N": 1000, "K": 2048}, H200).configs()} == {0, 2}


@pytest.mark.parametrize("family", ["matmul", "attention"])
def test_a_tma_launch_refuses_operands_that_do_not_start_on_16_bytes_naming_them(family):
    # A tensor descriptor needs a 16-byte aligned start; a view one element into its storage would
    # fault on the GPU (the interpreter asserts), so the launch refuses it before anything runs.
    import torch

    kernel = BUILTINS[family]
    shape = {"M": 32, "N": 32, "K": 32} if family == "matmul" else \
        {"Z": 1, "H": 1, "N_CTX": 64, "HEAD_DIM": 16, "CAUSAL": False}
    inputs = kernel.make_inputs(shape, "fp16", "cpu", 0)
    name = "a" if family == "matmul" else "k"
    view = torch.empty(inputs[name].numel() + 8, dtype=torch.float16)[1:inputs[name].numel() + 1]
    inputs[name] = view.view(inputs[name].shape).copy_(inputs[name])
    config = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "TMA": 2}
    if family == "matmul":
        config.update(BLOCK_K=32, GROUP_M=8)
    with pytest.raises(ValueError, match=rf"{family} with TMA > 0 .* {name} \(address % 16 = 2\) do not:.*TMA = 0"):
        kernel.launch(inputs, config)


def test_a_live_attention_tuning_on_hopper_searches_the_tma_kernel_on_the_tiles_it_was_measured_on():
    from dr_kernel.analysis import A100, B200, H200

    attention = BUILTINS["attention"]
    shape = {"Z": 2, "H": 16, "N_CTX": 8192, "HEAD_DIM": 128, "CAUSAL": False}
    recorded = list(attention.search_space().configs())
    live = list(attention.space_for(shape, H200).configs())
    tma = [c for c in live if c["TMA"] == 2]  # The refined TMA kernel: it beat TMA = 1 on every problem measured.
    assert {c["TMA"] for c in live} == {0, 2, 3, 4}
    assert [c for c in live if c["TMA"] == 0] == recorded and {c["TMA"] for c in recorded} == {0}
    # BLOCK_M 64-256, BLOCK_N 32-128, 4 or 8 warps, 2-4 stages: 3 * 3 * 2 * 3.
    assert len(tma) == 54 and all(c["BLOCK_M"] >= 64 and c["BLOCK_N"] >= 32 and c["num_warps"] >= 4
                                  and c["num_stages"] >= 2 for c in tma)
    # The warp-specialised Gluon kernel (3, and 4 with the overlap inside a warpgroup): 128-row tiles
    # of two 4-warp warpgroups, key blocks of 64 or 128, 2-4 stages.
    ws = [c for c in live if c["TMA"] >= 3]
    assert {(c["BLOCK_M"], c["num_warps"]) for c in ws} == {(128, 4)} and len(ws) == 2 * 2 * 3
    assert {(c["BLOCK_N"], c["num_stages"]) for c in ws} == {(n, s) for n in (64, 128) for s in (2, 3, 4)}
    # Before compute capability 9.0 there are no tensor descriptors to copy through; after it no
    # warpgroup MMA (sm_100 has its own); Triton's interpreter does not run Gluon.
    assert list(attention.space_for(shape, A100).configs()) == recorded
    assert {c["TMA"] for c in attention.space_for(shape, B200).configs()} == {0, 2}
    assert [c for c in attention.space_for(shape, H200, interpret=True).configs()] == \
        [c for c in live if c["TMA"] < 3]


@pytest.mark.parametrize(("head_dim", "opened"), [
    (128, [(4, 128, 3), (3, 128, 3)]), (64, [(4, 128, 3), (3, 128, 3)]), (256, [(3, 64, 2)])])
def test_a_tuning_on_hopper_opens_with_the_warp_specialised_kernels_measured_winners_that_fit(head_dim, opened):
    from dr_kernel.analysis import A100, H200, analyse

    attention = BUILTINS["attention"]
    shape = {"Z": 1, "H": 16, "N_CTX": 2048, "HEAD_DIM": head_dim, "CAUSAL": True}
    opening = attention.opening(shape, H200)
    assert [(c["TMA"], c["BLOCK_N"], c["num_stages"]) for c in opening] == opened
    # What opens a tuning compiles within the H200's shared memory (head dim 256 fits one).
    for config in opening:
        report = analyse(attention, shape, "bf16", config, H200)
        assert report.valid and report.threads == 12 * 32 and report.n_spills == 0, report.reason
    assert attention.opening(shape, A100) == [] and attention.opening(shape, H200, interpret=True) == []
    assert BUILTINS["matmul"].opening({"M": 64, "N": 64, "K": 64}, H200) == []


def test_a_live_matmul_tuning_adds_splits_of_k_where_tiles_leave_sms_idle_and_leaves_out_spilling_accumulators():
    from dr_kernel.analysis import A100, H200
    from dr_kernel.kernels.base import cdiv

    matmul = BUILTINS["matmul"]
    recorded = matmul.search_space()
    # 4096³ has at least 256 tiles (256×256) for 132 SMs: no split; the recorded space less the
    # configs whose accumulator alone needs more than 128 registers a thread (they spill).
    big = matmul.space_for({"M": 4096, "N": 4096, "K": 4096}, A100)
    assert {c["SPLIT_K"] for c in big.configs()} == {1} and {c["TMA"] for c in big.configs()} == {0}
    spilling = [c for c in recorded.configs() if c["BLOCK_M"] * c["BLOCK_N"] > 128 * 32 * c["num_warps"]]
    assert big.count_valid() == recorded.count_valid() - len(spilling) and len(spilling) == 240
    assert not big.is_valid({"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 2,
                             "num_stages": 2, "SPLIT_K": 1})
    # 512×512×32768 has 16 tiles of 128×128: splits up to 16, each config within two programs per
    # SM and two K iterations per split; the recorded configs but the spilling ones still there.
    deep = matmul.space_for({"M": 512, "N": 512, "K": 32768}, H200)
    configs = [c for c in deep.configs() if c["TMA"] == 0]
    assert {c["SPLIT_K"] for c in configs} == {1, 2, 4, 8, 16}
    assert sum(c["SPLIT_K"] == 1 for c in configs) == 1440 - 240
    for c in configs:
        if c["SPLIT_K"] > 1:
            assert cdiv(512, c["BLOCK_M"]) * cdiv(512, c["BLOCK_N"]) * c["SPLIT_K"] <= 2 * H200.sm_count
            assert 32768 >= 2 * c["SPLIT_K"] * c["BLOCK_K"]
    assert not deep.is_valid({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 4,
                              "num_stages": 3, "SPLIT_K": 2})  # 256 tiles: one program per SM already.
    # A GPU with fewer SMs has less room for a split.
    small = dataclasses.replace(H200, sm_count=16)
    assert matmul.space_for({"M": 512, "N": 512, "K": 32768}, small).count_valid() < deep.count_valid()
    # Other families search their own space whatever the problem.
    assert BUILTINS["softmax"].space_for({"rows": 8, "cols": 1024}).count_valid() == \
        BUILTINS["softmax"].search_space().count_valid()


def test_rows_aligned_to_8_but_not_16_launch_the_variant_told_so_and_load_16_bytes_at_a_time():
    import re

    from dr_kernel.analysis import analyse
    from dr_kernel.kernels.matmul import matmul_aligned_kernel, matmul_kernel, row_alignment

    matmul = BUILTINS["matmul"]
    config = matmul.check_config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8,
                                  "num_warps": 8, "num_stages": 3})
    assert [row_alignment(n) for n in (4096, 1000, 1020, 1022, 4095)] == [16, 8, 4, 2, 1]
    assert matmul.fn_for(config, {"M": 2048, "N": 1000, "K": 16384}) is matmul_aligned_kernel
    assert matmul.fn_for(config, {"M": 2048, "N": 4095, "K": 16384}) is matmul_kernel  # Nothing to tell.
    assert matmul.fn_for(config, {"M": 2000, "N": 1024, "K": 1024}) is matmul_kernel   # M sets no stride.

    def widths(fn, shape):
        # The global memory traffic of the kernel compiled for the H200 as a launch on this problem
        # would compile it: the asynchronous copies' sizes, how many, and the stores' widths.
        from dr_kernel.analysis import compile_kernel
        from dr_kernel.kernels.base import specialise
        from dr_kernel.kernels.matmul import aligned_arguments, recorded_arguments

        kernel_config = {k: v for k, v in config.items() if k not in ("num_warps", "num_stages")}
        arguments = (aligned_arguments(shape, "fp16", kernel_config, 8) if fn is matmul_aligned_kernel
                     else recorded_arguments(shape, "fp16", kernel_config))
        compiled, _ = compile_kernel(fn, *specialise(fn, arguments), {"num_warps": 8, "num_stages": 3})
        ptx = compiled.asm["ptx"]
        copies = re.findall(r"cp\.async\.c[ag]\.shared\.global\S* \[[^\]]*\], \[[^\]]*\], (0x\w+|\d+)", ptx)
        return sorted(set(copies)), len(copies), sorted(set(re.findall(r"st\.global\S*", ptx)))

    odd = {"M": 1000, "N": 1000, "K": 1000}
    aligned = widths(matmul_kernel, {"M": 1024, "N": 1024, "K": 1024})
    assert aligned[0] == ["0x10"] and all(".v4" in store for store in aligned[2])
    # Rows of 1000 elements, told: as many 16-byte copies as on aligned rows, and vector stores.
    assert widths(matmul_aligned_kernel, odd) == aligned
    # The recorded kernel on that problem copies nothing 16 bytes at a time and stores single
    # elements: what the variant is for.
    recorded = widths(matmul_kernel, odd)
    assert recorded[1] == 0 and recorded[2] == ["st.global.b16"]
    # The analyser compiles what the launch runs.
    assert analyse(matmul, {"M": 2048, "N": 1000, "K": 16384}, "bf16", config).valid


def test_compile_description_specialises_like_a_launch_on_contiguous_tensors():
    matmul = BUILTINS["matmul"]
    config = {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}
    signature, constexprs, attrs = matmul.compile_source({"M": 16, "N": 4096, "K": 4096}, "bf16", config)
    assert signature["a_ptr"] == "*bf16" and signature["M"] == "i32"
    # Unit strides become the constant 1; the configuration's compiler options are not constexprs.
    assert constexprs == {"sak": 1, "sbn": 1, "scn": 1,
                          "BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}
    assert signature["sak"] == "constexpr" and "num_warps" not in signature
    # All three pointers and every size and stride here are multiples of 16.
    names = list(signature)
    divisible = sorted(names[i[0]] for i in attrs)
    assert divisible == sorted(["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "sam", "sbk", "scm"])
    softmax_signature = BUILTINS["softmax"].signature({"rows": 3, "cols": 100}, "fp32")
    assert softmax_signature == {"x_ptr": "*fp32", "y_ptr": "*fp32", "n_cols": "i32", "stride": "i32",
                                 "BLOCK": "constexpr"}
    attention_config = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}
    assert BUILTINS["attention"].constexprs(BUILTINS["attention"].shapes[1], attention_config) == \
        {"HEAD_DIM": 64, "BLOCK_M": 128, "BLOCK_N": 64, "CAUSAL": True}


def test_specialise_agrees_with_tritons_own_launch_rules():
    # Triton's launcher classifies each argument with this native function; our rules must give
    # the same type, the same constant and the same divisibility for every kind of value.
    import torch
    import triton
    import triton.language as tl
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import MockTensor

    @triton.jit
    def probe(p, a, b, c, d, e, f, X: tl.constexpr):
        pass

    values = {"p": MockTensor(torch.bfloat16), "a": 1, "b": 48, "c": 17, "d": 2**40, "e": 0.5, "f": -7}
    signature, constexprs, attrs = specialise(probe, {**{k: v for k, v in values.items() if k != "p"},
                                                      "p": Pointer("bf16"), "X": 3})
    jit_attrs = {}
    for index, (name, value) in enumerate(values.items()):
        kind, attribute = native_specialize_impl(BaseBackend, value, False, True, True)
        assert signature[name] == kind, name
        if kind == "constexpr":
            assert constexprs[name] == attribute
        elif isinstance(attribute, str):  # What the JIT's _pack_args keeps, empty ones included.
            jit_attrs[(index,)] = BaseBackend.parse_attr(attribute)
    assert constexprs["X"] == 3
    # The same dict in the same order: Triton's cache key hashes its text.
    assert str(attrs) == str(jit_attrs) and (3,) in attrs and attrs[(3,)] == []


def test_make_inputs_are_seeded_random_normal_and_never_zero():
    import torch

    kernel = BUILTINS["attention"]
    shape = {"Z": 1, "H": 2, "N_CTX": 32, "HEAD_DIM": 16, "CAUSAL": False}
    first, again, other = (kernel.make_inputs(shape, "bf16", "cpu", seed) for seed in (3, 3, 4))
    assert first["q"].dtype == torch.bfloat16 and first["q"].shape == (1, 2, 32, 16)
    assert torch.equal(first["k"], again["k"]) and not torch.equal(first["k"], other["k"])
    assert not torch.equal(first["q"], first["k"])
    for name in ("q", "k", "v"):
        values = first[name].float()
        assert (values != 0).float().mean() > 0.99
        assert 0.8 < values.std().item() < 1.2 and abs(values.mean().item()) < 0.2
    assert kernel.output(first) is first["o"]


def test_rmsnorm_reference_normalises_rows_to_unit_root_mean_square():
    import torch

    kernel = BUILTINS["rmsnorm"]
    inputs = kernel.make_inputs({"rows": 4, "cols": 256}, "fp32", "cpu", 0)
    inputs["w"] = torch.ones_like(inputs["w"])
    y = kernel.reference(inputs)
    assert torch.allclose(y.pow(2).mean(dim=-1), torch.ones(4), atol=1e-4)


# ----- results under the interpreter ----------------------------------------------------------

# Small problems whose sizes are not multiples of the blocks, so that every mask is exercised,
# and two configurations per kernel (one with GROUP_M wrapping for matmul, one causal attention).
INTERPRETER_CASES = {
    "matmul": [({"M": 40, "N": 72, "K": 50}, {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8,
                                               "num_warps": 4, "num_stages": 3}),
               ({"M": 33, "N": 40, "K": 64}, {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 1,
                                               "num_warps": 2, "num_stages": 2}),
               # N and K multiples of 16: the recorded kernel; odd N and K: the recorded kernel too.
               # The two above (alignment 2 and 8) launch matmul_aligned_kernel.
               ({"M": 33, "N": 48, "K": 80}, {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8,
                                               "num_warps": 4, "num_stages": 2}),
               ({"M": 20, "N": 45, "K": 37}, {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 1,
                                               "num_warps": 2, "num_stages": 2}),
               # Split-K: 4 programs per tile over a K of 10 iterations (the last split is short).
               ({"M": 40, "N": 72, "K": 300}, {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8,
                                                "num_warps": 4, "num_stages": 2, "SPLIT_K": 4}),
               # More splits than K iterations: the idle programs must add nothing.
               ({"M": 16, "N": 32, "K": 64}, {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1,
                                               "num_warps": 4, "num_stages": 2, "SPLIT_K": 16}),
               # The TMA kernel: tiles past every edge (M 40 of 48, N 72 of 96, K 56 of 64), grouped.
               ({"M": 40, "N": 72, "K": 56}, {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2,
                                               "num_warps": 4, "num_stages": 3, "TMA": 1}),
               # The persistent TMA kernel: 4 programs for 9 tiles (some take three, some two),
               # tiles past every edge, C stored in halves of 16 columns, grouped order.
               ({"M": 40, "N": 72, "K": 56}, {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2,
                                               "num_warps": 4, "num_stages": 3, "TMA": 2}),
               # Fewer tiles than programs: one tile, K of one short iteration.
               ({"M": 8, "N": 24, "K": 8}, {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 8,
                                             "num_warps": 4, "num_stages": 2, "TMA": 2})],
    "softmax": [({"rows": 5, "cols": 300}, {"BLOCK": 128, "num_warps": 4, "num_stages": 1}),
                ({"rows": 3, "cols": 100}, {"BLOCK": 256, "num_warps": 1, "num_stages": 2})],
    "attention": [({"Z": 1, "H": 2, "N_CTX": 40, "HEAD_DIM": 16, "CAUSAL": False},
                   {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}),
                  ({"Z": 2, "H": 1, "N_CTX": 48, "HEAD_DIM": 32, "CAUSAL": True},
                   {"BLOCK_M": 32, "BLOCK_N": 16, "num_warps": 4, "num_stages": 2}),
                  # The TMA kernel: rows past the sequence's end (40 of 48 and 64), its unmasked
                  # and masked key loops, and key blocks wider than the row tiles on the diagonal.
                  ({"Z": 1, "H": 2, "N_CTX": 40, "HEAD_DIM": 16, "CAUSAL": False},
                   {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1, "TMA": 1}),
                  ({"Z": 2, "H": 2, "N_CTX": 72, "HEAD_DIM": 32, "CAUSAL": True},
                   {"BLOCK_M": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "TMA": 1}),
                  ({"Z": 1, "H": 3, "N_CTX": 40, "HEAD_DIM": 16, "CAUSAL": True},
                   {"BLOCK_M": 32, "BLOCK_N": 16, "num_warps": 4, "num_stages": 2, "TMA": 1}),
                  # REFINED (TMA = 2): the causal tiles in reverse order, the last one short; the
                  # scale fused into the exponent, masked and unmasked loops alike.
                  ({"Z": 2, "H": 2, "N_CTX": 72, "HEAD_DIM": 32, "CAUSAL": True},
                   {"BLOCK_M": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "TMA": 2}),
                  ({"Z": 1, "H": 2, "N_CTX": 40, "HEAD_DIM": 16, "CAUSAL": False},
                   {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1, "TMA": 2})],
    # The row in one block (h kept in registers) and in chunks of 128 (h written, then read back).
    "add_rmsnorm": [({"rows": 5, "cols": 300}, {"BLOCK": 512, "num_warps": 4, "num_stages": 1}),
                    ({"rows": 3, "cols": 300}, {"BLOCK": 128, "num_warps": 2, "num_stages": 2})],
    "rmsnorm": [({"rows": 5, "cols": 300}, {"BLOCK": 128, "num_warps": 4, "num_stages": 1}),
                ({"rows": 2, "cols": 64}, {"BLOCK": 256, "num_warps": 2, "num_stages": 2})],
}
if not SPLIT_K_INTERPRETS:
    INTERPRETER_CASES["matmul"] = [(shape, config) for shape, config in INTERPRETER_CASES["matmul"]
                                   if config.get("SPLIT_K", 1) == 1]

# Triton 3.6's interpreter multiplies bf16 operands of tl.dot as the raw 16-bit integers it stores
# them in, so bf16 products are wrong there (the compiled kernel is right); bf16 is checked under
# the interpreter only for the kernels without tl.dot.
INTERPRETER_DTYPES = {"matmul": ["fp16", "fp32"], "attention": ["fp16", "fp32"],
                      "softmax": ["fp16", "bf16", "fp32"], "rmsnorm": ["fp16", "bf16", "fp32"],
                      "add_rmsnorm": ["fp16", "bf16", "fp32"]}

# Relative L2 error allowed: the recorded tables' 2e-2 for half precision; fp32 results are
# computed in fp32 throughout except tl.dot, which uses TF32 on a GPU but exact fp32 here.
TOLERANCE = {"fp16": 2e-2, "bf16": 2e-2, "fp32": 1e-4}


@pytest.mark.parametrize("name", sorted(INTERPRETER_CASES))
def test_kernel_matches_its_reference_under_the_interpreter(name):
    environment = {**os.environ, "TRITON_INTERPRET": "1",
                   "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    result = subprocess.run([sys.executable, __file__, name], capture_output=True, text=True, env=environment,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    cases = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(cases) == len(INTERPRETER_CASES[name]) * len(INTERPRETER_DTYPES[name])
    for case in cases:
        assert case["interpreted"], "the child process compiled instead of interpreting"
        assert case["dtype_kept"], case
        assert math.isfinite(case["relerr"]) and case["relerr"] < TOLERANCE[case["dtype"]], case
        # The output buffer starts as garbage; a kernel that wrote nothing could not match.
        assert case["reference_norm"] > 0


def _numpy_index_fix() -> None:
    # Triton 3.6's interpreter converts one-element arrays to int with int(array), which NumPy
    # 2.4 refuses (triton-lang/triton#9171); loop bounds such as tl.cdiv(K, BLOCK_K) hit it. This
    # re-installs the conversion on a scalar, inside the interpreter's own patch scope so that it
    # is undone with the rest after each launch.
    import numpy
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor

    def patch(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(numpy.asarray(self.handle.data).reshape(-1)[0]))

    interpreter._patch_lang_tensor = patch


def _run_interpreted(name: str) -> None:
    import triton

    _numpy_index_fix()
    kernel = kernels.get(name)
    for shape, config in INTERPRETER_CASES[name]:
        for dtype in INTERPRETER_DTYPES[name]:
            inputs = kernel.make_inputs(shape, dtype, "cpu", seed=1)
            kernel.launch(inputs, config)
            output, reference = kernel.output(inputs), kernel.reference(inputs)
            error = ((output.float() - reference.float()).norm() / reference.float().norm()).item()
            print(json.dumps({"kernel": name, "dtype": dtype, "shape": shape, "relerr": error,
                              "reference_norm": reference.float().norm().item(),
                              "dtype_kept": output.dtype == reference.dtype == kernels.torch_dtype(dtype),
                              "interpreted": triton.knobs.runtime.interpret}), flush=True)


if __name__ == "__main__":
    _run_interpreted(sys.argv[1])
