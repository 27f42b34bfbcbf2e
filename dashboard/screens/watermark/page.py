"""Watermark: where it is, how far it trails, and exactly which events it dropped."""

from __future__ import annotations

import streamlit as st

from dashboard import charts, ui
from dashboard.fleet import Grouping, grouping
from dashboard.status import clock, human_ms
from dashboard.text import md
from streaming.store.views.snapshot import Snapshot


def server_drops(snap: Snapshot, g: Grouping) -> None:
    """Drops and late accepts per server, or per region past a few servers with the servers dropping most."""
    t = snap.totals
    if not snap.servers:
        return
    dropped = g.counts({s: x.dropped for s, x in t.servers.items()})
    late = g.counts({s: x.late for s, x in t.servers.items()})
    cols = st.columns(len(g.labels))
    for col, label in zip(cols, g.labels, strict=True):
        col.metric(f"{md(label)} · dropped late", ui.fmt_int(dropped[label]),
                   help=None if not g.grouped else f"The sum over {len(g.members[label]):,} servers.")
        col.caption(f"late but accepted: {late[label]:,}")
    if g.grouped:
        worst = sorted(t.servers.items(), key=lambda kv: (-kv[1].dropped, kv[0]))[:5]
        st.caption("Most dropped: " + ", ".join(f"{md(s)} ({x.dropped:,})" for s, x in worst if x.dropped)
                   if worst and worst[0][1].dropped else "No server has dropped an event.")


def render(snap: Snapshot, now_ms: int) -> None:
    state = snap.state
    assert state is not None
    t = snap.totals
    c = st.columns(5)
    c[0].metric("Watermark (UTC)", clock(state.next_watermark_ms, zone=False),
                help="In force for the next batch: windows ending at or before it are closed and final.")
    c[1].metric("Watermark lag", human_ms(now_ms - state.next_watermark_ms) if state.next_watermark_ms else "-",
                help="Wall clock minus watermark: how long an event may take to arrive and still count, plus any "
                     "stall.")
    c[2].metric("Max event time (UTC)", clock(state.head_ms, zone=False) if state.head_ms is not None else "-",
                help="The newest event time seen; the watermark is this minus the delay.")
    c[3].metric("Dropped late (total)", ui.fmt_int(t.dropped),
                help="Exact count of events (per window) that arrived after their window closed.")
    c[4].metric("Late accepted (total)", ui.fmt_int(t.late),
                help="Events behind the watermark whose window was still open: counted.")

    if state.lost_at_batch is not None:
        st.caption(f"Totals count from batch {state.lost_at_batch}: Redis came back empty before it, and what it "
                   "held is gone.")
    g = grouping(snap.servers, snap.regions, {s: x.dropped for s, x in t.servers.items()})
    server_drops(snap, g)

    lost = state.lost_at_batch
    ui.chart(st, charts.mark_loss(charts.watermark_vs_time(snap.batches, now_ms), snap.batches, lost),
             "watermark_vs_time",
             "No batches in this range: the watermark appears here with the first batch.")
    left, right = st.columns(2)
    ui.chart(left, charts.watermark_lag(snap.batches, state.delay_ms), "watermark_lag",
             "No watermark yet: it starts with the first batch that has events.")
    ui.chart(right, charts.dropped_per_window(g.windows(snap.windows), g.labels), "dropped_per_window",
             "No window in this range has dropped an event: an event arriving after its window closed would "
             "appear here, under its window.")
    left, right = st.columns(2)
    ui.chart(left, charts.mark_loss(charts.per_server_over_time(snap.batches, g.members, "dropped",
                                                                "Dropped late per batch"), snap.batches, lost),
             "dropped_over_time", "No batch in this range dropped an event: a batch that does appears here as a "
             "bar per server.")
    ui.chart(right, charts.per_server_over_time(snap.batches, g.members, "late", "Late but accepted per batch"),
             "late_over_time", "No batch in this range accepted a late event (behind the watermark, its window "
             "still open): a batch that does appears here as a bar per server.")
    ui.retired_note(st, snap)
    with st.expander("How to read the first chart"):
        st.markdown("From the wall clock (dashed) down to the newest event time seen is how late events arrive; "
                    "from there down to the watermark in force is the delay; a flat watermark while events arrive "
                    "is a stall.")
    with st.expander("The late rule"):
        st.markdown(
            "Spark's rule, applied to every (event, window) pair: a window is **closed**, and an event for it is "
            "**dropped**, when `window end <= watermark in force for the batch`. After each batch with data the "
            f"watermark becomes `max(watermark, max event time − {human_ms(state.delay_ms)})`; it never falls. An "
            "event older than the watermark whose window is still open is **late but accepted**. These are exact "
            "event counts, unlike Spark's `numRowsDroppedByWatermark`, which counts late groups."
        )


def main() -> None:
    st.title("Watermark")
    ui.live(render)

