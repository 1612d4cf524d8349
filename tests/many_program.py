"""A program that launches tests/many_kernels.py's kernels at 20 keys and prints how many configs it
measured (tests/test_tune_many.py runs it under `dr-kernel collect`, then again to read the winners)."""

import json

import many_kernels

many_kernels.launch_all()
print(json.dumps({"evaluations": many_kernels.evaluations()}))
