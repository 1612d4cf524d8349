"""Issue 11's matmul bar (no shape below 0.8x cuBLAS) on Hopper: a persistent, warp-specialised
GEMM in Gluon, probed against cuBLAS and the built-in kernel before it may join matmul's space.

The two shapes left below 0.8x on an H100 (3000x5000x1000 at 0.72x, 1000^3 at 0.76x) have short
K loops, so each output tile's prologue (filling the pipeline) and epilogue (converting and
storing C) weigh as much as its products; the persistent TMA kernel overlaps neither. cuBLAS's
Hopper kernels overlap both with warp specialisation, which Triton 3.6's `tl.range(...,
warp_specialize=True)` gives sm_100 only. Gluon writes it on sm_90: one warp loads A and B tiles
through TMA, alternating between two consumer warpgroups' rings of stages one K step at a time;
each consumer warpgroup computes every other output tile of its CTA with warpgroup MMAs and
stores it through TMA, so one consumer's epilogue runs under the other's products (the
"ping-pong" schedule).

    python3 benchmarks/gluon_matmul_probe.py --out DIR            # on the GPU: check and time
    python3 benchmarks/gluon_matmul_probe.py --compile-only       # anywhere: compile for sm_90

On the GPU every config's C is checked against an fp32 product before it is timed; rows (config,
ms, TFLOP/s, cuBLAS's ms, the built-in matmul's best over a few tiles) go to DIR/gluon_matmul.json.
"""

from __future__ import annotations

import gluon_probe
import triton
from dr_kernel.kernels.hopper_tma import tma_load, tma_store
from gluon_probe import MAXNREG, builtin_best_ms, check_and_time, do_bench_ms
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)


@gluon.jit
def _tile_coords(tile, M, N, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr):
    # Grouped order: GROUP_M rows of tiles sweep the columns together, so A's rows and B's
    # columns stay in L2 across neighbouring tiles.
    tiles_m = gl.cdiv(M, BM)
    tiles_n = gl.cdiv(N, BN)
    per_group = GROUP_M * tiles_n
    group = tile // per_group
    first_m = group * GROUP_M
    rows = gl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (tile % per_group) % rows
    pid_n = (tile % per_group) // rows
    return pid_m * BM, pid_n * BN


@gluon.jit
def _load_partition(a_ptr, b_ptr, M, N, K, sam, sbk, a_smem, b_smem, ready, empty,
                    BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, GROUP_M: gl.constexpr,
                    STAGES: gl.constexpr):
    # One warp. The CTA's tiles in pairs, one per consumer; within a pair the K steps alternate
    # between the two consumers' rings, so that neither waits while the other's ring is full.
    dtype: gl.constexpr = a_ptr.dtype.element_ty
    a_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BM, BK], dtype)
    b_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BK, BN], dtype)
    a_desc = tma.make_tensor_descriptor(a_ptr, [M, K], [sam, 1], [BM, BK], a_layout)
    b_desc = tma.make_tensor_descriptor(b_ptr, [K, N], [sbk, 1], [BK, BN], b_layout)
    tiles = gl.cdiv(M, BM) * gl.cdiv(N, BN)
    k_steps = gl.cdiv(K, BK)
    pid = gl.program_id(0)
    programs = gl.num_programs(0)
    mine = gl.cdiv(tiles - pid, programs)  # Tiles pid, pid + programs, ...
    nbytes: gl.constexpr = (BM * BK + BK * BN) * dtype.primitive_bitwidth // 8
    for pair in range(gl.cdiv(mine, 2)):
        off_m0, off_n0 = _tile_coords(pid + (2 * pair) * programs, M, N, BM, BN, GROUP_M)
        off_m1, off_n1 = _tile_coords(pid + (2 * pair + 1) * programs, M, N, BM, BN, GROUP_M)
        has_second = 2 * pair + 1 < mine
        for kk in range(k_steps):
            step = pair * k_steps + kk  # This consumer's K steps so far.
            stage = step % STAGES
            phase = (step // STAGES) & 1
            mbarrier.wait(empty.index(stage), phase ^ 1)
            mbarrier.expect(ready.index(stage), nbytes)
            tma_load(a_desc, [off_m0, kk * BK], ready.index(stage), a_smem.index(stage))
            tma_load(b_desc, [kk * BK, off_n0], ready.index(stage), b_smem.index(stage))
            if has_second:
                mbarrier.wait(empty.index(STAGES + stage), phase ^ 1)
                mbarrier.expect(ready.index(STAGES + stage), nbytes)
                tma_load(a_desc, [off_m1, kk * BK], ready.index(STAGES + stage), a_smem.index(STAGES + stage))
                tma_load(b_desc, [kk * BK, off_n1], ready.index(STAGES + stage), b_smem.index(STAGES + stage))


@gluon.jit
def _consume(c_ptr, M, N, K, scm, a_smem, b_smem, c_smem, ready, empty, WHICH: gl.constexpr, BM: gl.constexpr,
             BN: gl.constexpr, BK: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    # One warpgroup: the CTA's tiles 2 * pair + WHICH, each accumulated in registers over the K
    # steps (one warpgroup MMA in flight while the next stage is waited for), then stored.
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, BN, 16])
    c_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BM, BN], c_ptr.dtype.element_ty)
    c_desc = tma.make_tensor_descriptor(c_ptr, [M, N], [scm, 1], [BM, BN], c_layout)
    tiles = gl.cdiv(M, BM) * gl.cdiv(N, BN)
    k_steps = gl.cdiv(K, BK)
    pid = gl.program_id(0)
    programs = gl.num_programs(0)
    mine = gl.cdiv(tiles - pid, programs)
    out = c_smem.index(WHICH)
    zero = gl.zeros([BM, BN], gl.float32, layout=acc_layout)
    for pair in range(gl.cdiv(mine - WHICH, 2)):
        off_m, off_n = _tile_coords(pid + (2 * pair + WHICH) * programs, M, N, BM, BN, GROUP_M)
        step = pair * k_steps
        stage = WHICH * STAGES + step % STAGES
        mbarrier.wait(ready.index(stage), (step // STAGES) & 1)
        acc = warpgroup_mma(a_smem.index(stage), b_smem.index(stage), zero, use_acc=False, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))  # Still in flight: the wait gives the loop a tensor to carry.
        for kk in range(1, k_steps):
            step = pair * k_steps + kk
            prev = stage
            stage = WHICH * STAGES + step % STAGES
            mbarrier.wait(ready.index(stage), (step // STAGES) & 1)
            acc = warpgroup_mma(a_smem.index(stage), b_smem.index(stage), acc, is_async=True)
            acc = warpgroup_mma_wait(1, deps=(acc,))  # The step before this one is done: its stage is free.
            mbarrier.arrive(empty.index(prev), count=1)
        acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(empty.index(stage), count=1)
        tma.store_wait(0)  # The previous tile's store has left this buffer.
        out.store(acc.to(c_ptr.dtype.element_ty))
        fence_async_shared()
        tma_store(c_desc, [off_m, off_n], out)
    tma.store_wait(0)


@gluon.jit
def _second_consumer(c_ptr, M, N, K, scm, a_smem, b_smem, c_smem, ready, empty, BM: gl.constexpr,
                     BN: gl.constexpr, BK: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    _consume(c_ptr, M, N, K, scm, a_smem, b_smem, c_smem, ready, empty, 1, BM, BN, BK, GROUP_M, STAGES)


@gluon.jit
def matmul_ws_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sbk, scm, BM: gl.constexpr, BN: gl.constexpr,
                     BK: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    # Persistent: grid (min(SMs, tiles),); A (M, K), B (K, N), C (M, N), each with unit stride
    # along its rows.
    dtype: gl.constexpr = a_ptr.dtype.element_ty
    a_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BM, BK], dtype)
    b_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BK, BN], dtype)
    c_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BM, BN], c_ptr.dtype.element_ty)
    a_smem = gl.allocate_shared_memory(dtype, [2 * STAGES, BM, BK], a_layout)
    b_smem = gl.allocate_shared_memory(dtype, [2 * STAGES, BK, BN], b_layout)
    c_smem = gl.allocate_shared_memory(c_ptr.dtype.element_ty, [2, BM, BN], c_layout)
    ready = gl.allocate_shared_memory(gl.int64, [2 * STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [2 * STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2 * STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    gl.warp_specialize([
        (_consume, (c_ptr, M, N, K, scm, a_smem, b_smem, c_smem, ready, empty, 0, BM, BN, BK, GROUP_M, STAGES)),
        (_load_partition, (a_ptr, b_ptr, M, N, K, sam, sbk, a_smem, b_smem, ready, empty, BM, BN, BK, GROUP_M,
                           STAGES)),
        (_second_consumer, (c_ptr, M, N, K, scm, a_smem, b_smem, c_smem, ready, empty, BM, BN, BK, GROUP_M,
                            STAGES)),
    ], [1, 4], [24, 240])


CONFIGS = [{"BM": bm, "BN": bn, "BK": 64, "GROUP_M": 8, "STAGES": s}
           for bm, bn, s in ((128, 128, 2), (64, 128, 4), (64, 256, 2), (128, 64, 4), (64, 64, 4))]


def launch(a, b, c, BM: int, BN: int, BK: int, GROUP_M: int, STAGES: int, sms: int):
    from dr_kernel.kernels.base import ensure_allocator

    ensure_allocator()  # The partitions make their tensor descriptors in scratch memory.
    M, K = a.shape
    N = b.shape[1]
    assert a.stride(1) == b.stride(1) == c.stride(1) == 1
    grid = (min(sms, triton.cdiv(M, BM) * triton.cdiv(N, BN)),)
    matmul_ws_kernel[grid](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0), BM=BM, BN=BN, BK=BK,
                           GROUP_M=GROUP_M, STAGES=STAGES, num_warps=4, maxnreg=MAXNREG)


def compile_for_sm90(config: dict, dtype: str = "fp16"):
    """Compiles the kernel for sm_90 without a GPU."""
    pointer = f"*{dtype}"
    signature = {"a_ptr": pointer, "b_ptr": pointer, "c_ptr": pointer, "M": "i32", "N": "i32", "K": "i32",
                 "sam": "i32", "sbk": "i32", "scm": "i32", **{name: "constexpr" for name in config}}
    return gluon_probe.compile_for_sm90(matmul_ws_kernel, signature, config)


PROBLEMS = [  # (M, N, K, dtype): the two shapes under 0.8x, and the ops set's others for the geomean.
    (3000, 5000, 1000, "fp16"), (1000, 1000, 1000, "fp16"), (4096, 4096, 4096, "fp16"),
    (8192, 2048, 1024, "bf16"), (4096, 4095, 4096, "fp16"), (2048, 1000, 16384, "bf16"), (1024, 1024, 1024, "bf16"),
]


def measure_problem(M: int, N: int, K: int, dtype_name: str) -> dict:
    """cuBLAS, every Gluon config (checked against an fp32 product first) and the built-in
    matmul's best over four usual tiles, on one problem."""
    import torch

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn((M, K), generator=gen, device="cuda", dtype=dtype)
    b = torch.randn((K, N), generator=gen, device="cuda", dtype=dtype)
    ref = a.float() @ b.float()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cublas_ms = do_bench_ms(lambda: torch.matmul(a, b))
    row = {"problem": [M, N, K, dtype_name], "reference": "cublas", "reference_ms": cublas_ms, "configs": []}
    c = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)

    def run(config: dict) -> None:
        # TMA strides must be multiples of 16 bytes: a shape with rows that are not is not served.
        assert (N * a.element_size()) % 16 == 0 and (K * a.element_size()) % 16 == 0, "rows not 16-byte aligned"
        launch(a, b, c, **config, sms=sms)

    # Error: the Frobenius norm of the difference over the fp32 product's.
    check_and_time(row, CONFIGS, run, lambda: ((c.float() - ref).norm() / ref.norm()).item(), 1e-2,
                   2.0 * M * N * K, cublas_ms)
    # The built-in matmul (recorded kernel) on a few of its usual best tiles.
    inputs = {"a": a, "b": b, "c": torch.empty_like(c)}
    row["builtin_best_ms"] = builtin_best_ms("matmul", inputs, [
        {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": warps, "num_stages": stages}
        for bm, bn, warps, stages in ((128, 128, 8, 3), (128, 256, 8, 3), (128, 128, 4, 4), (64, 128, 4, 4))])
    return row


def compile_report() -> None:
    from dr_kernel.analysis import binary_resources

    for config in CONFIGS:
        try:
            kernel = compile_for_sm90(config)
            regs, spills = binary_resources(kernel.kernel, kernel.asm.get("ptx"))
            print(f"{config}: shared {kernel.metadata.shared} B, {kernel.metadata.num_warps} warps, "
                  f"{regs} registers, {spills} spilled words")
        except Exception as error:  # noqa: BLE001
            print(config, "failed:", type(error).__name__, str(error)[:800])


if __name__ == "__main__":
    gluon_probe.main(__doc__, "gluon_matmul.json", PROBLEMS, measure_problem, compile_report, "cublas")
