"""The examples in the rules' docstrings run: a rule said in words, in code and in an example stays one rule."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from types import ModuleType

import pytest

import dashboard
import streaming

PACKAGES = (streaming, dashboard)


def modules() -> list[str]:
    out = []
    for pkg in PACKAGES:
        for info in pkgutil.walk_packages(pkg.__path__, f"{pkg.__name__}."):
            if info.name.endswith(".page") or info.name.startswith("streaming.spark"):
                continue  # pages run as Streamlit scripts; Spark's modules import PySpark
            out.append(info.name)
    return sorted(out)


def with_examples() -> list[str]:
    return [name for name in modules() if ">>> " in (importlib.util.find_spec(name).loader.get_source(name) or "")]


@pytest.mark.parametrize("name", with_examples())
def test_the_examples_hold(name: str) -> None:
    module: ModuleType = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0, result


def test_the_rules_have_examples() -> None:
    assert {"streaming.rules.windows", "streaming.rules.fleet", "streaming.apps.monitor.http",
            "dashboard.pages.wall.model"} <= set(with_examples())
