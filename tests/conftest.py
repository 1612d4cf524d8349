"""Shared fixtures: the bundled recorded tables."""

from __future__ import annotations

import pytest
from dr_kernel import DATA_DIR, bundled_tables


@pytest.fixture(scope="session")
def table_paths():
    paths = bundled_tables()
    assert {p.name for p in paths} >= {"matmul.jsonl", "softmax.jsonl", "attention.jsonl"}, DATA_DIR
    return paths


@pytest.fixture(scope="session")
def recorded_paths(table_paths):
    """The three tables recorded before the project started (8 problems), whose figures tests pin."""
    return [p for p in table_paths if p.name in ("matmul.jsonl", "softmax.jsonl", "attention.jsonl")]


@pytest.fixture(scope="session")
def recorded_tables(recorded_paths):
    from dr_kernel import _core

    return _core.read_tables([str(p) for p in recorded_paths])


@pytest.fixture(scope="session")
def tables(table_paths):
    from dr_kernel import _core

    return _core.read_tables([str(p) for p in table_paths])


@pytest.fixture(autouse=True)
def _no_compile_timeouts_from_other_tests():
    """A compile that timed out is not retried in the process (session._TIMED_OUT): each test
    starts without the timeouts of the tests before it."""
    from dr_kernel import session

    session._TIMED_OUT.clear()
    yield
