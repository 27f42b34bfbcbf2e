"""Plotly figures: data in, figure out. No Redis, no Streamlit, so each is unit-tested.

Conventions every chart keeps, so a reader learns them once:

* one colour per server or region, the same on every page (:func:`server_colors`), from a categorical palette
  without red, amber or green: those three mean status and outcome only (:data:`BEHIND` dropped, late or slow;
  :data:`LATE` late but accepted; :data:`ON_TIME` on time or fine), so a server is never read as bad news;
* provisional windows (the watermark has not passed their end, numbers can
  still grow) are hatched and lighter, or drawn dotted; final ones are solid;
* hovering any point tells its batch (or window) and its exact values;
* times are UTC; a time axis spans the data shown and no more, and a stretch with no data (the job
  stopped, a server silent) is a gap in the line, never a straight line across it;
* under a time chart's title, the span its data covers, and how much of the span asked for that is
  (:func:`frame`); its ticks are formatted for that span, so no two read alike;
* count axes start at zero; a title fits a half-width chart (:data:`TITLE_MAX_CHARS`);
* a chart with nothing to show is not drawn: the page says in words what would appear (:func:`has_data`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from streaming.rules.online.rollup import TOTAL
from streaming.schema.records import Annotation, LagRecord
from streaming.store.history_store import Timeline
from streaming.store.views.online import OnlinePoint
from streaming.store.views.snapshot import BatchPoint, WindowRow
from watermark_client.timeutil import human_ms

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


def time_axis(fig: go.Figure, *, pad_ms: int = 0, **where: object) -> go.Figure:
    """The x axis (or the one ``where`` selects) spans exactly the times in the data, padded by ``pad_ms`` (half
    a bar's width), with one-line tick labels (no date line for the legend to sit on)."""
    xs = [x for t in fig.data for x in (t.x or ()) if isinstance(x, datetime)]
    fig.update_xaxes(hoverformat="%H:%M:%S", **where)
    if xs:
        lo, hi = min(xs), max(xs)
        # Room for the end markers: 2% of the span, or half a bar.
        pad = timedelta(milliseconds=pad_ms) if pad_ms else max((hi - lo) / 50, timedelta(seconds=1))
        fig.update_xaxes(range=[lo - pad, hi + pad], **where)
    return fig


SECONDS_UP_TO_MS = 10 * 60_000
"""A time axis spanning up to this shows seconds: past it, a minute a tick at most (else "05:31 05:31 05:31")."""


def tick_format(span_ms: int) -> str:
    """The tick labels of a time axis spanning ``span_ms``: seconds up to 10 minutes, minutes up to two days, then
    the day too; plotly's ticks then never fall closer than the labels tell apart.

    >>> [tick_format(ms) for ms in (120_000, 3_600_000, 3 * 86_400_000)]
    ['%H:%M:%S', '%H:%M', '%a %d %H:%M']
    """
    return "%H:%M:%S" if span_ms <= SECONDS_UP_TO_MS else "%H:%M" if span_ms <= 2 * 86_400_000 else "%a %d %H:%M"


def span_text(lo_ms: int, hi_ms: int, asked_ms: int | None = None) -> str:
    """The span a time chart's data covers, as its subtitle says it; with ``asked_ms`` (the range the reader chose)
    and less data than that, the range asked for too.

    >>> span_text(1_767_225_600_000, 1_767_227_400_000, asked_ms=86_400_000)
    '00:00–00:30 UTC · 30 min of data (24 h asked)'
    >>> span_text(1_767_225_600_000, 1_767_225_630_000)
    '00:00:00–00:00:30 UTC · 30.0 s'
    """
    span_ms = hi_ms - lo_ms
    fmt = tick_format(span_ms) if span_ms < 86_400_000 else "%a %d %H:%M"  # past a day, "05:31–05:34" is ambiguous
    length = f"{round(span_ms / 86_400_000)} days" if span_ms >= 2 * 86_400_000 else human_ms(span_ms)
    text = f"{ts(lo_ms):{fmt}}–{ts(hi_ms):{fmt}} UTC · {length}"
    if asked_ms is not None and span_ms < 0.9 * asked_ms:
        return f"{text} of data ({_whole(asked_ms)} asked)"
    return text


def _whole(ms: int) -> str:
    """A range as a reader chose it: ``24 h``, ``7 days``."""
    if ms >= 2 * 86_400_000 and ms % 86_400_000 == 0:
        return f"{ms // 86_400_000} days"
    return f"{ms // 3_600_000} h" if ms % 3_600_000 == 0 else human_ms(ms)


def _x_span(fig: go.Figure) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """A time chart's x span in ms: what it shows (its axis range, else its data's) and its data's; None without a
    time x axis."""
    xs = [x for t in fig.data for x in (t.x or ()) if isinstance(x, datetime)]
    if not xs:
        return None
    data = _ms(min(xs)), _ms(max(xs))
    rng = fig.layout.xaxis.range
    shown = (_ms(rng[0]), _ms(rng[1])) if rng and all(isinstance(r, datetime | str) for r in rng) else data
    return shown, data


def frame(fig: go.Figure) -> go.Figure:
    """A time chart's frame, applied to every chart as it is drawn (``dashboard.ui``): the span its data covers
    under the title (:func:`span_text`; ``layout.meta["asked_ms"]`` the range asked for, when there is one) and tick
    labels for that span (:func:`tick_format`). Charts without a time x axis are left as they are."""
    span = _x_span(fig)
    if span is None:
        return fig
    (shown_lo, shown_hi), (data_lo, data_hi) = span
    lo, hi = max(shown_lo, data_lo), min(shown_hi, data_hi)  # the data's span, not the axis' padding
    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else {}
    fig.update_xaxes(tickformat=tick_format(hi - lo))
    if fig.layout.title.text and fig.layout.title.subtitle.text is None:
        # the subtitle's room added above, so the plot keeps its height and its legend stays clear of the ticks
        top = fig.layout.margin.t if fig.layout.margin.t is not None else 50
        fig.update_layout(title_subtitle_text=span_text(lo, hi, meta.get("asked_ms")), margin_t=top + 16,
                          height=(fig.layout.height or HEIGHT) + 16)
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


def gaps(xs_ms: Sequence[int], ys: Sequence[object], limit_ms: int) -> tuple[list[datetime | None], list[object]]:
    """Points as plotly draws them with a break (a None) wherever two neighbours are more than ``limit_ms``
    apart: the job stopped, or nothing arrived, and a line across would invent values."""
    out_x: list[datetime | None] = []
    out_y: list[object] = []
    for i, (x, y) in enumerate(zip(xs_ms, ys, strict=True)):
        if i and x - xs_ms[i - 1] > limit_ms:
            out_x.append(None)
            out_y.append(None)
        out_x.append(ts(x))
        out_y.append(y)
    return out_x, out_y


def batch_gap_ms(batches: Sequence[BatchPoint]) -> int:
    """Neighbouring batches further apart than this are a gap: five times their usual spacing, at least 10 s."""
    steps = sorted(b.batch_ts_ms - a.batch_ts_ms for a, b in zip(batches, batches[1:], strict=False))
    usual = steps[len(steps) // 2] if steps else 0
    return max(10_000, 5 * usual)


LOST = "#111111"


def mark_loss(fig: go.Figure, batches: Sequence[BatchPoint], lost_at_batch: int | None) -> go.Figure:
    """A vertical line where Redis came back empty (before ``lost_at_batch``), named in the legend, when that
    batch is in the range: what is left of it is all there is."""
    at = next((b for b in batches if b.batch == lost_at_batch), None)
    if at is None:
        return fig
    ys = [y for t in fig.data for y in (t.y or ()) if y is not None]
    if not ys:
        return fig
    fig.add_trace(go.Scatter(x=[ts(at.batch_ts_ms)] * 2, y=[min(ys), max(ys)], mode="lines",
                             name=f"history lost (batch {lost_at_batch})", line={"color": LOST, "dash": "dashdot"},
                             hovertemplate="Redis came back empty before this batch: totals and windows open then "
                                           "count only what came after<extra></extra>"))
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


@dataclass(frozen=True)
class Mark:
    """Something drawn over a time chart: a moment (a line) or a range (shaded)."""

    start_ms: int
    end_ms: int | None
    label: str
    color: str


ANNOTATION_COLORS = {"deploy": "#393b79", "maintenance": "#7f7f7f", "incident": BEHIND, "note": "#6b6b6b"}
LABELLED_MARKS = 8
"""Marks named on the chart itself; past them a mark is drawn with its name in the list under the charts."""


def annotation_marks(annotations: Sequence[Annotation]) -> list[Mark]:
    return [Mark(a.start_ms, a.end_ms, f"{a.kind}: {a.text}" + (f" ({a.region})" if a.region else ""),
                 ANNOTATION_COLORS.get(a.kind, ANNOTATION_COLORS["note"])) for a in annotations]


def mark(fig: go.Figure, marks: Sequence[Mark]) -> go.Figure:
    """Draw the marks over the chart's time range (its x axis range, else the span of its data): a range shaded,
    a moment as a dotted line, each named at the top while there are few. Shapes, not traces: the legend keeps
    the chart's lines."""
    span = _x_span(fig)
    if span is None or not marks:  # no time axis (a bar per server, a delay): nothing to draw over
        return fig
    lo_ms, hi_ms = span[0]
    shown = [m for m in marks if m.start_ms <= hi_ms and (m.end_ms or m.start_ms) >= lo_ms]
    for i, m in enumerate(shown):
        start = ts(max(m.start_ms, lo_ms))
        if m.end_ms is None or m.end_ms == m.start_ms:
            fig.add_shape(type="line", x0=start, x1=start, y0=0, y1=1, yref="paper",
                          line={"color": m.color, "dash": "dot", "width": 1.5})
        else:
            fig.add_shape(type="rect", x0=start, x1=ts(min(m.end_ms, hi_ms)), y0=0, y1=1, yref="paper",
                          fillcolor=m.color, opacity=0.12, line={"width": 0}, layer="below")
        if i < LABELLED_MARKS:
            # Dark text on a light box edged in the mark's colour, read over any band; stepped down so neighbours
            # do not cover each other; towards the right edge it ends at the mark, so it is never cut; the whole
            # label on hover.
            right = (m.start_ms - lo_ms) > 0.6 * max(1, hi_ms - lo_ms)
            fig.add_annotation(x=ts(min(m.end_ms or m.start_ms, hi_ms)) if right else start, y=1 - 0.09 * (i % 3),
                               yref="paper", text=m.label[:40], hovertext=m.label, showarrow=False,
                               xanchor="right" if right else "left", yanchor="top",
                               font={"size": 11, "color": "#222222"}, bgcolor="rgba(255,255,255,0.85)",
                               bordercolor=m.color, borderwidth=1)
    return fig


def _ms(x: object) -> int:
    when = x if isinstance(x, datetime) else datetime.fromisoformat(str(x))
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


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


def dropped_per_window(windows: Sequence[WindowRow], servers: Sequence[str]) -> go.Figure:
    """Events that arrived after their window closed, per window and server (a closed window is final)."""
    return _per_window_bars(windows, servers, "dropped", "Dropped late per window", "events dropped", hatch=False)


# --------------------------------------------------------------------------- lag


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
