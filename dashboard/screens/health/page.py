"""Pipeline health: is the job keeping up, and is anything being quarantined?"""

from __future__ import annotations

import streamlit as st

from dashboard import charts, ui
from dashboard.status import human_ms
from streaming.store.views.snapshot import Snapshot


def render(snap: Snapshot, now_ms: int) -> None:
    state = snap.state
    assert state is not None
    stream = snap.stream
    c = st.columns(4)
    c[0].metric("Last batch", f"#{state.last_batch}", help="The newest batch committed to Redis.")
    # Spark reports a batch's duration just after its commit: the newest batch that has one (else "-" at most ticks)
    timed = next((b for b in reversed(snap.batches) if b.duration_ms is not None), None)
    c[1].metric("Last batch duration", human_ms(timed.duration_ms) if timed is not None else "-",
                help=f"Spark's triggerExecution of the newest batch it has reported"
                     f"{f' (#{timed.batch})' if timed is not None else ''}; above the {human_ms(state.trigger_ms)} "
                     "trigger the job falls behind.")
    c[2].metric("Entries waiting", ui.fmt_int(stream.waiting),
                help="Stream entries the job has not committed yet (exact: the stream's length plus what was "
                     "trimmed, minus what was committed).")
    c[3].metric("Behind by", human_ms(stream.behind_ms(now_ms)) if stream.waiting else "up to date",
                help="How long the oldest entry not committed yet has waited (wall clock minus its arrival).")
    c = st.columns(4)
    head = stream.head_ms
    c[0].metric("Newest entry age", human_ms(now_ms - head) if head else "-",
                help="Wall clock minus the ingest time of the newest stream entry.")
    c[1].metric("Input kept", ui.fmt_int(stream.length),
                help="Entries in the input stream now. Committed entries are trimmed once every reader (the "
                     "pipeline, each lab lane, the online view) has committed them and they fall out of the "
                     "look-back (10 minutes, or about STREAM_KEEP_ENTRIES entries at the current rate).")
    c[2].metric("Input kept for", human_ms(now_ms - stream.first_ms) if stream.first_ms else "-",
                help="Age of the oldest entry still in the input stream (wall clock minus its arrival).")
    c[3].metric("Quarantined (total)", ui.fmt_int(snap.totals.quarantined),
                help="Entries that did not parse; kept with their reason in the dead-letter stream.")

    left, right = st.columns(2)
    ui.chart(left, charts.batch_durations(snap.batches, state.trigger_ms), "batch_durations",
             "No batch timings in this range yet: Spark reports each batch's duration as it completes.")
    ui.chart(right, charts.rates(snap.batches), "rates",
             "No rates in this range yet: they appear once a few batches have run.")
    ui.chart(st, charts.mark_loss(charts.input_per_batch(snap.batches), snap.batches, state.lost_at_batch),
             "input_per_batch",
             "No entries arrived in this range: each batch with entries appears here as a bar.")
    if snap.totals.bad:
        st.subheader("Quarantined by reason")
        ui.table(st, [{"Reason": r, "Entries": f"{n:,}"} for r, n in snap.totals.bad.items()], hide_index=True)
        st.caption(f"Each is kept in `{snap.namespace}:dead` under its original entry ID.")


def main() -> None:
    st.title("Pipeline health")
    ui.live(render)

