"""First calls of one @optimize kernel for several keys in one process, in Triton's interpreter:
what reusing the measuring process between keys saves (run with DR_KERNEL_FRESH_WORKERS=1 and
without, each with a fresh store).

    export DR_KERNEL_DB=/tmp/kb.db PYTHONPATH=python
    rm -f /tmp/kb.db*; DR_KERNEL_FRESH_WORKERS=1 .venv/bin/python benchmarks/keys_bench.py
    rm -f /tmp/kb.db*; .venv/bin/python benchmarks/keys_bench.py
"""

import json
import os
import sys
import time
import warnings
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
warnings.simplefilter("ignore")

import optimize_kernels  # noqa: E402

seconds = []
for n in (1000, 1500, 2000, 2500, 3000):
    start = time.perf_counter()
    optimize_kernels.run(n)
    seconds.append(round(time.perf_counter() - start, 2))
print(json.dumps({"first_call_s": seconds}))
