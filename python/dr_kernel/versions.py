"""The Triton versions dr_kernel supports, and one warning when the installed one is older.

Tested: Triton 3.6.0 on the CPU and on the GPU machine (H200 and H100), and 3.7.1, 3.8.0 and 3.9.0
on the CPU (`scripts/test-triton VERSION`: compiles for the H200 and the interpreter). Triton 3.5
lacks what the launch capture and the built-in kernels use (its specialisation and
instrumentation hooks, Gluon's warp_specialize and TMA descriptors as 3.6 has them).
"""

from __future__ import annotations

import re
import warnings

OLDEST_TRITON = (3, 6)
_warned = False


def triton_version(text: str) -> tuple[int, int]:
    """(major, minor) of a version string such as "3.6.0" or "3.7.0+git1234abcd"."""
    found = re.match(r"(\d+)\.(\d+)", text)
    if found is None:
        raise ValueError(f"{text!r} is not a Triton version (MAJOR.MINOR...)")
    return int(found[1]), int(found[2])


def check_triton() -> None:
    """Warns once per process when the installed Triton is older than dr_kernel supports."""
    global _warned
    import triton

    if _warned or triton_version(triton.__version__) >= OLDEST_TRITON:
        return
    _warned = True
    oldest = ".".join(map(str, OLDEST_TRITON))
    warnings.warn(f"dr_kernel supports Triton {oldest} and later; this process has Triton {triton.__version__}, "
                  f"with which kernels may fail to compile or be described: install triton>={oldest}",
                  stacklevel=2)
