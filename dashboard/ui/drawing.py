"""Every chart and table is drawn here: framed, with the marks over every time chart (annotations and fired
alerts), names made safe, in our theme; a chart with nothing to show said in words instead; a figure built once per
refresh tick for every session (:func:`chart`, :func:`vega_chart`, :func:`draw`, :func:`table`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import redis
import streamlit as st

from dashboard.charts import Mark, mark
from dashboard.loaders import TICK_TTL_S, load_marks
from dashboard.text import csv_safe, safe_figure
from dashboard.ui.view import current_region, current_view, now_ms
from streaming.schema.config import Config, ConfigError


def page_marks(now: int | None = None) -> list[Mark]:
    """What every time chart draws over its data (the configured pipeline's: annotations concern the game, and
    the monitor watches that pipeline); none when they cannot be read (the status line speaks for Redis)."""
    at = now_ms() if now is None else now
    try:
        cfg = Config.from_env(os.environ)
        return load_marks(cfg.redis_url, cfg.namespace, current_view().tick(at), at)
    except (ConfigError, redis.RedisError, ValueError):
        return []


def marked(fig: Any) -> Any:  # noqa: ANN401 - a plotly figure
    """``fig`` with the annotations and fired alerts of its time range drawn over it (a chart without a time axis
    is left as it is)."""
    return mark(fig, page_marks())


def chart(where: Any, fig: Any, key: str, empty: str, *, shared: tuple | None = None) -> None:  # noqa: ANN401
    """Draw ``fig`` in ``where`` (``st`` or a column), or, when it has nothing to show, say so in words:
    ``empty`` says what would appear and when. With ``shared``, ``fig`` is a function building the figure, and
    ``shared`` names everything it is built from (the snapshot read, the view's settings; the region filter is
    added here): every session drawing the same key within a refresh tick draws the one figure built for the
    first (marks and escaping included)."""
    ready = (_shared_chart((key, *shared, current_region(), current_view().tick(now_ms())), fig) if shared is not None
             else _ready(fig))
    if ready is None:
        where.info(empty)
    else:
        where.plotly_chart(ready, key=key, theme=None)


def vega_chart(where: Any, build: Callable[[], dict | None], key: str, empty: str, *,  # noqa: ANN401
               shared: tuple) -> None:
    """Draw the Vega-Lite spec ``build`` returns in ``where``, or say ``empty`` in words when it returns None;
    built once per ``shared`` (what it is built from) and refresh tick for every session, as :func:`chart`."""
    spec = _shared_spec((key, *shared, current_region(), current_view().tick(now_ms())), build)
    if spec is None:
        where.info(empty)
    else:
        where.vega_lite_chart(spec, key=key, width="stretch")


@st.cache_data(show_spinner=False, ttl=TICK_TTL_S, max_entries=512)
def _shared_spec(key: tuple, _build: Callable[[], dict | None]) -> dict | None:
    # st.cache_data: each session gets its own copy of the spec, which Streamlit may change as it draws it.
    return _build()


def _ready(fig: Any) -> Any:  # noqa: ANN401 - a plotly figure
    """The figure as drawn: its marks over it, its names as text; None when it has nothing to show."""
    from dashboard.charts import frame, has_data, themed

    return themed(safe_figure(marked(frame(fig)))) if has_data(fig) else None


@st.cache_resource(show_spinner=False, ttl=TICK_TTL_S, max_entries=512)
def _shared_chart(key: tuple, _build: Callable[[], Any]) -> Any:  # noqa: ANN401 - a plotly figure, or None
    return _ready(_build())


def draw(where: Any, fig: Any, key: str) -> None:  # noqa: ANN401 - st or a column; a plotly figure
    """Every chart is drawn here: framed (``dashboard.charts.frame``), the names it carries as text
    (``dashboard.text.safe_figure``), in our theme (``dashboard.charts.THEME``)."""
    from dashboard.charts import frame, themed

    where.plotly_chart(themed(safe_figure(frame(fig))), key=key, theme=None)


def table(where: Any, data: Any, **kw: Any) -> Any:  # noqa: ANN401 - st or a column; rows; st.dataframe's options
    """Every table is drawn here: its text cells safe in a spreadsheet (``dashboard.text.csv_safe``), since each
    offers its rows as CSV and producers' names reach them."""
    return where.dataframe(csv_safe(data), **kw)


def fmt_int(n: int) -> str:
    return f"{n:,}"
