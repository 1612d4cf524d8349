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
