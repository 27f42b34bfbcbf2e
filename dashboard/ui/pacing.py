"""How often a page refreshes: as the View asks, or slower when drawing it takes longer than half the interval
(:func:`paced_s`, :func:`repace`), so a page is never redrawn back to back; :func:`refreshing` runs a page's body so."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import streamlit as st

from dashboard.ui.view import current_view

PACES = "paces"
"""Session-state key: each page's refresh interval when it draws slower than the View asks (:func:`paced_s`)."""


def paced_s(asked_s: int, took_s: float) -> int:
    """How often a page refreshes: as often as the View asks, or twice as long as its last refresh took (rounded
    up to a second), whichever is longer. A page is then idle at least half the time, so one viewer costs the
    dashboard at most about half a core, and the page can be read, scrolled and clicked between redraws; a page
    asked to refresh faster than it can draw would otherwise redraw back to back, never at rest.

    >>> paced_s(2, 0.3), paced_s(2, 1.0), paced_s(2, 1.2), paced_s(10, 2.6)
    (2, 2, 3, 10)
    """
    return max(asked_s, math.ceil(2 * took_s))


def repace(every_s: int, asked_s: int, took_s: float) -> int | None:
    """The interval a page refreshing every ``every_s`` moves to after a refresh that took ``took_s``, or None to
    stay: slower at once when a refresh took more than half the interval, faster again only once the interval
    would halve, so a page near the line does not flip between two paces.

    >>> repace(2, 2, 1.6), repace(4, 2, 1.6), repace(4, 2, 1.1), repace(4, 2, 0.4), repace(6, 2, 1.4)
    (4, None, None, 2, 3)
    """
    want = paced_s(asked_s, took_s)
    return want if want > every_s or (every_s > asked_s and 2 * want <= every_s) else None


def refreshing(page: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """Decorates a page's body as a fragment that Streamlit reruns every View interval (never while paused),
    paced by :func:`repace`: when a refresh takes more than half the interval, the page re-registers at the slower
    pace (a rerun of the whole script) and says so under its data. ``page``: the key its pace is kept under. The
    first run of each registration (inside a whole run of the script: cold caches, imports) does not count."""
    view = current_view()
    paces: dict[str, int] = st.session_state.setdefault(PACES, {})
    every = None if view.paused else max(view.refresh_s, paces.get(page, 0))

    def wrap(body: Callable[[], None]) -> Callable[[], None]:
        first = [True]

        @st.fragment(run_every=every)
        def tick() -> None:
            started = time.perf_counter()
            body()
            took = time.perf_counter() - started
            if every is None:
                return
            if every > view.refresh_s:
                st.caption(f"Refreshing every {every} s, not every {view.refresh_s} s: drawing this page takes "
                           f"{took:.1f} s.")
            if first:
                first.clear()
                return
            if (new := repace(every, view.refresh_s, took)) is not None:
                paces[page] = new
                st.rerun()

        return tick

    return wrap
