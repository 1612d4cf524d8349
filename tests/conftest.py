"""Shared fixtures (the bundled recorded tables), and the order the test files run in."""

from __future__ import annotations

from pathlib import Path

import pytest
from dr_kernel import DATA_DIR, bundled_tables

# The files whose tests take longest (seconds of two workers' time, `pytest --durations=0`), run
# first: `scripts/test` hands whole files to two workers in collection order, and a long file
# collected last (alphabetically, tune_many is among the last) left one worker busy for minutes
# after the other had finished.
LONGEST_FIRST = ["test_tune_many.py", "test_optimize.py", "test_libraries.py", "test_autotune.py", "test_ops.py",
                 "test_faults.py", "test_measure.py", "test_agent.py", "test_kernels.py", "test_progress.py",
                 "test_gpu_bench.py"]


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # Stable: each file's order is kept.


@pytest.fixture(scope="session")
def table_paths():
    paths = bundled_tables()
    assert {p.name for p in paths} >= {"matmul.jsonl", "softmax.jsonl", "attention.jsonl"}, DATA_DIR
    return paths


@pytest.fixture(scope="session")
def recorded_paths(table_paths):
    """The three tables recorded before the project started (8 problems), whose figures tests pin:
    matmul's as first recorded (tests/data; the package has two of its problems recorded again)."""
    first_matmul = Path(__file__).parent / "data" / "matmul_first_recording.jsonl"
    return [first_matmul, *(p for p in table_paths if p.name in ("softmax.jsonl", "attention.jsonl"))]


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
