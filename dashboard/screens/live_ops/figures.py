"""Live ops' first charts, as Vega-Lite specs: the last hour per minute, online and who came and went.

The page's first screen draws these two and nothing heavier. A browser draws a Vega-Lite chart about a second and a
half sooner than a plotly one (plotly's script alone takes that long to start), and Live ops' first chart is the
number an operator waits for (docs/benchmarks.md). The other charts stay plotly, in tabs drawn when opened.

A name is a value in the data, never markup: Vega-Lite draws labels and legends as text, and its tooltips escape
what they show.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dashboard.charts import BEHIND, HEIGHT, LATE, NEUTRAL, ON_TIME, Mark, server_colors, span_text
from streaming.rules.online.rollup import MINUTE_MS, Minute

HOUR_MS = 3_600_000
"""What the charts show: the last hour."""
GAP_MS = 90_000
"""Two minutes further apart than this have a gap between them: the job stopped, and a line across would invent."""

Spec = dict[str, Any]

TRANSITIONS = (("came online", ("login", "heartbeat", "event"), ON_TIME), ("logged out", ("logout",), NEUTRAL),
               ("timed out", ("timeout",), LATE))
"""How the causes of transitions are grouped for ops: a logout is a player leaving, a timeout a player gone
silent (a crash, a network cut), and those are different news."""


def online_per_minute(minutes: Sequence[Minute], labels: Sequence[str], what: str = "",
                      marks: Sequence[Mark] = ()) -> Spec | None:
    """Players online per label (a server, a region, or the rest) at the end of each minute of arrival time, the
    open minute last, with the minute's peak in the tooltip (kept per server, not per group: ``what`` says which).
    None when nobody was online in any of them."""
    if not any(m.last.get(label) for m in minutes for label in labels):
        return None
    rows: list[dict[str, object]] = []
    for i, m in enumerate(minutes):
        gap = i and m.minute_ms - minutes[i - 1].minute_ms > GAP_MS
        for label in labels:
            if gap:  # a row without a count breaks the line
                rows.append({"minute": m.minute_ms - 1, "series": label, "online": None})
            rows.append({"minute": m.minute_ms, "series": label, "online": m.last.get(label, 0),
                         "peak": "not kept per group" if what else f"{m.peak.get(label, 0):,}"})
    colors = server_colors(labels)
    line = {"mark": {"type": "line", "point": len(minutes) <= POINTS_UP_TO, "invalid": "break-paths-show-domains"},
            "data": {"values": rows},
            "encoding": {
                "x": _time_x(minutes),
                "y": {"field": "online", "type": "quantitative", "title": "players online"},
                "color": {"field": "series", "type": "nominal", "title": None, "sort": list(labels),
                          "scale": {"domain": list(labels), "range": [colors[lb] for lb in labels]},
                          "legend": {"orient": "bottom", "labelLimit": 160, "columns": LEGEND_COLUMNS}},
                "tooltip": [{"field": "series", "title": "of"}, _time_tooltip(),
                            {"field": "online", "title": "online at the minute's end", "format": ","},
                            {"field": "peak", "title": "the minute's peak"}]}}
    return _chart(f"Players online{what} per minute", [line, *_marks(marks, minutes)], minutes)


def transitions_per_minute(minutes: Sequence[Minute]) -> Spec | None:
    """Players who came online, logged out and timed out per minute, all servers together. None when none did."""
    rows = [{"minute": m.minute_ms, "what": name,
             "players": sum(by.get(c, 0) for by in m.causes.values() for c in causes)}
            for m in minutes for name, causes, _ in TRANSITIONS]
    if not any(r["players"] for r in rows):
        return None
    names = [name for name, _, _ in TRANSITIONS]
    bars = {"mark": {"type": "bar"}, "data": {"values": rows},
            "encoding": {
                "x": _time_x(minutes, timeUnit="utchoursminutes"),  # a bar a minute wide, the three stacked
                "y": {"field": "players", "type": "quantitative", "title": "players per minute"},
                "color": {"field": "what", "type": "nominal", "title": None, "sort": names,
                          "scale": {"domain": names, "range": [color for _, _, color in TRANSITIONS]},
                          "legend": {"orient": "bottom"}},
                "tooltip": [_time_tooltip(), {"field": "what", "title": "players who"},
                            {"field": "players", "title": "players", "format": ","}]}}
    return _chart("Logins, logouts and timeouts per minute", [bars], minutes)


LEGEND_COLUMNS = 4
"""Legend entries a row at most: seven regions in one row ran past a half-width chart's edge at 1280 px."""
POINTS_UP_TO = 60
"""A point on each minute up to this many minutes (an hour and its open minute), a line alone past it."""


def _time_x(minutes: Sequence[Minute], **more: object) -> dict[str, object]:
    # As many ticks as minutes, a dozen at most, and a label only on a minute: left to itself Vega-Lite ticks a
    # two-minute span every 10 s, and labels each of them with the same minute.
    span = (minutes[-1].minute_ms - minutes[0].minute_ms) // MINUTE_MS
    return {"field": "minute", "type": "temporal", "title": None, "scale": {"type": "utc"},
            "axis": {"labelExpr": "utcseconds(datum.value) == 0 ? utcFormat(datum.value, '%H:%M') : ''",
                     "tickCount": max(1, min(12, span))}, **more}


def _time_tooltip() -> dict[str, object]:
    return {"field": "minute", "type": "temporal", "title": "minute (UTC)", "scale": {"type": "utc"},
            "timeUnit": "utchoursminutes", "format": "%H:%M"}


def _marks(marks: Sequence[Mark], minutes: Sequence[Minute]) -> list[Spec]:
    """Annotations and fired alerts within the chart's span: a moment as a dotted rule, a range shaded."""
    lo, hi = minutes[0].minute_ms, minutes[-1].minute_ms
    shown = [{"start": max(m.start_ms, lo), "end": min(m.end_ms if m.end_ms is not None else m.start_ms, hi),
              "label": m.label, "color": m.color}
             for m in marks if m.start_ms <= hi and (m.end_ms or m.start_ms) >= lo]
    if not shown:
        return []
    return [{"mark": {"type": "rect", "opacity": 0.12}, "data": {"values": [m for m in shown if m["end"] > m["start"]]},
             "encoding": {"x": {"field": "start", "type": "temporal", "scale": {"type": "utc"}},
                          "x2": {"field": "end"}, "color": {"field": "color", "type": "nominal", "scale": None},
                          "tooltip": [{"field": "label", "title": "what"}]}},
            {"mark": {"type": "rule", "strokeDash": [3, 3]}, "data": {"values": [m for m in shown
                                                                                   if m["end"] <= m["start"]]},
             "encoding": {"x": {"field": "start", "type": "temporal", "scale": {"type": "utc"}},
                          "color": {"field": "color", "type": "nominal", "scale": None},
                          "tooltip": [{"field": "label", "title": "what"}]}}]


def _chart(title: str, layers: list[Spec], minutes: Sequence[Minute]) -> Spec:
    """The layers under ``title``, and under it the span the minutes cover of the hour shown
    (:func:`dashboard.charts.span_text`)."""
    span = span_text(minutes[0].minute_ms, minutes[-1].minute_ms, asked_ms=HOUR_MS)
    return {"title": {"text": title, "anchor": "start", "subtitle": span, "subtitleColor": "#555555"},
            "height": HEIGHT - 80, "layer": layers,
            "resolve": {"scale": {"color": "independent"}}}


MAP_COLORS = {"live": ON_TIME, "empty": NEUTRAL, "silent": BEHIND}
"""The fleet map's states in status colours: green speaking, grey speaking with nobody online, red silent."""


def fleet_map(cells: Sequence[dict[str, object]]) -> Spec | None:
    """Every live server as a cell coloured by state, a block of rows per region (one order on every page); hover
    names the server, a click opens its events. Names are data, never markup. None without servers."""
    if not cells:
        return None
    states = [s for s in MAP_COLORS if any(c["state"] == s for c in cells)]
    regions = list(dict.fromkeys(str(c["region"]) for c in cells))
    return {"data": {"values": list(cells)}, "title": {"text": "The fleet: every live server", "anchor": "start",
                                                        "subtitle": "a click opens its events"},
            "facet": {"row": {"field": "region", "type": "nominal", "sort": regions, "title": None,
                              "header": {"labelAngle": 0, "labelAlign": "left", "labelFontSize": 13}}},
            "spacing": 4, "resolve": {"scale": {"y": "independent"}},
            "spec": {"width": {"step": 30}, "height": {"step": 22},  # 25 cells a row: 750 px, at 1280 px too
                     "mark": {"type": "rect", "stroke": "white", "strokeWidth": 2, "cursor": "pointer"},
                     "encoding": {
                         "x": {"field": "col", "type": "ordinal", "axis": None},
                         "y": {"field": "row", "type": "ordinal", "axis": None},
                         "color": {"field": "state", "type": "nominal", "title": None, "sort": states,
                                   "scale": {"domain": states, "range": [MAP_COLORS[s] for s in states]},
                                   "legend": {"orient": "bottom"}},
                         "href": {"field": "href"},
                         "tooltip": [{"field": "server"}, {"field": "region"}, {"field": "state"},
                                     {"field": "players", "title": "players online", "format": ","}]}}}
