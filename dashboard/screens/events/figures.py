"""The per-event figure: every event at (event time, arrival time), the watermark and the window boundaries.

Pure like :mod:`dashboard.charts` (data in, figure out), so it is unit-tested.
Reading it: a point left of the red watermark line at its height arrived
behind the watermark; it is dropped when the window boundary to its right (its
window's end) is also left of that line.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from dashboard.charts import WALL_CLOCK, WATERMARK, layout, ts
from dashboard.text import plot
from streaming.rules.eventview import STATUS_LABELS, EventPoint, Status, Step, window_boundaries
from streaming.rules.windows import Verdict

STATUS_COLORS: dict[Status, str] = {
    Status.ON_TIME: "#2ca02c",
    Status.LATE_ACCEPTED: "#ff7f0e",
    Status.PARTLY_DROPPED: "#b8411b",
    Status.DROPPED: "#d62728",
    Status.PENDING: "#7f7f7f",
    Status.UNKNOWN: "#c7c7c7",
}
VERDICT_LABELS: dict[Verdict | None, str] = {
    Verdict.ON_TIME: "on time", Verdict.LATE_ACCEPTED: "late but accepted", Verdict.DROPPED: "dropped",
    None: "not judged yet",
}
MAX_BOUNDARIES = 400
"""More window boundaries than this are not drawn (they would be a grey wall); the title says so."""


def clock_ms(ms: int) -> str:
    return f"{ts(ms):%H:%M:%S}.{ms % 1000:03d}"


def hover_text(p: EventPoint) -> str:
    """The event, its window(s) with each one's verdict, the batch and the watermark it met."""
    ev_ms = p.event_time_us // 1000
    lines = [
        f"<b>{STATUS_LABELS[p.status]}</b> · server {plot(p.server)} · player {plot(p.player_id)}"
        + (f" · {plot(p.kind)}" if p.kind else ""),
        f"event time {clock_ms(ev_ms)} · arrived {clock_ms(p.arrival_ms)} ({(p.arrival_ms - ev_ms) / 1000:+.1f} s)",
        f"entry {p.entry_id}" + (f" of input shard {p.shard}" if p.shard else "")  # IDs repeat across shards
        + (f" · event {plot(p.event_id)}" if p.event_id and p.event_id != p.entry_id else ""),
    ]
    if p.batch is None:
        lines.append("not processed yet" if p.status is Status.PENDING else "batch record no longer kept")
    else:
        lines.append(f"batch {p.batch} · watermark met {clock_ms(p.watermark_ms or 0)}")
    for w in p.windows:
        lines.append(f"window {clock_ms(w.window.start_ms)}–{clock_ms(w.window.end_ms)}: {VERDICT_LABELS[w.verdict]}")
    return "<br>".join(lines)


def events_figure(points: Sequence[EventPoint], steps: Sequence[Step], window_ms: int, slide_ms: int,
                  lo_ms: int, hi_ms: int) -> go.Figure:
    """Points coloured by status, the watermark in force as a step line, window boundaries as verticals."""
    fig = go.Figure()
    ev_times = [p.event_time_us // 1000 for p in points]
    xs = ev_times + [s.watermark_ms for s in steps if s.watermark_ms > 0]
    title = "Each event at (event time, arrival time); red: the watermark in force; grey: window boundaries"
    if xs:
        bounds = window_boundaries(min(xs) - window_ms, max(xs) + window_ms, window_ms, slide_ms)
        if len(bounds) > MAX_BOUNDARIES:
            title += f" (not drawn: {len(bounds):,} boundaries)"
        else:
            fig.add_trace(go.Scatter(
                x=[v for b in bounds for v in (ts(b), ts(b), None)],
                y=[v for _ in bounds for v in (ts(lo_ms), ts(hi_ms), None)],
                mode="lines", line={"color": WALL_CLOCK, "width": 1, "dash": "dot"}, name="window boundary",
                hoverinfo="skip",
            ))
    for status in Status:
        these = [p for p in points if p.status is status]
        if not these:
            continue
        fig.add_trace(go.Scattergl(
            x=[ts(p.event_time_us // 1000) for p in these], y=[ts(p.arrival_ms) for p in these], mode="markers",
            name=f"{STATUS_LABELS[status]} ({len(these):,})", marker={"color": STATUS_COLORS[status], "size": 6},
            text=[hover_text(p) for p in these], hovertemplate="%{text}<extra></extra>",
        ))
    committed = [s for s in steps if s.batch is not None and s.watermark_ms > 0]
    pending = [s for s in steps if s.batch is None and s.watermark_ms > 0]
    for part, name, dash in ((committed, "watermark in force", "solid"), (pending, "next watermark (pending)",
                                                                             "dash")):
        if not part:
            continue
        fig.add_trace(go.Scatter(
            x=[ts(s.watermark_ms) for s in part for _ in (0, 1)], y=[ts(m) for s in part for m in (s.from_ms, s.to_ms)],
            mode="lines", name=name, line={"color": WATERMARK, "width": 2, "dash": dash},
            text=[f"batch {s.batch}" if s.batch is not None else "next batch" for s in part for _ in (0, 1)],
            hovertemplate="%{text}: watermark %{x}<br>arrival %{y}<extra></extra>",
        ))
    fig.update_xaxes(title_text="event time (UTC)", tickformat="%H:%M:%S")
    fig.update_yaxes(tickformat="%H:%M:%S")  # one-line labels: the date is in the caption above
    fig = layout(fig, title, "arrival time (UTC)", height=560, counts=False)
    fig.update_layout(legend={"y": -0.16})  # below the x-axis title
    return fig
