"""Streamlit glue shared by the pages: controls, the Redis client, the per-tick read, the status line.

Reads are shared: :func:`load_snapshot` is cached per (Redis, namespace, range,
refresh tick), and Streamlit computes one cache key once, so any number of open
tabs cost one Redis read per tick. Nothing here writes to Redis (the Lab control
page writes its requests itself, on a button press).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
import streamlit as st

from dashboard.charts import Mark, annotation_marks, mark
from dashboard.data import Snapshot, read_snapshot
from dashboard.eventdata import EventRange, read_events
from dashboard.lanes import MAIN, Lane, read_lanes
from dashboard.status import Level, Status, assess, clock, human_ms, unreachable
from watermark.schema.config import Config, ConfigError, redact_url
from watermark.schema.keys import KeySchema
from watermark.schema.records import Control, GeneratorStatus
from watermark.store.alert_store import AlertView, read_alert_view
from watermark.store.annotation_store import read_happenings
from watermark.store.control_store import read_lab, write_control
from watermark.store.history_store import Timeline, read_timeline

log = logging.getLogger("dashboard")

RANGES: dict[str, int] = {"5 min": 300_000, "15 min": 900_000, "60 min": 3_600_000}
REFRESH: dict[str, int] = {"1 s": 1, "2 s": 2, "5 s": 5, "10 s": 10}
CONTROL_RESULT = "lab_result"
"""Session-state key holding what the last control button press did, shown under the buttons."""
NOW_OVERRIDE = "now_ms"
"""Session-state key a test sets to inject the clock (the dashboard's "now")."""


@dataclass(frozen=True)
class View:
    range_ms: int
    refresh_s: int
    paused: bool

    def tick(self, now_ms: int) -> int:
        """The refresh tick ``now_ms`` falls in: every cached read is keyed by it, so sessions share reads."""
        return now_ms // (self.refresh_s * 1000)


def now_ms() -> int:
    override = st.session_state.get(NOW_OVERRIDE)
    return int(override) if override is not None else int(time.time() * 1000)


def sidebar(active: bool = True) -> None:
    """The controls every page shares; drawn by the entry script so they persist across pages. On a page that
    reads none of them (``active`` false) they are shown disabled, with a word on why, and keep their values."""
    lanes = available_lanes()
    off = not active
    with st.sidebar:
        if off:
            st.caption("These settings are for the other pages; this one does not use them.")
        if len(lanes) > 1:
            st.selectbox("Pipeline", [lane.name for lane in lanes], key="pipeline", disabled=off,
                         format_func=lambda name: next(f"{x.label} ({x.mode}"
                                                       + (f", {x.policy}" if x.mode == "per-server" else "")
                                                       + (", idleness" if x.idle else "") + ")"
                                                       for x in lanes if x.name == name),
                         help="The configured pipeline, or one of the lab lanes the job runs beside it over the "
                              "same events (see the Watermark lab page).")
        st.segmented_control("Time range", list(RANGES), default="15 min", key="range", disabled=off,
                             help="Windows whose end is this close to the newest event time, and batches this close "
                                  "to the newest batch.")
        st.selectbox("Refresh every", list(REFRESH), index=1, key="refresh", disabled=off)
        st.toggle("Pause", key="paused", disabled=off, help="Stop refreshing; the page keeps what it shows.")


def current_view() -> View:
    state = st.session_state
    range_label = state.get("range") or "15 min"
    return View(range_ms=RANGES.get(range_label, RANGES["15 min"]),
                refresh_s=REFRESH.get(state.get("refresh") or "2 s", 2),
                paused=bool(state.get("paused", False)))


@st.cache_resource(show_spinner=False)
def redis_client(url: str) -> redis.Redis:
    # Short timeouts: a dead Redis must turn into a status message within a tick, not hang the page.
    return redis.Redis.from_url(url, socket_connect_timeout=1.0, socket_timeout=3.0, health_check_interval=5)


@st.cache_data(show_spinner=False, ttl=120, max_entries=256)
def load_snapshot(url: str, namespace: str, range_ms: int, refresh_s: int, tick: int, _now_ms: int,
                  input_namespace: str, retire_after_ms: int) -> Snapshot:
    """One read per (namespace, range, tick) for all sessions; ``_now_ms`` is not part of the key."""
    return read_snapshot(redis_client(url), KeySchema(namespace), range_ms=range_ms, now_ms=_now_ms,
                         input_keys=KeySchema(input_namespace), retire_after_ms=retire_after_ms)


def retired_note(st: Any, snap: Snapshot, shown: int = 8) -> None:  # noqa: ANN401 - st or a column
    """Servers out of the live views, named under the charts they left (never hidden without a word)."""
    if not snap.retired:
        return
    items = sorted(snap.retired.items(), key=lambda kv: -kv[1])
    names = ", ".join(f"{s} ({human_ms(snap.read_ms - t)})" for s, t in items[:shown])
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    st.caption(f"Retired (no event for {human_ms(snap.retire_after_ms)} or longer, RETIRE_AFTER; not charted here, "
               "the totals keep them): "
               f"{names}{more} since their last event. A retired server is back with its next event.")


def lane_snapshot(cfg: Config, lane: Lane, view: View, now: int) -> Snapshot:
    """The pipeline's snapshot for this tick, read from its own keys and its input stream."""
    return load_snapshot(cfg.redis_url, lane.namespace, view.range_ms, view.refresh_s, view.tick(now), now,
                         lane.input_namespace, cfg.retire_after_ms)


@st.cache_data(show_spinner=False, ttl=10, max_entries=16)
def load_lanes(url: str, namespace: str) -> list[Lane]:
    return read_lanes(redis_client(url), namespace)


def available_lanes() -> list[Lane]:
    """The configured pipeline and its lanes; just the configured one if Redis cannot say."""
    try:
        cfg = Config.from_env(os.environ)
    except ConfigError:
        return []
    try:
        return load_lanes(cfg.redis_url, cfg.namespace)
    except (redis.RedisError, ValueError, KeyError):  # the page's status line reports Redis itself
        return [Lane(MAIN, cfg.namespace, cfg.namespace)]


def selected_lane(cfg: Config) -> Lane:
    lanes = available_lanes() or [Lane(MAIN, cfg.namespace, cfg.namespace)]
    chosen = st.session_state.get("pipeline")
    return next((lane for lane in lanes if lane.name == chosen), lanes[0])


@st.cache_data(show_spinner=False, ttl=60, max_entries=64)
def load_lab(url: str, namespace: str, tick: int) -> tuple[Control | None, GeneratorStatus | None]:
    """The lab's control request and generator status, one read per (namespace, tick) for all sessions."""
    return read_lab(redis_client(url), KeySchema(namespace))


def submit_control(cfg: Config, changes: Callable[[], dict[str, object]]) -> None:
    """A button's callback: runs before the page is drawn again, so the page shows the new request."""
    keys = KeySchema(cfg.namespace)
    try:
        ctl = write_control(redis_client(cfg.redis_url), keys, now_ms=now_ms(), **changes())  # type: ignore[arg-type]
    except redis.exceptions.NoPermissionError as exc:
        result = Status(Level.WARNING, f"This dashboard's Redis user cannot change the control settings: NOPERM "
                                       f"{exc}. Give it write access to `{keys.control}` (e.g. `+hset +hincrby "
                                       "+multi +exec`), or use `wm-control set` with the job's user.")
    except (ConfigError, ValueError) as exc:
        result = Status(Level.ERROR, f"Not saved: {exc}")
    except redis.RedisError as exc:
        result = unreachable(redact_url(cfg.redis_url), exc)
    else:
        load_lab.clear()
        result = Status(Level.OK, f"Saved as rev {ctl.rev}.")
    st.session_state[CONTROL_RESULT] = result


@st.cache_data(show_spinner=False, ttl=120, max_entries=64)
def load_events(url: str, namespace: str, server: str | None, range_ms: int, refresh_s: int,
                tick: int, input_namespace: str) -> EventRange | None:
    """The events page's read, shared like :func:`load_snapshot` per (server, range, tick)."""
    return read_events(redis_client(url), KeySchema(namespace), server=server, range_ms=range_ms,
                       input_keys=KeySchema(input_namespace))


@st.cache_data(show_spinner=False, ttl=120, max_entries=32)
def load_timeline(url: str, namespace: str, series: tuple[str, ...], start_ms: int, end_ms: int,
                  week_ago: tuple[str, ...], tick: int) -> Timeline:
    """Players online over a range: one read per (series, range, tick) for all sessions; O((regions or servers) x
    days) commands (``watermark.store.history_store``)."""
    return read_timeline(redis_client(url), KeySchema(namespace), series, start_ms, end_ms, week_ago)


MARKS_SPAN_MS = 8 * 86_400_000
"""How far back the marks over the time charts are read: the longest chart's range, and a day more."""


@st.cache_data(show_spinner=False, ttl=60, max_entries=32)
def load_marks(url: str, namespace: str, tick: int, _now_ms: int) -> list[Mark]:
    """The annotations and fired alerts of the last week as marks, one read (two commands) per tick for all
    sessions and pages."""
    from dashboard.alertview import alert_marks, spans

    h = read_happenings(redis_client(url), KeySchema(namespace), _now_ms - MARKS_SPAN_MS, _now_ms + 1)
    return [*annotation_marks(h.annotations), *alert_marks(spans(h.notices, [], _now_ms, h.since_ms))]


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


@st.cache_data(show_spinner=False, ttl=60, max_entries=32)
def load_alerts(url: str, namespace: str, tick: int, _now_ms: int) -> AlertView:
    """The monitor's alerts, one read per (namespace, tick) for all sessions and pages."""
    return read_alert_view(redis_client(url), KeySchema(namespace), _now_ms)


def firing_banner(now: int) -> None:
    """On the headline page: what the monitor has firing, so a wall screen shows it without a click. Says
    nothing when it cannot read them (the status line speaks for Redis)."""
    from dashboard.alertview import firing_text

    try:
        cfg = Config.from_env(os.environ)
        view = load_alerts(cfg.redis_url, cfg.namespace, current_view().tick(now), now)
    except (ConfigError, redis.RedisError, ValueError):
        return
    text = firing_text(list(view.alerts.values()))
    if text:
        st.error(text)
        st.page_link("views/alerts.py", label="Open the Alerts page", icon=":material/notifications_active:")


def show_status(statuses: list[Status]) -> None:
    for s in statuses:
        {Level.OK: st.success, Level.INFO: st.info, Level.WARNING: st.warning, Level.ERROR: st.error}[s.level](s.text)


def live(render: Callable[[Snapshot, int], None]) -> None:
    """Run ``render(snapshot, now_ms)`` now and, unless paused, every refresh interval."""
    view = current_view()

    @st.fragment(run_every=None if view.paused else view.refresh_s)
    def tick() -> None:
        now = now_ms()
        try:
            cfg = Config.from_env(os.environ)
        except ConfigError as exc:
            st.error(f"Configuration error: {exc}")
            return
        lane = selected_lane(cfg)
        try:
            snap = lane_snapshot(cfg, lane, view, now)
        except redis.RedisError as exc:
            show_status([unreachable(redact_url(cfg.redis_url), exc)])
            return
        show_status(assess(snap, now, demo=cfg.demo))
        if view.paused:
            st.caption(f"Paused: showing data read at {clock(snap.read_ms)}.")
        if snap.state is None:
            return
        try:
            render(snap, now)
        except Exception as exc:  # a bug or an unexpected record must not become a traceback on the page
            log.exception("rendering failed")
            st.error(f"This page could not be drawn from the data in Redis ({type(exc).__name__}: {exc}). "
                     "The other pages may still work; the dashboard log has the details.")

    tick()


def page(title: str, render: Callable[[Config], None]) -> None:
    """A page that draws from the configuration rather than one snapshot (the lab pages)."""
    st.title(title)
    try:
        cfg = Config.from_env(os.environ)
    except ConfigError as exc:
        st.error(f"Configuration error: {exc}")
        return
    render(cfg)


def params_caption(snap: Snapshot) -> str:
    s = snap.state
    assert s is not None
    kind = "tumbling" if s.slide_ms == s.window_ms else f"sliding every {human_ms(s.slide_ms)}"
    mode = f" · per-server watermarks combined by {s.policy}" if s.mode == "per-server" else ""
    return (f"Namespace `{snap.namespace}` · windows of {human_ms(s.window_ms)} ({kind}) · watermark delay "
            f"{human_ms(s.delay_ms)}{mode} · trigger {human_ms(s.trigger_ms)} · times in UTC")


def chart(where: Any, fig: Any, key: str, empty: str) -> None:
    """Draw ``fig`` in ``where`` (``st`` or a column), or, when it has nothing to show, say so in words:
    ``empty`` says what would appear and when."""
    from dashboard.charts import has_data

    if has_data(fig):
        where.plotly_chart(marked(fig), key=key)
    else:
        where.info(empty)


def fmt_int(n: int) -> str:
    return f"{n:,}"
