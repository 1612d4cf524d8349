"""A program with one hot and one cold tuned key, run by tests/test_retune.py in Triton's
interpreter: key n=4096 is launched 12 times, n=1024 twice. Its first run tunes each key with one
evaluation (the smallest block: the slowest config in the interpreter, which runs one program
instance after another); `retune` then has something to find. Prints the config each key launched."""

import json
import os

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from dr_kernel import optimize  # noqa: E402


@optimize(space={"BLOCK": [16, 32, 64, 128, 256, 512, 1024]}, key=["n"], max_evals=1, strategy="exhaustive",
          isolate=False, static_checks=False)
@triton.jit
def scale(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y + offs, 2.0 * tl.load(x + offs, mask=mask), mask=mask)


def run(n: int, times: int) -> dict:
    x = torch.randn(n)
    y = torch.empty_like(x)
    for _ in range(times):
        scale[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
    assert torch.allclose(y, 2 * x)
    return dict(scale.best_config.all_kwargs() if hasattr(scale.best_config, "all_kwargs") else scale.best_config)


print(json.dumps({"hot": run(4096, 12), "cold": run(1024, 2)}))
