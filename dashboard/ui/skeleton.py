"""The refresh skeleton every page runs in (:func:`live`: one read per tick, one error policy, the status line
first; :func:`page` for the lab pages), and what it says around a page's data: the status, the firing alerts, the
servers out of the live views."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import redis
import streamlit as st

from dashboard.fleet import in_region
from dashboard.loaders import load_alerts, load_snapshot, load_windows
from dashboard.status import Level, Status, assess, clock, human_ms, unreachable
from dashboard.text import md
from dashboard.ui.controls import selected_lane, settings_text
from dashboard.ui.pacing import refreshing
from dashboard.ui.view import View, current_region, current_view, now_ms
from streaming.schema.config import Config, ConfigError, Lane, redact_url
from streaming.store.views.snapshot import Snapshot

log = logging.getLogger("dashboard")


def retired_note(st: Any, snap: Snapshot, shown: int = 8) -> None:  # noqa: ANN401 - st or a column
    """Servers out of the live views, counted and named under the charts they left (never hidden without a word):
    drained (every player logged out) and retired (silent for RETIRE_AFTER). At a fleet's scale the newest few are
    named and the rest counted: a day of matches is thousands of names."""
    parts = []
    for gone, what in ((snap.drained, "drained (every player logged out: a match over, a pod drained)"),
                       (snap.retired, f"retired (no event for {human_ms(snap.retire_after_ms)} or longer, "
                                      "RETIRE_AFTER)")):
        if not gone:
            continue
        items = sorted(gone.items(), key=lambda kv: (-kv[1], kv[0]))
        names = ", ".join(f"{md(s)} ({human_ms(snap.read_ms - t)} ago)" for s, t in items[:shown])
        more = f" and {len(items) - shown:,} more" if len(items) > shown else ""
        parts.append(f"{len(items):,} {what}: {names}{more}")
    if parts:
        st.caption("Out of the live views, not charted here (the totals keep them; each is back with its next "
                   "event): " + "; ".join(parts) + ".")


def lane_snapshot(cfg: Config, lane: Lane, view: View, now: int, windows: bool = True) -> Snapshot:
    """The pipeline's snapshot for this tick, read from its own keys and its input stream; ``windows`` False: without
    the windows, for a page or tab that draws none."""
    args = (cfg.redis_url, lane.namespace, view.range_ms, view.refresh_s, view.tick(now), now, lane.input_namespace,
            cfg.retire_after_ms)
    snap = load_snapshot(*args)
    return replace(snap, windows=load_windows(*args)) if windows else snap


def firing_banner(now: int) -> None:
    """On the headline page: what the monitor has firing, so a wall screen shows it without a click. Says
    nothing when it cannot read them (the status line speaks for Redis)."""
    from dashboard.alertview import firing_text

    try:
        cfg = Config.from_env(os.environ)
        view = load_alerts(cfg.redis_url, cfg.namespace, current_view().tick(now), now)
    except (ConfigError, redis.RedisError, ValueError):
        return
    text = firing_text(list(view.alerts.values()))
    if text:  # one line above the data: the Alerts page, in the navigation, says the rest
        st.error(text, icon=":material/notifications_active:")


def show_status(statuses: list[Status]) -> None:
    for s in statuses:
        {Level.OK: st.success, Level.INFO: st.info, Level.WARNING: st.warning, Level.ERROR: st.error}[s.level](s.text)


def live(render: Callable[[Snapshot, int], None], status: bool = True,
         windows: Callable[[], bool] = lambda: True, whole: bool = False) -> None:
    """Run ``render(snapshot, now_ms)`` now and, unless paused, every refresh interval; ``status`` False: the page
    says the pipeline's health itself (the wall), and only a Redis that cannot be read is said here. ``windows()``,
    asked each run: whether this run draws windows (False: the snapshot is read without them). The snapshot is
    the chosen region's (``dashboard.fleet.in_region``), or with ``whole`` the whole fleet's: the page judges the
    fleet's health on it and applies the region itself (the wall's status tile)."""
    view = current_view()

    @refreshing(render.__module__)
    def tick() -> None:
        now = now_ms()
        try:
            cfg = Config.from_env(os.environ)
        except ConfigError as exc:
            st.error(f"Configuration error: {exc}")
            return
        lane = selected_lane(cfg)
        try:
            snap = lane_snapshot(cfg, lane, view, now, windows())
        except redis.RedisError as exc:
            show_status([unreachable(redact_url(cfg.redis_url), exc)])
            return
        if status or snap.state is None:
            show_status(assess(snap, now, demo=cfg.demo))
        if view.paused:
            st.caption(f"Paused: showing data read at {clock(snap.read_ms)}.")
        if snap.state is None:
            return
        if lane.namespace != cfg.namespace:  # a lab lane: the page says so, with what makes it one
            st.caption(f"The lab lane {lane.label}, not the configured pipeline: {params_caption(snap)}")
        if (region := current_region()) is not None:
            st.caption(f"Region {md(region)} alone (the Region filter in the sidebar); the status line is the "
                       "whole fleet's.")
        try:
            render(snap if whole else in_region(snap, region), now)
        except Exception as exc:  # a bug or an unexpected record must not become a traceback on the page
            log.exception("rendering failed")
            st.error(f"This page could not be drawn from the data in Redis ({type(exc).__name__}: {exc}). "
                     "The other pages may still work; the dashboard log has the details.")

    tick()


def page(title: str, render: Callable[[Config], None]) -> None:
    """A page that draws from the configuration rather than one snapshot (the lab pages)."""
    st.title(title)
    try:
        cfg = Config.from_env(os.environ)
    except ConfigError as exc:
        st.error(f"Configuration error: {exc}")
        return
    render(cfg)


def params_caption(snap: Snapshot) -> str:
    assert snap.state is not None
    return settings_text(snap.namespace, snap.state)
