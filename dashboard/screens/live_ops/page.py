"""Live ops: how many players are on each server right now, and can I trust the number yet?"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import streamlit as st

from dashboard import charts, loaders, status, ui
from dashboard.fleet import Grouping, grouping, total_label
from dashboard.screens.live_ops import figures, model
from dashboard.status import clock, human_ms
from dashboard.text import md, md_list
from streaming.rules.online.rollup import DAY_MS, MINUTE_MS, TOTAL, region_key
from streaming.schema.config import Config
from streaming.store.history_store import Timeline
from streaming.store.views.online import OnlineView
from streaming.store.views.snapshot import Snapshot, WindowRow, open_at_loss


def distinct_players(snap: Snapshot, current: dict, last_final: dict, bounds: object, g: Grouping) -> None:
    """Each server's (or region's) distinct players in the current window (provisional until final; partial
    when it was open when Redis came back empty) and in the last final one."""
    state = snap.state
    assert state is not None
    st.subheader("Distinct players per window")
    st.caption("Not the same number as online now: every player with an accepted event anywhere in the window "
               f"({human_ms(state.window_ms)}), including those who have since logged out or gone silent."
               + (" Per region: the sum of its servers' distinct players." if g.by == "region" else "")
               + (" The busiest servers, the rest summed." if g.by == "top" else ""))
    current, last_final = g.current(current), g.current(last_final)
    labels = [lb for lb in g.labels if lb in current] if g.grouped else [s for s in snap.servers if s in g.members]
    cols = st.columns(max(1, len(labels)))
    said = {lb: model.window_status(current.get(lb), bounds, state.next_watermark_ms, state.head_ms) for lb in labels}
    once = len(set(said.values())) == 1 and len(said) > 1  # the same window for all: said once, under the row
    finals = [f for lb in labels if (f := last_final.get(lb)) is not None]
    one_final = once and len({(f.start_ms, f.end_ms) for f in finals}) == 1
    for col, server in zip(cols, labels, strict=False):
        w = current.get(server)
        f = last_final.get(server)
        with col:
            st.metric(md(server) if g.grouped else f"{md(server)} · distinct players, current window",
                      ui.fmt_int(w.players if w else 0),
                      help="From the windowed counts: distinct player ids with an accepted event in the window "
                           "holding the newest event time (a Redis set per window and server). Provisional until "
                           "the watermark passes the window's end.")
            if not once:
                st.caption(said[server])
            if w is not None and open_at_loss(w, snap):
                st.caption(f"Partial: this window was open when Redis came back empty (before batch "
                           f"{state.lost_at_batch}); it counts only what came after.")
            if f is not None:
                st.caption(f"last final: {f.players:,} players" + ("" if one_final else f" in {_span(f)}"))
    if once:
        st.caption(next(iter(said.values())).capitalize()
                   + (f"; the last final one {_span(finals[0])}." if one_final else "."))


def _span(w: WindowRow) -> str:
    return f"{charts.ts(w.start_ms):%H:%M}–{charts.ts(w.end_ms):%H:%M:%S}"


def render(snap: Snapshot, now_ms: int) -> None:
    state = snap.state
    assert state is not None
    ui.firing_banner(now_ms)  # the job's settings are in the View popover: data first
    g = grouping(model.live_servers(snap), snap.regions, snap.online.counts if snap.online else {})
    online_now(snap, g)
    # Only the open tab runs and is sent: a browser draws two charts on arrival, not nine (at 300 servers the nine
    # took a shared core 12 s to draw, and kept 0.7 of it busy redrawing every tick); the table of every server,
    # hundreds of rows with a trend each, is a tab of its own.
    now, servers, over_time, windows = st.tabs(TABS, key=TAB_KEY, on_change="rerun")
    if now.open:
        with now:
            online_details(snap, g)
    if servers.open and snap.online is not None:
        with servers:
            server_table(snap, snap.online)
    if over_time.open and snap.online is not None:
        with over_time:
            tl = timeline(snap, g, now_ms)
            assert tl is not None
            online_over_time(snap.online, g, tl, [m for m in ui.page_marks(now_ms) if (m.end_ms or m.start_ms)
                                                  >= tl.start_ms], shared(snap))
    if windows.open:
        with windows:
            windows_and_totals(snap, g)


TABS = ("Now", "Servers", "Over time", "Windows")
TAB_KEY = "ops_tab"


def windows_and_totals(snap: Snapshot, g: Grouping) -> None:
    """The streaming side: each window's distinct players, the totals of accepted, late and dropped, the windows."""
    state = snap.state
    assert state is not None
    current = snap.current_windows()
    distinct_players(snap, current, snap.last_final_windows(), snap.current_window_bounds(), g)
    st.subheader("Totals")
    if state.lost_at_batch is not None:
        st.caption(f"Counted from batch {state.lost_at_batch}: Redis came back empty before it, and what it held "
                   "is gone; windows open then count only what came after.")
    t = snap.totals
    c = st.columns(5)
    c[0].metric("Events accepted", ui.fmt_int(t.events),
                help="(event, window) pairs counted into an open window, summed over every batch the job committed "
                     "(the totals hash).")
    c[1].metric("Late but accepted", ui.fmt_int(t.late),
                help="(event, window) pairs behind the watermark in force whose window was still open: counted.")
    c[2].metric("Dropped late", ui.fmt_int(t.dropped),
                help="(event, window) pairs whose window had closed (end <= watermark in force): not counted, "
                     "counted here exactly, per event.")
    c[3].metric("Quarantined", ui.fmt_int(t.quarantined),
                help="Stream entries that are not valid events, kept with their reason; see Pipeline health.")
    c[4].metric("Entries read", ui.fmt_int(t.input), help="Stream entries in every batch the job has committed.")

    left, right = st.columns(2)
    windows = g.windows(snap.windows)
    read = shared(snap)
    ui.chart(left, lambda: charts.players_now(g.current(current), g.labels), "players_now",
             "No events in the current window yet: its distinct players per server appear with the first one.",
             shared=read)
    ui.chart(right, lambda: charts.players_over_time(windows, g.labels), "players_over_time",
             "No windows in this range yet: each window's distinct players appear once it has events.", shared=read)
    ui.chart(st, lambda: charts.events_per_window(windows, g.labels), "events_per_window",
             "No windows in this range yet: each window's accepted events appear once it has events.", shared=read)

    with st.expander(f"Windows in range ({len(snap.windows):,})"):
        if len(snap.windows) > MAX_WINDOW_ROWS:
            st.caption(f"The newest {MAX_WINDOW_ROWS:,} of {len(snap.windows):,}: pick a server on the Events page "
                       "for all of its windows.")
        ui.table(st, model.window_table(snap.windows, MAX_WINDOW_ROWS), hide_index=True, width="stretch")
    if state.head_ms is not None:
        st.caption(f"Newest event time {clock(state.head_ms)}; the page shows windows ending within "
                   f"{human_ms(snap.range_ms)} of it.")


MAX_WINDOW_ROWS = 500
"""Rows of the windows table at most: 300 servers over 15 minutes are thousands of windows."""

def shared(snap: Snapshot) -> tuple:
    """What a chart drawn from the snapshot alone is made of: the one read every session of this view shares."""
    return snap.namespace, snap.read_ms, snap.range_ms


HELP_ONLINE = ("From the online view: players whose latest event is a login or heartbeat and who have been silent "
               "for less than the timeout of their own server's event time (every batch folds its events into each "
               "player's state, streaming/rules/online/player.py). The line: the last hour, a point a minute.")


def online_now(snap: Snapshot, g: Grouping) -> None:
    """Players online in total and per region (per server up to a few): each a number with its last hour as a
    sparkline on its own scale; the online view, folded by the pipeline's sink with every batch."""
    v = snap.online
    if v is None:
        st.info("The online view has not committed a batch yet: no online players to show. It starts with "
                "the job and needs its first micro-batch (Spark takes 10-20 s to start).")
        return
    note = model.online_loss_note(v)
    if note:
        (st.warning if v.partial else st.info)(note)
    counts = g.counts(v.counts)
    minutes = g.minutes(v.minutes)
    as_of = model.as_of(status.verdict(snap, snap.read_ms))
    # The total on a row of its own: at a few hundred thousand players its six digits and the regions' five do not
    # fit in one row of seven at 1280 px (both were cut to "103,..." and "17,...").
    _online_metric(st.container(), TOTAL, v, g, counts, [sum(m.last.values()) for m in v.minutes], as_of)
    if g.labels:
        for col, label in zip(st.columns(len(g.labels)), g.labels, strict=True):
            _online_metric(col, label, v, g, counts, [m.last.get(label, 0) for m in minutes], None)


def online_details(snap: Snapshot, g: Grouping) -> None:
    """The last hour per minute and who logged in or out, and what to know about silent servers' clocks."""
    v = snap.online
    if v is None:
        return
    left, right = st.columns(2)
    ui.vega_chart(left, lambda: figures.online_per_minute(g.minutes(v.minutes), g.labels, summed(g), ui.page_marks()),
                  "online_per_minute", "No player has been online in the last hour.", shared=shared(snap))
    ui.vega_chart(right, lambda: figures.transitions_per_minute(v.minutes), "transitions_per_minute",
                  "No logins, logouts or timeouts in the last hour.", shared=shared(snap))
    silent = status.silent_servers(snap, snap.read_ms)
    note = model.silent_note(silent, snap.read_ms, snap.thresholds.server_silent.after_ms)
    for text in ([note] if note else []) + model.clock_notes(v, retired=snap.retired):
        st.info(text)
    ui.retired_note(st, snap)


def summed(g: Grouping) -> str:
    """What a chart of every label says it sums: per region, or the busiest servers and the rest."""
    return {"region": " per region", "top": " (the busiest servers, the rest summed)"}.get(g.by, "")


HISTORY_RANGES = {"1 h": 3_600_000, "6 h": 6 * 3_600_000, "24 h": DAY_MS, "7 d": 7 * DAY_MS}
RANGE_KEY, WEEK_AGO_KEY = "ops_history_range", "ops_week_ago"


def _online_metric(col: Any, label: str, v: OnlineView, g: Grouping,  # noqa: ANN401 - a column or a container
                   counts: dict[str, int], trend: list[int], as_of: str | None) -> None:
    """One series' players online now (the total, a server, a region or the rest) with its last hour per minute
    as a sparkline; its peak today, and what "online" means, in its help."""
    region = ui.current_region()
    name = total_label(region) if label == TOTAL else label
    n = v.total if label == TOTAL else counts[label]
    # a region's own peak (the highest sum of one batch); the busiest-servers grouping's "rest" has none
    peak = v.peaks.get(region_key(label) if g.by == "region" and label != TOTAL else label)
    if g.by == "top" and label != TOTAL and len(g.members[label]) > 1:
        peak = None
    members = "" if not g.grouped or label == TOTAL else (
        f" The sum over {len(g.members[label]):,} servers: " + ", ".join(md_list(g.members[label][:10]))
        + (" ..." if len(g.members[label]) > 10 else ""))
    peak_text = f" Peak today {peak[0]:,} at {clock(peak[1])}." if peak is not None else ""
    when = f" As of batch {v.last_batch}, watermark {clock(v.watermark_ms)}; offline after {human_ms(v.timeout_ms)}."
    title = f"{md(name)} · online now" if not g.grouped or label == TOTAL else md(name)
    if as_of:
        title = f"{md(name)} · as of {as_of}"
    col.metric(title, ui.fmt_int(n), help=HELP_ONLINE + peak_text + when + members,
               chart_data=trend if len(trend) > 1 else None, chart_type="line")


def timeline(snap: Snapshot, g: Grouping, now_ms: int) -> Timeline | None:
    """The range the page's selector holds (read before the selector is drawn, further down), to the end of this
    minute; today's against a week ago for ranges up to a day. None while there is no online view."""
    v = snap.online
    if v is None:
        return None
    span = HISTORY_RANGES.get(st.session_state.get(RANGE_KEY) or "24 h", DAY_MS)
    week_ago = st.session_state.get(WEEK_AGO_KEY, True) and span <= DAY_MS
    end = now_ms - now_ms % MINUTE_MS + MINUTE_MS
    url = Config.from_env(os.environ).redis_url
    tl = loaders.load_timeline(url, snap.namespace, tuple(model.series_labels(g)), end - span, end,
                               (TOTAL,) if week_ago else (), ui.current_view().tick(now_ms))
    return tl.with_open_minute(v.minutes[-1] if v.minutes else None, snap.regions)


def online_over_time(v: OnlineView, g: Grouping, tl: Timeline, marks: Sequence[charts.Mark], read: tuple) -> None:
    """Up to a week of players online per region (or server) and in total, today against a week ago, the peaks
    with when, and what happened (annotations, fired alerts) drawn over the chart and listed."""
    st.subheader("Players online over time")
    left, right = st.columns([3, 2])
    left.segmented_control("Range", list(HISTORY_RANGES), default="24 h", key=RANGE_KEY)
    right.toggle("The total a week ago", value=True, key=WEEK_AGO_KEY, disabled=tl.end_ms - tl.start_ms > DAY_MS,
                 help="The same hours seven days before, dotted: is tonight normal for this day of the week?")
    what = {"region": " per region", "top": " (the busiest servers)"}.get(g.by, "")
    labels = model.series_labels(g)
    ui.chart(st, lambda: charts.online_history(tl, labels, what), "online_history",
             "No minute of players online in this range yet: each minute appears once it has closed.",
             shared=(*read, tl.start_ms, tl.end_ms, bool(tl.week_ago), *labels.items()))
    ui.table(st, model.peak_rows(v, g, labels), hide_index=True, width="stretch")
    if marks:
        st.caption("Drawn over every time chart: annotations (`wm-annotate`, `POST /annotations`) and fired "
                   "alerts, in this range.")
        ui.table(st, [{"From (UTC)": f"{charts.ts(m.start_ms):%a %d %b %H:%M}",
                       "To (UTC)": "" if m.end_ms is None else f"{charts.ts(m.end_ms):%a %d %b %H:%M}",
                       "What": m.label} for m in marks], hide_index=True, width="stretch")
    if v.history:
        ui.chart(st, lambda: charts.online_over_batches(g.history(v.history), g.labels, summed(g)),
                 "online_over_batches", "No player online after any batch in this range.", shared=read)


TOP_N = 5
MAX_FOUND = 200
"""Drained and retired servers a search lists at most: a day of matches is thousands of names."""


def server_table(snap: Snapshot, v: OnlineView) -> None:
    """Every server in one sortable table, the busiest and the emptiest named, and a box to find one."""
    servers = model.live_servers(snap)
    ranked = sorted(servers, key=lambda s: (-v.counts.get(s, 0), s))
    silent = status.silent_servers(snap, snap.read_ms)
    fleet, drops, slow = st.columns([3, 2, 2])
    with fleet:  # the fleet at a glance: servers by state per region
        ui.table(st, model.states_by_region(snap, silent), hide_index=True, width="stretch", key="fleet_states")
    drops.markdown("**Biggest drops, last hour**")
    drops.markdown("\n".join(f"- {md(s)}: {then:,} → {now:,}" for s, then, now in model.biggest_drops(v, servers,
                                                                                                     TOP_N))
                   or "No server lost players in the last hour.")
    slow.markdown("**Slowest clocks (lag p95)**")
    slow.markdown("\n".join(f"- {md(s)}: {human_ms(ms)}" for s, ms in model.slowest_clocks(snap, TOP_N))
                  or "No lag figures yet.")
    ui.vega_chart(st, lambda: figures.fleet_map(model.fleet_cells(snap, v, silent)), "fleet_map",
                  "No server in the live views.", shared=shared(snap))
    st.caption("Most players: " + ", ".join(f"{md(s)} ({v.counts.get(s, 0):,})" for s in ranked[:TOP_N])
               + " · fewest: " + ", ".join(f"{md(s)} ({v.counts.get(s, 0):,})" for s in reversed(ranked[-TOP_N:])))
    find = st.text_input("Find a server", key="ops_find_server",
                         placeholder="a name, or part of one (drained and retired ones too)").strip()
    shown = [s for s in ranked if find.lower() in s.lower()] if find else ranked
    gone = {**{s: "drained" for s in snap.drained}, **{s: "retired" for s in snap.retired}}
    if find:  # out of the live views, but found by name
        shown += sorted(s for s in gone if find.lower() in s.lower() and s not in servers)[:MAX_FOUND]
    rows = [{"Server": s, "State": gone.get(s) or ("silent" if s in silent else "live"),
             "Region": snap.regions.get(s, ""),
             "Online now": v.counts.get(s, 0),
             "Peak today": v.peaks[s][0] if s in v.peaks else None,
             "Peak at (UTC)": clock(v.peaks[s][1]) if s in v.peaks else "",
             "Highest ever": v.peaks_ever[s][0] if s in v.peaks_ever else None,
             "Ever at (UTC)": f"{charts.ts(v.peaks_ever[s][1]):%Y-%m-%d %H:%M}" if s in v.peaks_ever else "",
             "Trend (last hour)": [m.last.get(s, 0) for m in v.minutes]} for s in shown]
    ui.table(st, rows, hide_index=True, width="stretch", height=min(400, 38 + 35 * max(1, len(rows))),
                 column_config={"Trend (last hour)": st.column_config.LineChartColumn(
                     "Trend (last hour)", help="Players online at each minute's end")})
    if find and not shown:
        st.caption(f"No server's name contains “{md(find)}”.")


def main() -> None:
    st.title("Live ops")
    # Only the Windows tab draws windows: the others read the snapshot without them (a third of its read).
    ui.live(render, windows=lambda: st.session_state.get(TAB_KEY) == "Windows")

