"""A page is one folder: each under ``dashboard/screens/`` is in the navigation, draws through ``page.main`` and draws
nothing when imported (the navigation imports them all). Not ``dashboard/pages/``: a ``pages`` folder beside the
entry script makes Streamlit run a process's first session as an old-style multipage app, whose only page is the
entry script, so the first visit after a start (a wall screen reloading ``/wall``) said "Page not found"."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from dashboard.app import PAGES

FOLDERS = sorted(p.name for p in (Path(__file__).resolve().parents[2] / "dashboard" / "screens").iterdir()
                 if (p / "page.py").is_file())


def test_every_page_folder_is_in_the_navigation_under_its_url() -> None:
    by_module = {spec.main.__module__: name for name, spec in PAGES.items()}
    assert sorted(by_module) == [f"dashboard.screens.{f}.page" for f in FOLDERS]
    assert {spec.url_path for spec in PAGES.values()} == set(PAGES)


@pytest.mark.parametrize("folder", FOLDERS)
def test_importing_a_page_draws_nothing(folder: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import streamlit as st

    drawn: list[str] = []
    for name in ("title", "error", "warning", "info", "markdown", "plotly_chart", "dataframe"):
        monkeypatch.setattr(st, name, lambda *a, _n=name, **k: drawn.append(_n))
    module = importlib.reload(importlib.import_module(f"dashboard.screens.{folder}.page"))
    assert callable(module.main) and drawn == []


def test_no_pages_folder_beside_the_entry_script() -> None:
    assert not (Path(__file__).resolve().parents[2] / "dashboard" / "pages").exists()
