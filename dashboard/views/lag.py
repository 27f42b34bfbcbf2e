"""Lag: how far behind event time each server's data arrives, so a slow server stands out."""

from __future__ import annotations

import streamlit as st

from dashboard import charts, ui
from dashboard.data import BatchPoint, Snapshot
from streaming.commit import ServerStats


def latest_per_server(batches: tuple[BatchPoint, ...], servers: tuple[str, ...]) -> dict[str, tuple[int, ServerStats]]:
    """Each server's figures from the newest batch that had its events."""
    out: dict[str, tuple[int, ServerStats]] = {}
    for b in reversed(batches):
        for s in servers:
            sb = b.servers.get(s)
            if s not in out and sb is not None and sb.ingest_lag_ms is not None:
                out[s] = (b.batch, sb)
        if len(out) == len(servers):
            break
    return out


def lag_table(latest: dict[str, tuple[int, ServerStats]]) -> list[dict[str, object]]:
    rows = []
    for server, (batch, sb) in latest.items():
        il, pl = sb.ingest_lag_ms, sb.processing_lag_ms
        assert il is not None and pl is not None
        rows.append({"server": server, "batch": batch, "ingest p50 (s)": round(il.p50 / 1000, 3),
                     "ingest p95 (s)": round(il.p95 / 1000, 3), "ingest max (s)": round(il.max / 1000, 3),
                     "processing p50 (s)": round(pl.p50 / 1000, 3), "processing p95 (s)": round(pl.p95 / 1000, 3),
                     "processing max (s)": round(pl.max / 1000, 3)})
    return sorted(rows, key=lambda r: -float(r["ingest p95 (s)"]))  # type: ignore[arg-type]


def render(snap: Snapshot, now_ms: int) -> None:
    st.caption("Ingest lag = entry ID time − event time (delay before the event reached Redis). Processing lag = "
               "batch trigger time − event time (what the watermark has to wait for). " + ui.params_caption(snap))
    latest = latest_per_server(snap.batches, snap.servers)
    if latest:
        cols = st.columns(len(latest))
        worst = max(latest, key=lambda s: latest[s][1].ingest_lag_ms.p95)  # type: ignore[union-attr]
        for col, (server, (_, sb)) in zip(cols, sorted(latest.items()), strict=False):
            lag = sb.ingest_lag_ms
            assert lag is not None
            col.metric(f"{server} · ingest lag p95", f"{lag.p95 / 1000:.2f} s",
                       help="95th percentile of (ingest − event time) in the server's newest batch.")
            if server == worst and len(latest) > 1:
                col.caption(":red[slowest server]")
    st.plotly_chart(charts.lag_chart(snap.batches, snap.servers), key="lag_chart")
    st.dataframe(lag_table(latest), hide_index=True, width="stretch")


def main() -> None:
    st.title("Event-time lag")
    ui.live(render)


main()
