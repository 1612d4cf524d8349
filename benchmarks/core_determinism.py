"""Does the C++ core decide the same on two machines? What the shipped agent ranks first and what it
proposes in a session on made-up times, for the bench's problems, written as JSON here and on the
GPU machine and compared (`--compare`): the first difference, or none.

Recorded GPU sessions (gpu_bench.py rows) are replayed by `session_replay.py` on this machine; for
that to hold, the core must decide on the GPU machine as here. On 2026-12-05 (sixth session) it did
(`benchmarks/results/h100-2026-12-05b/determinism/`), and the sessions that left their paths in
replay lacked an input: the refits their rows did not record.

    .venv/bin/python benchmarks/core_determinism.py --json here.json [--agent DIR]
    .venv/bin/python benchmarks/core_determinism.py --compare here.json there.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# The bench's problems whose recorded sessions left their path in replay (2026-12-05, sixth session).
PROBLEMS = [("matmul", {"M": 4096, "N": 4095, "K": 4096}), ("matmul", {"M": 3000, "N": 5000, "K": 1000}),
            ("matmul", {"M": 16, "N": 4096, "K": 4096}), ("matmul", {"M": 512, "N": 512, "K": 32768}),
            ("matmul", {"M": 8, "N": 8192, "K": 8192}), ("softmax", {"rows": 1000, "cols": 50257})]


def made_up_ms(config: dict) -> float:
    """A time with many distinct values and no structure the agent could have learned."""
    v = sum((i + 1) * math.log2(float(x) + 1.0) for i, x in enumerate(config.values()))
    return 0.05 + (math.sin(v) + 1.3) * 0.1


def run() -> dict:
    from dr_kernel import _core
    from dr_kernel.analysis import H200
    from dr_kernel.kernels import get
    from dr_kernel.session import builtin_problem

    out = {}
    for name, shape in PROBLEMS:
        kernel = get(name)
        space = kernel.space_for(shape, H200)
        problem = builtin_problem(kernel, shape, "fp16", "NVIDIA H200")
        order = _core.predicted_order(dict(problem), space, 64)

        def measure(batch):
            return [({"status": "ok", "ms": made_up_ms(c)}, 0.0) for c in batch]

        history = _core.tune(dict(problem), space, measure, "ppo", 30, math.inf, 0, {"stop": 0.0})
        out[f"{name} {json.dumps(shape)}"] = {
            "predicted_order": [list(c.values()) for c in order],
            "session": [[list(c.values()), m.get("why", "")] for c, m, _ in history]}
    return out


def compare(here: dict, there: dict) -> list[str]:
    """The first difference per problem, in words."""
    found = []
    for key in sorted(set(here) | set(there)):
        if key not in here or key not in there:
            found.append(f"{key}: only in {'the first' if key in here else 'the second'} file")
            continue
        for part in ("predicted_order", "session"):
            a, b = here[key][part], there[key][part]
            for i, (x, y) in enumerate(zip(a, b, strict=False)):
                if x != y:
                    found.append(f"{key}: {part} differs at {i + 1}: {x} against {y}")
                    break
            else:
                if len(a) != len(b):
                    found.append(f"{key}: {part} has {len(a)} entries against {len(b)}")
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", type=Path, help="write this machine's answers here")
    p.add_argument("--agent", type=Path, help="an agent folder (policy.bin, cost_model.bin[.xz]); default the shipped")
    p.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"), help="compare two written files")
    args = p.parse_args()
    if args.compare:
        a, b = (json.loads(f.read_text()) for f in args.compare)
        found = compare(a, b)
        print("\n".join(found) if found else f"identical: {len(a)} problems")
        sys.exit(1 if found else 0)
    if args.agent:
        from session_replay import use_agent

        use_agent(args.agent)
    answers = run()
    text = json.dumps(answers)
    if args.json:
        args.json.write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
