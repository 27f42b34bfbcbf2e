"""What every time chart shares: its axis spanning the data, the span under its title and ticks for it
(:func:`frame`), a gap where there is no data (:func:`gaps`), and what is drawn over it: where history was lost,
and the annotations' marks (:func:`mark`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import plotly.graph_objects as go

from dashboard.charts.style import BEHIND, HEIGHT, ts
from streaming.schema.records import Annotation
from streaming.store.views.snapshot import BatchPoint
from watermark_client.timeutil import human_ms


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
