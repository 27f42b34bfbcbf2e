"""The wall: an ops room's TV (1920x1080) at a glance, without scrolling, readable from across the room.

Players online in total and per region with the trend, what is firing (one line per alert and region), and the
pipeline's health in a word. It refreshes by itself, as every page does, and draws from the same shared reads.
"""

from __future__ import annotations

import os

import plotly.graph_objects as go
import streamlit as st

from dashboard import charts, loaders, ui
from dashboard.fleet import grouping
from dashboard.pages.live_ops import model as ops
from dashboard.pages.live_ops.page import shared as ops_shared
from dashboard.pages.wall import model
from dashboard.status import clock, human_ms, verdict
from dashboard.text import md
from watermark.alerting.health import Health, Severity
from watermark.rules.online.rollup import MINUTE_MS, TOTAL
from watermark.schema.config import Config
from watermark.store.history_store import Timeline
from watermark.store.views.snapshot import Snapshot

SPAN_MS = 6 * 3_600_000
"""The trend the chart draws: an evening's shape, at a minute a point."""
TREND_MS = 3_600_000
"""Each number's change is against this long ago."""
CHART_HEIGHT = 760

STYLE = """<style>
section[data-testid="stSidebar"], header[data-testid="stHeader"], div[data-testid="stToolbar"] {display: none;}
.block-container {padding-top: 1rem; padding-bottom: 0; max-width: 100%;}
div[data-testid="stMetricValue"] {font-size: clamp(1.8rem, 2.6vw, 3.4rem); line-height: 1.1;}
[data-testid="stMetricLabel"] * {font-size: 1.6rem !important;}
[data-testid="stAlertContainer"] p {font-size: 1.8rem !important; font-weight: 600;}
div[data-testid="stMetricDelta"] {font-size: 1.2rem;}
</style>"""
"""The TV's own type sizes, and no sidebar or toolbar: our own markup, never a name (names go through ``md``)."""

HEALTH_WORDS = {Health.LIVE: "Live", Health.IDLE: "Idle", Health.BEHIND: "Behind", Health.STALLED: "Stalled",
                Health.DOWN: "Down", Health.STOPPED: "Stopped", Health.STARTING: "Starting", Health.EMPTY: "Empty",
                Health.REDIS_FULL: "Redis full", Health.REDIS_UNREACHABLE: "Redis unreachable"}


def trend(tl: Timeline, series: str, now_ms: int) -> int | None:
    """The series' count an hour ago (the last minute at or before then), None when the range has none."""
    then = [p.last for p in tl.series.get(series, []) if p.at_ms <= now_ms - TREND_MS]
    return then[-1] if then else None


def tv_figure(tl: Timeline, labels: dict[str, str], what: str) -> go.Figure:
    """Live ops' players-online chart, in type for a TV."""
    fig = charts.online_history(tl, labels, what)
    fig.update_layout(height=CHART_HEIGHT, font={"size": 18}, title_font_size=22, legend_font_size=18)
    fig.update_xaxes(tickfont_size=18)
    return fig.update_yaxes(tickfont_size=18, title_font_size=18)


def render(snap: Snapshot, now_ms: int) -> None:
    v = snap.online
    left, right = st.columns([5, 2])
    left.title(f"Players online · {clock(now_ms)}")
    if v is None:
        st.info("The online view has not committed a batch yet.")
        health(right, snap, now_ms)
        return
    g = grouping(ops.live_servers(snap), snap.regions, v.counts)
    labels = ops.series_labels(g)
    end = now_ms - now_ms % MINUTE_MS + MINUTE_MS
    url = Config.from_env(os.environ).redis_url
    tl = loaders.load_timeline(url, snap.namespace, tuple(labels), end - SPAN_MS, end, (),
                               ui.current_view().tick(now_ms)).with_open_minute(v.minutes[-1] if v.minutes else None,
                                                                                snap.regions)
    counts = g.counts(v.counts)
    series_of = {label: s for s, label in labels.items()}
    cols = st.columns(1 + min(len(g.labels), 7))
    before = trend(tl, TOTAL, now_ms)
    cols[0].metric("All servers", ui.fmt_int(v.total),
                   delta=None if before is None else f"{v.total - before:+,} in 1 h")
    before_each = {label: b for label in g.labels if (b := trend(tl, series_of.get(label, label), now_ms)) is not None}
    for col, (label, n, change) in zip(cols[1:], model.region_rows(counts, before_each), strict=False):
        col.metric(md(label), ui.fmt_int(n), delta=None if change is None else f"{change:+,} in 1 h")
    chart, side = st.columns([5, 2])
    ui.chart(chart, lambda: tv_figure(tl, labels, " per region" if g.by == "region" else ""), "wall_online",
             "No minute of players online in the last six hours yet.",
             shared=(*ops_shared(snap), tl.start_ms, *labels.items()))
    with side:
        firing(snap, now_ms)
        health(st, snap, now_ms)


def firing(snap: Snapshot, now_ms: int) -> None:
    cfg = Config.from_env(os.environ)
    view = loaders.load_alerts(cfg.redis_url, cfg.namespace, ui.current_view().tick(now_ms), now_ms)
    alerts = list(view.alerts.values())
    lines = model.firing_lines(alerts, snap.regions)
    if not lines:
        st.success("Nothing firing")
        return
    n = sum(a.status == "firing" for a in alerts)
    st.error(f"{n:,} alert{'s' if n != 1 else ''} firing")
    for x in lines[:model.SHOWN]:  # a heading a line: big from across a room; names as text (md)
        st.markdown(f"#### {':red[■]' if x.critical else ':orange[■]'} {md(x.text())} · since {clock(x.since_ms)}")
    if (more := len(lines) - model.SHOWN) > 0:
        st.markdown(f"#### and {more:,} more")


def health(where: st.delta_generator.DeltaGenerator, snap: Snapshot, now_ms: int) -> None:
    """The pipeline in a word, and the two figures behind it: how fresh the newest batch is, the watermark's lag."""
    v = verdict(snap, now_ms)
    box = {Severity.OK: where.success, Severity.INFO: where.info, Severity.WARNING: where.warning}.get(
        v.severity, where.error)
    box(f"Pipeline: {HEALTH_WORDS.get(v.health, v.health.value)}")
    s = snap.state
    if s is not None:
        where.markdown(f"#### last batch {human_ms(now_ms - s.updated_ms)} ago · watermark lag "
                       f"{human_ms(max(0, now_ms - s.next_watermark_ms))}")


def main() -> None:
    st.html(STYLE)
    ui.live(render, status=False)
