"""The wall's screen as HTML: data in, markup out (pure, tested as tables and measured in Chromium).

A TV across a room (1920x1080, dark, high contrast), top to bottom:

1. **The status tile**, full width: green, amber or red, in words (the pipeline's health by the one rule,
   :mod:`streaming.alerting.health`), with the two figures behind it.
2. **Players online**: the total in digits at least 120 px tall, its change over the hour (▲▼), "as of" when no
   server is speaking, and its sparkline (six hours, its own scale); beside it **the regions** as small multiples,
   each its name and number in its line's colour, its change over the hour and its own sparkline on its own scale,
   so a big region never flattens a small one.
3. **The servers by state** under the total, and **what fires** under the regions, one line each, grouped by
   alert and region.

Every name here comes from producers: it goes through :func:`html.escape` and is never markup.
"""

from __future__ import annotations

import html
from base64 import b64decode, b64encode  # noqa: F401 - b64decode: the doctest's
from collections.abc import Sequence
from dataclasses import dataclass

BACKGROUND = "#0b0f14"
INK = "#f2f4f7"
DIM = "#a9b1bc"
TILE = {"ok": "#1b7a3a", "info": "#1f4e8c", "warning": "#b36b00", "error": "#b3261e"}
"""The status tile's colour by the verdict's severity: green, blue (information, not a problem), amber, red."""
ALERT = {True: "#ff5c5c", False: "#ffb547"}
"""A firing line's mark: critical red, warning amber."""
REGION_INK = {"#1f77b4": "#6cb4ee", "#9467bd": "#c5a3f0", "#17becf": "#5fe3f0", "#e377c2": "#ff9fe0",
              "#393b79": "#9aa0ff", "#7f7f7f": "#c8c8c8", "#a55194": "#f08ad8", "#0e6e7a": "#3fc1d0",
              "#6b6ecf": "#b3b5ff", "#7b4173": "#d98ccd"}
"""Each palette colour lightened for a dark screen: the same hue as the region's line on the other pages."""

TOTAL_PX = 200
"""The total's font size: its digits stand about 145 px tall (the issue asks at least 120)."""
REGION_PX = 76
STATUS_PX = 46
ALERT_PX = 32


@dataclass(frozen=True)
class Number:
    """A series as the wall shows it: its label, count now, change over the hour (None: no count then), its
    points over the span (None: a minute with no record) and its colour (the line's, on the other pages)."""

    label: str
    now: int
    change: int | None
    points: tuple[int | None, ...]
    color: str
    span: str = ""
    """The times the points cover, said under the line (``06:34–06:40 UTC``)."""


def change_text(change: int | None) -> str:
    """▲ or ▼ with the change over the hour, or "no count an hour ago".

    >>> change_text(120), change_text(-7), change_text(0), change_text(None)
    ('▲ +120 in 1 h', '▼ −7 in 1 h', '= 0 in 1 h', 'no count an hour ago')
    """
    if change is None:
        return "no count an hour ago"
    if change == 0:
        return "= 0 in 1 h"
    return f"▲ +{change:,} in 1 h" if change > 0 else f"▼ −{-change:,} in 1 h"


def sparkline(points: Sequence[int | None], color: str, height: int) -> str:
    """An inline SVG line of ``points`` on its own scale (its minimum to its maximum), stretched to its box's
    width; a gap where a point is None. Empty with fewer than two points.

    >>> b64decode(sparkline([1, 3], "#fff", 10).split("base64,")[1].split('"')[0]).count(b"<polyline")
    1
    >>> sparkline([5], "#fff", 0)
    ''
    """
    known = [p for p in points if p is not None]
    if len(known) < 2:
        return '<div class="spark spark-none">the trend starts with its second minute</div>' if height else ""
    low, high = min(known), max(known)
    # its own scale, but never magnifying less than a tenth of its level into the box's full height
    floor = max(1.0, 0.1 * max(abs(high), abs(low)))
    if high - low < floor:
        mid = (high + low) / 2
        low, high = mid - floor / 2, mid + floor / 2
    span = high - low
    n = len(points) - 1
    runs: list[list[str]] = [[]]
    for i, p in enumerate(points):
        if p is None:
            runs.append([])
            continue
        y = height - 2 - (p - low) / span * (height - 4)
        runs[-1].append(f"{i * 1000 / n:.1f},{y:.1f}")
    lines = "".join(f'<polyline points="{" ".join(r)}" fill="none" stroke="{color}" stroke-width="3" '
                    f'vector-effect="non-scaling-stroke"/>' for r in runs if len(r) > 1)
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 1000 {height}" preserveAspectRatio="none">'
           f'{lines}</svg>')
    # as an image: Streamlit's HTML sanitiser keeps an <img> with a data URI, not inline SVG
    return f'<img class="spark" alt="trend" src="data:image/svg+xml;base64,{b64encode(svg.encode()).decode()}"/>'


def status_tile(severity: str, word: str, detail: str) -> str:
    return (f'<div class="wall-status" style="background:{TILE.get(severity, TILE["error"])}">'
            f'<span class="wall-word">{html.escape(word)}</span>'
            f'<span class="wall-detail">{html.escape(detail)}</span></div>')


def total_block(total: Number, as_of: str | None, region: str | None = None) -> str:
    """The total (with ``region``, that region's: the Region filter), its change over the hour and sparkline."""
    stale = f'<div class="wall-asof">as of {html.escape(as_of)}: no server is speaking</div>' if as_of else ""
    where = f" in {html.escape(region)}" if region else ""
    return (f'<div class="wall-total"><div class="wall-label">Players online{where}</div>'
            f'<div class="wall-total-n" data-label="{html.escape(total.label)}">{total.now:,}</div>'
            f'<div class="wall-change">{change_text(total.change)}</div>{stale}'
            f'{sparkline(total.points, INK, 150)}<div class="wall-span">{html.escape(total.span)}</div></div>')


@dataclass(frozen=True)
class Fleet:
    """Servers by state (``streaming.rules.fleet.life``): in the live views (live and silent), drained, retired."""

    live: int
    silent: int
    drained: int
    retired: int


def fleet_block(fleet: Fleet) -> str:
    silent = f'<span style="color:{ALERT[False]}">{fleet.silent:,} silent</span>' if fleet.silent else "0 silent"
    return (f'<div class="wall-servers"><div class="wall-label">Servers</div><div class="wall-fleet"><b>'
            f'{fleet.live:,}</b> live · {silent} · {fleet.drained:,} drained · {fleet.retired:,} retired</div></div>')


def alerts_block(lines: Sequence[tuple[bool, str]], more: int) -> str:
    """What fires: one line each (critical first), ``(critical, text)``; ``more`` counted in one line more."""
    if not lines:
        return '<div class="wall-alerts"><div class="wall-label">Alerts</div><div class="wall-none">Nothing firing' \
               '</div></div>'
    rows = "".join(f'<div class="wall-alert"><span style="color:{ALERT[critical]}">■</span> {html.escape(text)}</div>'
                   for critical, text in lines)
    if more > 0:
        rows += f'<div class="wall-alert wall-dim">and {more:,} more</div>'
    n = len(lines) + max(more, 0)
    return f'<div class="wall-alerts"><div class="wall-label">{n:,} firing</div>{rows}</div>'


def region_tiles(regions: Sequence[Number]) -> str:
    cells = []
    for r in regions:
        ink = REGION_INK.get(r.color, INK)
        cells.append(f'<div class="wall-region"><div class="wall-region-name" style="color:{ink}">'
                     f'{html.escape(r.label)}</div><div class="wall-region-n" style="color:{ink}" '
                     f'data-label="{html.escape(r.label)}">{r.now:,}</div>'
                     f'<div class="wall-change">{change_text(r.change)}</div>{sparkline(r.points, ink, 90)}</div>')
    across = max(1, min(4, -(-len(cells) // 2)))  # two rows: 6 regions 3 across, 8 regions 4
    return f'<div class="wall-regions" style="grid-template-columns:repeat({across},1fr)">{"".join(cells)}</div>'


STYLE = f"""<style>
section[data-testid="stSidebar"], header[data-testid="stHeader"], div[data-testid="stToolbar"],
div[data-testid="stSidebarCollapsedControl"] {{display: none;}}
.stApp, .stMain {{background: {BACKGROUND};}}
.block-container {{padding: 16px 28px 0 28px !important; max-width: 100% !important;}}
.stApp * {{color: {INK};}}
.wall {{font-family: "Source Sans", "Source Sans Pro", sans-serif; color: {INK}; display: flex;
  flex-direction: column; gap: 18px; height: 1040px; overflow: hidden;}}
.wall-status {{display: flex; align-items: baseline; gap: 28px; padding: 14px 28px; border-radius: 10px;
  white-space: nowrap; overflow: hidden;}}
.wall-word {{font-size: {STATUS_PX}px; font-weight: 700; text-transform: uppercase; letter-spacing: 1px;}}
.wall-detail {{font-size: 32px; overflow: hidden; text-overflow: ellipsis;}}
.wall-main {{display: grid; grid-template-columns: 9fr 11fr; gap: 28px; flex: 1 1 0; min-height: 0;}}
.wall-total, .wall-region, .wall-col {{display: flex; flex-direction: column; min-height: 0;}}
.wall-col {{gap: 18px;}}
.wall-total {{flex: 1 1 0;}}
.wall-label {{font-size: 30px; color: {DIM}; text-transform: uppercase; letter-spacing: 2px;}}
.wall-total-n {{font-size: {TOTAL_PX}px; font-weight: 700; line-height: 1; font-variant-numeric: tabular-nums;}}
.wall-change {{font-size: 30px; color: {DIM}; white-space: nowrap;}}
.wall-asof {{font-size: 30px; color: #ffb547; white-space: nowrap;}}
.wall-alerts {{overflow: hidden; flex: 0 0 auto;}}
.wall-alert, .wall-none {{font-size: {ALERT_PX}px; line-height: 1.45; white-space: nowrap; overflow: hidden;
  text-overflow: ellipsis;}}
.wall-dim {{color: {DIM};}}
.wall-title {{position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); margin: 0;
  padding: 0;}}
.wall-fleet {{font-size: 36px; white-space: nowrap; margin-bottom: 10px;}}
.wall-span {{font-size: 22px; color: {DIM}; text-align: right;}}
.wall-regions {{display: grid; gap: 20px; grid-auto-rows: 1fr; flex: 0 0 470px;}}
.wall-region {{background: #151b23; border-radius: 10px; padding: 12px 18px; min-width: 0;}}
.wall-region-name {{font-size: 32px; font-weight: 600; white-space: nowrap; overflow: hidden;
  text-overflow: ellipsis;}}
.wall-region-n {{font-size: {REGION_PX}px; font-weight: 700; line-height: 1.05; font-variant-numeric: tabular-nums;}}
.spark {{display: block; margin-top: 8px; flex: 1 1 0; min-height: 40px; width: 100%;}}
.spark-none {{font-size: 24px; color: {DIM};}}
</style>"""
"""The TV's own type and dark theme, and no sidebar or toolbar: our own markup, never a name."""


def screen(tile: str, total: str, fleet: str, regions: str, alerts: str) -> str:
    """The status tile across the top; the total and the servers by state on the left; the regions and what
    fires on the right."""
    return (f'<div class="wall"><h1 class="wall-title">Wall screen</h1>{tile}<div class="wall-main">'
            f'<div class="wall-col">{total}{fleet}</div>'
            f'<div class="wall-col">{regions}{alerts}</div></div></div>')
