"""Attention's warp-specialised forward for Hopper (sm_90), written in Gluon: attention's `TMA` 3
and 4 (attention.py).

Triton 3.6's `tl.range(..., warp_specialize=True)` partitions loops for sm_100 only; Gluon
(triton.experimental.gluon, Triton's lower-level dialect) writes Hopper's producer/consumer
pipeline by hand. One warp loads K and V tiles through TMA into a ring of shared-memory stages;
two consumer warpgroups, each with its own 64 rows of a 128-row query tile, run QK^T and PV as
warpgroup MMAs and the online softmax in registers, and release a stage once both have read it.
The warp scheduler overlaps one consumer's softmax with the other's products (FA3's
two-warpgroup schedule, without its explicit ping-pong barriers). With PIPE (`TMA` 4) each
warpgroup also overlaps its own softmax with its previous block's PV product (FA3's overlap
inside a warpgroup: block j's QK^T is issued before block j-1's PV and waited for alone). Only
the key blocks that straddle a warpgroup's diagonal (causal) or the sequence's end are masked.

On an H100 (benchmarks/results/h100-2026-12-06h/gluonattn/) its best config ran 1.11-1.31x
faster than the refined TMA kernel's four usual tiles on the head-dim-128 and -256 problems,
1.01-1.07x on head dim 64, and 0.74-1.12x SDPA's speed; tuned over the 20 problems of the ops
set, Triton alone went from 0.84x to 0.92x SDPA by GPU time (docs/ops.md).

Gluon kernels do not run in Triton's interpreter, so a tuning there does not search them
(BuiltinKernel.compiled_only).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from .hopper_tma import tma_load, tma_store

ROWS = gl.constexpr(64)  # Query rows per consumer warpgroup: one warpgroup MMA's M.


@gluon.jit
def _load_partition(Q, K, V, base, s_m, row0, N_CTX, n_blocks, q_smem, k_smem, v_smem, q_bar, k_ready, v_ready,
                    kv_empty, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    # One warp: both consumers' query rows once, then K and V block by block into the ring,
    # each stage refilled once both consumers have released it.
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, HEAD_DIM], Q.dtype.element_ty)
    kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HEAD_DIM], K.dtype.element_ty)
    q_desc = tma.make_tensor_descriptor(Q + base, [N_CTX, HEAD_DIM], [s_m, 1], [ROWS, HEAD_DIM], q_layout)
    k_desc = tma.make_tensor_descriptor(K + base, [N_CTX, HEAD_DIM], [s_m, 1], [BLOCK_N, HEAD_DIM], kv_layout)
    v_desc = tma.make_tensor_descriptor(V + base, [N_CTX, HEAD_DIM], [s_m, 1], [BLOCK_N, HEAD_DIM], kv_layout)
    mbarrier.expect(q_bar, 2 * q_desc.block_type.nbytes)
    tma_load(q_desc, [row0, 0], q_bar, q_smem.index(0))
    tma_load(q_desc, [row0 + ROWS, 0], q_bar, q_smem.index(1))
    for j in range(n_blocks):
        stage = j % STAGES
        phase = (j // STAGES) & 1
        # A barrier starts with its phase 1 complete: the first round passes at once.
        mbarrier.wait(kv_empty.index(stage), phase ^ 1)
        mbarrier.expect(k_ready.index(stage), k_desc.block_type.nbytes)
        tma_load(k_desc, [j * BLOCK_N, 0], k_ready.index(stage), k_smem.index(stage))
        mbarrier.expect(v_ready.index(stage), v_desc.block_type.nbytes)
        tma_load(v_desc, [j * BLOCK_N, 0], v_ready.index(stage), v_smem.index(stage))


@gluon.jit
def _masked(s, offs_m, j, masked_from, N_CTX, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr, TAIL: gl.constexpr,
            cols: gl.constexpr):
    # Scores of keys past N_CTX, or (causal) past the row, out of the softmax; only blocks from
    # masked_from on have any (the rest lie wholly before the warpgroup's first row and N_CTX).
    if CAUSAL or TAIL:
        if j >= masked_from:
            offs_n = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=cols)
            valid = gl.expand_dims(offs_n, 0) < N_CTX
            if CAUSAL:
                valid = valid & (gl.expand_dims(offs_m, 1) >= gl.expand_dims(offs_n, 0))
            s = gl.where(valid, s, -1.0e6)
    return s


@gluon.jit
def _blocks(acc, q, offs_m, N_CTX, mine, masked_from, qk_scale, k_smem, v_smem, k_ready, v_ready, kv_empty,
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
        s = _masked(s, offs_m, j, masked_from, N_CTX, BLOCK_N, CAUSAL, TAIL, gl.SliceLayout(0, s_layout))
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
def _blocks_pipelined(acc, q, offs_m, N_CTX, mine, masked_from, qk_scale, k_smem, v_smem, k_ready, v_ready,
                      kv_empty, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                      TAIL: gl.constexpr, s_layout: gl.constexpr, p_layout: gl.constexpr, rows_o: gl.constexpr):
    # _blocks' arithmetic with FA3's overlap inside one warpgroup: block j's QK^T is issued, then
    # block j-1's PV; the softmax of block j runs while that PV is still in the tensor cores.
    cols_s: gl.constexpr = gl.SliceLayout(0, s_layout)
    s_zero = gl.zeros([ROWS, BLOCK_N], gl.float32, layout=s_layout)
    mbarrier.wait(k_ready.index(0), 0)
    s = warpgroup_mma(q, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(0, deps=(s,))
    s = _masked(s, offs_m, 0, masked_from, N_CTX, BLOCK_N, CAUSAL, TAIL, cols_s)
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
        s = _masked(s, offs_m, j, masked_from, N_CTX, BLOCK_N, CAUSAL, TAIL, cols_s)
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
def _consumer(O, base, s_m, row0, N_CTX, n_blocks, qk_scale, q_smem, k_smem, v_smem, q_bar, k_ready,  # noqa: E741
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
    # released, once loaded (the other warpgroup needs them); the blocks before its first row are
    # visible to all its rows.
    mine = n_blocks
    if CAUSAL:
        mine = gl.minimum(n_blocks, gl.cdiv(first + ROWS, BLOCK_N))
        masked_from = first // BLOCK_N
    else:
        masked_from = N_CTX // BLOCK_N
    if PIPE:
        acc, l_i = _blocks_pipelined(acc, q, offs_m, N_CTX, mine, masked_from, qk_scale, k_smem, v_smem, k_ready,
                                     v_ready, kv_empty, BLOCK_N, STAGES, CAUSAL, TAIL, s_layout, p_layout, rows_o)
    else:
        acc, l_i = _blocks(acc, q, offs_m, N_CTX, mine, masked_from, qk_scale, k_smem, v_smem, k_ready, v_ready,
                           kv_empty, BLOCK_N, STAGES, CAUSAL, TAIL, s_layout, p_layout, rows_o)
    for j in range(mine, n_blocks):
        stage = j % STAGES
        mbarrier.wait(k_ready.index(stage), (j // STAGES) & 1)
        mbarrier.wait(v_ready.index(stage), (j // STAGES) & 1)
        mbarrier.arrive(kv_empty.index(stage), count=1)
    out_rows = acc / gl.expand_dims(gl.convert_layout(l_i, rows_o), 1)
    layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, HEAD_DIM], O.dtype.element_ty)
    o_desc = tma.make_tensor_descriptor(O + base, [N_CTX, HEAD_DIM], [s_m, 1], [ROWS, HEAD_DIM], layout)
    buffer = q_smem.index(WHICH)  # Its query rows are read: the buffer takes the output rows.
    buffer.store(out_rows.to(O.dtype.element_ty))
    fence_async_shared()
    tma_store(o_desc, [first, 0], buffer)
    tma.store_wait(0)


@gluon.jit
def attn_fwd_ws_kernel(Q, K, V, O, sm_scale, s_z, s_h, s_m, H, N_CTX,  # noqa: E741
                       HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                       CAUSAL: gl.constexpr, TAIL: gl.constexpr, PIPE: gl.constexpr):
    # Grid: (cdiv(N_CTX, BLOCK_M), Z * H), BLOCK_M 128 (two consumers of 64 rows); Q, K, V and O
    # share their strides, with unit stride along HEAD_DIM; 4 warps a warpgroup (num_warps 4).
    # TAIL: N_CTX is not a multiple of BLOCK_N (the last block's keys past it are masked).
    gl.static_assert(BLOCK_M == 2 * ROWS, "the warp-specialised forward runs 128-row tiles")
    gl.static_assert(Q.dtype.element_ty.primitive_bitwidth == 16, "the warp-specialised forward takes fp16 or bf16")
    start = gl.program_id(0)
    if CAUSAL:
        start = gl.num_programs(0) - 1 - start  # The tiles with the most keys first.
    off_hz = gl.program_id(1)
    base = (off_hz // H).to(gl.int64) * s_z + (off_hz % H).to(gl.int64) * s_h
    row0 = start * BLOCK_M
    if CAUSAL:
        n_blocks = gl.cdiv(gl.minimum(row0 + BLOCK_M, N_CTX), BLOCK_N)
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
        (_consumer, (O, base, s_m, row0, N_CTX, n_blocks, qk_scale, q_smem, k_smem, v_smem, q_bar, k_ready,
                     v_ready, kv_empty, 0, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, TAIL, PIPE)),
        (_load_partition, (Q, K, V, base, s_m, row0, N_CTX, n_blocks, q_smem, k_smem, v_smem, q_bar, k_ready,
                           v_ready, kv_empty, HEAD_DIM, BLOCK_N, STAGES)),
        (_consumer, (O, base, s_m, row0, N_CTX, n_blocks, qk_scale, q_smem, k_smem, v_smem, q_bar, k_ready,
                     v_ready, kv_empty, 1, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, TAIL, PIPE)),
    ], [1, 4], [24, 240])
