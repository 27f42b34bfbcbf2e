"""Plotly figures: data in, figure out. No Redis, no Streamlit, so each is unit-tested.

Conventions every chart keeps, so a reader learns them once:

* one colour per server, the same on every page (:func:`server_colors`);
* provisional windows (the watermark has not passed their end, numbers can
  still grow) are hatched and lighter, or drawn dotted; final ones are solid;
* hovering any point tells its batch (or window) and its exact values;
* times are UTC.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.data import BatchPoint, WindowRow
from streaming.commit import Lag
from streaming.presence_rollup import Minute
from streaming.presence_store import OnlinePoint

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
WALL_CLOCK = "#888888"
WATERMARK = "#d62728"
MAX_EVENT = "#1f77b4"
BEHIND = "#d62728"
ON_TIME = "#2ca02c"
PROVISIONAL_PATTERN = "/"
HEIGHT = 340


def ts(ms: int | float) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def server_colors(servers: Iterable[str]) -> dict[str, str]:
    """Stable colours: by sorted name, so a server keeps its colour on every page."""
    return {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(sorted(servers))}


def _layout(fig: go.Figure, title: str, y_title: str, height: int = HEIGHT) -> go.Figure:
    fig.update_layout(
        title={"text": title, "x": 0, "xanchor": "left"}, height=height, margin={"l": 10, "r": 10, "t": 50, "b": 10},
        legend={"orientation": "h", "y": -0.12, "yanchor": "top", "traceorder": "normal"}, hovermode="closest",
        yaxis_title=y_title,
    )
    return fig


def _window_label(w: WindowRow) -> str:
    return f"{ts(w.start_ms):%H:%M:%S}–{ts(w.end_ms):%H:%M:%S}"


def _window_custom(w: WindowRow) -> list[object]:
    return [_window_label(w), w.events, w.players, w.dropped, w.late, "final" if w.final else "provisional"]


_WINDOW_HOVER = ("<b>%{fullData.name}</b> window %{customdata[0]} (%{customdata[5]})<br>players %{customdata[2]:,}"
                 "<br>events %{customdata[1]:,} · late accepted %{customdata[4]:,} · dropped %{customdata[3]:,}"
                 "<extra></extra>")


# --------------------------------------------------------------------------- live ops


def players_now(current: dict[str, WindowRow | None], servers: Sequence[str]) -> go.Figure:
    """Active players per server in the current window; hatched while it is provisional."""
    colors = server_colors(servers)
    fig = go.Figure()
    for s in servers:
        w = current.get(s)
        players = w.players if w else 0
        final = bool(w and w.final)
        fig.add_trace(go.Bar(
            x=[s], y=[players], name=s, marker_color=colors[s], text=[f"{players:,}"], textposition="outside",
            marker_pattern_shape="" if final else PROVISIONAL_PATTERN, opacity=1.0 if final else 0.75,
            customdata=[_window_custom(w)] if w else None,
            hovertemplate=_WINDOW_HOVER if w else f"<b>{s}</b>: no events in the current window<extra></extra>",
            showlegend=False,
        ))
    return _layout(fig, "Active players now (current window; hatched = provisional)", "distinct players")


def players_over_time(windows: Sequence[WindowRow], servers: Sequence[str]) -> go.Figure:
    """Distinct players per window and server: solid where final, dotted where provisional."""
    return _per_window_lines(windows, servers, "players", "Active players per window", "distinct players")


def events_per_window(windows: Sequence[WindowRow], servers: Sequence[str]) -> go.Figure:
    """Accepted events per window and server, grouped; provisional windows hatched."""
    return _per_window_bars(windows, servers, "events", "Accepted events per window (hatched = provisional)",
                            "events", hatch=True)


def _per_window_bars(windows: Sequence[WindowRow], servers: Sequence[str], attr: str, title: str, y_title: str,
                     hatch: bool) -> go.Figure:
    colors = server_colors(servers)
    fig = go.Figure()
    for s in servers:
        ws = [w for w in windows if w.server == s]
        fig.add_trace(go.Bar(
            x=[ts(w.start_ms) for w in ws], y=[getattr(w, attr) for w in ws], name=s, marker_color=colors[s],
            marker_pattern_shape=["" if w.final or not hatch else PROVISIONAL_PATTERN for w in ws],
            marker_opacity=[1.0 if w.final or not hatch else 0.6 for w in ws],
            customdata=[_window_custom(w) for w in ws], hovertemplate=_WINDOW_HOVER,
        ))
    fig.update_layout(barmode="group")
    return _layout(fig, title, y_title)


def _per_window_lines(windows: Sequence[WindowRow], servers: Sequence[str], attr: str, title: str,
                      y_title: str) -> go.Figure:
    colors = server_colors(servers)
    fig = go.Figure()
    for s in servers:
        ws = sorted((w for w in windows if w.server == s), key=lambda w: (w.start_ms, w.end_ms))
        final = [w for w in ws if w.final]
        provisional = [w for w in ws if not w.final]
        # The dotted part starts at the last final point so the line stays connected.
        bridge = final[-1:] + provisional if provisional else []
        for part, dash, symbol, suffix in ((final, "solid", "circle", ""), (bridge, "dot", "circle-open",
                                                                             " (provisional)")):
            if not part:
                continue
            fig.add_trace(go.Scatter(
                x=[ts(w.start_ms) for w in part], y=[getattr(w, attr) for w in part], name=s + suffix,
                legendgroup=s, mode="lines+markers", line={"color": colors[s], "dash": dash},
                marker={"symbol": symbol, "size": 7}, customdata=[_window_custom(w) for w in part],
                hovertemplate=_WINDOW_HOVER,
            ))
    return _layout(fig, title + " (dotted = provisional)", y_title)


def online_over_batches(history: Sequence[OnlinePoint], servers: Sequence[str]) -> go.Figure:
    """Players online per server after each batch, x = the watermark its expiries used (a batch before any
    event has none: left out, it would stretch the axis to 1970)."""
    colors = server_colors(servers)
    history = [p for p in history if p.watermark_ms > 0]
    fig = go.Figure()
    for s in servers:
        fig.add_trace(go.Scatter(
            x=[ts(p.watermark_ms) for p in history], y=[p.counts.get(s, 0) for p in history], name=s,
            mode="lines+markers", line={"color": colors[s], "shape": "hv"}, marker={"size": 5},
            customdata=[[p.batch, p.online, p.offline] for p in history],
            hovertemplate=f"<b>{s}</b> batch %{{customdata[0]}}<br>online %{{y:,}}<br>watermark %{{x|%H:%M:%S}}"
                          "<br>batch transitions: %{customdata[1]:,} on, %{customdata[2]:,} off<extra></extra>",
        ))
    return _layout(fig, "Players online after each batch (by watermark)", "players online")


def online_per_minute(minutes: Sequence[Minute], servers: Sequence[str]) -> go.Figure:
    """Players online per server at the end of each minute of batch time (the open minute last), with the
    minute's peak in the hover."""
    colors = server_colors(servers)
    fig = go.Figure()
    for s in servers:
        fig.add_trace(go.Scatter(
            x=[ts(m.minute_ms) for m in minutes], y=[m.last.get(s, 0) for m in minutes], name=s,
            mode="lines+markers", line={"color": colors[s]}, marker={"size": 5},
            customdata=[[m.peak.get(s, 0)] for m in minutes],
            hovertemplate=f"<b>{s}</b> %{{x|%H:%M}}<br>online at the minute's end %{{y:,}}"
                          "<br>the minute's peak %{customdata[0]:,}<extra></extra>",
        ))
    fig.update_yaxes(rangemode="tozero")
    return _layout(fig, "Players online, last hour (per minute)", "players online")


TRANSITIONS = (("came online", ("login", "heartbeat", "event"), ON_TIME), ("logged out", ("logout",), MAX_EVENT),
               ("timed out", ("timeout",), BEHIND))
"""How the causes of transitions are grouped for ops: a logout is a player leaving, a timeout a player gone
silent (a crash, a network cut), and those are different news."""


def transitions_per_minute(minutes: Sequence[Minute]) -> go.Figure:
    """Logins (anyone coming online), logouts and timeouts per minute, all servers together."""
    fig = go.Figure()
    for name, causes, color in TRANSITIONS:
        counts = [sum(by.get(c, 0) for by in m.causes.values() for c in causes) for m in minutes]
        fig.add_trace(go.Bar(x=[ts(m.minute_ms) for m in minutes], y=counts, name=name, marker_color=color,
                             hovertemplate=f"%{{x|%H:%M}}<br>{name}: %{{y:,}}<extra></extra>"))
    fig.update_layout(barmode="group")
    return _layout(fig, "Logins, logouts and timeouts per minute", "players per minute")


# --------------------------------------------------------------------------- watermark


def _batch_custom(b: BatchPoint) -> list[object]:
    return [b.batch, b.input, b.dropped, b.late]


def watermark_vs_time(batches: Sequence[BatchPoint], now_ms: int) -> go.Figure:
    """Event time against processing time: wall clock, running max event time, watermark.

    The vertical gap from the wall clock down to the max event time is how far
    behind the events arrive; from there down to the watermark is the delay; a
    flat watermark is a stall.
    """
    fig = go.Figure()
    if batches:
        first = batches[0].batch_ts_ms
        fig.add_trace(go.Scatter(
            x=[ts(first), ts(now_ms)], y=[ts(first), ts(now_ms)], name="wall clock", mode="lines",
            line={"color": WALL_CLOCK, "dash": "dash"}, hovertemplate="wall clock %{y}<extra></extra>",
        ))
        with_max = [b for b in batches if b.running_max_event_us is not None]
        # Until the first batch with data the watermark is the epoch; drawing it would flatten everything else.
        batches = [b for b in batches if b.watermark_ms > 0]
        fig.add_trace(go.Scatter(
            x=[ts(b.batch_ts_ms) for b in with_max], y=[ts(b.running_max_event_us // 1000) for b in with_max],
            name="max event time", mode="lines+markers", line={"color": MAX_EVENT}, marker={"size": 5},
            customdata=[_batch_custom(b) for b in with_max],
            hovertemplate="batch %{customdata[0]} at %{x}<br>max event time %{y}<br>input %{customdata[1]:,}"
                          "<extra></extra>",
        ))
        fig.add_trace(go.Scatter(
            x=[ts(b.batch_ts_ms) for b in batches], y=[ts(b.watermark_ms) for b in batches],
            name="watermark in force", mode="lines+markers", line={"color": WATERMARK, "shape": "hv"},
            marker={"size": 5}, customdata=[_batch_custom(b) for b in batches],
            hovertemplate="batch %{customdata[0]} at %{x}<br>watermark %{y}<br>dropped %{customdata[2]:,} · "
                          "late accepted %{customdata[3]:,}<extra></extra>",
        ))
    return _layout(fig, "Event time (y) against processing time (x): wall clock, max event time, watermark",
                   "event time (UTC)", height=420)


def watermark_lag(batches: Sequence[BatchPoint], delay_ms: int) -> go.Figure:
    """Seconds the watermark trails the batch's clock, against the configured delay."""
    fig = go.Figure()
    x = [ts(b.batch_ts_ms) for b in batches]
    fig.add_trace(go.Scatter(
        x=x, y=[(b.batch_ts_ms - b.watermark_ms) / 1000 if b.watermark_ms else None for b in batches],
        name="watermark lag (now − watermark)", mode="lines+markers", line={"color": WATERMARK}, marker={"size": 5},
        customdata=[_batch_custom(b) for b in batches],
        hovertemplate="batch %{customdata[0]}<br>watermark lag %{y:.1f} s<extra></extra>",
    ))
    with_max = [b for b in batches if b.running_max_event_us is not None]
    fig.add_trace(go.Scatter(
        x=[ts(b.batch_ts_ms) for b in with_max],
        y=[(b.batch_ts_ms - b.running_max_event_us / 1000) / 1000 for b in with_max],  # type: ignore[operator]
        name="event-time lag (now − max event time)", mode="lines", line={"color": MAX_EVENT},
        customdata=[_batch_custom(b) for b in with_max],
        hovertemplate="batch %{customdata[0]}<br>now − max event time %{y:.1f} s<extra></extra>",
    ))
    if batches:
        fig.add_hline(y=delay_ms / 1000, line={"color": WALL_CLOCK, "dash": "dot"},
                      annotation_text=f"delay {delay_ms / 1000:g} s", annotation_position="top left")
    return _layout(fig, "Watermark lag", "seconds")


def per_server_over_time(batches: Sequence[BatchPoint], servers: Sequence[str], attr: str, title: str) -> go.Figure:
    """Stacked per-batch counts per server (``attr`` is ``dropped`` or ``late``)."""
    colors = server_colors(servers)
    fig = go.Figure()
    for s in servers:
        rows = [(b, b.servers.get(s)) for b in batches]
        fig.add_trace(go.Bar(
            x=[ts(b.batch_ts_ms) for b, _ in rows], y=[getattr(sb, attr) if sb else 0 for _, sb in rows], name=s,
            marker_color=colors[s], customdata=[[b.batch, ts(b.watermark_ms).strftime("%H:%M:%S")] for b, _ in rows],
            hovertemplate=f"<b>{s}</b> batch %{{customdata[0]}}<br>{attr} %{{y:,}}<br>watermark in force "
                          "%{customdata[1]}<extra></extra>",
        ))
    fig.update_layout(barmode="stack")
    return _layout(fig, title, "events")


def dropped_per_window(windows: Sequence[WindowRow], servers: Sequence[str]) -> go.Figure:
    """Events that arrived after their window closed, per window and server (a closed window is final)."""
    return _per_window_bars(windows, servers, "dropped", "Dropped late per window", "events dropped", hatch=False)


# --------------------------------------------------------------------------- lag


def lag_chart(batches: Sequence[BatchPoint], servers: Sequence[str]) -> go.Figure:
    """p50 / p95 / max of ingest − event time and processing − event time, per server and batch."""
    colors = server_colors(servers)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12, subplot_titles=(
        "ingest − event time (network and server delay)", "processing − event time (what the watermark sees)"))
    styles = (("p50", "solid"), ("p95", "dash"), ("max", "dot"))
    for row, attr in ((1, "ingest_lag_ms"), (2, "processing_lag_ms")):
        for s in servers:
            pts: list[tuple[BatchPoint, Lag]] = [(b, lag) for b in batches
                                                 if (sb := b.servers.get(s)) and (lag := getattr(sb, attr))]
            for stat, dash in styles:
                fig.add_trace(go.Scatter(
                    x=[ts(b.batch_ts_ms) for b, _ in pts], y=[getattr(lag, stat) / 1000 for _, lag in pts],
                    name=f"{s} {stat}", legendgroup=s, showlegend=row == 1, mode="lines",
                    line={"color": colors[s], "dash": dash}, customdata=[[b.batch] for b, _ in pts],
                    hovertemplate=f"<b>{s}</b> {stat} %{{y:.2f}} s<br>batch %{{customdata[0]}}<extra></extra>",
                ), row=row, col=1)
    fig.update_yaxes(title_text="seconds")
    return _layout(fig, "Event-time lag per server (solid p50, dashed p95, dotted max)", "seconds", height=560)


# --------------------------------------------------------------------------- health


def batch_durations(batches: Sequence[BatchPoint], trigger_ms: int) -> go.Figure:
    """Batch duration against the trigger interval; batches slower than it are red."""
    timed = [b for b in batches if b.duration_ms is not None]
    fig = go.Figure(go.Bar(
        x=[ts(b.batch_ts_ms) for b in timed], y=[b.duration_ms / 1000 for b in timed],  # type: ignore[operator]
        marker_color=[BEHIND if b.duration_ms > trigger_ms else ON_TIME for b in timed],  # type: ignore[operator]
        customdata=[[b.batch, b.input, "falling behind" if b.duration_ms > trigger_ms else "on time"]  # type: ignore[operator]
                    for b in timed],
        hovertemplate="batch %{customdata[0]}: %{y:.2f} s (%{customdata[2]})<br>input %{customdata[1]:,}"
                      "<extra></extra>",
        name="batch duration",
    ))
    fig.add_hline(y=trigger_ms / 1000, line={"color": WALL_CLOCK, "dash": "dash"},
                  annotation_text=f"trigger {trigger_ms / 1000:g} s", annotation_position="top left")
    return _layout(fig, "Batch duration vs trigger (red = falling behind)", "seconds")


def rates(batches: Sequence[BatchPoint]) -> go.Figure:
    """Spark's input rate (arriving) against processed rate (keeping up), in stream entries."""
    timed = [b for b in batches if b.input_per_s is not None or b.processed_per_s is not None]
    fig = go.Figure()
    for attr, name, color in (("input_per_s", "input rate", MAX_EVENT),
                              ("processed_per_s", "processed rate", ON_TIME)):
        fig.add_trace(go.Scatter(
            x=[ts(b.batch_ts_ms) for b in timed], y=[getattr(b, attr) for b in timed], name=name, mode="lines+markers",
            line={"color": color}, marker={"size": 4}, customdata=[[b.batch] for b in timed],
            hovertemplate=f"batch %{{customdata[0]}}<br>{name} %{{y:,.0f}} entries/s<extra></extra>",
        ))
    return _layout(fig, "Input vs processed rate", "entries/s")


def input_per_batch(batches: Sequence[BatchPoint]) -> go.Figure:
    """Entries per batch, split into accepted, dropped and quarantined."""
    fig = go.Figure()
    x = [ts(b.batch_ts_ms) for b in batches]
    for name, values, color in (
        ("parsed", [b.parsed for b in batches], ON_TIME),
        ("quarantined", [b.quarantined for b in batches], "#7f7f7f"),
    ):
        fig.add_trace(go.Bar(x=x, y=values, name=name, marker_color=color, customdata=[[b.batch] for b in batches],
                             hovertemplate=f"batch %{{customdata[0]}}<br>{name} %{{y:,}}<extra></extra>"))
    fig.update_layout(barmode="stack")
    return _layout(fig, "Entries per batch", "entries")
