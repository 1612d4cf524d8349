"""What one launch of a kernel would compile, taken from Triton's JIT itself.

Triton turns a call's arguments into the compiler's input (signature, constexprs, divisibility
attributes, parsed options) by rules of its own: integers equal to 1 become constants, 16-divisible
integers and aligned pointers get attributes, ``do_not_specialize`` lists, tuples, TMA
descriptors, ``None``, and whatever a library's dispatcher or ``@triton.heuristics`` add on the
way down. A copy of those rules (kernels/base.py's ``specialise``) covers the common cases; where
it differs by one attribute, a config compiled ahead of time lands in another cache entry than the
one the launch looks up, and the launch compiles it again.

So the description is taken from the launch: the kernel is called in warm-up mode through the
wrappers it sits under, and its JITFunction's ``_do_compile`` is intercepted, for this one call in
this one thread, to record its arguments instead of compiling. The record, compiled in a worker
process with ``triton.compile`` exactly as ``_do_compile`` compiles it, fills the disk-cache entry
the real launch then loads.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from .analysis import LaunchSource

_LOCK = threading.Lock()


def launch_source(kernel: Any, arguments: Mapping[str, Any]) -> LaunchSource | None:
    """Returns what ``kernel.run(**arguments, grid=..., warmup=False)`` would compile: a
    LaunchSource, or None when there is nothing to compile (this process already holds that
    binary) or nothing to capture (a kernel run by Triton's interpreter). `kernel` is a
    JITFunction or a wrapper that keeps it in ``.fn`` (``@triton.heuristics``); `arguments` are
    the kernel's arguments and launch options by name (num_warps, ...), without grid and warmup.
    Raises what the call raises (a heuristic's error, an unknown keyword)."""
    from triton.runtime.jit import JITFunction

    from .compile_pool import jit_function

    jit = jit_function(kernel)
    if not isinstance(jit, JITFunction):
        return None
    captured: list[LaunchSource] = []
    caller = threading.get_ident()
    compile_for_real = type(jit)._do_compile

    def record(key, signature, device, constexprs, options, attrs, warmup):
        if threading.get_ident() != caller:  # Another thread's launch of this kernel compiles as usual.
            return compile_for_real(jit, key, signature, device, constexprs, options, attrs, warmup)
        target = jit.device_caches[device][2]
        captured.append(LaunchSource(jit, dict(signature), dict(constexprs), dict(attrs), dict(options.__dict__),
                                     target))
        return None  # The JIT then returns without compiling or launching.

    with _LOCK:
        jit._do_compile = record
        try:
            kernel.run(**arguments, grid=None, warmup=True)
        finally:
            del jit._do_compile
    return captured[0] if captured else None
