"""Choosing the delay: the trade-off between a longer watermark delay and events dropped as late, in words and one
figure. Pure (no Redis, no Streamlit)."""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go

from dashboard.charts import WALL_CLOCK, layout, server_colors
from dashboard.fleet import grouping
from dashboard.status import human_ms
from streaming.rules.tradeoff import Tradeoff


def delay_text(ms: int | None) -> str:
    """A candidate delay in words; None is a recommendation that no candidate meets."""
    return "beyond the largest candidate" if ms is None else human_ms(ms) if ms else "0 s"


TICK_DELAYS_MS = frozenset({0, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000, 120_000, 300_000, 600_000, 1_800_000,
                            3_600_000})
"""The candidate delays labelled on the axis: every candidate is drawn, but their labels would pile up where
the log scale packs them together (30 s to 3 min); hovering a point names its delay."""


def tradeoff_chart(tradeoff: Tradeoff, current_delay_ms: int, recommended_ms: int | None,
                   regions: Mapping[str, str] | None = None) -> go.Figure:
    """Share of (event, window) pairs each candidate delay would have dropped, overall and per server (per
    region past a few servers: each region's share over its servers' pairs, exactly).

    The delay axis is logarithmic (candidates run from 1 s to 1 h); 0 s sits at half a second."""
    fig = go.Figure()
    g = grouping(tradeoff.servers, regions or {}, {})
    colors = server_colors(g.labels)

    def x(ms: int) -> float:
        return max(ms, 500) / 1000

    xs = [x(d) for d in tradeoff.grid]
    top = 0.0
    for name, servers, color in [("all servers", None, "#000000"),
                                 *[(label, list(members), colors[label]) for label, members in g.members.items()]]:
        cands = tradeoff.candidates(servers)
        ys = [100 * c.dropped_share for c in cands]
        top = max(top, *ys)
        fig.add_trace(go.Scatter(
            x=xs, y=ys, name=name, mode="lines+markers",
            line={"color": color, "width": 3 if servers is None else 1.5},
            customdata=[[delay_text(c.delay_ms), c.dropped, c.pairs] for c in cands],
            hovertemplate="<b>%{fullData.name}</b> delay %{customdata[0]}<br>%{y:.3g}% dropped (%{customdata[1]:,} of "
                          "%{customdata[2]:,} pairs)<extra></extra>"))
    marks = [("current delay", current_delay_ms, WALL_CLOCK, "dash")]
    if recommended_ms is not None:
        marks.append(("recommended", recommended_ms, "#111111", "solid"))
    for label, ms, color, dash in marks:  # vertical lines as traces: they sit right on a log axis
        fig.add_trace(go.Scatter(x=[x(ms), x(ms)], y=[0, top or 1], name=label, mode="lines",
                                 line={"color": color, "dash": dash},
                                 hovertemplate=f"%{{fullData.name}}: {delay_text(ms)}<extra></extra>"))
    ticks = [(x(d), delay_text(d)) for d in tradeoff.grid if d in TICK_DELAYS_MS]
    fig.update_xaxes(title="watermark delay", type="log", tickvals=[t for t, _ in ticks],
                     ticktext=[label for _, label in ticks])
    fig.update_yaxes(ticksuffix="%")
    fig = layout(fig, "Dropped if the delay had been…", "dropped (share of event-window pairs)", height=400)
    fig.update_layout(legend={"y": -0.25})  # below the axis title
    return fig
