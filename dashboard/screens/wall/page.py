"""The wall: an ops room's TV (1920x1080) at a glance, without scrolling, readable from across the room.

The pipeline's health in a full-width tile, players online in total (digits 145 px tall) and per region (small
multiples, each on its own scale) with the change over the hour, and what is firing (one line per alert and
region). Drawn as HTML by :mod:`.screen`; it refreshes by itself, as every page does, from the same shared reads.
"""

from __future__ import annotations

import os

import streamlit as st

from dashboard import charts, loaders, ui
from dashboard.fleet import grouping, in_region, total_label
from dashboard.screens.live_ops import model as ops
from dashboard.screens.wall import model, screen
from dashboard.status import clock, human_ms, silent_servers, verdict
from streaming.alerting.health import Health, Verdict
from streaming.rules.online.rollup import MINUTE_MS, TOTAL, region_key
from streaming.schema.config import Config
from streaming.store.history_store import Timeline
from streaming.store.views.snapshot import Snapshot

SPAN_MS = 6 * 3_600_000
"""The trend each sparkline draws: an evening's shape, at a minute a point."""
TREND_MS = 3_600_000
"""Each number's change is against this long ago."""

HEALTH_WORDS = {Health.LIVE: "Live", Health.IDLE: "Idle", Health.BEHIND: "Behind", Health.STALLED: "Stalled",
                Health.DOWN: "Down", Health.STOPPED: "Stopped", Health.STARTING: "Starting", Health.EMPTY: "Empty",
                Health.REDIS_FULL: "Redis full", Health.REDIS_UNREACHABLE: "Redis unreachable"}


def trend(tl: Timeline, series: str, now_ms: int) -> int | None:
    """The series' count an hour ago (the last minute at or before then), None when the range has none."""
    then = [p.last for p in tl.series.get(series, []) if p.at_ms <= now_ms - TREND_MS]
    return then[-1] if then else None


def points(tl: Timeline, series: str) -> tuple[int | None, ...]:
    return tuple(p.last for p in tl.series.get(series, []))


def status_words(snap: Snapshot, v: Verdict, now_ms: int) -> tuple[str, str]:
    """The tile's word and the figures behind it (the status line's verdict, in a few words)."""
    s = snap.state
    word = HEALTH_WORDS.get(v.health, v.health.value)
    if s is None:
        return word, ""
    if v.fleet is not None:
        heard = f" since {clock(v.fleet.heard_ms)}" if v.fleet.heard_ms else ""
        return word, f"{v.fleet.silent:,} of {v.fleet.in_play:,} servers silent{heard}"
    if v.lag_ms is not None:
        return word, f"watermark lag {human_ms(v.lag_ms)}, delay {human_ms(s.delay_ms)}"
    if v.stall is not None:
        return word, f"watermark unmoved for {human_ms(v.stall.held_ms(now_ms))} while events arrive"
    if v.health in (Health.DOWN, Health.IDLE, Health.STOPPED):
        return word, f"no batch for {human_ms(now_ms - s.updated_ms)}"
    return word, (f"last batch {human_ms(max(0, now_ms - s.updated_ms))} ago · watermark lag "
                  f"{human_ms(max(0, now_ms - s.next_watermark_ms))}")


def as_of(snap: Snapshot, v: Verdict) -> str | None:
    """When the numbers last moved, if no server is speaking: most silent (Live ops' rule, ``ops.as_of``), or no
    event at all (idle: as of the last batch); else None."""
    if (silent := ops.as_of(v)) is not None:
        return silent
    if v.health is Health.IDLE and snap.state is not None:
        return clock(snap.state.updated_ms)
    return None


def render(whole: Snapshot, now_ms: int) -> None:
    """The wall from the whole fleet's snapshot: its status tile is the fleet's (one truth, whatever the Region
    filter), the numbers and servers the chosen region's."""
    v = verdict(whole, now_ms)
    word, detail = status_words(whole, v, now_ms)
    tile = screen.status_tile(v.severity.value, word, f"{detail} · {clock(now_ms)}" if detail else clock(now_ms))
    region = ui.current_region()
    snap = in_region(whole, region)
    online = snap.online
    fleet = fleet_counts(snap, now_ms)
    if online is None:
        st.html(screen.screen(tile, "", screen.fleet_block(fleet), "", screen.alerts_block([], 0)))
        st.info("The online view has not committed a batch yet.")
        return
    g = grouping(ops.live_servers(snap), snap.regions, online.counts)
    # the total's series: the fleet's, or with the Region filter that region's own
    total_series = TOTAL if region is None else region_key(region)
    labels = ops.series_labels(g)
    end = now_ms - now_ms % MINUTE_MS + MINUTE_MS
    url = Config.from_env(os.environ).redis_url
    series = tuple(dict.fromkeys([*labels, total_series]))
    tl = loaders.load_timeline(url, snap.namespace, series, end - SPAN_MS, end, (),
                               ui.current_view().tick(now_ms)).with_open_minute(
        online.minutes[-1] if online.minutes else None, snap.regions)
    before = trend(tl, total_series, now_ms)
    span = covered(tl, total_series)
    total = screen.Number(total_label(region), online.total,
                          None if before is None else online.total - before, points(tl, total_series), screen.INK,
                          span)
    counts, colors = g.counts(online.counts), charts.server_colors(g.labels)
    series_of = {label: s for s, label in labels.items()}
    regions = []
    for label in g.labels:  # one order on every page: the grouping's
        series = series_of.get(label)
        then = trend(tl, series, now_ms) if series else None
        regions.append(screen.Number(label, counts[label], None if then is None else counts[label] - then,
                                     points(tl, series) if series else (), colors[label], span))
    st.html(screen.screen(tile, screen.total_block(total, as_of(whole, v), region), screen.fleet_block(fleet),
                          screen.region_tiles(regions), firing(snap, now_ms)))


def covered(tl: Timeline, series: str) -> str:
    """The minutes a series' points cover, in words: the sparkline's frame."""
    pts = [p for p in tl.series.get(series, []) if p.last is not None]
    if len(pts) < 2:
        return ""
    return f"{clock(pts[0].at_ms, zone=False)}–{clock(pts[-1].at_ms)}"


def fleet_counts(snap: Snapshot, now_ms: int) -> screen.Fleet:
    """The servers by state, by the one rule of silence (the status line's, ServerSilent's)."""
    silent = len(silent_servers(snap, now_ms))
    return screen.Fleet(live=len(snap.servers) - silent, silent=silent, drained=len(snap.drained),
                        retired=len(snap.retired))


def firing(snap: Snapshot, now_ms: int) -> str:
    cfg = Config.from_env(os.environ)
    view = loaders.load_alerts(cfg.redis_url, cfg.namespace, ui.current_view().tick(now_ms), now_ms)
    lines = model.firing_lines(list(view.alerts.values()), snap.regions)
    shown = [(x.critical, f"{x.text()} · since {clock(x.since_ms, zone=False)}") for x in lines[:model.SHOWN]]
    return screen.alerts_block(shown, len(lines) - model.SHOWN)


def main() -> None:
    st.html(screen.STYLE)
    ui.live(render, status=False, whole=True)
