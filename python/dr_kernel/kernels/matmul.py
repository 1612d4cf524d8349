"""Matrix multiplication C = A·B with fp32 accumulation and a grouped order of output tiles.

The kernel is the one the recorded tables in data/h200/matmul.jsonl were measured with; its
parameter names and its code for fp16 are kept exactly, so that a configuration here compiles to
the binary that was timed there. The only change is that the result is cast to the element type
of the output pointer instead of always to fp16, which makes bf16 and fp32 problems possible.

SPLIT_K is the algorithm as a parameter: with SPLIT_K = 1 (the recorded tables' configs, which
lack it) the launch is that kernel; above 1 it is split-K, whose programs each take 1/SPLIT_K of
the K loop for one tile and add their partial sums into C with atomics (C zeroed first, inside
the launch, so that its cost is timed). A deep K and a small M·N leave most SMs idle with one
program per tile: 512×512×32768 has 16 tiles of 128×128 for 132 SMs.

The problem picks one more variant, unsearched: where N and K are multiples of 2, 4 or 8 but not
of 16 (rows of 1000 elements), matmul_aligned_kernel takes them in units of that multiple so that
its loads and stores are as wide as the rows' alignment allows; Triton's launch specialises only
divisibility by 16, and the recorded kernel loads such rows one element at a time. The bundled
table of such a shape (matmul_2048x1000x16384_bf16) is this kernel's: re-recorded whole on the
H200 on 2026-12-05 (its best config 3.7x faster than the recorded kernel's).

TMA picks the loads: 0 through pointers (the kernels above), 1 matmul_tma_kernel (one program per
tile, A, B and C behind tensor descriptors), 2 matmul_tma_persistent_kernel (the same copies, one
program per SM walking its share of the tiles in one software-pipelined loop). A live tuning on
Hopper searches 0 and 2.
"""

from __future__ import annotations

import functools

import triton
import triton.language as tl

from .base import BuiltinKernel, Pointer, cdiv, check_starts_aligned, ensure_allocator


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # Programs are numbered so that GROUP_M consecutive row-tiles share a column of B: the tiles
    # that run at the same time then reuse the same panels of A and B from L2.
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    # Row and column offsets wrap around instead of being masked, so loads along M and N never
    # need a mask; the store below masks the rows and columns that lie outside C.
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None] * sam + offs_k[None, :] * sak
    b_ptrs = b_ptr + offs_k[:, None] * sbk + offs_bn[None, :] * sbn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * sak
        b_ptrs += BLOCK_K * sbk
    c = acc.to(c_ptr.dtype.element_ty)
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + scm * offs_cm[:, None] + scn * offs_cn[None, :]
    tl.store(c_ptrs, c, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


@triton.jit
def _grouped_tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    # matmul_kernel's order of output tiles (which keeps its own inline copy: its source is the
    # recorded one), for the variants: GROUP_M row-tiles in turn share a column of B.
    width = GROUP_M * tl.cdiv(N, BLOCK_N)
    first_m = (pid // width) * GROUP_M
    rows = min(tl.cdiv(M, BLOCK_M) - first_m, GROUP_M)
    return first_m + (pid % width) % rows, (pid % width) // rows


@triton.jit
def _tile_sum(a_ptr, b_ptr, pid_m, pid_n, M, N, K, sam, sak, sbk, sbn, first_iter, last_iter,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # The variants' main loop (matmul_kernel keeps its own inline copy: its source is the recorded
    # one): the fp32 product of tile (pid_m, pid_n) over K iterations [first_iter, last_iter).
    # Rows and columns wrap around instead of being masked, as in matmul_kernel.
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = first_iter * BLOCK_K + tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None] * sam + offs_k[None, :] * sak
    b_ptrs = b_ptr + offs_k[:, None] * sbk + offs_bn[None, :] * sbn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(first_iter, last_iter):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - (k - first_iter) * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - (k - first_iter) * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * sak
        b_ptrs += BLOCK_K * sbk
    return acc


@triton.jit
def matmul_splitk_kernel(a_ptr, b_ptr, c_ptr, M, n_units, k_units, sam_units, sak, sbk_units, sbn, scm_units, scn,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr, ALIGN: tl.constexpr):
    # The tiles as in matmul_kernel; program_id(1) picks this program's share of the K loop. The
    # sizes and row strides arrive in units of ALIGN elements, as in matmul_aligned_kernel.
    N = n_units * ALIGN
    K = k_units * ALIGN
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    iters = tl.cdiv(K, BLOCK_K)
    per_split = tl.cdiv(iters, SPLIT_K)
    first_iter = tl.program_id(1) * per_split
    last_iter = min(first_iter + per_split, iters)
    acc = _tile_sum(a_ptr, b_ptr, pid_m, pid_n, M, N, K, sam_units * ALIGN, sak, sbk_units * ALIGN, sbn,
                    first_iter, last_iter, BLOCK_M, BLOCK_N, BLOCK_K)
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + (scm_units * ALIGN) * offs_cm[:, None] + scn * offs_cn[None, :]
    mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N) & (first_iter < iters)
    tl.atomic_add(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask, sem="relaxed")


@triton.jit
def matmul_aligned_kernel(a_ptr, b_ptr, c_ptr, M, n_units, k_units, sam_units, sak, sbk_units, sbn, scm_units, scn,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_M: tl.constexpr, ALIGN: tl.constexpr):
    # matmul_kernel for problems whose N, K and row strides are multiples of ALIGN (2, 4 or 8)
    # but not of 16, the only divisibility Triton's launch specialises: they arrive in units of
    # ALIGN elements, so that the compiler knows every row of A, B and C starts ALIGN elements
    # apart, and that the masks along K and N change only at such boundaries. Loads and stores
    # are then as wide as ALIGN elements allow (16 bytes for 8 fp16) instead of one element.
    N = n_units * ALIGN
    K = k_units * ALIGN
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = _tile_sum(a_ptr, b_ptr, pid_m, pid_n, M, N, K, sam_units * ALIGN, sak, sbk_units * ALIGN, sbn,
                    0, tl.cdiv(K, BLOCK_K), BLOCK_M, BLOCK_N, BLOCK_K)
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + (scm_units * ALIGN) * offs_cm[:, None] + scn * offs_cn[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


@triton.jit
def matmul_tma_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # matmul_kernel's tiles and order through Hopper's tensor memory accelerator: A, B and C are
    # behind tensor descriptors made on the GPU, so each tile of A and B is one bulk copy into
    # shared memory (rows and columns past the matrix's edge read as zeros) and C's tile one bulk
    # store (clipped at the edge): no address arithmetic, masks or wrap-around in the loop. The
    # copies need rows that start 16 bytes apart: N and K multiples of 8 (fp16/bf16).
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [K, 1], [BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, [K, N], [N, 1], [BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, [M, N], [N, 1], [BLOCK_M, BLOCK_N])
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
        b = b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])
        acc = tl.dot(a, b, acc)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_ptr.dtype.element_ty))


@triton.jit(do_not_specialize=["programs"])
def matmul_tma_persistent_kernel(a_ptr, b_ptr, c_ptr, M, N, K, programs,
                                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                                 GROUP_M: tl.constexpr, EPILOGUE_HALVES: tl.constexpr, FLATTEN: tl.constexpr,
                                 WARP_SPECIALIZE: tl.constexpr = False):
    # matmul_tma_kernel's tiles on a fixed set of `programs` programs (one per SM), each taking
    # tiles program_id, program_id + programs, ... in the grouped order. With FLATTEN the
    # tile loop and the K loop become one software-pipelined loop, so that the next tile's first
    # copies are in flight while this tile's result is converted and stored: the pipeline fills
    # once per program instead of once per tile, which is most of a tile's time when K is short
    # (K = 1000: 16 iterations of 64). EPILOGUE_HALVES stores C's tile as two halves of
    # BLOCK_N / 2 columns, so the staging buffer of the store is half as large. WARP_SPECIALIZE
    # splits the (unflattened) tile loop into Triton's warp-specialised partitions, on sm_90 with 4
    # warps a TMA producer and two consumer warpgroups that overlap a tile's store with the next
    # tile's products. It tied the flattened kernel within 2 % on an H100 (persistent_probe.py's
    # tma_persistent_ws, docs/benchmarks.md), so no live space searches it.
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    iters = tl.cdiv(K, BLOCK_K)
    a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [K, 1], [BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, [K, N], [N, 1], [BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, [M, N], [N, 1], [BLOCK_M, BLOCK_N // EPILOGUE_HALVES])
    persistent_tiles(a_desc, b_desc, c_desc, M, N, iters, tiles, programs, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M,
                     EPILOGUE_HALVES, FLATTEN, WARP_SPECIALIZE)


@triton.jit
def persistent_tiles(a_desc, b_desc, c_desc, M, N, iters, tiles, programs, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                     EPILOGUE_HALVES: tl.constexpr, FLATTEN: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    # Tiles program_id, program_id + programs, ... below `tiles`, each whole: its K loop, then C.
    # The epilogue finds its tile from a counter of its own rather than from the values the top of
    # the loop computed: Triton's own persistent matmul does the same, around a pipelining bug
    # (Blackwell's) with a value used on both sides of a flattened loop; a few integer operations
    # a tile cost nothing here.
    done = tl.program_id(0) - programs
    for tile in tl.range(tl.program_id(0), tiles, programs, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = _grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, iters):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
            b = b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])
            acc = tl.dot(a, b, acc)
        done += programs
        out_m, out_n = _grouped_tile(done, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        store_c_tile(c_desc, acc, out_m * BLOCK_M, out_n * BLOCK_N, BLOCK_M, BLOCK_N, EPILOGUE_HALVES)


@triton.jit
def store_c_tile(c_desc, acc, row, col, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EPILOGUE_HALVES: tl.constexpr):
    # C's tile through its descriptor (of C's element type), whole or as two halves of BLOCK_N / 2
    # columns, whose staging buffer is half as large.
    if EPILOGUE_HALVES == 2:
        left, right = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
        c_desc.store([row, col], left.to(c_desc.dtype))
        c_desc.store([row, col + BLOCK_N // 2], right.to(c_desc.dtype))
    else:
        c_desc.store([row, col], acc.to(c_desc.dtype))


def row_alignment(*sizes: int) -> int:
    """The largest power of two up to 16 that divides every one of `sizes` (elements)."""
    align = 16
    while align > 1 and any(size % align for size in sizes):
        align //= 2
    return align


def _aligned(shape) -> int:
    """ALIGN for matmul_aligned_kernel on this problem (contiguous operands: the row strides are K,
    N and N), or 0 where the recorded kernel is the one to launch: Triton already specialises
    multiples of 16, and with odd sizes there is nothing to tell the compiler."""
    return _alignment_hint(shape["N"], shape["K"])


def _alignment_hint(N: int, K: int) -> int:
    align = row_alignment(N, K)
    return align if 1 < align < 16 else 0


# The splits a sweep records and a user may search (--space '{..., "SPLIT_K": [1, 2, 4, 8, 16]}').
SPLIT_K_VALUES = [1, 2, 4, 8, 16]


def _variant(config, shape):
    """The kernel a config launches on a problem: split-K above SPLIT_K = 1; otherwise the recorded
    kernel, or the one told its rows' alignment where N and K are multiples of 2, 4 or 8 but not
    of 16 (2048×1000×16384 bf16: 0.67 ms recorded with one-element loads, cuBLAS 0.09)."""
    if config.get("SPLIT_K", 1) > 1:
        return matmul_splitk_kernel
    if config.get("TMA", 0):
        return matmul_tma_persistent_kernel if config["TMA"] == 2 else matmul_tma_kernel
    return matmul_aligned_kernel if _aligned(shape) else matmul_kernel


# A live tuning leaves out the configs whose fp32 accumulator alone needs more than 128 registers
# a thread (BLOCK_M·BLOCK_N / (32·num_warps)): they spill, and ptxas takes seconds to minutes on
# them (256×128 with 2 warps: 16.7 s, 1,136 spills, 40× the best on 8192×8192×4096). They are 240
# of the space's 1,440 and 34–152 of the configs that ran in each recorded matmul table, and none
# is within 5 % of a table's best. The recorded space keeps them: its tables hold them, and
# replays must find what they found.
ACCUMULATOR_RULE = "BLOCK_M * BLOCK_N <= 128 * 32 * num_warps"


# Where a live tuning on Hopper adds the persistent TMA kernel (TMA = 2): tiles of at least 64×64
# for one or two warpgroups, never split. On an H100 (benchmarks/persistent_probe.py, third
# session of 2026-12-06 in docs/gpu-notes.md) its best (C in halves, loops flattened: the
# variant kept) beat the built-in kernel's best on the same five tiles by 1.06-1.16x on the
# short-K and large problems (3000×5000×1000, 6144×1000×2048, 8192×8192×1024, 4096×4096×512,
# 8192×8192×4096), by 1.01x on 4096³, and lost by 1.07-1.29x on the small ones (1000³, 1024³,
# 2048³), so it is a choice per problem, not a replacement.
PERSISTENT_RULE = "TMA == 0 or (SPLIT_K == 1 and BLOCK_M >= 64 and BLOCK_N >= 64 and num_warps >= 4)"
# And only on problems of at least this many waves of 128×128 tiles: each program then walks
# several tiles, which is where the kernel pays. The tuner chose it on exactly those 8 of issue
# 11's 20 problems on two H100 machines (third session of 2026-12-06), and never below, where it
# only made the space larger (2,160 configs against 1,824 for 1000³).
PERSISTENT_WAVES = 2


def _problem_space(shape, limits):
    """The space a tuning of `shape` searches: the recorded one without the configs that break
    ACCUMULATOR_RULE, plus the splits of K that can pay, plus on compute capability 9.0 and later
    (N and K multiples of 8, PERSISTENT_WAVES waves of 128×128 tiles or more) the persistent TMA
    kernel on the tiles of PERSISTENT_RULE. A split pays only while the programs do not fill the
    GPU: a config with SPLIT_K = s is kept when its tiles times s stay within two programs per SM
    (so that the split of s / 2 left SMs idle) and each split keeps at least two iterations of its
    K loop. Where no tile of the space leaves room for a split (4096³: 256 tiles of 256×256),
    SPLIT_K stays 1."""
    M, N, K = shape["M"], shape["N"], shape["K"]
    room = 2 * limits.sm_count
    tiles = min(cdiv(M, m) * cdiv(N, n) for m in KERNEL.space["BLOCK_M"] for n in KERNEL.space["BLOCK_N"])
    splits = [s for s in SPLIT_K_VALUES if s == 1 or (tiles * s <= room and K >= 2 * s * min(KERNEL.space["BLOCK_K"]))]
    space, constraints = dict(KERNEL.space), [*KERNEL.constraints, ACCUMULATOR_RULE]
    waves = cdiv(M, 128) * cdiv(N, 128) / limits.sm_count
    if limits.arch >= 90 and N % 8 == 0 and K % 8 == 0 and waves >= PERSISTENT_WAVES:
        space["TMA"] = [0, 2]
        constraints.append(PERSISTENT_RULE)
    if splits == [1]:
        return space, constraints
    rule = (f"SPLIT_K == 1 or ((({M} + BLOCK_M - 1) // BLOCK_M) * (({N} + BLOCK_N - 1) // BLOCK_N) * SPLIT_K "
            f"<= {room} and {K} >= 2 * SPLIT_K * BLOCK_K)")
    return {**space, "SPLIT_K": splits}, [*constraints, rule]


def _problem(inputs):
    return {"M": inputs["a"].shape[0], "N": inputs["b"].shape[1], "K": inputs["a"].shape[1]}


def _kernel_config(config):
    # matmul_kernel has no SPLIT_K or TMA parameter: a config of 1 and 0 launches it as recorded.
    # TMA = 2 is the persistent kernel as measured best: C stored in halves, the loops flattened.
    out = {k: v for k, v in config.items() if (k != "SPLIT_K" or v > 1) and k != "TMA"}
    if config.get("TMA", 0) == 2 and config.get("SPLIT_K", 1) == 1:
        out.update(EPILOGUE_HALVES=2, FLATTEN=True)
    return out


def _arguments(shape, dtype, config):
    # The strides are those of contiguous row-major A (M×K), B (K×N) and C (M×N), as make_inputs
    # allocates them; the unit strides therefore compile as the constant 1.
    if config.get("TMA", 0) and config.get("SPLIT_K", 1) == 1:  # As _variant: a split takes precedence.
        _check_tma(shape["N"], shape["K"])
        # The persistent kernel's program count is not specialised on: any count compiles alike.
        programs = {"programs": 132} if config["TMA"] == 2 else {}
        return {"a_ptr": Pointer(dtype), "b_ptr": Pointer(dtype), "c_ptr": Pointer(dtype),
                "M": shape["M"], "N": shape["N"], "K": shape["K"], **programs, **_kernel_config(config)}
    if config.get("SPLIT_K", 1) > 1:
        return aligned_arguments(shape, dtype, config, row_alignment(shape["N"], shape["K"]))
    align = _aligned(shape)
    return aligned_arguments(shape, dtype, config, align) if align else recorded_arguments(shape, dtype, config)


def recorded_arguments(shape, dtype, config):
    """matmul_kernel's arguments for contiguous operands of `shape`."""
    M, N, K = shape["M"], shape["N"], shape["K"]
    return {"a_ptr": Pointer(dtype), "b_ptr": Pointer(dtype), "c_ptr": Pointer(dtype),
            "M": M, "N": N, "K": K, "sam": K, "sak": 1, "sbk": N, "sbn": 1, "scm": N, "scn": 1,
            **_kernel_config(config)}


def aligned_arguments(shape, dtype, config, align):
    """matmul_aligned_kernel's (and split-K's) arguments for contiguous operands of `shape`, rows
    `align`-aligned."""
    M, N, K = shape["M"], shape["N"], shape["K"]
    return {"a_ptr": Pointer(dtype), "b_ptr": Pointer(dtype), "c_ptr": Pointer(dtype),
            "M": M, "n_units": N // align, "k_units": K // align, "sam_units": K // align, "sak": 1,
            "sbk_units": N // align, "sbn": 1, "scm_units": N // align, "scn": 1, "ALIGN": align,
            **_kernel_config(config)}


def _check_tma(N: int, K: int) -> None:
    if N % 8 or K % 8:
        raise ValueError(f"matmul with TMA = 1 or 2 needs N and K multiples of 8 (rows 16-byte aligned), not N={N}, "
                         f"K={K}: search TMA = 0 for this problem")


def _make_inputs(shape, dtype, device, seed):
    import torch

    generator = torch.Generator(device=device).manual_seed(seed)
    M, N, K = shape["M"], shape["N"], shape["K"]
    a = torch.randn((M, K), generator=generator, device=device, dtype=dtype)
    b = torch.randn((K, N), generator=generator, device=device, dtype=dtype)
    c = torch.empty((M, N), device=device, dtype=dtype)
    return {"a": a, "b": b, "c": c}


def _launch(fn, inputs, config):
    a, b, c = inputs["a"], inputs["b"], inputs["c"]
    M, K = a.shape
    N = b.shape[1]
    split = config.get("SPLIT_K", 1)
    grid = (cdiv(M, config["BLOCK_M"]) * cdiv(N, config["BLOCK_N"]), split)
    if config.get("TMA", 0) and split == 1:
        _check_tma(N, K)
        assert a.stride() == (K, 1) and b.stride() == (N, 1) and c.stride() == (N, 1), \
            "matmul with TMA = 1 or 2 takes contiguous row-major A, B and C"
        check_starts_aligned("matmul", a=a, b=b, c=c)
        ensure_allocator()
        if config["TMA"] == 2:  # One program per SM at most, each walking its share of the tiles.
            programs = min(grid[0], _programs(a.device))
            return fn[(programs,)](a, b, c, M, N, K, programs, **_kernel_config(config))
        return fn[grid](a, b, c, M, N, K, **_kernel_config(config))
    if split > 1:
        c.zero_()  # The partial sums are added into C: part of the launch, and of its time.
    if split > 1 or _alignment_hint(N, K):  # _variant's choice, without building a shape per launch.
        # The sizes and row strides in units of ALIGN elements; a stride that is not such a
        # multiple (an operand that is a view) takes the alignment down with it.
        align = row_alignment(N, K, a.stride(0), b.stride(0), c.stride(0))
        return fn[grid](a, b, c, M, N // align, K // align, a.stride(0) // align, a.stride(1),
                        b.stride(0) // align, b.stride(1), c.stride(0) // align, c.stride(1),
                        ALIGN=align, **_kernel_config(config))
    return fn[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                    c.stride(0), c.stride(1), **_kernel_config(config))


@functools.cache
def _programs(device) -> int:
    """The persistent kernel's program count on `device`: its SM count (4 in the interpreter, whose
    programs run one after another: enough to give each program several tiles). Once per device:
    it is asked on every launch."""
    if device.type != "cuda":
        return 4
    import torch

    return torch.cuda.get_device_properties(device).multi_processor_count


def _reference(inputs):
    import torch

    return torch.matmul(inputs["a"].float(), inputs["b"].float()).to(inputs["c"].dtype)



def _torch():
    import torch

    return torch


KERNEL = BuiltinKernel(
    name="matmul",
    family="matmul",
    fn=matmul_kernel,
    description="C = A·B, fp32 accumulation, grouped tile order",
    space={
        "BLOCK_M": [16, 32, 64, 128, 256],
        "BLOCK_N": [32, 64, 128, 256],
        "BLOCK_K": [32, 64, 128],
        "GROUP_M": [1, 8],
        "num_warps": [2, 4, 8],
        "num_stages": [2, 3, 4, 5],
        # The recorded space: no split. A tuning of one problem adds the splits that can pay on
        # it (_problem_space): the cost model has never seen a split in its tables, and ranked
        # SPLIT_K = 2 first for 4096³, whose tiles already fill the GPU and where every split
        # loses; on the split-K sweep of 512×512×32768 the shipped agent reached 1.05× of the
        # best in 6 evaluations (median of 10; random search 34).
        "SPLIT_K": [1],
        # 1 launches matmul_tma_kernel (compute capability 9.0 and later; N and K multiples of 8),
        # searched only where a space lists it (--space '{..., "TMA": [0, 1]}', with SPLIT_K 1):
        # on the H200 its best was 0.96-1.00x the recorded kernel's on the same 24 tiles of three
        # large problems (benchmarks/device_run.sh sweeps-mm-tma, docs/benchmarks.md), so a live
        # tuning does not add it. 2 launches matmul_tma_persistent_kernel, which a live tuning on
        # Hopper adds (_problem_space, PERSISTENT_RULE).
        "TMA": [0],
    },
    # Configs written before SPLIT_K and TMA existed (the recorded tables, users' --config) mean
    # the recorded kernel.
    defaults={"SPLIT_K": 1, "TMA": 0},
    variant=_variant,
    _problem=_problem,
    _problem_space=_problem_space,
    # The recorded space has no constraints: the configurations that need too much shared memory
    # or take minutes in ptxas are part of what a tuner must learn to avoid, and the recorded
    # tables hold them as out_of_resources and compile_timeout rows.
    constraints=[],
    shape_keys=("M", "N", "K"),
    shapes=[
        {"M": 4096, "N": 4096, "K": 4096},
        {"M": 16, "N": 4096, "K": 4096},
        {"M": 8192, "N": 2048, "K": 1024},
        {"M": 1024, "N": 1024, "K": 1024},
    ],
    arguments=_arguments,
    _make_inputs=_make_inputs,
    _launch=_launch,
    _reference=_reference,
    reference_name="torch.matmul",
    _framework=lambda inputs: _torch().matmul(inputs["a"], inputs["b"]),
    tensor_cores=True,
    output_name="c",
    _flops=lambda s: 2 * s["M"] * s["N"] * s["K"],
    _bytes=lambda s, size: (s["M"] * s["K"] + s["K"] * s["N"] + s["M"] * s["N"]) * size,
)
