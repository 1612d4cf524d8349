"""Launching one compiled kernel again and again without the JIT's work on every call.

`fn[grid](*args)` on a @triton.jit function costs about 14 µs of host time on the H200 machine
(Triton 3.6; `benchmarks/ops_dispatch_profile.py`): binding the arguments, specialising each one,
hashing the cache key, looking the binary up, checking the globals it read. torch's own operators
cost 6–8 µs, so a problem of a few microseconds of GPU time served by a Triton kernel loses call
after call however fast the kernel is. Once a call has gone through Triton's own path, the same
binary serves every later call whose arguments specialise the same way; `DirectLaunch` remembers
the binary and the arguments that decide its specialisation, and hands later calls with the same
ones straight to the binary's launcher.

A call is taken the short way only when it would have loaded the same binary: it passes the
same arguments positionally and by keyword as the first call; every argument that is not a
tensor (sizes, strides, constexprs, scalars, compile options) is equal to the first call's;
every tensor has the first call's dtype and is 16-byte aligned if it was (alignment is part of
the specialisation); the current device is the first call's; the JITFunction has no pre-run
hooks, no launch hooks are set (profilers set them) and Triton's debug knob is as it was.
Anything else goes through `fn[grid]` as before. Under Triton's interpreter there is no binary:
every call takes the normal path.
"""

from __future__ import annotations

import inspect
from typing import Any


class DirectLaunch:
    """Stands in for a @triton.jit function in `fn[grid](*args, **kwargs)` for repeated launches
    of one problem (see the module's doc). Not for the interpreter: there `fn[grid]` is all."""

    def __init__(self, fn: Any):
        from triton import knobs
        from triton.runtime.driver import driver

        self.fn = fn
        self._runtime, self._driver = knobs.runtime, driver
        self._params = list(inspect.signature(fn.fn).parameters.values())
        self._kernel = None  # The first call's binary, and what decided it (_capture).
        self.direct = 0  # Launches taken the short way (for tests and benchmarks).

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self._call(grid, args, kwargs)

    def _call(self, grid, args: tuple, kwargs: dict):
        kernel = self._kernel
        if kernel is not None and self._same(args, kwargs):
            values = (*args, *map(kwargs.__getitem__, self._rest_kwargs), *self._rest_defaults)
            if callable(grid):
                grid = grid(dict(zip(self._names, values, strict=True)))
            kernel.run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1,
                       self._driver.active.get_current_stream(self._device), kernel.function,
                       kernel.packed_metadata, None, None, None, *values)
            self.direct += 1
            return kernel
        kernel = self.fn[grid](*args, **kwargs)
        if self._kernel is None and kernel is not None and not getattr(self.fn, "pre_run_hooks", None):
            self._capture(kernel, args, kwargs)
        return kernel

    def _same(self, args: tuple, kwargs: dict) -> bool:
        # Whether this call would load the first call's binary (the module's doc lists the tests).
        runtime = self._runtime
        if (len(args) != self._nargs or kwargs.keys() != self._keys or runtime.debug != self._debug
                or not _unhooked(runtime.launch_enter_hook) or not _unhooked(runtime.launch_exit_hook)
                or self._driver.active.get_current_device() != self._device):
            return False
        at, key = args.__getitem__, kwargs.__getitem__
        if (tuple(map(at, self._fixed_at)) != self._fixed or tuple(map(key, self._fixed_keys)) != self._fixed_kw):
            return False
        tensors = [*map(at, self._tensor_at), *map(key, self._tensor_keys)]
        if [t.dtype for t in tensors] != self._dtypes:
            return False
        for i in self._aligned:
            if tensors[i].data_ptr() % 16:
                return False
        return True

    def _capture(self, kernel, args: tuple, kwargs: dict) -> None:
        # The parameters after the positional ones come from kwargs or their defaults, in the
        # order the binary's launcher takes them (the JIT binder's); kwargs that are no parameter
        # (num_warps, num_stages) are compile options: compared, not passed.
        rest = self._params[len(args):]
        if any(p.name not in kwargs and p.default is inspect.Parameter.empty for p in rest):
            return  # The JIT would have refused the call; nothing to remember.
        given = [p.name for p in rest if p.name in kwargs]
        if given != [p.name for p in rest[:len(given)]]:
            return  # A default between given parameters: keep the JIT's path (rare; not worth a plan).

        self._names = [p.name for p in self._params]
        self._nargs, self._keys = len(args), set(kwargs)
        self._rest_kwargs = given
        self._rest_defaults = tuple(p.default for p in rest[len(given):])
        tensor = [hasattr(v, "data_ptr") for v in args]
        tensor_kw = {k: hasattr(v, "data_ptr") for k, v in kwargs.items()}
        self._fixed_at = [i for i, t in enumerate(tensor) if not t]
        self._fixed = tuple(args[i] for i in self._fixed_at)
        self._fixed_keys = [k for k, t in tensor_kw.items() if not t]
        self._fixed_kw = tuple(kwargs[k] for k in self._fixed_keys)
        self._tensor_at = [i for i, t in enumerate(tensor) if t]
        self._tensor_keys = [k for k, t in tensor_kw.items() if t]
        tensors = [*(args[i] for i in self._tensor_at), *(kwargs[k] for k in self._tensor_keys)]
        self._dtypes = [t.dtype for t in tensors]
        self._aligned = [i for i, t in enumerate(tensors) if t.data_ptr() % 16 == 0]
        self._device, self._debug = self._driver.active.get_current_device(), self._runtime.debug
        kernel.run  # noqa: B018 -- loads the binary and its launcher (the JIT has, for this call).
        self._kernel = kernel


def _unhooked(hook: Any) -> bool:
    # Triton 3.6 keeps the launch hooks as chains (empty unless a profiler adds to them); a knob
    # set to a plain callable is a hook too.
    return hook is None or not getattr(hook, "calls", True)
