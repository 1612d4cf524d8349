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
def tables(table_paths):
    from dr_kernel import _core

    return _core.read_tables([str(p) for p in table_paths])
