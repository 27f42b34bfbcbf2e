"""Lag: how far behind event time each server's data arrives, so a slow server stands out."""

from __future__ import annotations

import streamlit as st

from dashboard import charts, ui
from dashboard.fleet import MAX_SERIES, latest_per_server
from dashboard.status import human_ms
from dashboard.text import md
from streaming.schema.records import ServerRecord
from streaming.store.views.snapshot import Snapshot

HEADLINED = 4
"""Servers whose lag is headlined as a number: the slowest, each in a column wide enough to read."""


def lag_table(latest: dict[str, tuple[int, ServerRecord]]) -> list[dict[str, object]]:
    rows = []
    for server, (batch, sb) in latest.items():
        il, pl = sb.ingest_lag_ms, sb.processing_lag_ms
        assert il is not None and pl is not None
        rows.append({"Server": server, "Batch": batch, "Ingest p50": human_ms(il.p50), "Ingest p95": human_ms(il.p95),
                     "Ingest max": human_ms(il.max), "Processing p50": human_ms(pl.p50),
                     "Processing p95": human_ms(pl.p95), "Processing max": human_ms(pl.max), "_order": -il.p95})
    rows.sort(key=lambda r: r["_order"])  # type: ignore[arg-type,return-value]
    return [{k: v for k, v in r.items() if k != "_order"} for r in rows]


def headline(sb: ServerRecord) -> tuple[str, float]:
    """The lag that matters most for a server (``ServerRecord.worse_lag_p95``); every server here has its ingest
    lag (``latest_per_server``)."""
    worse = sb.worse_lag_p95()
    assert worse is not None
    return worse


def render(snap: Snapshot, now_ms: int) -> None:
    st.caption("Ingest lag = entry ID time − event time (delay before the event reached Redis). Processing lag = "
               "batch trigger time − event time (what the watermark has to wait for).")
    latest = latest_per_server(snap.batches, snap.servers)
    # Past a few servers, the slowest (the worse p95 of the two) are drawn: percentiles do not add up per region.
    slowest = sorted(latest, key=lambda s: (-headline(latest[s][1])[1], s))[:MAX_SERIES]
    shown = sorted(slowest) if len(latest) <= MAX_SERIES else slowest
    if len(latest) > MAX_SERIES:
        st.caption(f"The {MAX_SERIES} slowest of {len(latest):,} servers by the worse lag p95 (ingest or processing) "
                   f"in their newest batch, the {HEADLINED} slowest as numbers; every server is in the table below.")
    if latest:
        # the slowest few as numbers (each column wide enough for "3 min 26 s"); the chart draws all it shows
        headlined = slowest[:HEADLINED] if len(latest) > HEADLINED else shown
        cols = st.columns(len(headlined))
        worst = slowest[0]
        for col, (server, (_, sb)) in zip(cols, [(s, latest[s]) for s in headlined], strict=False):
            which, p95 = headline(sb)
            col.metric(f"{md(server)} · {which} p95", human_ms(p95),
                       help=f"{which} lag p95 in the server's newest batch: the worse of "
                       "ingest (arrival − event time) and processing (batch − event time).")
            if server == worst and len(latest) > 1:
                col.caption("slowest server")
    stat = st.segmented_control("Statistic", list(charts.LAG_STATS), default="p95", key="lag_stat",
                                format_func=lambda k: charts.LAG_STATS[k]) or "p95"
    ui.chart(st, charts.lag_chart(snap.batches, shown if len(latest) > MAX_SERIES else snap.servers, stat), "lag_chart",
             "No lag figures in this range yet: each batch with events adds a point per server.")
    ui.retired_note(st, snap)
    ui.table(st, lag_table(latest), hide_index=True, width="stretch")


def main() -> None:
    st.title("Event-time lag")
    ui.live(render)

