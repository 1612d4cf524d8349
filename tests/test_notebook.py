"""dr_kernel in Jupyter, tested by executing a real notebook headlessly (nbclient, an IPython
kernel): `%load_ext dr_kernel`, a `%%dr_kernel` cell whose triton.autotune kernel is tuned by
dr_kernel with a live view, and @optimize(verbose=True) with the session's table and plot, its
kernel (and the @triton.jit helper it calls) measured in a measuring process. Kernels run in
Triton's interpreter."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")  # scripts/setup installs these three (the notebook's test).

PYTHON_PATH = str(Path(__file__).resolve().parents[1] / "python")

CELLS = [
    'import os\nos.environ["TRITON_INTERPRET"] = "1"\nimport torch, triton, triton.language as tl',
    "%load_ext dr_kernel",
    '''%%dr_kernel --budget 3
@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (32, 64, 128)], key=["n"])
@triton.jit
def scale(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, 3 * tl.load(x + offs, mask=offs < n), mask=offs < n)

x = torch.randn(500)
y = torch.empty_like(x)
scale[lambda meta: (triton.cdiv(500, meta["BLOCK"]),)](x, y, 500)
assert torch.allclose(y, 3 * x)
print("scaled with", scale.best_config)''',
    # The magic's tuning ran in a measuring process (its kernel went there as source), which is
    # parked for the next tuning when it ends.
    "from dr_kernel import measure\nassert measure._PARKED.get('cpu'), 'the magic measured in the notebook process'",
    '''import warnings
from dr_kernel import measure, optimize

TWICE = tl.constexpr(2)

@triton.jit
def twice(v):
    return TWICE * v

@optimize(space={"BLOCK": [32, 64, 128, 256]}, key=["n"], max_evals=4, strategy="exhaustive", verbose=True)
@triton.jit
def double(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    # (A helper's result passed straight to tl.store fails in the interpreter of Triton 3.7-3.9.)
    doubled = twice(tl.load(x + offs, mask=offs < n))
    tl.store(y + offs, doubled, mask=offs < n)

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    double[lambda meta: (triton.cdiv(500, meta["BLOCK"]),)](x, y, 500)
assert torch.allclose(y, 2 * x)
# Measured in a measuring process, as a kernel of a module is: it went there as its source.
assert not [w for w in caught if "measured in this process" in str(w.message)], [str(w.message) for w in caught]
assert measure._PARKED.get("cpu"), "no measuring process ran"''',
    "double.last_session",
    "double.last_session.plot();",
]


def test_a_notebook_tunes_with_live_views_tables_and_a_plot(tmp_path):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    env = {"DR_KERNEL_DB": str(tmp_path / "r.db"), "PYTHONPATH": PYTHON_PATH, "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # The kernel is started with this process's environment.
    try:
        client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                         resources={"metadata": {"path": str(tmp_path)}})
        client.execute()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    outputs = [cell.outputs for cell in notebook.cells]
    errors = [o for cell in outputs for o in cell if o.output_type == "error"]
    assert not errors, errors

    def html_of(cell_outputs) -> list[str]:
        return [o.data["text/html"] for o in cell_outputs if "data" in o and "text/html" in o.data]

    magic = outputs[2]
    live = [h for h in html_of(magic) if "dr-kernel-live" in h]
    # The live view's display area, updated in place: its last state has all three configs measured.
    assert live and any("3/3 evaluations" in h for h in live), html_of(magic)
    assert any("<svg" in h for h in live)
    tables = [h for h in html_of(magic) if "dr-kernel-session" in h]
    assert tables and "<h4>scale</h4>" in tables[0] and tables[0].count("<tr>") == 4  # Header and 3 configs.
    assert any("scaled with" in o.get("text", "") for o in magic if o.output_type == "stream")

    assert any("dr-kernel-live" in h and "4/4 evaluations" in h for h in html_of(outputs[4]))
    (table,) = html_of(outputs[5])
    assert "4 evaluations (4 ok)" in table and "{&quot;BLOCK&quot;: 256}" in table
    assert any("image/png" in o.get("data", {}) for o in outputs[6])
