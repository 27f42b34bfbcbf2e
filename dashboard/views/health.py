"""Pipeline health: is the job keeping up, and is anything being quarantined?"""

from __future__ import annotations

import streamlit as st

from dashboard import charts, ui
from dashboard.data import Snapshot
from dashboard.status import human_ms


def render(snap: Snapshot, now_ms: int) -> None:
    state = snap.state
    assert state is not None
    st.caption(ui.params_caption(snap))
    last = snap.last_batch
    c = st.columns(5)
    c[0].metric("Last batch", f"#{state.last_batch}", help="The newest batch committed to Redis.")
    c[1].metric("Last batch duration", human_ms(last.duration_ms) if last and last.duration_ms is not None else "-",
                help=f"Spark's triggerExecution; above the {human_ms(state.trigger_ms)} trigger the job falls behind.")
    waiting = snap.stream.waiting
    c[2].metric("Events waiting", f"{waiting:,}{'' if snap.stream.waiting_exact else '+'}",
                help="Stream entries after the last committed offset.")
    head = snap.stream.head_ms
    c[3].metric("Newest entry age", human_ms(now_ms - head) if head else "-",
                help="Wall clock minus the ingest time of the newest stream entry.")
    c[4].metric("Quarantined (total)", ui.fmt_int(snap.totals.quarantined),
                help="Entries that did not parse; kept with their reason in the dead-letter stream.")

    left, right = st.columns(2)
    left.plotly_chart(charts.batch_durations(snap.batches, state.trigger_ms), key="batch_durations")
    right.plotly_chart(charts.rates(snap.batches), key="rates")
    st.plotly_chart(charts.input_per_batch(snap.batches), key="input_per_batch")
    if snap.totals.bad:
        st.subheader("Quarantined by reason")
        st.dataframe([{"reason": r, "entries": n} for r, n in snap.totals.bad.items()], hide_index=True)
        st.caption(f"Each is kept in `{snap.namespace}:dead` under its original entry ID.")


def main() -> None:
    st.title("Pipeline health")
    ui.live(render)


main()
