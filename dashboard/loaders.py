"""Every cached read of the dashboard, and its one policy.

A read that shows the present is keyed by the refresh tick (``ui.View.tick``): Streamlit computes one cache key
once, so any number of open tabs and pages cost one Redis read per tick, and :data:`TICK_TTL_S` only evicts entries
whose tick has passed; the lanes the job runs too (one small hash: keyed by the tick, no session's read depends on
how long a page took to draw). One read is not keyed by the tick, and its TTL is how fresh it is: a player's look-up
(:data:`LOOKUP_TTL_S`: it reads the past). Nothing here writes to Redis.

The three large reads (a pipeline's snapshot, the events, players online over a range) are kept as they are, shared
by every session (``st.cache_resource``: frozen records, never changed by a page), not pickled per write and copied
per read as ``st.cache_data`` does: at 300 servers, pickling the snapshot took three times as long as reading it.
The small reads stay ``st.cache_data`` (each reader gets its own copy of a list it may sort).
"""

from __future__ import annotations

import redis
import streamlit as st

from dashboard.charts import Mark, annotation_marks
from streaming.rules.fleet import IdleDecision
from streaming.rules.tradeoff import Tradeoff
from streaming.schema.config import Lane
from streaming.schema.keys import KeySchema
from streaming.schema.records import Control, GeneratorStatus
from streaming.store.alert_store import AlertView, read_alert_view
from streaming.store.annotation_store import read_happenings
from streaming.store.control_store import read_lab
from streaming.store.history_store import Timeline, read_timeline
from streaming.store.pipeline_status import PipelineState, read_state
from streaming.store.report import WindowRow
from streaming.store.views.events import EventRange, PlayerEvents, find_player, read_events
from streaming.store.views.lanes import read_idleness, read_lanes, read_seen, read_tradeoff
from streaming.store.views.online import OnlinePoints
from streaming.store.views.snapshot import BatchPoints, Snapshot, read_snapshot, read_windows
from watermark_client.connection import open_client

TICK_TTL_S = 120
"""Reads keyed by the refresh tick: evicted two minutes on (a tick is 1-10 s, so never read again by then)."""
LOOKUP_TTL_S = 30
IDLE_DECISIONS_SHOWN = 12
"""The Watermark lab's list of the latest idleness decisions."""


MARKS_SPAN_MS = 8 * 86_400_000
"""How far back the marks over the time charts are read: the longest chart's range, and a day more."""


@st.cache_resource(show_spinner=False)
def redis_client(url: str) -> redis.Redis:
    # Short timeouts: a dead Redis must turn into a status message within a tick, not hang the page.
    return open_client(url, socket_connect_timeout=1.0, socket_timeout=3.0, health_check_interval=5)


@st.cache_resource(show_spinner=False, max_entries=64)
def batch_points(url: str, namespace: str, range_ms: int) -> BatchPoints:
    """The batch records read so far, per (namespace, range), for every session: a tick decodes only the new ones."""
    return BatchPoints()


@st.cache_resource(show_spinner=False, max_entries=64)
def online_points(url: str, namespace: str) -> OnlinePoints:
    """The online view's per-batch records read so far, per namespace, for every session."""
    return OnlinePoints()


@st.cache_resource(show_spinner=False, ttl=TICK_TTL_S, max_entries=256)
def load_snapshot(url: str, namespace: str, range_ms: int, refresh_s: int, tick: int, _now_ms: int,
                  input_namespace: str, retire_after_ms: int) -> Snapshot:
    """One read per (namespace, range, tick) for all sessions, without the windows (:func:`load_windows`);
    ``_now_ms`` is not part of the key."""
    return read_snapshot(redis_client(url), KeySchema(namespace), range_ms=range_ms, now_ms=_now_ms,
                         input_keys=KeySchema(input_namespace), retire_after_ms=retire_after_ms,
                         points=batch_points(url, namespace, range_ms), online_points=online_points(url, namespace),
                         windows=False)


@st.cache_resource(show_spinner=False, ttl=TICK_TTL_S, max_entries=256)
def load_windows(url: str, namespace: str, range_ms: int, refresh_s: int, tick: int, _now_ms: int,
                 input_namespace: str, retire_after_ms: int) -> tuple[WindowRow, ...]:
    """The windows of that tick's snapshot: one more read per tick for all sessions, only once a page that draws
    windows asks (Live ops' first tabs draw none)."""
    snap = load_snapshot(url, namespace, range_ms, refresh_s, tick, _now_ms, input_namespace, retire_after_ms)
    return read_windows(redis_client(url), KeySchema(namespace), snap)


@st.cache_data(show_spinner=False, ttl=TICK_TTL_S, max_entries=16)
def load_lanes(url: str, namespace: str, tick: int) -> list[Lane]:
    return read_lanes(redis_client(url), namespace)


@st.cache_data(show_spinner=False, ttl=TICK_TTL_S, max_entries=64)
def load_lab(url: str, namespace: str, tick: int) -> tuple[Control | None, GeneratorStatus | None]:
    """The lab's control request and generator status, one read per (namespace, tick) for all sessions."""
    return read_lab(redis_client(url), KeySchema(namespace))


@st.cache_data(show_spinner=False, ttl=TICK_TTL_S, max_entries=64)
def load_state(url: str, namespace: str, tick: int) -> PipelineState | None:
    """The job's committed settings (its delay, window, trigger), one read per (namespace, tick): what every page
    shows of the job, never this process's own environment."""
    return read_state(redis_client(url), KeySchema(namespace))


@st.cache_data(show_spinner=False, ttl=TICK_TTL_S, max_entries=64)
def load_regions(url: str, namespace: str, tick: int) -> tuple[str, ...]:
    """The regions the fleet's events carry (``{ns}:regions``), sorted, one read per (namespace, tick): the region
    filter's choices. O(servers known), which RETIRE_AFTER bounds."""
    return tuple(sorted({v.decode() if isinstance(v, bytes) else v
                         for v in redis_client(url).hvals(KeySchema(namespace).regions)}))


@st.cache_resource(show_spinner=False, ttl=TICK_TTL_S, max_entries=64)
def load_events(url: str, namespace: str, server: str | None, range_ms: int, refresh_s: int,
                tick: int, input_namespace: str) -> EventRange | None:
    """The events page's read, shared like :func:`load_snapshot` per (server, range, tick)."""
    return read_events(redis_client(url), KeySchema(namespace), server=server, range_ms=range_ms,
                       input_keys=KeySchema(input_namespace))


@st.cache_resource(show_spinner=False, ttl=TICK_TTL_S, max_entries=32)
def load_timeline(url: str, namespace: str, series: tuple[str, ...], start_ms: int, end_ms: int,
                  week_ago: tuple[str, ...], tick: int) -> Timeline:
    """Players online over a range: one read per (series, range, tick) for all sessions; O((regions or servers) x
    days) commands (``streaming.store.history_store``)."""
    return read_timeline(redis_client(url), KeySchema(namespace), series, start_ms, end_ms, week_ago)


@st.cache_data(show_spinner=False, ttl=TICK_TTL_S, max_entries=32)
def load_marks(url: str, namespace: str, tick: int, _now_ms: int) -> list[Mark]:
    """The annotations and fired alerts of the last week as marks, one read (two commands) per tick for all
    sessions and pages."""
    from dashboard.alertview import alert_marks, spans

    h = read_happenings(redis_client(url), KeySchema(namespace), _now_ms - MARKS_SPAN_MS, _now_ms + 1)
    return [*annotation_marks(h.annotations), *alert_marks(spans(h.notices, [], _now_ms, h.since_ms))]


@st.cache_data(show_spinner=False, ttl=TICK_TTL_S, max_entries=32)
def load_alerts(url: str, namespace: str, tick: int, _now_ms: int) -> AlertView:
    """The monitor's alerts, one read per (namespace, tick) for all sessions and pages."""
    return read_alert_view(redis_client(url), KeySchema(namespace), _now_ms)


@st.cache_data(show_spinner=False, ttl=TICK_TTL_S, max_entries=64)
def load_seen(url: str, namespace: str, tick: int) -> dict[str, int]:
    return read_seen(redis_client(url), KeySchema(namespace))


@st.cache_data(show_spinner=False, ttl=TICK_TTL_S, max_entries=64)
def load_idleness(url: str, namespace: str, tick: int) -> list[tuple[str, IdleDecision]]:
    return read_idleness(redis_client(url), KeySchema(namespace), IDLE_DECISIONS_SHOWN)


@st.cache_data(show_spinner=False, ttl=TICK_TTL_S, max_entries=64)
def load_tradeoff(url: str, namespace: str, tick: int) -> Tradeoff:
    return read_tradeoff(redis_client(url), KeySchema(namespace))


@st.cache_data(show_spinner=False, ttl=LOOKUP_TTL_S, max_entries=16)
def load_player(url: str, namespace: str, input_namespace: str, player: str, lo_ms: int,
                hi_ms: int) -> PlayerEvents | None:
    return find_player(redis_client(url), KeySchema(namespace), player, lo_ms, hi_ms,
                       input_keys=KeySchema(input_namespace))




def forget() -> None:
    """Drop every cached read, shared or copied (for a test that changes Redis within one refresh tick)."""
    st.cache_data.clear()
    for shared in (load_snapshot, load_events, load_timeline):
        shared.clear()
