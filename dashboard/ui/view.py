"""What the reader chose, as every page reads it: the time range, the refresh interval, paused or not
(:class:`View`), the region filter's choice (:func:`current_region`), and the dashboard's clock (:func:`now_ms`).
The sidebar (``dashboard.ui.controls``) draws the controls that set them."""

from __future__ import annotations

import time
from dataclasses import dataclass

import streamlit as st

from dashboard.fleet import ALL_REGIONS

RANGES: dict[str, int] = {"5 min": 300_000, "15 min": 900_000, "60 min": 3_600_000}
REFRESH: dict[str, int] = {"1 s": 1, "2 s": 2, "5 s": 5, "10 s": 10}
NOW_OVERRIDE = "now_ms"
"""Session-state key a test sets to inject the clock (the dashboard's "now")."""


@dataclass(frozen=True)
class View:
    range_ms: int
    refresh_s: int
    paused: bool

    def tick(self, now_ms: int) -> int:
        """The refresh tick ``now_ms`` falls in: every cached read is keyed by it, so sessions share reads."""
        return now_ms // (self.refresh_s * 1000)


def now_ms() -> int:
    override = st.session_state.get(NOW_OVERRIDE)
    return int(override) if override is not None else int(time.time() * 1000)


REGION_KEY = "region"
"""Session-state key and URL parameter (``?region=eu``) of the region filter: set on one page, every page keeps it,
and a link carries it."""


def current_region() -> str | None:
    """The region the filter holds; None: every region."""
    region = st.session_state.get(REGION_KEY)
    return None if region in (None, ALL_REGIONS) else str(region)


def view_label(view: View) -> str:
    """What the view settings' popover says while closed: the settings every page reads, in a few words."""
    rng = next(k for k, v in RANGES.items() if v == view.range_ms)
    every = next(k for k, v in REFRESH.items() if v == view.refresh_s)
    return f"View: {rng} · " + ("paused" if view.paused else f"every {every}")


def current_view() -> View:
    state = st.session_state
    range_label = state.get("range") or "15 min"
    return View(range_ms=RANGES.get(range_label, RANGES["15 min"]),
                refresh_s=REFRESH.get(state.get("refresh") or "2 s", 2),
                paused=bool(state.get("paused", False)))
