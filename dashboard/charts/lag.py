"""The Lag page's chart: how far behind event time each server's events arrive and are processed."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.charts.style import layout, server_colors
from dashboard.charts.time_axes import batch_gap_ms, gaps, time_axis
from streaming.schema.records import LagRecord
from streaming.store.views.snapshot import BatchPoint

LAG_STATS = {"p50": "median", "p95": "95th percentile", "max": "maximum"}


def lag_chart(batches: Sequence[BatchPoint], servers: Sequence[str], stat: str = "p95") -> go.Figure:
    """One statistic (``p50``, ``p95`` or ``max``) of ingest − event time and of processing − event time, per
    server and batch: one line per server in each panel, so no server's line hides another's pattern."""
    colors = server_colors(servers)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.14, subplot_titles=(
        "ingest − event time (network and server delay)", "processing − event time (what the watermark sees)"))
    limit = batch_gap_ms(batches)
    for row, attr in ((1, "ingest_lag_ms"), (2, "processing_lag_ms")):
        for s in servers:
            pts: list[tuple[BatchPoint, LagRecord]] = [(b, lag) for b in batches
                                                 if (sb := b.servers.get(s)) and (lag := getattr(sb, attr))]
            x, y = gaps([b.batch_ts_ms for b, _ in pts], [getattr(lag, stat) / 1000 for _, lag in pts], limit)
            _, custom = gaps([b.batch_ts_ms for b, _ in pts], [[b.batch] for b, _ in pts], limit)
            fig.add_trace(go.Scatter(
                x=x, y=y, name=s, legendgroup=s, showlegend=row == 1, mode="lines", line={"color": colors[s]},
                customdata=custom,
                hovertemplate=f"<b>%{{fullData.name}}</b> {stat} %{{y:.2f}} s<br>batch %{{customdata[0]}}"
                              "<extra></extra>",
            ), row=row, col=1)
    fig = layout(fig, f"Event-time lag per server: {LAG_STATS[stat]}", "seconds (log)", height=560)
    # a log scale: a server 25 s behind and one at 0.4 s are both read, neither flattened by the other
    fig.update_yaxes(type="log", title_text="seconds (log)", rangemode="normal")
    return time_axis(fig)
