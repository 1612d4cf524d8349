"""The Triton versions dr_kernel supports (versions.py)."""

from __future__ import annotations

import warnings

import pytest
import triton
from dr_kernel import versions


@pytest.mark.parametrize(("text", "parsed"), [("3.6.0", (3, 6)), ("3.10.1", (3, 10)),
                                              ("3.7.0+git1234abcd", (3, 7)), ("4.0", (4, 0))])
def test_a_version_string_is_read_as_major_and_minor(text, parsed):
    assert versions.triton_version(text) == parsed


def test_a_string_that_is_no_version_is_refused_by_name():
    with pytest.raises(ValueError, match="'nightly' is not a Triton version"):
        versions.triton_version("nightly")


def test_an_older_triton_is_named_once_with_the_fix(monkeypatch):
    monkeypatch.setattr(versions, "_warned", False)
    monkeypatch.setattr(triton, "__version__", "3.5.1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        versions.check_triton()
        versions.check_triton()
    assert [str(w.message) for w in caught] == [
        "dr_kernel supports Triton 3.6 and later; this process has Triton 3.5.1, with which kernels may fail to "
        "compile or be described: install triton>=3.6"]


@pytest.mark.parametrize("installed", ["3.6.0", "3.9.0"])
def test_a_supported_triton_says_nothing(monkeypatch, installed):
    monkeypatch.setattr(versions, "_warned", False)
    monkeypatch.setattr(triton, "__version__", installed)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        versions.check_triton()
