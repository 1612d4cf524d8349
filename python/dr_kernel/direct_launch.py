"""Launching one compiled kernel again and again without the JIT's work on every call.

`fn[grid](*args)` on a @triton.jit function costs about 14 µs of host time on the H200 machine
(Triton 3.6; `benchmarks/ops_dispatch_profile.py`): binding the arguments, specialising each one,
hashing the cache key, looking the binary up, checking the globals it read. torch's own operators
cost 6–8 µs, so a problem of a few microseconds of GPU time served by a Triton kernel loses call
after call however fast the kernel is. Once a call has gone through Triton's own path, the same
binary serves every later call whose arguments specialise the same way; `DirectLaunch` remembers
the binary and the arguments that decide its specialisation, and hands later calls with the same
ones straight to the binary's launcher.

A call is taken the short way only when it would have loaded the same binary: every argument
that is not a tensor (sizes, strides, constexprs, scalars) is equal to the first call's, every
tensor has the first call's dtype and is 16-byte aligned if it was (alignment is part of the
specialisation), the current
device is the first call's, the JITFunction has no pre-run hooks, no launch hooks are set
(profilers set them) and Triton's debug knob is as it was. Anything else goes through `fn[grid]`
as before. Under Triton's interpreter there is no binary: every call takes the normal path.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any


class DirectLaunch:
    """Stands in for a @triton.jit function in `fn[grid](*args, **kwargs)` for repeated launches
    of one problem (see the module's doc). Not for the interpreter: there `fn[grid]` is all."""

    def __init__(self, fn: Any):
        self.fn = fn
        params = list(inspect.signature(fn.fn).parameters.values())
        self._names = [p.name for p in params]
        self._defaults = [p.default for p in params]
        self._kernel = None  # The compiled binary of the first call, and what decided it:
        self._fixed: tuple = ()          # the values of the arguments that are not tensors,
        self._fixed_at: Sequence[int] = ()  # their positions,
        self._tensors: Sequence[tuple] = ()  # each tensor's position, dtype and 16-byte alignment,
        self._device = None              # the device it was loaded on, and the debug knob.
        self._debug = None
        self.direct = 0  # Launches taken the short way (for tests and benchmarks).

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self._call(grid, args, kwargs)

    def _bind(self, args: tuple, kwargs: dict) -> list:
        # The parameters in order, as the JIT's binder lists them; kwargs that are no parameter of
        # the kernel (num_warps, num_stages) are compile options, part of the binary already.
        values = list(args)
        for name, default in zip(self._names[len(args):], self._defaults[len(args):], strict=True):
            values.append(kwargs[name] if name in kwargs else default)
        return values

    def _call(self, grid, args: tuple, kwargs: dict):
        from triton import knobs
        from triton.runtime.driver import driver

        kernel = self._kernel
        runtime = knobs.runtime
        if (kernel is not None and _unhooked(runtime.launch_enter_hook) and _unhooked(runtime.launch_exit_hook)
                and runtime.debug == self._debug):
            values = self._bind(args, kwargs)
            device = driver.active.get_current_device()
            if (device == self._device and tuple(values[i] for i in self._fixed_at) == self._fixed
                    and all(values[i].dtype == dtype and (not aligned or values[i].data_ptr() % 16 == 0)
                            for i, dtype, aligned in self._tensors)):
                grid = grid(dict(zip(self._names, values, strict=False))) if callable(grid) else grid
                kernel.run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1,
                           driver.active.get_current_stream(device), kernel.function, kernel.packed_metadata,
                           None, None, None, *values)
                self.direct += 1
                return kernel
        kernel = self.fn[grid](*args, **kwargs)
        if self._kernel is None and kernel is not None and not getattr(self.fn, "pre_run_hooks", None):
            self._capture(kernel, self._bind(args, kwargs), driver.active.get_current_device(), knobs.runtime.debug)
        return kernel

    def _capture(self, kernel, values: list, device, debug) -> None:
        tensors = [i for i, v in enumerate(values) if hasattr(v, "data_ptr")]
        self._fixed_at = [i for i in range(len(values)) if i not in tensors]
        self._fixed = tuple(values[i] for i in self._fixed_at)
        self._tensors = [(i, values[i].dtype, values[i].data_ptr() % 16 == 0) for i in tensors]
        kernel.run  # noqa: B018 -- loads the binary and its launcher (the JIT has, for this call).
        self._kernel, self._device, self._debug = kernel, device, debug


def _unhooked(hook: Any) -> bool:
    # Triton 3.6 keeps the launch hooks as chains (empty unless a profiler adds to them); a knob
    # set to a plain callable is a hook too.
    return hook is None or not getattr(hook, "calls", True)
