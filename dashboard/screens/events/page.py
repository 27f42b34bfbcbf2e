"""Events: every raw event of a server, and why it was counted, counted late, or dropped."""

from __future__ import annotations

import os
from datetime import UTC, datetime

import redis
import streamlit as st

from dashboard import loaders, ui
from dashboard.screens.events import figures, model
from dashboard.status import clock, human_ms
from dashboard.text import md
from streaming.rules.eventview import STATUS_LABELS, Status
from streaming.schema.config import Config
from streaming.store.views.events import EventRange
from streaming.store.views.snapshot import Snapshot

TABLE_ROWS = 1_000
METRIC_LABELS: dict[Status, str] = {s: label[0].upper() + label[1:] for s, label in STATUS_LABELS.items()}


GONE_OPTIONS = 500
"""Drained and retired servers offered in the server picker, the most recently gone first."""

def notes(ev: EventRange, namespace: str, input_namespace: str) -> None:
    """Everything that makes the counts cover less than the range asked for, said out loud."""
    if ev.reaches_below_stream and ev.trimmed != 0:
        first = clock(ev.stream_first_ms or 0)
        how_many = f"{ev.trimmed:,} entries have" if ev.trimmed else "entries may have"
        stream = f"{input_namespace}:events"
        st.warning(f"The range starts at {clock(ev.lo_ms)}, but the oldest entry still in `{stream}` "
                   f"arrived at {first}: {how_many} been trimmed from the stream (it keeps about 10 minutes below "
                   f"what the job committed). Of the events that arrived in the range before {first}, the "
                   f"{ev.kept:,} late ones (dropped or late but accepted) are kept and shown; the on-time ones "
                   "are neither drawn nor counted.")
    elif ev.reaches_below_stream:
        st.caption(f"The stream starts at {clock(ev.stream_first_ms or 0)} and nothing was trimmed from it: no "
                   "event arrived earlier.")
    if ev.capped:
        st.warning(f"More than {ev.cap:,} entries arrived in the range: showing the newest {ev.cap:,}, which "
                   f"arrived from {clock(ev.shown_from_ms)} on, and the {ev.kept:,} late events kept from before. "
                   "On-time counts cover the newest entries only; choose a shorter time range to see everything.")
    if ev.kept_evicted:
        st.caption(f"Late events are kept up to `LATE_EVENTS_KEEP` ({ev.kept_now:,} now): the bound has evicted "
                   f"the oldest {ev.kept_evicted:,} of the {ev.kept_total:,} kept so far.")
    counts = ev.counts()
    if counts[Status.UNKNOWN]:
        st.warning(f"{counts[Status.UNKNOWN]:,} events were processed by batches whose records are no longer kept "
                   "(expired, or older than the commit log): the watermark they met is unknown, so they are shown as "
                   f"'{STATUS_LABELS[Status.UNKNOWN]}'.")
    if ev.quarantined:
        reasons: dict[str, int] = {}
        for q in ev.quarantined:
            reasons[q.reason] = reasons.get(q.reason, 0) + 1
        text = ", ".join(f"{r} {n:,}" for r, n in sorted(reasons.items()))
        st.info(f"{len(ev.quarantined):,} entries in the range (any server) are not valid events and are not drawn "
                f"or counted above: {text}. They are kept in `{namespace}:dead` (`{namespace}:dead:N` for input "
                "shard N when the input is sharded; see Pipeline health).")


def pick_server(snap: Snapshot) -> str:
    """The server picker: the live ones, then the newest few hundred drained or retired (their events can still be
    looked up), then every server; it opens on the server with the most late events, the one people ask about."""
    gone = sorted({**snap.retired, **snap.drained}.items(), key=lambda kv: (-kv[1], kv[0]))[:GONE_OPTIONS]
    options = [*snap.servers, *(s for s, _ in gone), model.ALL]
    linked = st.query_params.get("server")  # a link to a server's events (Live ops' fleet map)
    if linked is not None and linked in options and st.session_state.get("events_linked") != linked:
        st.session_state["events_server"] = st.session_state["events_linked"] = linked
    if st.session_state.get("events_server") not in options:  # once: then the user's choice stays
        st.session_state["events_server"] = model.latest_server(snap)
    return st.selectbox("Server", options, key="events_server")


def render(snap: Snapshot, now_ms: int) -> None:
    state = snap.state
    assert state is not None
    choice = pick_server(snap)
    view = ui.current_view()
    cfg = Config.from_env(os.environ)
    lane = ui.selected_lane(cfg)
    try:
        ev = loaders.load_events(cfg.redis_url, lane.namespace, None if choice == model.ALL else choice,
                                 view.range_ms, view.refresh_s, view.tick(now_ms), lane.input_namespace)
    except redis.RedisError as exc:
        st.error(f"Could not read the events: {exc}")
        return
    if ev is None:
        st.info("No batch has been committed yet: nothing to judge.")
        return
    st.caption(f"Events that arrived in the {human_ms(view.range_ms)} up to the newest stream entry "
               f"({clock(ev.lo_ms)} – {clock(ev.hi_ms)}, the sidebar's time range), by arrival (ingest) time.")
    notes(ev, snap.namespace, lane.input_namespace)

    counts = ev.counts()
    shown = [s for s in Status if s is not Status.UNKNOWN or counts[s]]
    cols = st.columns(len(shown) + 1)
    for col, s in zip(cols, shown, strict=False):
        col.metric(METRIC_LABELS[s], ui.fmt_int(counts[s]))
    cols[-1].metric("Quarantined", ui.fmt_int(len(ev.quarantined)), help="Entries of any server in the range that "
                    "are not valid events; not in the other counts.")

    ui.draw(st, ui.marked(figures.events_figure(ev.points, ev.steps, ev.window_ms, ev.slide_ms, ev.shown_from_ms,
                                                ev.hi_ms)), "events_scatter")

    dropped = [p for p in ev.points if p.status in (Status.DROPPED, Status.PARTLY_DROPPED)]
    if dropped:
        st.subheader("Dropped and partly dropped events")
        rows = dropped[-TABLE_ROWS:]
        ui.table(st, model.point_rows(rows), hide_index=True)
        if len(dropped) > len(rows):
            st.caption(f"The newest {len(rows):,} of {len(dropped):,} dropped events.")

    player_lookup(cfg, lane.namespace, lane.input_namespace, now_ms)

    with st.expander("How each event is judged"):
        st.markdown(
            "Each event met the watermark in force for the micro-batch that read it (batch N reads the entries "
            "that arrived after batch N−1's last one). For each window the event falls in: the window is "
            "**closed** and the event **dropped** from it when `window end <= watermark`; otherwise the event is "
            "counted, **late but accepted** if `event time < watermark`, else **on time**. With sliding windows "
            "an event falls in several windows and each is judged on its own: **partly dropped** means dropped "
            "from some (the older, closed ones) and counted in the others. **Pending** events arrived after the "
            "job's committed offset and have not been processed; the dashed red line is the watermark the next "
            "batch will meet. In the chart, the red line at a point's height is the watermark its batch met: a "
            "point left of it was late, and it was dropped when the grey boundary right of it (its window's end) "
            "is left of the red line too."
        )


SPANS: dict[str, int] = {"± 5 min": 300_000, "± 30 min": 1_800_000, "± 2 h": 7_200_000, "± 12 h": 43_200_000}


def player_lookup(cfg: Config, namespace: str, input_namespace: str, now_ms: int) -> None:
    """Any event, by player and arrival time: the stream where it still holds it, the late ones kept for
    hours (``{ns}:late``)."""
    st.subheader("Find a player's events")
    now = datetime.fromtimestamp(now_ms / 1000, tz=UTC)
    with st.form("player_lookup", border=False):
        c = st.columns([2, 1.3, 1, 1, 0.8], vertical_alignment="bottom")
        player = c[0].text_input("Player id", key="lookup_player", placeholder="e.g. A-p46182")
        day = c[1].date_input("Arrived on (UTC)", value=now.date(), key="lookup_day")
        at = c[2].time_input("around", value=now.time().replace(microsecond=0), step=60, key="lookup_time")
        span = c[3].selectbox("within", list(SPANS), index=1, key="lookup_span")
        c[4].form_submit_button("Find")
    player = (player or "").strip()
    if not player:
        st.caption("Type a player id: every event of theirs that arrived around that time, with how it was "
                   "judged. Late ones (dropped or late but accepted) are kept for hours, after the input stream "
                   "has let them go.")
        return
    centre = int(datetime.combine(day, at, tzinfo=UTC).timestamp() * 1000)
    lo, hi = centre - SPANS[span], centre + SPANS[span]
    try:
        found = loaders.load_player(cfg.redis_url, namespace, input_namespace, player, lo, hi)
    except redis.RedisError as exc:
        st.error(f"Could not search for the player: {exc}")
        return
    if found is None:
        st.info("No batch has been committed yet: nothing to judge.")
        return
    if found.points:
        ui.table(st, model.point_rows(found.points), hide_index=True, key="lookup_table")
    else:
        st.info(f"No event of player “{md(player)}” arrived between {clock(lo)} and {clock(hi)}.")
    st.caption(model.lookup_coverage(found))


def main() -> None:
    st.title("Events")
    ui.live(render)

