"""Charts of the watermark, a point per batch (the Watermark page): event time against processing time, the
watermark's lag against the delay, and what each server had dropped or accepted late."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from dashboard.charts.style import MAX_EVENT, WALL_CLOCK, WATERMARK, layout, line_mode, server_colors, ts
from dashboard.charts.time_axes import batch_gap_ms, gaps, time_axis
from streaming.store.views.snapshot import BatchPoint


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
        first, last = batches[0].batch_ts_ms, max(batches[-1].batch_ts_ms, now_ms)
        fig.add_trace(go.Scatter(
            x=[ts(first), ts(last)], y=[ts(first), ts(last)], name="wall clock", mode="lines",
            line={"color": WALL_CLOCK, "dash": "dash", "width": 2}, hovertemplate="wall clock %{y}<extra></extra>",
        ))
        limit = batch_gap_ms(batches)
        with_max = [b for b in batches if b.running_max_event_us is not None]
        # Until the first batch with data the watermark is the epoch; drawing it would flatten everything else.
        batches = [b for b in batches if b.watermark_ms > 0]
        for part, name, value, line, hover in (
            (with_max, "max event time", lambda b: ts(b.running_max_event_us // 1000), {"color": MAX_EVENT},
             "batch %{customdata[0]} at %{x}<br>max event time %{y}<br>input %{customdata[1]:,}<extra></extra>"),
            (batches, "watermark in force", lambda b: ts(b.watermark_ms), {"color": WATERMARK, "shape": "hv"},
             "batch %{customdata[0]} at %{x}<br>watermark %{y}<br>dropped %{customdata[2]:,} · late accepted "
             "%{customdata[3]:,}<extra></extra>"),
        ):
            x, y = gaps([b.batch_ts_ms for b in part], [value(b) for b in part], limit)
            _, custom = gaps([b.batch_ts_ms for b in part], [_batch_custom(b) for b in part], limit)
            fig.add_trace(go.Scatter(x=x, y=y, name=name, mode=line_mode(len(x)), line=line, marker={"size": 5},
                                     customdata=custom, hovertemplate=hover))
    fig = layout(fig, "Event time against processing time", "event time (UTC)", height=420, counts=False)
    fig.update_xaxes(title="processing time (UTC)")
    fig.update_yaxes(tickformat="%H:%M:%S", hoverformat="%H:%M:%S")
    return time_axis(fig)


def watermark_lag(batches: Sequence[BatchPoint], delay_ms: int) -> go.Figure:
    """Seconds the watermark trails the batch's clock, against the configured delay."""
    fig = go.Figure()
    limit = batch_gap_ms(batches)
    marked = [b for b in batches if b.watermark_ms]
    with_max = [b for b in batches if b.running_max_event_us is not None]
    for part, name, value, color, hover in (
        (marked, "watermark lag (now − watermark)", lambda b: (b.batch_ts_ms - b.watermark_ms) / 1000, WATERMARK,
         "batch %{customdata[0]}<br>watermark lag %{y:.1f} s<extra></extra>"),
        (with_max, "event-time lag (now − max event time)",
         lambda b: (b.batch_ts_ms - b.running_max_event_us / 1000) / 1000, MAX_EVENT,
         "batch %{customdata[0]}<br>now − max event time %{y:.1f} s<extra></extra>"),
    ):
        x, y = gaps([b.batch_ts_ms for b in part], [value(b) for b in part], limit)
        _, custom = gaps([b.batch_ts_ms for b in part], [_batch_custom(b) for b in part], limit)
        fig.add_trace(go.Scatter(x=x, y=y, name=name, mode="lines", line={"color": color}, customdata=custom,
                                 hovertemplate=hover))
    if marked:  # the delay as a line of its own, named in the legend rather than written over the data
        fig.add_trace(go.Scatter(x=[ts(marked[0].batch_ts_ms), ts(marked[-1].batch_ts_ms)],
                                 y=[delay_ms / 1000] * 2, name=f"the delay ({delay_ms / 1000:g} s)", mode="lines",
                                 line={"color": WALL_CLOCK, "dash": "dot"}, hoverinfo="skip"))
    return time_axis(layout(fig, "Watermark lag", "seconds"))


def per_server_over_time(batches: Sequence[BatchPoint], servers: Sequence[str] | Mapping[str, Sequence[str]],
                         attr: str, title: str) -> go.Figure:
    """Stacked per-batch counts per server or group (a mapping: label -> the servers it sums; ``attr`` is
    ``dropped`` or ``late``)."""
    if not isinstance(servers, Mapping):
        servers = {s: (s,) for s in servers}
    colors = server_colors(servers)
    fig = go.Figure()
    for s, members in servers.items():
        rows = [(b, sum(getattr(sb, attr) for m in members if (sb := b.servers.get(m)))) for b in batches]
        fig.add_trace(go.Bar(
            x=[ts(b.batch_ts_ms) for b, _ in rows], y=[n for _, n in rows], name=s,
            marker_color=colors[s], customdata=[[b.batch, ts(b.watermark_ms).strftime("%H:%M:%S")] for b, _ in rows],
            hovertemplate=f"<b>%{{fullData.name}}</b> batch %{{customdata[0]}}<br>{attr} %{{y:,}}<br>watermark in "
                          "force "
                          "%{customdata[1]}<extra></extra>",
        ))
    fig.update_layout(barmode="stack")
    return time_axis(layout(fig, title, "events"), pad_ms=batch_gap_ms(batches) // 10)
