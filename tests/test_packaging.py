"""What pyproject.toml declares is what the code needs: every third-party module the package imports (at module
level or in a function) comes from a declared dependency, every declared dependency is imported, test tools are
not runtime needs, and every package folder ships in the wheel."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "clients" / "python"
PLACES = {"streaming": ROOT, "dashboard": ROOT, "bench": ROOT, "watermark_client": CLIENT}
"""Each top-level package and the folder it sits in: the game servers' client is a package of its own."""
CODE = tuple(PLACES)
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CLIENT_PROJECT = tomllib.loads((CLIENT / "pyproject.toml").read_text())
NEEDED_WITHOUT_IMPORT: set[str] = set()  # pandas was one (PySpark's Arrow path) until the online view used its index
TEST_TOOLS = {"pytest", "pytest-xdist", "hypothesis", "ruff", "import-linter", "mypy", "playwright",
              "oidc-provider-mock"}


def dist_name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def third_party_imports(tops: tuple[str, ...] = CODE) -> dict[str, set[str]]:
    """Top-level module name -> the files importing it, anywhere in the file."""
    ours = set(CODE)
    found: dict[str, set[str]] = {}
    for top in tops:
        for path in (PLACES[top] / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                for name in names:
                    head = name.split(".")[0]
                    if head not in sys.stdlib_module_names and head not in ours and head != "__future__":
                        found.setdefault(head, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_import_comes_from_a_declared_dependency_and_every_dependency_is_imported() -> None:
    declared = {dist_name(r) for r in PROJECT["project"]["dependencies"]}
    providers = importlib.metadata.packages_distributions()
    imported = {}
    for module, files in third_party_imports().items():
        dists = {d.lower().replace("_", "-") for d in providers.get(module, [])}
        assert dists, f"{module} (imported by {sorted(files)}) is not installed"
        imported[module] = dists
    # a benchmark may drive a browser as the tests do (bench/pages.py): a test tool, installed with them
    bench_only = {m for m, files in third_party_imports().items() if all(f.startswith("bench/") for f in files)}
    undeclared = {m: sorted(d) for m, d in imported.items()
                  if not d & declared and not (m in bench_only and d & TEST_TOOLS)}
    assert not undeclared, f"imported but not in pyproject's dependencies: {undeclared}"
    used = set().union(*(d for m, d in imported.items() if m not in bench_only or d & declared))
    assert declared - used == NEEDED_WITHOUT_IMPORT, declared - used


def test_test_tools_are_not_runtime_dependencies() -> None:
    declared = {dist_name(r) for r in PROJECT["project"]["dependencies"]}
    assert not declared & TEST_TOOLS
    assert {dist_name(r) for r in PROJECT["project"]["optional-dependencies"]["test"]} == TEST_TOOLS


def test_every_package_folder_ships() -> None:
    folders = {".".join(p.parent.relative_to(PLACES[top]).parts) for top in CODE
               for p in (PLACES[top] / top).rglob("*.py")}
    assert folders == set(PROJECT["tool"]["setuptools"]["packages"])
    assert PROJECT["tool"]["setuptools"]["package-dir"] == {"watermark_client": "clients/python/watermark_client"}
    assert CLIENT_PROJECT["tool"]["setuptools"]["packages"] == ["watermark_client"]


def test_the_client_needs_only_what_it_declares() -> None:
    """The game servers' package (clients/python) imports only its own declared dependencies, and nothing of the
    project: installed alone, it works (the next test installs it)."""
    declared = {dist_name(r) for r in CLIENT_PROJECT["project"]["dependencies"]}
    imported = third_party_imports(("watermark_client",))
    assert not {"streaming", "dashboard", "bench"} & set(imported), imported
    providers = importlib.metadata.packages_distributions()
    dists = {d.lower().replace("_", "-") for m in imported for d in providers.get(m, [])}
    assert dists == declared == {"redis", "hiredis", "orjson"}
    assert {dist_name(r) for r in PROJECT["project"]["dependencies"]} >= declared


def test_every_benchmark_imports() -> None:
    """A benchmark is run by hand, rarely: one that names something renamed since (``bench/soak.py`` imported
    ``_committed_key`` for a week after it became ``_committed_keys``) fails here, not on the day it is needed."""
    import importlib

    modules = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "bench").rglob("*.py"))
    assert "bench.soak" in modules
    for name in modules:
        importlib.import_module(name.removesuffix(".__init__"))
