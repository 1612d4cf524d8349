"""DirectLaunch: later launches of one problem go straight to the first launch's binary, and only
those that would have loaded that binary (the GPU figures: docs/benchmarks.md, dr_kernel.ops).

Without a GPU there is no binary to launch, so the JIT function, the binary and Triton's driver are
stand-ins that record what reaches them; the arguments are real torch tensors."""

from __future__ import annotations

import pytest
import torch
import triton.language as tl
from dr_kernel.direct_launch import DirectLaunch
from triton import knobs
from triton.runtime.driver import driver


def scale_kernel(x_ptr, y_ptr, n, factor, BLOCK: tl.constexpr, EVEN: tl.constexpr = True):
    pass


class Binary:
    function, packed_metadata = "function handle", "packed metadata"

    def __init__(self):
        self.launches = []

    def run(self, *args):
        self.launches.append(args)


class Jit:
    """What DirectLaunch reads of a JITFunction: .fn, .pre_run_hooks, fn[grid](*args, **kwargs)."""

    fn = staticmethod(scale_kernel)

    def __init__(self):
        self.pre_run_hooks = []
        self.binary = Binary()
        self.calls = []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.calls.append((grid, args, kwargs))
            return self.binary
        return launch


class Driver:
    device = 0

    def get_current_device(self):
        return self.device

    def get_current_stream(self, device):
        return 1000 + device


@pytest.fixture
def fake_driver(monkeypatch):
    fake = Driver()
    monkeypatch.setattr(driver, "_active", fake)
    return fake


def test_a_launch_like_the_first_goes_straight_to_its_binary_and_any_other_through_the_jit(fake_driver, monkeypatch):
    jit = Jit()
    direct = DirectLaunch(jit)
    x, y = torch.zeros(64, dtype=torch.float16), torch.zeros(64, dtype=torch.float16)

    def launch(x, y, n=64, factor=2.0, **meta):
        return direct[(4,)](x, y, n, factor, BLOCK=16, num_warps=4, **meta)

    assert launch(x, y) is jit.binary and len(jit.calls) == 1 and direct.direct == 0
    # The same problem on other tensors: the binary's launcher, every parameter in order (the
    # constexprs and defaults included, the compile options left out), on the current stream.
    x2, y2 = torch.ones(64, dtype=torch.float16), torch.ones(64, dtype=torch.float16)
    launch(x2, y2)
    assert len(jit.calls) == 1 and direct.direct == 1
    (launched,) = jit.binary.launches
    assert launched[:9] == (4, 1, 1, 1000, "function handle", "packed metadata", None, None, None)
    assert launched[9] is x2 and launched[10] is y2 and launched[11:] == (64, 2.0, 16, True)

    # Anything that would specialise or bind otherwise goes through the JIT, every time.
    launch(x, y, n=32)                                   # another size
    launch(x, y, factor=3.0)                             # another scalar
    launch(x, y, EVEN=False)                             # another constexpr
    launch(x.float(), y)                                 # another dtype
    direct[(4,)](x, y, 64, 2.0, BLOCK=16, num_warps=8)   # other compile options
    direct[(4,)](x, y, 64, 2.0, 16, num_warps=4)         # the same values, bound otherwise
    launch(x[1:], y[1:], n=63)                           # a view 2 bytes off 16-byte alignment...
    launch(torch.zeros(65, dtype=torch.float16)[1:], y)  # ...even with the same sizes
    fake_driver.device = 1
    launch(x, y)                                         # another current device
    fake_driver.device = 0
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda *a: None)
    launch(x, y)                                         # a profiler's launch hook
    monkeypatch.undo()
    monkeypatch.setattr(driver, "_active", fake_driver)
    hook = knobs.runtime.launch_exit_hook  # Triton's own chain, as a profiler adds to it.
    hook.add(print)
    try:
        launch(x, y)
    finally:
        hook.remove(print)
    assert len(jit.calls) == 12 and direct.direct == 1
    launch(x2, y2)
    assert len(jit.calls) == 12 and direct.direct == 2


def test_an_unaligned_first_launch_lets_any_pointer_take_the_short_way(fake_driver):
    # The first binary was specialised for an unaligned pointer, so it assumes nothing of any.
    jit = Jit()
    direct = DirectLaunch(jit)
    base = torch.zeros(80, dtype=torch.float16)
    direct[(1,)](base[1:65], base[1:65], 64, 1.0, BLOCK=16)
    direct[(1,)](base[:64], base[:64], 64, 1.0, BLOCK=16)
    assert len(jit.calls) == 1 and direct.direct == 1


def test_a_kernel_with_pre_run_hooks_always_goes_through_the_jit(fake_driver):
    jit = Jit()
    jit.pre_run_hooks.append(lambda *a, **k: None)
    direct = DirectLaunch(jit)
    x = torch.zeros(64, dtype=torch.float16)
    for _ in range(3):
        direct[(1,)](x, x, 64, 1.0, BLOCK=16)
    assert len(jit.calls) == 3 and direct.direct == 0
