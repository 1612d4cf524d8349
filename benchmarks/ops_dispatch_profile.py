"""Where the host time of a dr_kernel.ops call served by Triton goes (the H200 machine): a small
softmax (8×256, launch-bound), timed per call back to back through ops.softmax, through the
built-in kernel's launch, as a bare JIT launch and through DirectLaunch (the binary's launcher);
then Python's profiler over ops.softmax calls.

    python benchmarks/ops_dispatch_profile.py --out DIR
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import tempfile
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import torch
    from dr_kernel import kernels, ops
    from dr_kernel.direct_launch import DirectLaunch

    ops.configure(variants=("triton",), max_evals=4, db=str(Path(tempfile.mkdtemp()) / "results.db"))
    x = torch.randn(8, 256, device="cuda", dtype=torch.float16)
    ops.softmax(x)
    choice = ops.decisions()[-1]
    kernel = kernels.get("softmax")
    fn, config = kernel.fn_for(choice.config, None), choice.config
    y = torch.empty_like(x)
    inputs = {"x": x, "y": y}
    meta = dict(config)
    direct = DirectLaunch(fn)
    calls = {
        "ops.softmax": lambda: ops.softmax(x),
        "torch.softmax": lambda: torch.softmax(x, -1),
        "kernel._launch": lambda: kernel._launch(fn, inputs, config),
        "bare fn[grid](...)": lambda: fn[(8,)](x, y, 256, 256, **meta),
        "DirectLaunch(fn)[grid](...)": lambda: direct[(8,)](x, y, 256, 256, **meta),
        "torch.empty_like": lambda: torch.empty_like(x),
    }
    row = {"config": config}
    for name, call in calls.items():
        call()
        torch.cuda.synchronize()
        row[name] = min(timeit.repeat(call, number=2000, repeat=3)) / 2000 * 1e6
        torch.cuda.synchronize()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(5000):
        ops.softmax(x)
    profile.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(30)
    (args.out / "profile.txt").write_text(text.getvalue())
    (args.out / "dispatch.json").write_text(json.dumps(row, indent=1))
    print(json.dumps(row, indent=1))
    print(text.getvalue()[:6000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
