"""The rules every chart on every page keeps, checked on a figure's spec (issue 18, item 1).

One function for both places a figure is found: built by ``dashboard.charts`` in a unit test, or read out of
the browser (each ``.js-plotly-plot``'s ``data`` and ``layout``) while a real stack runs. It returns what is
wrong, in words; an empty list is a pass.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from dashboard.charts import MAX_TRACES, TITLE_MAX_CHARS

EPOCH_2000_MS = 946_684_800_000
"""No time axis of ours shows anything before 2000: an axis there is the 1970 of a watermark of 0."""


def to_ms(v: object) -> float | None:
    if v is None:
        return None
    if isinstance(v, datetime):
        return v.timestamp() * 1000
    if isinstance(v, str):
        try:
            d = datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            return None
        return (d if d.tzinfo else d.replace(tzinfo=UTC)).timestamp() * 1000
    return None


def _values(trace: Mapping, axis: str) -> list:
    vals = trace.get(axis)
    return [] if vals is None else list(vals)


def audit(data: Sequence[Mapping], layout: Mapping, range_ms: int | None = None, half_width: bool = True,
          name: str = "chart") -> list[str]:
    """What breaks the rules in one figure: at most :data:`MAX_TRACES` series, a title that fits, time axes
    within the data shown (never 1970, never wider than ``range_ms``), count axes from zero, no raw column
    name in a title or a trace name, something to show."""
    problems: list[str] = []
    title = re.sub(r"<[^>]+>", "", (layout.get("title") or {}).get("text") or "")  # Streamlit adds <b>
    if half_width and len(title) > TITLE_MAX_CHARS:
        problems.append(f"{name}: title of {len(title)} characters may be cut: {title!r}")
    # A series is a legend entry: drawn in two styles (solid final, dotted provisional) it is one, in its legend group.
    series = {t.get("legendgroup") or t.get("name") for t in data
              if t.get("showlegend", True) is not False and (t.get("name") or t.get("legendgroup"))}
    if len(series) > MAX_TRACES:
        problems.append(f"{name}: {len(series)} series (at most {MAX_TRACES})")
    if len(data) > 2 * MAX_TRACES:
        problems.append(f"{name}: {len(data)} traces (at most {2 * MAX_TRACES}: a series in two styles at most)")
    labels = [title, *(t.get("name") or "" for t in data)]
    for key, axis in layout.items():
        if key.startswith(("xaxis", "yaxis")) and isinstance(axis, Mapping):
            labels.append(((axis.get("title") or {}).get("text")) or "")
    raw = [s for s in labels if "_" in s]
    if raw:
        problems.append(f"{name}: raw names {raw}")
    if not any(v is not None for t in data for v in _values(t, "y")):
        problems.append(f"{name}: nothing to show (say it in words instead)")
    xs = [m for t in data for v in _values(t, "x") if (m := to_ms(v)) is not None]
    xaxis = layout.get("xaxis") or {}
    rng = xaxis.get("range")
    if xs and rng:
        lo, hi = (to_ms(r) for r in rng)
        if lo is not None and hi is not None:
            if lo < EPOCH_2000_MS:
                problems.append(f"{name}: time axis starts in {datetime.fromtimestamp(lo / 1000, UTC):%Y}")
            span = max(xs) - min(xs)
            slack = max(span * 0.1, 120_000)  # a bar's half width, a little air
            if lo < min(xs) - slack or hi > max(xs) + slack:
                problems.append(f"{name}: time axis {rng} reaches past the data")
            if range_ms is not None and hi - lo > range_ms + slack:
                problems.append(f"{name}: time axis spans {(hi - lo) / 60_000:.0f} min, more than the range")
    yaxis = layout.get("yaxis") or {}
    ys = [v for t in data for v in _values(t, "y") if isinstance(v, (int, float))]
    yr = yaxis.get("range")
    log = yaxis.get("type") == "log"  # a log axis' range is in powers of ten: below zero is under 1, not negative
    if ys and min(ys) >= 0 and yr and isinstance(yr[0], (int, float)) and yr[0] < 0 and not log:
        problems.append(f"{name}: count axis goes below zero ({yr})")
    return problems
