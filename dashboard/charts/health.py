"""Charts of the job's health, a point per batch (the Health page): how long each batch took against the
trigger, entries arriving against committed, and each batch's input."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from dashboard.charts.style import BEHIND, NEUTRAL, ON_TIME, WALL_CLOCK, layout, ts
from dashboard.charts.time_axes import batch_gap_ms, gaps, time_axis
from streaming.store.views.snapshot import BatchPoint


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
    if timed:  # the trigger as a line named in the legend, not a label written over the bars
        fig.add_trace(go.Scatter(x=[ts(timed[0].batch_ts_ms), ts(timed[-1].batch_ts_ms)], y=[trigger_ms / 1000] * 2,
                                 name=f"trigger ({trigger_ms / 1000:g} s)", mode="lines",
                                 line={"color": WALL_CLOCK, "dash": "dash"}, hoverinfo="skip"))
        top = max(trigger_ms, *(b.duration_ms for b in timed)) / 1000  # type: ignore[type-var]
        fig.update_yaxes(range=[0, top * 1.1])  # the tallest bar whole
    fig = layout(fig, "Batch duration (red: longer than the trigger)", "seconds")
    return time_axis(fig, pad_ms=batch_gap_ms(batches) // 10)


RATE_SPAN = 10
"""Batches a committed rate is averaged over: one batch's own rate swings with its duration."""


def committed_rates(batches: Sequence[BatchPoint], span: int = RATE_SPAN) -> list[float | None]:
    """Entries committed per second of wall time over the last ``span`` batches (up to each one): it equals the
    arriving rate while the job keeps up and falls below it when the job falls behind."""
    out: list[float | None] = []
    for i, b in enumerate(batches):
        j = max(0, i - span)
        elapsed_ms = b.batch_ts_ms - batches[j].batch_ts_ms
        out.append(sum(x.input for x in batches[j + 1:i + 1]) * 1000 / elapsed_ms if elapsed_ms > 0 else None)
    return out


def rates(batches: Sequence[BatchPoint]) -> go.Figure:
    """Entries arriving per second (Spark's input rate) against entries committed per second of wall time."""
    limit = batch_gap_ms(batches)
    marks = [b.batch_ts_ms for b in batches]
    fig = go.Figure()
    for name, values, color in (("arriving", [b.input_per_s for b in batches], NEUTRAL),
                                (f"committed (over {RATE_SPAN} batches)", committed_rates(batches), ON_TIME)):
        x, y = gaps(marks, values, limit)
        _, custom = gaps(marks, [[b.batch] for b in batches], limit)
        fig.add_trace(go.Scatter(
            x=x, y=y, name=name, mode="lines", line={"color": color}, customdata=custom,
            hovertemplate=f"batch %{{customdata[0]}}<br>{name} %{{y:,.0f}} entries/s<extra></extra>",
        ))
    return time_axis(layout(fig, "Entries arriving and committed per second", "entries/s"))


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
    return time_axis(layout(fig, "Entries per batch", "entries"), pad_ms=batch_gap_ms(batches) // 10)
