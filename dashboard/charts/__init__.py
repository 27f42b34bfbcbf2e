"""Plotly figures: data in, figure out. No Redis, no Streamlit, so each is unit-tested. Each chart is in the
module of what it is for (``windows``, ``online``, ``watermark``, ``lag``, ``health``), the look they share in
``style`` and what every time chart shares in ``time_axes``; they are imported from here.

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

from dashboard.charts.health import RATE_SPAN, batch_durations, committed_rates, input_per_batch, rates
from dashboard.charts.lag import LAG_STATS, lag_chart
from dashboard.charts.online import HISTORY_TOTAL, WEEK_AGO, online_history, online_over_batches
from dashboard.charts.style import (
    BEHIND,
    FADED,
    FONT,
    GRID,
    HEIGHT,
    INK,
    LATE,
    MARKERS_UP_TO,
    MAX_EVENT,
    MAX_TRACES,
    NEUTRAL,
    ON_TIME,
    PALETTE,
    PAPER,
    PROVISIONAL_PATTERN,
    THEME,
    TITLE_MAX_CHARS,
    WALL_CLOCK,
    WATERMARK,
    has_data,
    layout,
    line_mode,
    server_colors,
    themed,
    ts,
)
from dashboard.charts.time_axes import (
    ANNOTATION_COLORS,
    LABELLED_MARKS,
    LOST,
    SECONDS_UP_TO_MS,
    Mark,
    annotation_marks,
    batch_gap_ms,
    frame,
    gaps,
    mark,
    mark_loss,
    span_text,
    tick_format,
    time_axis,
)
from dashboard.charts.watermark import per_server_over_time, watermark_lag, watermark_vs_time
from dashboard.charts.windows import dropped_per_window, events_per_window, players_now, players_over_time

__all__ = ["ANNOTATION_COLORS", "BEHIND", "FADED", "FONT", "GRID", "HEIGHT", "HISTORY_TOTAL", "INK", "LABELLED_MARKS",
           "LAG_STATS", "LATE", "LOST", "MARKERS_UP_TO", "MAX_EVENT", "MAX_TRACES", "Mark", "NEUTRAL", "ON_TIME",
           "PALETTE", "PAPER", "PROVISIONAL_PATTERN", "RATE_SPAN", "SECONDS_UP_TO_MS", "THEME", "TITLE_MAX_CHARS",
           "WALL_CLOCK", "WATERMARK", "WEEK_AGO", "annotation_marks", "batch_durations", "batch_gap_ms",
           "committed_rates", "dropped_per_window", "events_per_window", "frame", "gaps", "has_data",
           "input_per_batch", "lag_chart", "layout", "line_mode", "mark", "mark_loss", "online_history",
           "online_over_batches", "per_server_over_time", "players_now", "players_over_time", "rates",
           "server_colors", "span_text", "themed", "tick_format", "time_axis", "ts", "watermark_lag",
           "watermark_vs_time"]
