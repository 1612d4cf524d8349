"""Whether a stream-K schedule lifts the two matmul shapes issue 11 leaves below 0.8x cuBLAS
(1000^3: 64 tiles of 128x128 for 132 SMs; 3000x5000x1000: 480 tiles of 128x256, 3.6 waves), before
it is a variant the search tunes.

`matmul_streamk_kernel` (below) is the persistent TMA kernel with its last tiles shared out by K
iterations instead of whole: the first `dp_tiles` tiles go whole to the programs in turn (as in
matmul_tma_persistent_kernel), and the iterations of the remaining tiles are cut into one equal,
contiguous range per program, so that every SM ends within one K iteration of the others instead
of a wave's tail leaving most of them idle. A tile whose iterations fall to several programs is
summed in an fp32 workspace by atomic adds; the program whose add comes last (a counter per tile)
converts it, stores C's tile, and zeroes the workspace tile and its counter for the next launch,
so no program ever waits for another and no launch needs a memset. The workspace is one zeroed
buffer per device, kept between launches (launches on two streams at once would share it: the
probe launches on one).

    python benchmarks/streamk_probe.py --out DIR              # on the GPU
    python benchmarks/streamk_probe.py --out DIR --interpret  # the kernels' results on the CPU

Times are do_bench medians (L2 cleared before each launch); every variant's result is checked
against torch's in fp32 first (`relerr`), and a variant that fails is a row with its error. Each
problem also runs the stream-K kernel 20 times more on fresh inputs, checked each time (the
workspace's reset between launches is what those check).
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
if "--interpret" in sys.argv:  # Before Triton decorates anything.
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from dr_kernel.kernels.matmul import _grouped_tile, persistent_tiles, store_c_tile  # noqa: E402
from persistent_probe import _relerr, launch_built_in, measure_problems, probe_arguments  # noqa: E402

PROBLEMS = [  # (M, N, K, dtype): the two below 0.8x, small and short-K neighbours, deep K, a control.
    (1000, 1000, 1000, "fp16"), (3000, 5000, 1000, "fp16"), (1024, 1024, 1024, "fp16"),
    (6144, 1000, 2048, "bf16"), (2048, 2048, 2048, "bf16"), (512, 512, 32768, "fp16"),
    (4096, 4096, 4096, "fp16"),
]
TILES = [  # BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages
    (128, 128, 64, 8, 3), (128, 128, 64, 4, 4), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4), (128, 256, 64, 8, 3),
    (64, 64, 64, 4, 4), (128, 128, 128, 8, 3),
]
VARIANTS = ["built_in", "tma_persistent", "streamk", "streamk_all"]


@triton.jit
def _owner(it, per, extra):
    # The program whose range holds stream-K iteration `it`: programs below `extra` hold per + 1.
    return tl.where(it < extra * (per + 1), it // (per + 1), extra + (it - extra * (per + 1)) // tl.maximum(per, 1))


@triton.jit(do_not_specialize=["programs", "dp_tiles"])
def matmul_streamk_kernel(a_ptr, b_ptr, c_ptr, ws_ptr, counts_ptr, M, N, K, programs, dp_tiles,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_M: tl.constexpr, EPILOGUE_HALVES: tl.constexpr):
    pid = tl.program_id(0)
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    iters = tl.cdiv(K, BLOCK_K)
    a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [K, 1], [BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, [K, N], [N, 1], [BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, [M, N], [N, 1], [BLOCK_M, BLOCK_N // EPILOGUE_HALVES])
    # Whole tiles first, as matmul_tma_persistent_kernel walks them (flattened).
    persistent_tiles(a_desc, b_desc, c_desc, M, N, iters, dp_tiles, programs, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M,
                     EPILOGUE_HALVES, True, False)
    # Then this program's share of the remaining tiles' iterations, [start, end), its last tile first.
    total = (tiles - dp_tiles) * iters
    per = total // programs
    extra = total % programs
    start = pid * per + tl.minimum(pid, extra)
    end = start + per + (pid < extra).to(tl.int32)
    rows = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    cur = end
    while cur > start:
        t = (cur - 1) // iters
        first = t * iters
        seg = tl.maximum(start, first)
        pid_m, pid_n = _grouped_tile(dp_tiles + t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(seg - first, cur - first):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
            b = b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])
            acc = tl.dot(a, b, acc)
        sharers = _owner(first + iters - 1, per, extra) - _owner(first, per, extra)
        if sharers == 0:  # The whole tile is this program's.
            store_c_tile(c_desc, acc, pid_m * BLOCK_M, pid_n * BLOCK_N, BLOCK_M, BLOCK_N, EPILOGUE_HALVES)
        else:
            part = ws_ptr + t.to(tl.int64) * (BLOCK_M * BLOCK_N) + rows[:, None] * BLOCK_N + cols[None, :]
            tl.atomic_add(part, acc, sem="relaxed")
            tl.debug_barrier()  # Every thread's adds issued before the counter says so.
            arrived = tl.atomic_add(counts_ptr + t, 1, sem="acq_rel")
            if arrived == sharers:  # The last to add: the tile is whole.
                summed = tl.load(part, cache_modifier=".cg")
                tl.store(part, tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32))
                tl.atomic_xchg(counts_ptr + t, 0, sem="relaxed")
                store_c_tile(c_desc, summed, pid_m * BLOCK_M, pid_n * BLOCK_N, BLOCK_M, BLOCK_N, EPILOGUE_HALVES)
        cur = seg


def compile_for_sm90(config, dtype: str = "fp16"):
    """matmul_streamk_kernel compiled for sm_90 without a GPU, for a (BLOCK_M, BLOCK_N, BLOCK_K,
    num_warps, num_stages) tile: what a device session would otherwise find out first."""
    from dr_kernel.analysis import compile_kernel

    bm, bn, bk, warps, stages = config
    pointer = f"*{dtype}"
    signature = {"a_ptr": pointer, "b_ptr": pointer, "c_ptr": pointer, "ws_ptr": "*fp32", "counts_ptr": "*i32",
                 "M": "i32", "N": "i32", "K": "i32", "programs": "i32", "dp_tiles": "i32",
                 **{name: "constexpr" for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "EPILOGUE_HALVES")}}
    constexprs = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "EPILOGUE_HALVES": _halves(bn)}
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(5)}
    compiled, _ = compile_kernel(matmul_streamk_kernel, signature, constexprs, attrs,
                                 {"num_warps": warps, "num_stages": stages})
    return compiled


def _halves(block_n: int) -> int:
    """EPILOGUE_HALVES for a tile BLOCK_N wide: C stored in two halves from 128 columns on."""
    return 2 if block_n >= 128 else 1


_WORKSPACE = {}


def _workspace(device, floats: int, counters: int):
    """The device's zeroed fp32 workspace and tile counters, at least this large (grown as zeros)."""
    import torch

    ws, counts = _WORKSPACE.get(str(device), (None, None))
    if ws is None or ws.numel() < floats or counts.numel() < counters:
        ws = torch.zeros(max(floats, 0 if ws is None else ws.numel()), device=device, dtype=torch.float32)
        counts = torch.zeros(max(counters, 0 if counts is None else counts.numel()), device=device,
                             dtype=torch.int32)
        _WORKSPACE[str(device)] = (ws, counts)
    return ws, counts


def streamk_split(tiles: int, programs: int) -> int:
    """Whole tiles before the stream-K share: every whole wave but the last partial one (which is
    what stream-K evens out); all tiles are shared when there is less than one wave."""
    if tiles <= programs:
        return 0
    return tiles - tiles % programs


def streamk(a, b, c, config, programs, dp_tiles=None):
    from dr_kernel.kernels.base import cdiv, ensure_allocator

    M, K = a.shape
    N = b.shape[1]
    bm, bn, bk, warps, stages = config
    tiles = cdiv(M, bm) * cdiv(N, bn)
    dp = streamk_split(tiles, programs) if dp_tiles is None else dp_tiles
    ws, counts = _workspace(a.device, (tiles - dp) * bm * bn, tiles - dp)
    ensure_allocator()
    matmul_streamk_kernel[(programs,)](a, b, c, ws, counts, M, N, K, programs, dp, BLOCK_M=bm, BLOCK_N=bn,
                                       BLOCK_K=bk, GROUP_M=8, EPILOGUE_HALVES=_halves(bn), num_warps=warps,
                                       num_stages=stages)


def _launcher(matmul, variant: str, programs: int):
    """(a, b, c, config) -> launches the variant's kernel with the tile config."""
    built_in = functools.partial(launch_built_in, matmul)
    return {
        "built_in": built_in,
        "tma_persistent": lambda a, b, c, config: built_in(a, b, c, config, tma=2),
        "streamk": lambda a, b, c, config: streamk(a, b, c, config, programs),
        "streamk_all": lambda a, b, c, config: streamk(a, b, c, config, programs, dp_tiles=0),
    }[variant]


def main() -> int:
    args = probe_arguments(__doc__, VARIANTS)
    import torch
    from dr_kernel import kernels

    matmul = kernels.get("matmul")
    device = "cpu" if args.interpret else "cuda"
    problems = args.problems or (
        [(40, 72, 48, "fp16"), (33, 40, 64, "fp16"), (70, 96, 80, "fp16")] if args.interpret else PROBLEMS)
    tiles = args.tiles or ([(16, 32, 16, 4, 2), (32, 32, 16, 4, 2)] if args.interpret else TILES)
    programs = 5 if args.interpret else torch.cuda.get_device_properties(0).multi_processor_count

    def repeats(row, a, b):  # Fresh inputs, the stream-K kernel again and again on the first tile.
        worst = 0.0
        for _ in range(3 if args.interpret else 20):
            a2, b2 = torch.randn_like(a), torch.randn_like(b)
            c2 = torch.full((a.shape[0], b.shape[1]), float("nan"), device=device, dtype=a.dtype)
            streamk(a2, b2, c2, tiles[0], programs)
            worst = max(worst, _relerr(c2, torch.matmul(a2.float(), b2.float())))
        row["streamk_repeat_worst_relerr"] = worst

    measure_problems(problems, tiles, args.variants.split(","), lambda v: _launcher(matmul, v, programs), device,
                     programs, args.out / "streamk.json", timed=not args.interpret, again=True, extra=repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
