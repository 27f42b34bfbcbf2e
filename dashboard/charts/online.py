"""Charts of the online view: players online after each batch, and over minutes to weeks with the week
before beside it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from dashboard.charts.style import layout, line_mode, server_colors
from dashboard.charts.time_axes import gaps, time_axis
from streaming.rules.online.rollup import TOTAL
from streaming.store.history_store import Timeline
from streaming.store.views.online import OnlinePoint


def online_over_batches(history: Sequence[OnlinePoint], servers: Sequence[str], what: str = "") -> go.Figure:
    """Players online per server after each batch, x = the watermark its expiries used (a batch before any
    event has none: left out, it would stretch the axis to 1970)."""
    colors = server_colors(servers)
    history = [p for p in history if p.watermark_ms > 0]
    steps = sorted(b.watermark_ms - a.watermark_ms for a, b in zip(history, history[1:], strict=False))
    limit = max(10_000, 5 * steps[len(steps) // 2]) if steps else 10_000
    marks = [p.watermark_ms for p in history]
    _, custom = gaps(marks, [[p.batch, p.online, p.offline] for p in history], limit)
    fig = go.Figure()
    for s in servers:
        x, y = gaps(marks, [p.counts.get(s, 0) for p in history], limit)
        fig.add_trace(go.Scatter(
            x=x, y=y, name=s, mode=line_mode(len(x)), line={"color": colors[s], "shape": "hv"}, marker={"size": 5},
            customdata=custom,
            hovertemplate="<b>%{fullData.name}</b> batch %{customdata[0]}<br>online %{y:,}<br>watermark %{x|%H:%M:%S}"
                          "<br>batch transitions: %{customdata[1]:,} on, %{customdata[2]:,} off<extra></extra>",
        ))
    return time_axis(layout(fig, f"Players online after each batch{what} (by watermark)", "players online"))


HISTORY_TOTAL = "#222222"
WEEK_AGO = "#9e9e9e"


def online_history(tl: Timeline, labels: Mapping[str, str], what: str = "") -> go.Figure:
    """Players online at each minute's end (each 5 minutes past a day) per series over the timeline's range, a
    line per label (``labels``: series -> name, the total among them), the same series a week ago dotted; a
    minute with no data (the job was down) is a gap. The hover adds the highest count within the minute. The axis
    spans the data shown, as every time axis does."""
    colors = server_colors([lb for s, lb in labels.items() if s != TOTAL])
    fig = go.Figure()
    for series, label in labels.items():
        color = HISTORY_TOTAL if series == TOTAL else colors[label]
        for points, name, dash in ((tl.series.get(series, []), label, "solid"),
                                   (tl.week_ago.get(series, []), f"{label}, a week ago", "dot")):
            if not points and dash == "dot":
                continue
            marks = [p.at_ms for p in points]
            x, y = gaps(marks, [p.last for p in points], 3 * tl.step_ms // 2)
            _, custom = gaps(marks, [[f"{p.peak:,}"] for p in points], 3 * tl.step_ms // 2)
            fig.add_trace(go.Scatter(
                x=x, y=y, name=name, mode="lines", customdata=custom,
                line={"color": WEEK_AGO if dash == "dot" else color, "dash": dash,
                      "width": 2 if series == TOTAL else 1.5},
                hovertemplate="<b>%{fullData.name}</b> %{x|%a %d %b %H:%M}<br>online %{y:,}<br>highest within it "
                              "%{customdata[0]}<extra></extra>"))
    fig = time_axis(layout(fig, f"Players online{what}", "players online"))
    fig.update_layout(meta={"asked_ms": tl.end_ms - tl.start_ms})  # the subtitle says how much of it there is
    return fig.update_xaxes(hoverformat="%a %H:%M")
