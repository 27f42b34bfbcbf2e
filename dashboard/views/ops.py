"""Live ops: how many players are on each server right now, and can I trust the number yet?"""

from __future__ import annotations

import streamlit as st

from dashboard import charts, ui
from dashboard.data import Snapshot, WindowRow
from dashboard.status import clock, human_ms
from streaming.presence_rollup import TOTAL
from streaming.presence_store import OnlineView


def window_status(w: WindowRow | None, bounds: tuple[int, int] | None, watermark_ms: int,
                  head_ms: int | None) -> str:
    """Says how far the window has got, so a small early count is not mistaken for a drop in players."""
    if w is None:
        where = "" if bounds is None else f" ({charts.ts(bounds[0]):%H:%M:%S}–{charts.ts(bounds[1]):%H:%M:%S})"
        return f"no events in the current window{where} yet"
    span = f"window {charts.ts(w.start_ms):%H:%M:%S}–{charts.ts(w.end_ms):%H:%M:%S}"
    if w.final:
        return f"{span} · final"
    seen = "" if head_ms is None else f" ({human_ms(head_ms - w.start_ms)} of {human_ms(w.end_ms - w.start_ms)} seen)"
    return (f"{span}{seen} · provisional: final once the watermark (now {clock(watermark_ms)}) reaches "
            f"{clock(w.end_ms)}")


def render(snap: Snapshot, now_ms: int) -> None:
    state = snap.state
    assert state is not None
    st.caption(ui.params_caption(snap))
    current = snap.current_windows()
    last_final = snap.last_final_windows()
    bounds = snap.current_window_bounds()

    st.subheader("Players now")
    cols = st.columns(max(1, len(snap.servers)))
    for col, server in zip(cols, snap.servers, strict=False):
        w = current.get(server)
        f = last_final.get(server)
        with col:
            st.metric(f"{server} · players now", ui.fmt_int(w.players if w else 0),
                      help="Distinct players with an accepted event in the window holding the newest event time. "
                           "Provisional until the watermark passes the window's end.")
            st.caption(window_status(w, bounds, state.next_watermark_ms, state.head_ms))
            if f is not None:
                st.caption(f"last final: {f.players:,} players in {charts.ts(f.start_ms):%H:%M}–"
                           f"{charts.ts(f.end_ms):%H:%M:%S}")

    online_now(snap)

    st.subheader("Totals")
    t = snap.totals
    c = st.columns(5)
    c[0].metric("Events accepted", ui.fmt_int(t.events), help="Counted into a window (each window once).")
    c[1].metric("Late but accepted", ui.fmt_int(t.late), help="Behind the watermark, but their window was open.")
    c[2].metric("Dropped late", ui.fmt_int(t.dropped), help="Arrived after their window closed (end <= watermark).")
    c[3].metric("Quarantined", ui.fmt_int(t.quarantined), help="Entries that did not parse; see Pipeline health.")
    c[4].metric("Entries read", ui.fmt_int(t.input), help="Stream entries the job has processed.")

    left, right = st.columns(2)
    left.plotly_chart(charts.players_now(current, snap.servers), key="players_now")
    right.plotly_chart(charts.players_over_time(snap.windows, snap.servers), key="players_over_time")
    st.plotly_chart(charts.events_per_window(snap.windows, snap.servers), key="events_per_window")

    with st.expander(f"Windows in range ({len(snap.windows)})"):
        st.dataframe(window_table(snap.windows), hide_index=True, width="stretch")
    if state.head_ms is not None:
        st.caption(f"Newest event time {clock(state.head_ms)}; the page shows windows ending within "
                   f"{human_ms(snap.range_ms)} of it.")


def online_now(snap: Snapshot) -> None:
    """Players online per server: the online view, folded by the pipeline's sink with every batch."""
    st.subheader("Online now")
    v = snap.online
    if v is None:
        st.info("The online view has not committed a batch yet: no online players to show. It starts with "
                "the job and needs its first micro-batch (Spark takes 10-20 s to start).")
        return
    note = online_loss_note(v)
    if note:
        (st.warning if v.partial else st.info)(note)
    servers = sorted({*snap.servers, *v.counts})
    cols = st.columns(max(1, len(servers)) + 1)
    for col, server in zip(cols, [*servers, TOTAL], strict=False):
        name = "All servers" if server == TOTAL else server
        n = v.total if server == TOTAL else v.counts.get(server, 0)
        peak = v.peaks.get(server)
        col.metric(f"{name} · online now", ui.fmt_int(n),
                   help="Logged in (or seen) and neither logged out nor silent for the timeout, in event time, "
                        "as of the watermark below (the online view, folded with every batch).")
        if peak is not None:
            col.caption(f"peak today {peak[0]:,} at {clock(peak[1])}")
    st.caption(f"As of batch {v.last_batch}, watermark {clock(v.watermark_ms)}: a player with no event for "
               f"{human_ms(v.timeout_ms)} of event time counts as offline.")
    if v.minutes:
        left, right = st.columns(2)
        left.plotly_chart(charts.online_per_minute(v.minutes, servers), key="online_per_minute")
        right.plotly_chart(charts.transitions_per_minute(v.minutes), key="transitions_per_minute")
    if v.history:
        st.plotly_chart(charts.online_over_batches(v.history, servers), key="online_over_batches")


def online_loss_note(v: OnlineView) -> str | None:
    """What a loss of Redis' data did to the online view, in words; None when nothing was lost."""
    if v.partial:
        assert v.partial_until_ms is not None
        return (f"Partial: Redis came back empty before batch {v.lost_at_batch} while the job restarted, so the "
                "online view is being rebuilt from new events. Players who have not sent an event since are "
                f"missing, and their next event counts as a login, until the watermark reaches "
                f"{clock(v.partial_until_ms)} (now {clock(v.watermark_ms)}; by then they would have timed out).")
    if v.lost_at_batch is not None:
        how = "rebuilt from new events" if v.partial_until_ms is not None else "rewritten from the job's copy"
        return (f"Redis came back empty before batch {v.lost_at_batch}. Players online are whole again ({how}); "
                "transitions, peaks and the trend from before the loss are gone.")
    return None


def window_table(windows: tuple[WindowRow, ...]) -> list[dict[str, object]]:
    return [
        {"server": w.server, "start (UTC)": charts.ts(w.start_ms), "end (UTC)": charts.ts(w.end_ms),
         "players": w.players, "events": w.events, "late accepted": w.late, "dropped": w.dropped,
         "status": "final" if w.final else "provisional"}
        for w in reversed(windows)
    ]


def main() -> None:
    st.title("Live ops")
    ui.live(render)


main()
