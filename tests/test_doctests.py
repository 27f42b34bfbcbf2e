"""Every example in a docstring runs: a rule stated once in words, once in code and once as an example (issue 64:
the doctests of ``rules/windows.py`` and ``rules/fleet.py`` never ran). Each module holding a ``>>>`` is found,
not listed, so a new one is run too."""

from __future__ import annotations

import doctest
import importlib

import pytest

from tests.paths import ROOT

WITH_EXAMPLES = sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts)
    for package in ("watermark", "dashboard") for p in (ROOT / package).rglob("*.py")
    if ">>> " in p.read_text(encoding="utf-8"))


def test_the_modules_with_examples_are_found() -> None:
    assert {"watermark.rules.windows", "watermark.rules.fleet", "watermark.schema.acl"} <= set(WITH_EXAMPLES)


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_every_docstring_example_holds(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, result
