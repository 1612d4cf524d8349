"""Issue 11's attention bar (0.9x SDPA) on Hopper: a warp-specialised forward kernel in Gluon,
probed against SDPA and the refined TMA kernel before it may join attention's space.

Triton 3.6's `tl.range(..., warp_specialize=True)` partitions loops for sm_100 only (on sm_90 it
fails or leaves the loop whole: docs/gpu-notes.md, 2026-12-03), and the head-dimension-128
problems, where the Triton kernels lose most (0.64-0.85x SDPA on an H100, head dim 64 0.83-1.14x:
benchmarks/results/h100-2026-12-06b/ops.log), are the ones
Hopper's producer/consumer pipeline serves. Gluon (triton.experimental.gluon) writes that
pipeline by hand on sm_90: one warp loads K and V tiles through TMA into a ring of shared-memory
stages; two consumer warpgroups, each with its own 64 rows of a 128-row query tile, run the
QK^T and PV products as warpgroup MMAs and the online softmax in registers, releasing a stage
once both have read it. The warp scheduler overlaps one consumer's softmax with the other's
products (FA3's two-warpgroup schedule, without its explicit ping-pong barriers). With PIPE each
warpgroup also overlaps its own softmax with its previous block's PV product (FA3's overlap
inside a warpgroup: block j's QK^T is issued before block j-1's PV, and waited for alone).

    python3 benchmarks/gluon_attention_probe.py --out DIR            # on the GPU: check and time
    python3 benchmarks/gluon_attention_probe.py --compile-only       # anywhere: compile for sm_90

On the GPU every config's output is checked against torch's SDPA in fp32 before it is timed; the
rows (config, ms, TFLOP/s, SDPA's ms, the refined TMA kernel's best ms over its tiles) go to
DIR/gluon_attention.json. Any query length is served: the descriptors read zeros past its end
and store nothing there, and keys past it are masked.
"""

from __future__ import annotations

import math

import gluon_probe
import triton
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

ROWS = gl.constexpr(64)  # Query rows per consumer warpgroup: one warpgroup MMA's M.


@gluon.jit
def _load_partition(Q, K, V, base, row0, N_CTX, n_blocks, q_smem, k_smem, v_smem, q_bar, k_ready, v_ready,
                    kv_empty, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    # One warp: both consumers' query rows once, then K and V block by block into the ring,
    # each stage refilled once both consumers have released it.
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, HEAD_DIM], Q.dtype.element_ty)
    kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HEAD_DIM], K.dtype.element_ty)
    q_desc = tma.make_tensor_descriptor(Q + base, [N_CTX, HEAD_DIM], [HEAD_DIM, 1], [ROWS, HEAD_DIM], q_layout)
    k_desc = tma.make_tensor_descriptor(K + base, [N_CTX, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_N, HEAD_DIM], kv_layout)
    v_desc = tma.make_tensor_descriptor(V + base, [N_CTX, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_N, HEAD_DIM], kv_layout)
    mbarrier.expect(q_bar, 2 * q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [row0, 0], q_bar, q_smem.index(0))
    tma.async_copy_global_to_shared(q_desc, [row0 + ROWS, 0], q_bar, q_smem.index(1))
    for j in range(n_blocks):
        stage = j % STAGES
        phase = (j // STAGES) & 1
        # A barrier starts with its phase 1 complete: the first round passes at once.
        mbarrier.wait(kv_empty.index(stage), phase ^ 1)
        mbarrier.expect(k_ready.index(stage), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [j * BLOCK_N, 0], k_ready.index(stage), k_smem.index(stage))
        mbarrier.expect(v_ready.index(stage), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [j * BLOCK_N, 0], v_ready.index(stage), v_smem.index(stage))


@gluon.jit
def _masked(s, offs_m, j, N_CTX, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr, TAIL: gl.constexpr,
            cols: gl.constexpr):
    # Scores of keys past N_CTX, or (causal) past the row, out of the softmax.
    if CAUSAL or TAIL:
        offs_n = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=cols)
        valid = gl.expand_dims(offs_n, 0) < N_CTX
        if CAUSAL:
            valid = valid & (gl.expand_dims(offs_m, 1) >= gl.expand_dims(offs_n, 0))
        s = gl.where(valid, s, -1.0e6)
    return s


@gluon.jit
def _blocks(acc, q, offs_m, N_CTX, mine, qk_scale, k_smem, v_smem, k_ready, v_ready, kv_empty,
            BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr, TAIL: gl.constexpr,
            s_layout: gl.constexpr, p_layout: gl.constexpr, rows_o: gl.constexpr):
    # Blocks 0..mine-1 into the running softmax, one at a time: S = Q K^T, then O += P V.
    rows_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    m_i = gl.full([ROWS], float("-inf"), gl.float32, layout=rows_s)
    l_i = gl.zeros([ROWS], gl.float32, layout=rows_s)
    s_zero = gl.zeros([ROWS, BLOCK_N], gl.float32, layout=s_layout)
    for j in range(mine):
        stage = j % STAGES
        phase = (j // STAGES) & 1
        mbarrier.wait(k_ready.index(stage), phase)
        s = warpgroup_mma(q, k_smem.index(stage).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(0, deps=(s,))
        s = _masked(s, offs_m, j, N_CTX, BLOCK_N, CAUSAL, TAIL, gl.SliceLayout(0, s_layout))
        m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
        p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))
        alpha = gl.exp2(m_i - m_new)
        l_i = l_i * alpha + gl.sum(p, 1)
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, rows_o), 1)
        p16 = gl.convert_layout(p.to(v_smem.dtype), p_layout)
        mbarrier.wait(v_ready.index(stage), phase)
        acc = warpgroup_mma(p16, v_smem.index(stage), acc, is_async=True)
        acc, p16 = warpgroup_mma_wait(0, deps=(acc, p16))  # P in registers is an operand: kept alive.
        mbarrier.arrive(kv_empty.index(stage), count=1)
        m_i = m_new
    return acc, l_i


@gluon.jit
def _blocks_pipelined(acc, q, offs_m, N_CTX, mine, qk_scale, k_smem, v_smem, k_ready, v_ready, kv_empty,
                      BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr, TAIL: gl.constexpr,
                      s_layout: gl.constexpr, p_layout: gl.constexpr, rows_o: gl.constexpr):
    # _blocks' arithmetic with FA3's overlap inside one warpgroup: block j's QK^T is issued, then
    # block j-1's PV; the softmax of block j runs while that PV is still in the tensor cores.
    cols_s: gl.constexpr = gl.SliceLayout(0, s_layout)
    s_zero = gl.zeros([ROWS, BLOCK_N], gl.float32, layout=s_layout)
    mbarrier.wait(k_ready.index(0), 0)
    s = warpgroup_mma(q, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(0, deps=(s,))
    s = _masked(s, offs_m, 0, N_CTX, BLOCK_N, CAUSAL, TAIL, cols_s)
    m_i = gl.max(s, 1) * qk_scale
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_i, 1))
    l_i = gl.sum(p, 1)
    p16 = gl.convert_layout(p.to(v_smem.dtype), p_layout)
    for j in range(1, mine):
        stage = j % STAGES
        prev = (j - 1) % STAGES
        mbarrier.wait(k_ready.index(stage), (j // STAGES) & 1)
        s_next = warpgroup_mma(q, k_smem.index(stage).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        mbarrier.wait(v_ready.index(prev), ((j - 1) // STAGES) & 1)
        pv = warpgroup_mma(p16, v_smem.index(prev), acc, is_async=True)
        s = warpgroup_mma_wait(1, deps=(s_next,))
        s = _masked(s, offs_m, j, N_CTX, BLOCK_N, CAUSAL, TAIL, cols_s)
        m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
        p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))
        alpha = gl.exp2(m_i - m_new)
        l_i = l_i * alpha + gl.sum(p, 1)
        acc, p16 = warpgroup_mma_wait(0, deps=(pv, p16))  # P stays alive until its PV retires.
        mbarrier.arrive(kv_empty.index(prev), count=1)
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, rows_o), 1)
        p16 = gl.convert_layout(p.to(v_smem.dtype), p_layout)
        m_i = m_new
    last = (mine - 1) % STAGES
    mbarrier.wait(v_ready.index(last), ((mine - 1) // STAGES) & 1)
    acc = warpgroup_mma(p16, v_smem.index(last), acc, is_async=True)
    acc, p16 = warpgroup_mma_wait(0, deps=(acc, p16))
    mbarrier.arrive(kv_empty.index(last), count=1)
    return acc, l_i


@gluon.jit
def _consumer(O, base, row0, N_CTX, n_blocks, qk_scale, q_smem, k_smem, v_smem, q_bar, k_ready,  # noqa: E741
              v_ready, kv_empty, WHICH: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr,
              STAGES: gl.constexpr, CAUSAL: gl.constexpr, TAIL: gl.constexpr, PIPE: gl.constexpr):
    # One warpgroup, rows row0 + WHICH * ROWS onwards: the online softmax over the key blocks,
    # then the rows stored through shared memory and TMA (rows past N_CTX are not stored).
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    rows_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    first = row0 + WHICH * ROWS
    offs_m = first + gl.arange(0, ROWS, layout=gl.SliceLayout(1, s_layout))
    acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, layout=o_layout)
    q = q_smem.index(WHICH)
    mbarrier.wait(q_bar, 0)
    # Under a causal mask this warpgroup's last key is its last row: the blocks past it are only
    # released, once loaded (the other warpgroup needs them).
    mine = n_blocks
    if CAUSAL:
        mine = gl.minimum(n_blocks, gl.cdiv(first + ROWS, BLOCK_N))
    if PIPE:
        acc, l_i = _blocks_pipelined(acc, q, offs_m, N_CTX, mine, qk_scale, k_smem, v_smem, k_ready, v_ready,
                                     kv_empty, BLOCK_N, STAGES, CAUSAL, TAIL, s_layout, p_layout, rows_o)
    else:
        acc, l_i = _blocks(acc, q, offs_m, N_CTX, mine, qk_scale, k_smem, v_smem, k_ready, v_ready, kv_empty,
                           BLOCK_N, STAGES, CAUSAL, TAIL, s_layout, p_layout, rows_o)
    for j in range(mine, n_blocks):
        stage = j % STAGES
        mbarrier.wait(k_ready.index(stage), (j // STAGES) & 1)
        mbarrier.wait(v_ready.index(stage), (j // STAGES) & 1)
        mbarrier.arrive(kv_empty.index(stage), count=1)
    out_rows = acc / gl.expand_dims(gl.convert_layout(l_i, rows_o), 1)
    layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, HEAD_DIM], O.dtype.element_ty)
    o_desc = tma.make_tensor_descriptor(O + base, [N_CTX, HEAD_DIM], [HEAD_DIM, 1], [ROWS, HEAD_DIM], layout)
    buffer = q_smem.index(WHICH)  # Its query rows are read: the buffer takes the output rows.
    buffer.store(out_rows.to(O.dtype.element_ty))
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [first, 0], buffer)
    tma.store_wait(0)


@gluon.jit
def attn_fwd_ws_kernel(Q, K, V, O, sm_scale, s_z, s_h, H, N_CTX,  # noqa: E741
                       HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                       TAIL: gl.constexpr, PIPE: gl.constexpr):
    # Grid: (cdiv(N_CTX, 128), Z * H); Q, K, V, O contiguous (Z, H, N_CTX, HEAD_DIM).
    start = gl.program_id(0)
    if CAUSAL:
        start = gl.num_programs(0) - 1 - start  # The tiles with the most keys first.
    off_hz = gl.program_id(1)
    base = (off_hz // H).to(gl.int64) * s_z + (off_hz % H).to(gl.int64) * s_h
    row0 = start * (2 * ROWS)
    if CAUSAL:
        n_blocks = gl.cdiv(gl.minimum(row0 + 2 * ROWS, N_CTX), BLOCK_N)
    else:
        n_blocks = gl.cdiv(N_CTX, BLOCK_N)
    dtype: gl.constexpr = Q.dtype.element_ty
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, HEAD_DIM], dtype)
    kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HEAD_DIM], dtype)
    q_smem = gl.allocate_shared_memory(dtype, [2, ROWS, HEAD_DIM], q_layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], kv_layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], kv_layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    kv_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(kv_empty.index(i), count=2)  # Released by both consumers.
    qk_scale = sm_scale * 1.4426950408889634
    gl.warp_specialize([
        (_consumer, (O, base, row0, N_CTX, n_blocks, qk_scale, q_smem, k_smem, v_smem, q_bar, k_ready,
                     v_ready, kv_empty, 0, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, TAIL, PIPE)),
        (_load_partition, (Q, K, V, base, row0, N_CTX, n_blocks, q_smem, k_smem, v_smem, q_bar, k_ready, v_ready,
                           kv_empty, HEAD_DIM, BLOCK_N, STAGES)),
        (_consumer, (O, base, row0, N_CTX, n_blocks, qk_scale, q_smem, k_smem, v_smem, q_bar, k_ready,
                     v_ready, kv_empty, 1, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, TAIL, PIPE)),
    ], [1, 4], [24, 240])


CONFIGS = [{"BLOCK_N": n, "STAGES": s, "PIPE": p} for p in (0, 1) for n in (64, 128) for s in (2, 3)]


def launch(q, k, v, o, causal: bool, sm_scale: float, BLOCK_N: int, STAGES: int, PIPE: int = 0):
    from dr_kernel.kernels.base import ensure_allocator

    ensure_allocator()  # The partitions make their tensor descriptors in scratch memory.
    Z, H, N, D = q.shape
    # The descriptors address each (batch, head) as an N_CTX x HEAD_DIM matrix of rows HEAD_DIM apart.
    assert q.stride() == k.stride() == v.stride() == o.stride() and q.stride(3) == 1 and q.stride(2) == D
    grid = (triton.cdiv(N, 2 * ROWS.value), Z * H)
    attn_fwd_ws_kernel[grid](q, k, v, o, sm_scale, q.stride(0), q.stride(1), H, N, HEAD_DIM=D, BLOCK_N=BLOCK_N,
                             STAGES=STAGES, CAUSAL=causal, TAIL=N % BLOCK_N != 0, PIPE=bool(PIPE), num_warps=4,
                             maxnreg=MAXNREG)


def compile_for_sm90(head_dim: int, block_n: int, stages: int, causal: bool, pipe: bool = False,
                     dtype: str = "fp16"):
    """Compiles the kernel for sm_90 without a GPU."""
    pointer = f"*{dtype}"
    signature = {"Q": pointer, "K": pointer, "V": pointer, "O": pointer, "sm_scale": "fp32", "s_z": "i32",
                 "s_h": "i32", "H": "i32", "N_CTX": "i32", "HEAD_DIM": "constexpr", "BLOCK_N": "constexpr",
                 "STAGES": "constexpr", "CAUSAL": "constexpr", "TAIL": "constexpr", "PIPE": "constexpr"}
    constexprs = {"HEAD_DIM": head_dim, "BLOCK_N": block_n, "STAGES": stages, "CAUSAL": causal, "TAIL": False,
                  "PIPE": pipe}
    return gluon_probe.compile_for_sm90(attn_fwd_ws_kernel, signature, constexprs)


PROBLEMS = [  # (Z, H, N_CTX, HEAD_DIM, causal, dtype): the ops set's head-dim-128 and -256 shapes, a few of 64.
    (2, 16, 8192, 128, False, "bf16"), (2, 16, 8192, 128, True, "fp16"), (1, 8, 16384, 128, True, "bf16"),
    (4, 32, 2048, 128, False, "fp16"), (4, 32, 2048, 128, True, "bf16"), (8, 32, 1024, 128, True, "bf16"),
    (4, 32, 4096, 64, False, "fp16"), (4, 32, 4096, 64, True, "bf16"), (1, 32, 4096, 64, True, "fp16"),
    (1, 16, 2048, 256, False, "bf16"),  # Head dim 256: only BLOCK_N 64 with 2 stages fits (197 KB).
]


def measure_problem(Z: int, H: int, N: int, D: int, causal: bool, dtype_name: str) -> dict:
    """SDPA, every Gluon config (checked against SDPA in fp32 first) and the refined TMA kernel's
    best over four usual tiles, on one problem."""
    import torch
    import torch.nn.functional as F

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn((Z, H, N, D), generator=gen, device="cuda", dtype=dtype) for _ in range(3))
    scale = 1.0 / math.sqrt(D)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal, scale=scale)
    sdpa_ms = do_bench_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale))
    row = {"problem": [Z, H, N, D, causal, dtype_name], "reference": "sdpa", "reference_ms": sdpa_ms, "configs": []}
    o = torch.full_like(q, float("nan"))

    def run(config: dict) -> None:
        launch(q, k, v, o, causal, scale, **config)

    # Error: the largest absolute difference from SDPA in fp32 (outputs are O(1)).
    check_and_time(row, CONFIGS, run, lambda: (o.float() - ref).abs().max().item(), 2e-2,
                   4.0 * Z * H * N * N * D * (0.5 if causal else 1.0), sdpa_ms)
    # The refined TMA kernel (attention's live variant on Hopper) on its usual best tiles.
    inputs = {"q": q, "k": k, "v": v, "o": o, "causal": causal, "sm_scale": scale}
    row["builtin_best_ms"] = builtin_best_ms("attention", inputs, [
        {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps, "num_stages": stages, "TMA": 2}
        for bm, bn, warps, stages in ((128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 4, 3), (64, 64, 4, 3))])
    return row


def compile_report() -> None:
    from dr_kernel.analysis import binary_resources

    for D in (64, 128, 256):
        for causal in (False, True):
            for config in CONFIGS:
                try:
                    kernel = compile_for_sm90(D, config["BLOCK_N"], config["STAGES"], causal, bool(config["PIPE"]))
                    regs, spills = binary_resources(kernel.kernel, kernel.asm.get("ptx"))
                    print(f"HEAD_DIM {D} causal {causal:d} {config}: shared {kernel.metadata.shared} B, "
                          f"{kernel.metadata.num_warps} warps, {regs} registers, {spills} spilled words")
                except Exception as error:  # noqa: BLE001
                    print(D, causal, config, "failed:", type(error).__name__, str(error)[:500])


if __name__ == "__main__":
    gluon_probe.main(__doc__, "gluon_attention.json", PROBLEMS, measure_problem, compile_report, "sdpa")
