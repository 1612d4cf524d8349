"""What one launch of a kernel would compile, taken from Triton's JIT itself.

Triton turns a call's arguments into the compiler's input (signature, constexprs, divisibility
attributes, parsed options) by rules of its own: integers equal to 1 become constants, 16-divisible
integers and aligned pointers get attributes, ``do_not_specialize`` lists, tuples, TMA
descriptors, ``None``, and whatever a library's dispatcher or ``@triton.heuristics`` add on the
way down. A copy of those rules (kernels/base.py's ``specialise``) covers the common cases; where
it differs by one attribute, a config compiled ahead of time lands in another cache entry than the
one the launch looks up, and the launch compiles it again.

So the description is taken from the launch: the kernel is called in warm-up mode through the
wrappers it sits under, with its JITFunction's ``run`` intercepted (for this one call, in this one
thread) to record the arguments it receives; they then go through the JIT's own binder and
``_pack_args``, as ``JITFunction.run`` sends them before ``_do_compile`` (Triton 3.6). Compiled in
a worker process with ``triton.compile`` as ``_do_compile`` compiles it, the description fills the
disk-cache entry the real launch then loads; for a binary this process holds already, the worker
finds it there.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from .analysis import LaunchSource

_LOCK = threading.Lock()


def launch_source(kernel: Any, arguments: Mapping[str, Any]) -> LaunchSource | None:
    """Returns what ``kernel.run(**arguments, grid=..., warmup=False)`` would compile, or None for
    a kernel run by Triton's interpreter (nothing is compiled). `kernel` is a JITFunction or a
    wrapper that keeps it in ``.fn`` (``@triton.heuristics``); `arguments` are the kernel's
    arguments and launch options by name (num_warps, ...), without grid and warmup. Raises what
    the call raises (a heuristic's error, an unknown keyword)."""
    from triton import knobs
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    from .compile_pool import jit_function

    jit = jit_function(kernel)
    if not isinstance(jit, JITFunction):
        return None
    captured: list[tuple[tuple, dict]] = []
    caller = threading.get_ident()
    run_for_real = type(jit).run

    def record(*args, grid=None, warmup=False, **kwargs):
        if threading.get_ident() != caller:  # Another thread's launch of this kernel runs as usual.
            return run_for_real(jit, *args, grid=grid, warmup=warmup, **kwargs)
        captured.append((args, kwargs))
        return None

    with _LOCK:
        jit.run = record
        try:
            kernel.run(**arguments, grid=None, warmup=True)
        finally:
            del jit.run
    if not captured:
        return None  # A wrapper decided not to launch.
    args, kwargs = captured[0]
    # JITFunction.run up to its _do_compile call.
    kwargs["debug"] = kwargs.get("debug", jit.debug) or knobs.runtime.debug
    kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    device = driver.active.get_current_device()
    _, _, target, backend, binder = jit.device_caches[device]
    bound_args, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = jit._pack_args(backend, kwargs, bound_args, specialization, options)
    return LaunchSource(jit, dict(signature), dict(constexprs), dict(attrs), dict(options.__dict__), target)
