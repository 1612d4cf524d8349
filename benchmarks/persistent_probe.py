"""What a persistent tile schedule gains over the built-in matmul (issue 11), before it is a
variant the search tunes: for a few tile configs per problem, on the GPU lent, the built-in
kernel (as dr_kernel launches it: the aligned-rows variant where it applies), the same tiles as
variants of it, and torch.matmul (cuBLAS):

- `pointer_persistent`: one program per SM walking the tiles, loads through pointers, its tile
  loop and K loop flattened (the probe of the second session of 2026-12-03: 1.7-2.7x slower);
- `tma`: matmul_tma_kernel (TMA = 1), one program per tile, A, B and C behind tensor descriptors;
- `tma_persistent`, `tma_persistent_halves`, `tma_persistent_halves_unflattened`:
  matmul_tma_persistent_kernel with C stored whole or in two halves, with and without the tile
  loop flattened into the K loop;
- `tma_persistent_ws`: the same kernel, C whole, its tile loop warp-specialised
  (`WARP_SPECIALIZE`): on sm_90 with 4 warps Triton 3.6 splits it into a producer (the 4 warps,
  which issue the TMA copies) and two 4-warp consumer partitions of 232 registers that run the
  wgmma products and store C, so one tile's store overlaps other products (12 warps in all; with
  8 warps the loop stays as it was, and with C in halves most tiles do not compile).

    python benchmarks/persistent_probe.py --out DIR            # on the GPU
    python benchmarks/persistent_probe.py --out DIR --interpret  # the kernels' results on the CPU
    python benchmarks/persistent_probe.py --out DIR --variants built_in,tma_persistent_ws \
        --problems "1000,1000,1000,fp16;3000,5000,1000,fp16" --tiles "128,256,64,4,3;128,128,64,4,4"

Times are do_bench medians (L2 cleared before each launch); every variant's result is checked
against torch's in fp32 first (`relerr`), and a variant that fails is a row with its error. The
rows decide whether the variants are worth the search's time.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
if "--interpret" in sys.argv:  # Before Triton decorates anything.
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from dr_kernel.kernels.matmul import _grouped_tile  # noqa: E402

PROBLEMS = [  # (M, N, K, dtype): the shapes the built-in kernel loses on, short K, and regular ones.
    (3000, 5000, 1000, "fp16"), (6144, 1000, 2048, "bf16"), (1000, 1000, 1000, "fp16"),
    (1024, 1024, 1024, "fp16"), (8192, 8192, 1024, "fp16"), (4096, 4096, 512, "bf16"),
    (2048, 2048, 2048, "bf16"), (4096, 4096, 4096, "fp16"), (8192, 8192, 4096, "bf16"),
]
TILES = [  # BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages
    (128, 128, 64, 8, 3), (128, 128, 64, 4, 4), (128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (64, 128, 64, 4, 4),
]
VARIANTS = ["built_in", "pointer_persistent", "tma", "tma_persistent", "tma_persistent_halves",
            "tma_persistent_halves_unflattened", "tma_persistent_ws"]


@triton.jit
def matmul_persistent_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sbk, scm,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             GROUP_M: tl.constexpr, ALIGN: tl.constexpr, PROGRAMS: tl.constexpr):
    # Contiguous row-major operands; N, K and the row strides in units of ALIGN elements, as in
    # matmul_aligned_kernel. Program p takes tiles p, p + PROGRAMS, ... in the grouped order.
    N = N * ALIGN
    K = K * ALIGN
    iters = tl.cdiv(K, BLOCK_K)
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    for tile in tl.range(tl.program_id(0), tiles, PROGRAMS, flatten=True):
        pid_m, pid_n = _grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
        cols = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, iters):
            ks = k * BLOCK_K + offs_k
            a = tl.load(a_ptr + rows[:, None] * (sam * ALIGN) + ks[None, :], mask=ks[None, :] < K, other=0.0)
            b = tl.load(b_ptr + ks[:, None] * (sbk * ALIGN) + cols[None, :], mask=ks[:, None] < K, other=0.0)
            acc = tl.dot(a, b, acc)
        out_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        out_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        tl.store(c_ptr + out_m[:, None] * (scm * ALIGN) + out_n[None, :], acc.to(c_ptr.dtype.element_ty),
                 mask=(out_m[:, None] < M) & (out_n[None, :] < N))


def persistent(a, b, c, config, programs):
    from dr_kernel.kernels.base import cdiv
    from dr_kernel.kernels.matmul import row_alignment

    M, K = a.shape
    N = b.shape[1]
    align = row_alignment(N, K, a.stride(0), b.stride(0), c.stride(0))
    bm, bn, bk, warps, stages = config
    grid = (min(programs, cdiv(M, bm) * cdiv(N, bn)),)
    matmul_persistent_kernel[grid](a, b, c, M, N // align, K // align, a.stride(0) // align,
                                   b.stride(0) // align, c.stride(0) // align, BLOCK_M=bm, BLOCK_N=bn,
                                   BLOCK_K=bk, GROUP_M=8, ALIGN=align, PROGRAMS=programs,
                                   num_warps=warps, num_stages=stages)


def tma_persistent(a, b, c, config, programs, halves: int, flatten: bool, warp_specialize: bool = False):
    from dr_kernel.kernels.base import cdiv, ensure_allocator
    from dr_kernel.kernels.matmul import matmul_tma_persistent_kernel

    M, K = a.shape
    N = b.shape[1]
    bm, bn, bk, warps, stages = config
    grid = (min(programs, cdiv(M, bm) * cdiv(N, bn)),)
    ensure_allocator()
    matmul_tma_persistent_kernel[grid](a, b, c, M, N, K, grid[0], BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                                       EPILOGUE_HALVES=halves, FLATTEN=flatten, WARP_SPECIALIZE=warp_specialize,
                                       num_warps=warps, num_stages=stages)


def launch_built_in(matmul, a, b, c, config, tma: int = 0) -> None:
    """The matmul family's launch of a (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) tile,
    GROUP_M 8, with that TMA value."""
    bm, bn, bk, warps, stages = config
    matmul.launch({"a": a, "b": b, "c": c}, {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8,
                                              "num_warps": warps, "num_stages": stages, "TMA": tma})


def _launcher(matmul, variant: str, programs: int):
    """(a, b, c, config) -> launches the variant's kernel with the tile config."""
    built_in = functools.partial(launch_built_in, matmul)
    return {
        "built_in": built_in,
        "pointer_persistent": lambda a, b, c, config: persistent(a, b, c, config, programs),
        "tma": lambda a, b, c, config: built_in(a, b, c, config, tma=1),
        "tma_persistent": lambda a, b, c, config: tma_persistent(a, b, c, config, programs, 1, True),
        "tma_persistent_halves": lambda a, b, c, config: tma_persistent(a, b, c, config, programs, 2, True),
        "tma_persistent_halves_unflattened": lambda a, b, c, config: tma_persistent(a, b, c, config, programs, 2,
                                                                                    False),
        "tma_persistent_ws": lambda a, b, c, config: tma_persistent(a, b, c, config, programs, 1, False, True),
    }[variant]


def _bench(fn, *args) -> float:
    return triton.testing.do_bench(lambda: fn(*args), return_mode="median")


def _relerr(c, expected) -> float:
    return ((c.float() - expected).norm() / expected.norm()).item()


def _measure(launch, a, b, expected, config, timed: bool, again: bool = False) -> dict:
    """One variant on one tile config: its error against fp32, then its time; with `again`, its
    error once more after the timed launches (`relerr_after`: state a kernel keeps between launches,
    such as streamk_probe.py's workspace, left as the next launch needs it)."""
    import torch

    c = torch.full((a.shape[0], b.shape[1]), float("nan"), device=a.device, dtype=a.dtype)
    entry = {"config": config}
    try:
        launch(a, b, c, config)
        entry["relerr"] = _relerr(c, expected)
        if timed:
            entry["ms"] = _bench(launch, a, b, c, config)
            if again:
                launch(a, b, c, config)
                entry["relerr_after"] = _relerr(c, expected)
    except Exception as e:  # noqa: BLE001 -- a config that fails is a row, not the end.
        entry["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    return entry


def measure_problems(problems, tiles, variants, launcher, device: str, programs: int, out: Path, timed: bool,
                     again: bool = False, extra=None) -> list[dict]:
    """Every variant (launcher(variant) -> launch) on every tile of every problem, each checked
    against fp32 and (when `timed`) timed beside torch.matmul; `extra(row, a, b)` adds a problem's
    own checks to its row. Rows are written to `out` as each problem ends (a call cut short keeps
    what it measured), and each variant's best printed at the end."""
    import torch
    from dr_kernel.kernels.base import torch_dtype

    rows = []
    for M, N, K, dtype in problems:
        a = torch.randn(M, K, device=device, dtype=torch_dtype(dtype))
        b = torch.randn(K, N, device=device, dtype=torch_dtype(dtype))
        expected = torch.matmul(a.float(), b.float())
        row = {"M": M, "N": N, "K": K, "dtype": dtype, "programs": programs, "configs": []}
        if timed:
            row["torch_ms"] = _bench(torch.matmul, a, b)
            row["torch_relerr"] = _relerr(torch.matmul(a, b), expected)
        for variant in variants:
            for config in tiles:
                entry = {"variant": variant, **_measure(launcher(variant), a, b, expected, config, timed, again)}
                row["configs"].append(entry)
                print(json.dumps({"problem": (M, N, K, dtype), **entry}), flush=True)
        if extra:
            extra(row, a, b)
        rows.append(row)
        out.write_text(json.dumps(rows, indent=1))
    for row in rows:  # Best ms per variant against torch's.
        best = {v: min((e["ms"] for e in row["configs"] if e["variant"] == v and "ms" in e), default=None)
                for v in variants}
        torch_ms = row.get("torch_ms")
        print(json.dumps({"problem": (row["M"], row["N"], row["K"], row["dtype"]), "torch_ms": torch_ms,
                          "best_ms": best, "of_cublas": {v: torch_ms / ms for v, ms in best.items() if ms and torch_ms},
                          **{k: v for k, v in row.items() if k.endswith("_relerr") and k != "torch_relerr"}}),
              flush=True)
    return rows


def probe_arguments(description: str, variants: list[str]) -> argparse.Namespace:
    """The matmul probes' command line: --out (made here), --interpret, and what a call measures
    (variants, problems and tiles)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--interpret", action="store_true", help="small problems on the CPU, results only")
    p.add_argument("--variants", default=",".join(variants), help=f"of {', '.join(variants)}")
    p.add_argument("--problems", type=_problems, help="M,N,K,dtype;... instead of the built-in list")
    p.add_argument("--tiles", type=_tiles, help="BLOCK_M,BLOCK_N,BLOCK_K,num_warps,num_stages;... instead of the "
                                                "built-in list")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    return args


def _problems(text: str) -> list[tuple]:
    try:
        return [(int(m), int(n), int(k), d) for m, n, k, d in (s.split(",") for s in text.split(";"))]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give problems as M,N,K,dtype;... (e.g. 1000,1000,1000,fp16)") from None


def _tiles(text: str) -> list[tuple]:
    try:
        tiles = [tuple(int(v) for v in s.split(",")) for s in text.split(";")]
    except ValueError:
        tiles = []
    if not tiles or any(len(t) != 5 for t in tiles):
        raise argparse.ArgumentTypeError(f"{text!r}: give tiles as BLOCK_M,BLOCK_N,BLOCK_K,num_warps,num_stages;... "
                                         "(e.g. 128,128,64,4,4)")
    return tiles


def main() -> int:
    args = probe_arguments(__doc__, VARIANTS)
    import torch
    from dr_kernel import kernels

    matmul = kernels.get("matmul")
    device = "cpu" if args.interpret else "cuda"
    problems = args.problems or ([(40, 72, 48, "fp16"), (33, 40, 64, "fp16")] if args.interpret else PROBLEMS)
    tiles = args.tiles or ([(16, 32, 16, 4, 2)] if args.interpret else TILES)
    programs = 3 if args.interpret else torch.cuda.get_device_properties(0).multi_processor_count
    measure_problems(problems, tiles, args.variants.split(","), lambda v: _launcher(matmul, v, programs), device,
                     programs, args.out / "persistent.json", timed=not args.interpret)
    return 0


if __name__ == "__main__":
    sys.exit(main())
