"""Charts of the windows, a value per window and server (Live ops, Watermark): final windows solid,
provisional ones hatched or dotted."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from dashboard.charts.style import PROVISIONAL_PATTERN, layout, line_mode, server_colors, ts
from dashboard.charts.time_axes import gaps, time_axis
from streaming.store.views.snapshot import WindowRow


def _window_label(w: WindowRow) -> str:
    return f"{ts(w.start_ms):%H:%M:%S}–{ts(w.end_ms):%H:%M:%S}"


def _window_custom(w: WindowRow) -> list[object]:
    return [_window_label(w), w.events, w.players, w.dropped, w.late, "final" if w.final else "provisional"]


_WINDOW_HOVER = ("<b>%{fullData.name}</b> window %{customdata[0]} (%{customdata[5]})<br>players %{customdata[2]:,}"
                 "<br>events %{customdata[1]:,} · late accepted %{customdata[4]:,} · dropped %{customdata[3]:,}"
                 "<extra></extra>")



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
            hovertemplate=_WINDOW_HOVER if w else
            "<b>%{fullData.name}</b>: no events in the current window<extra></extra>",
            showlegend=False,
        ))
    return layout(fig, "Current window's players (hatched: provisional)", "distinct players")


def players_over_time(windows: Sequence[WindowRow], servers: Sequence[str]) -> go.Figure:
    """Distinct players per window and server: solid where final, dotted where provisional."""
    return _per_window_lines(windows, servers, "players", "Players per window", "distinct players")


def events_per_window(windows: Sequence[WindowRow], servers: Sequence[str]) -> go.Figure:
    """Accepted events per window and server, grouped; provisional windows hatched."""
    return _per_window_bars(windows, servers, "events", "Events per window (hatched: provisional)", "events",
                            hatch=True)


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
    return time_axis(layout(fig, title, y_title), pad_ms=_window_step_ms(windows) // 2)


def _window_step_ms(windows: Sequence[WindowRow]) -> int:
    """The slide, as the smallest step between window starts (a window length when there is one start)."""
    starts = sorted({w.start_ms for w in windows})
    steps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    return min(steps) if steps else (windows[0].end_ms - windows[0].start_ms if windows else 60_000)


def _per_window_lines(windows: Sequence[WindowRow], servers: Sequence[str], attr: str, title: str,
                      y_title: str) -> go.Figure:
    colors = server_colors(servers)
    limit = 3 * _window_step_ms(windows) // 2  # a window with no events is missing: a gap, not a line across
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
            x, y = gaps([w.start_ms for w in part], [getattr(w, attr) for w in part], limit)
            _, custom = gaps([w.start_ms for w in part], [_window_custom(w) for w in part], limit)
            fig.add_trace(go.Scatter(  # the dotted part in the legend only when the series has no solid one
                x=x, y=y, name=s + suffix, legendgroup=s, showlegend=not suffix or not final, mode=line_mode(len(x)),
                line={"color": colors[s], "dash": dash}, marker={"symbol": symbol, "size": 7}, customdata=custom,
                hovertemplate=_WINDOW_HOVER,
            ))
    return time_axis(layout(fig, title + " (dotted: provisional)", y_title))


def dropped_per_window(windows: Sequence[WindowRow], servers: Sequence[str]) -> go.Figure:
    """Events that arrived after their window closed, per window and server (a closed window is final)."""
    return _per_window_bars(windows, servers, "dropped", "Dropped late per window", "events dropped", hatch=False)
