"""The look every chart shares: the colours (one per server or region, and the three that mean status), the
size, the title's room, the theme, and when a chart has nothing to show. Every other chart module draws with these.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

import plotly.graph_objects as go

PALETTE = ("#1f77b4", "#9467bd", "#17becf", "#e377c2", "#393b79", "#7f7f7f", "#a55194", "#0e6e7a", "#6b6ecf",
           "#7b4173")
"""Servers' and regions' colours: blue, purple, cyan, pink, navy, grey, magenta, dark cyan, periwinkle, plum; no
red, amber or green (a test holds every hue out of their ranges)."""
WALL_CLOCK = "#888888"
WATERMARK = "#111111"
"""The watermark: black, the line every other is read against."""
MAX_EVENT = "#6b6b6b"
BEHIND = "#d62728"
"""Status red: dropped, late past the watermark, slower than the trigger, firing."""
LATE = "#ff7f0e"
"""Status amber: late but accepted, warning."""
ON_TIME = "#2ca02c"
"""Status green: on time, within the trigger, fine."""
NEUTRAL = "#6b6b6b"
"""What is neither a server nor a status (a logout, arrivals)."""
PROVISIONAL_PATTERN = "/"
HEIGHT = 340
TITLE_MAX_CHARS = 48
"""What a chart's title holds without being cut in half of a 1280 px page."""
MAX_TRACES = 10
"""More series than this in one chart (its legend entries: a series drawn solid and dotted is one) and they hide
each other: past :data:`dashboard.fleet.MAX_SERIES` servers a chart draws regions, or the few that matter."""


MARKERS_UP_TO = 60
"""Points a line shows a marker on each of, at most: past that a line alone (a browser draws each marker as an
element of its own, and Live ops' lines of 600 batches each took it seconds to draw before its first chart)."""


def line_mode(points: int) -> str:
    """``lines+markers`` for a short line, ``lines`` for a long one (:data:`MARKERS_UP_TO`)."""
    return "lines+markers" if points <= MARKERS_UP_TO else "lines"


def ts(ms: int | float) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def server_colors(servers: Iterable[str]) -> dict[str, str]:
    """Stable colours: by sorted name, so a server keeps its colour on every page."""
    return {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(sorted(servers))}


def layout(fig: go.Figure, title: str, y_title: str, height: int = HEIGHT, counts: bool = True) -> go.Figure:
    fig.update_layout(
        title={"text": title, "x": 0, "xanchor": "left"}, height=height, margin={"l": 10, "r": 10, "t": 50, "b": 10},
        legend={"orientation": "h", "y": -0.14, "yanchor": "top", "traceorder": "normal"}, hovermode="closest",
        yaxis_title=y_title,
    )
    if counts:
        fig.update_yaxes(rangemode="tozero")
    return fig


INK, FADED, GRID, PAPER = "#31333f", "#808495", "#e6eaf1", "#ffffff"
"""Streamlit's light theme: body text, faded text (ticks, axis titles), grid lines, background."""
FONT = '"Source Sans", sans-serif'
"""Streamlit's body font, which the page loads."""
THEME = go.layout.Template(layout={
    "font": {"family": FONT, "size": 12, "color": INK},
    "title": {"font": {"family": FONT, "size": 16, "color": INK, "weight": 600}, "x": 0, "xanchor": "left",
              "pad": {"l": 2}, "subtitle": {"font": {"size": 12, "color": FADED}}},
    "paper_bgcolor": PAPER, "plot_bgcolor": PAPER, "colorway": PALETTE, "margin": {"pad": 8},
    "legend": {"font": {"size": 12, "color": INK}, "borderwidth": 0, "valign": "top",
               "title": {"side": "top", "font": {"size": 12, "color": FADED}}},
    "xaxis": {"showgrid": False, "zeroline": False, "gridcolor": GRID, "linecolor": GRID, "tickcolor": GRID,
              "tickfont": {"size": 12, "color": FADED},
              "title": {"font": {"size": 14, "color": FADED}, "standoff": 20}, "automargin": True},
    "yaxis": {"gridcolor": GRID, "zerolinecolor": GRID, "tickcolor": GRID, "ticklabelposition": "outside",
              "tickfont": {"size": 12, "color": FADED},
              "title": {"font": {"size": 14, "color": FADED}, "standoff": 24}, "automargin": True},
    "hoverlabel": {"bgcolor": PAPER, "bordercolor": GRID, "font": {"family": FONT, "size": 12, "color": INK}},
})
"""The look of every chart, Streamlit's own (its light theme), applied by us: ``dashboard.ui`` draws every
chart with ``theme=None``.
Streamlit's theme wraps ``layout.title`` in ``<b>`` in the browser each time the same figure is drawn again
(``<b><b><b>Players online…`` after three refreshes); with our own template nothing changes a figure once sent."""


def themed(fig: go.Figure) -> go.Figure:
    """``fig`` in :data:`THEME`; applied where every chart is drawn (``dashboard.ui``), to the copy drawn."""
    fig.update_layout(template=THEME)
    return fig


def has_data(fig: go.Figure) -> bool:
    """Whether any trace has a value worth drawing: a count chart of nothing but zeros is empty too."""
    for t in fig.data:
        if getattr(t, "showlegend", None) is False and t.name in ("", None):
            continue
        for y in t.y or ():
            if y is not None and y != 0:
                return True
    return False
