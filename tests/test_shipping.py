"""Kernels of a script or a notebook, sent to another process as source (shipping.py): rebuilt
there with the original's Triton cache key (so the compile pool's binaries are the ones loaded),
and refused with the name of what cannot travel."""

import inspect
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent('''
    import pickle, sys, threading
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice
    from dr_kernel import shipping

    SCALE = tl.constexpr(3)
    OFFSET = tl.constexpr(0.5)


    @triton.jit
    def helper(x):
        return libdevice.fast_expf(x) * SCALE


    @triton.jit(do_not_specialize=["n"])
    def kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n)
        tl.store(y_ptr + offs, helper(x) + OFFSET, mask=offs < n)


    LOCK = threading.Lock()


    @triton.jit
    def locked(x_ptr):
        tl.store(x_ptr, LOCK)


    def make():
        local = 2

        @triton.jit
        def closure(x_ptr):
            tl.store(x_ptr, local)
        return closure

    refusals = []
    for fn in (locked, make()):
        try:
            shipping.ship(fn)
        except shipping.Unshippable as error:
            refusals.append(str(error))
    sys.stdout.buffer.write(pickle.dumps((shipping.ship(kernel), kernel.cache_key, refusals)))
''')

LOAD = textwrap.dedent('''
    import pickle, sys
    from dr_kernel import shipping
    shipped = pickle.load(sys.stdin.buffer)
    kernel = shipping.load(shipped)
    print(kernel.cache_key, kernel.do_not_specialize)
''')


def test_a_kernel_of_a_script_is_rebuilt_elsewhere_with_its_cache_key(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # JITFunctions: they have cache keys.
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    (tmp_path / "script.py").write_text(SCRIPT)
    out = subprocess.run([sys.executable, "script.py"], capture_output=True, env=env, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    shipped, key, refusals = pickle.loads(out.stdout)
    assert [f["name"] for f in shipped["functions"]] == ["helper", "kernel"]  # Callees first.
    # What the bodies read; the decorators' names (triton here) stay behind with the decorators.
    assert {k: v[0] for k, v in shipped["globals"].items()} == {
        "tl": "module", "libdevice": "module", "SCALE": "value", "OFFSET": "value", "helper": "jit"}
    assert "reads 'LOCK' (lock)" in refusals[0] and "cannot be sent" in refusals[0]
    assert "closure reads variables of an enclosing function" in refusals[1]

    loaded = subprocess.run([sys.executable, "-c", LOAD], input=pickle.dumps(shipped), capture_output=True,
                            env=env, cwd=tmp_path, timeout=300)
    assert loaded.returncode == 0, loaded.stderr.decode()[-3000:]
    rebuilt_key, do_not_specialize = loaded.stdout.decode().split(maxsplit=1)
    assert rebuilt_key == key and "n" in do_not_specialize


@pytest.mark.parametrize("line", [1, 7])
def test_the_def_keeps_its_line_whatever_its_decorators(tmp_path, line):
    from dr_kernel import shipping

    source = "@triton.jit(\n    noinline=True,\n)\ndef f(x):\n    return x\n"
    shipped = {"kernel": "f", "globals": {"triton": ("module", "triton")},
               "functions": [{"name": "f", "source": source, "start": line, "options": {}}]}
    fn = shipping.load(shipped, folder=str(tmp_path))
    # Triton hashes the source from `def` on and the line its block starts at: the stand-in
    # decorator's line is the original's first decorator line, the def's line the original's.
    lines, start = inspect.getsourcelines(fn.fn)
    assert start == line and lines[0].strip() == "@_dr_kernel_keep" and lines[3] == "def f(x):\n"
    (written,) = list(tmp_path.iterdir())
    assert written.read_text().splitlines()[line - 1 + 3] == "def f(x):"
