"""The sidebar's controls every page shares, drawn by the entry script: the region filter, the View settings'
popover (pipeline or lab lane, range, refresh, pause) and the job's own settings in words; and the lane a page
reads (:func:`selected_lane`)."""

from __future__ import annotations

import os

import redis
import streamlit as st

from dashboard.fleet import ALL_REGIONS
from dashboard.loaders import load_lanes, load_regions, load_state
from dashboard.status import human_ms
from dashboard.ui.view import RANGES, REFRESH, REGION_KEY, current_view, now_ms, view_label
from streaming.schema.config import Config, ConfigError, Lane
from streaming.store.pipeline_status import PipelineState


def sidebar(active: bool = True, regional: bool = True) -> None:
    """The controls every page shares; drawn by the entry script so they persist across pages. On a page that
    reads none of them (``active`` false) they are shown disabled, with a word on why, and keep their values; the
    Region filter likewise on a page that is the whole fleet's (``regional`` false).

    They sit in a popover whose label says the view (range, refresh, paused): a browser draws the controls only
    when it is opened, and drawing them on every visit delayed Live ops' first chart (docs/benchmarks.md)."""
    lanes = available_lanes()
    off = not active
    region_filter(off or not regional)
    with st.sidebar.popover(view_label(current_view()), icon=":material/tune:", width="stretch", key="view_settings"):
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
        if (settings := job_settings()) is not None:
            st.caption(settings)


REGION_HELP = ("Live ops, the wall, Watermark, Lag, Events and Health show this region's servers alone (the status "
               "line stays the whole fleet's); Alerts, the lab, the delay advice and Lab control are the whole "
               "fleet's. The address carries it: ?region=eu.")


def region_filter(off: bool) -> None:
    """The region filter, in the sidebar above the view settings: the fleet's regions (``{ns}:regions``). A
    ``?region=`` in the address sets it on arrival; the address then follows the choice."""
    try:
        cfg = Config.from_env(os.environ)
        regions = load_regions(cfg.redis_url, cfg.namespace, current_view().tick(now_ms()))
    except (ConfigError, redis.RedisError):
        regions = ()
    options = [ALL_REGIONS, *regions]
    asked = st.query_params.get(REGION_KEY)
    if asked is not None and REGION_KEY not in st.session_state:
        st.session_state[REGION_KEY] = asked if asked in options else ALL_REGIONS
    if st.session_state.get(REGION_KEY) not in options:
        st.session_state[REGION_KEY] = ALL_REGIONS
    chosen = st.sidebar.selectbox("Region", options, key=REGION_KEY, disabled=off,
                                  help=("This page is the whole fleet's; the filter is kept for the others. "
                                        if off else "") + REGION_HELP)
    if chosen == ALL_REGIONS:
        st.query_params.pop(REGION_KEY, None)
    else:
        st.query_params[REGION_KEY] = chosen


def job_settings() -> str | None:
    """The job's own settings as it committed them (never this dashboard's environment), for the View popover;
    None before its first batch or when Redis cannot say."""
    try:
        cfg = Config.from_env(os.environ)
        state = load_state(cfg.redis_url, cfg.namespace, current_view().tick(now_ms()))
    except (ConfigError, redis.RedisError, ValueError):
        return None
    return None if state is None else "The job: " + settings_text(cfg.namespace, state)


def available_lanes() -> list[Lane]:
    """The configured pipeline and its lanes; just the configured one if Redis cannot say."""
    try:
        cfg = Config.from_env(os.environ)
    except ConfigError:
        return []
    try:
        return load_lanes(cfg.redis_url, cfg.namespace, current_view().tick(now_ms()))
    except (redis.RedisError, ValueError, KeyError):  # the page's status line reports Redis itself
        return [Lane.main(cfg.namespace)]


def selected_lane(cfg: Config) -> Lane:
    lanes = available_lanes() or [Lane.main(cfg.namespace)]
    chosen = st.session_state.get("pipeline")
    return next((lane for lane in lanes if lane.name == chosen), lanes[0])


def settings_text(namespace: str, s: PipelineState) -> str:
    """The job's settings, as its last commit wrote them, in one line."""
    kind = "tumbling" if s.slide_ms == s.window_ms else f"sliding every {human_ms(s.slide_ms)}"
    mode = f" · per-server watermarks combined by {s.policy}" if s.mode == "per-server" else ""
    return (f"Namespace `{namespace}` · windows of {human_ms(s.window_ms)} ({kind}) · watermark delay "
            f"{human_ms(s.delay_ms)}{mode} · trigger {human_ms(s.trigger_ms)} · times in UTC")
