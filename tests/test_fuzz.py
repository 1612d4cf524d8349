"""Property-based fuzzing of the inputs a user hands dr_kernel (issue 9): recorded-table lines, store
files, and search spaces. The property everywhere: a result, or one error of the documented kind
whose message names the input (the file and line, the store's path, the parameter), never another
exception, and nothing already stored lost. Each test's example count is in docs/reliability.md.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from dr_kernel import DATA_DIR, _core
from dr_kernel.space import make_space
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

SOFTMAX = Path(DATA_DIR) / "h200" / "softmax.jsonl"
EXAMPLES = 300

# A valid measure row, the seed every mutation starts from.
ROW = {"type": "measure", "family": "softmax", "shape": {"rows": 8, "cols": 8}, "config": {"BLOCK": 8},
       "status": "ok", "ms": 1.5}

json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True)
                           | st.text(max_size=8), lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)


@st.composite
def table_lines(draw):
    """A line of a recorded table: a valid row with fields dropped, replaced or added, or text."""
    kind = draw(st.sampled_from(["row", "row", "row", "text", "truncated"]))
    if kind == "text":
        return draw(st.text(max_size=60).filter(lambda s: "\n" not in s and "\r" not in s))
    row = json.loads(json.dumps(ROW))
    for key in draw(st.lists(st.sampled_from(sorted(ROW)), max_size=3, unique=True)):
        if draw(st.booleans()):
            row.pop(key)
        else:
            row[key] = draw(json_values)
    if draw(st.booleans()):
        row[draw(st.text(max_size=6))] = draw(json_values)
    text = json.dumps(row, allow_nan=True)
    return text[: draw(st.integers(0, len(text)))] if kind == "truncated" else text


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(table_lines(), min_size=1, max_size=6))
@example(lines=["\x80"])  # Found by this test: the message, cut inside a UTF-8 sequence, did not decode.
def test_a_table_file_gives_tables_or_one_error_naming_its_line(tmp_path, lines):
    path = tmp_path / "fuzzed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    try:
        tables = _core.read_tables([str(path)])
    except ValueError as error:
        text = str(error)
        assert text.startswith(f"{path}:") and "docs/data-format.md" in text, text
        line = int(text.split(":", 2)[1])
        assert 1 <= line <= len(lines)
        return
    for table in tables:  # What was read is usable: every ok row has a positive time.
        assert all(m["ms"] > 0 for _, m in table.rows() if m["status"] == "ok")


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A store holding the bundled softmax table, and its row count."""
    path = tmp_path_factory.mktemp("store") / "results.db"
    store = _core.Store(str(path))
    rows = store.import_tables(_core.read_tables([str(SOFTMAX)]), "")
    del store
    return path, rows


@settings(max_examples=EXAMPLES // 3, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.floats(0.0, 1.0), scribble=st.binary(min_size=1, max_size=64), where=st.floats(0.0, 1.0),
       truncate=st.booleans())
def test_a_damaged_store_opens_whole_or_says_which_file_is_damaged(tmp_path, stored, cut, scribble, where, truncate):
    source, rows = stored
    path = tmp_path / "damaged.db"
    shutil.copy(source, path)
    size = path.stat().st_size
    with open(path, "r+b") as f:
        if truncate:
            f.truncate(int(size * cut))
        else:
            f.seek(int((size - 1) * where))
            f.write(scribble)
    try:
        store = _core.Store(str(path))
        count = store.count()
        exported = store.export_tables()
    except OSError as error:
        assert str(path) in str(error), str(error)
        return
    # It opened: then what it holds is whole or plainly damaged, never silently partial rows.
    assert count == sum(len(t.rows()) for t in exported)
    assert count in (0, rows) or count <= rows


names = st.text(st.characters(codec="ascii", categories=("L", "N", "P")), min_size=0, max_size=8)
values = st.one_of(st.integers(-2**40, 2**40), st.floats(allow_nan=True), st.booleans(), st.text(max_size=4),
                   st.none(), st.lists(st.integers(), max_size=2))


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True)
@given(space=st.dictionaries(names, st.one_of(st.lists(values, max_size=5), values), max_size=4))
@example(space={"": [2**63]})  # Found by this test: std::bad_cast out of the binding.
def test_a_space_is_built_or_refused_in_one_sentence(space):
    try:
        built = make_space(space=space)
    except (ValueError, TypeError) as error:
        assert str(error) and "\n" not in str(error).strip(), str(error)
        return
    for config in built.configs(4):
        assert set(config) == set(space)
        for name, value in config.items():
            assert value in space[name] or (isinstance(value, float) and math.isnan(value))
