"""Choosing the delay: what each candidate watermark delay would have dropped, and what it costs in latency.

Exact, from the sink's trade-off histogram (``streaming.rules.tradeoff``): every
(event, window) pair the pipeline has seen, by the smallest delay that would
have kept it. A larger delay keeps more late data and closes every window that
much later.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping

import redis
import streamlit as st

from dashboard import loaders, ui
from dashboard.screens.delay import model
from dashboard.status import assess, human_ms, unreachable
from streaming.rules.tradeoff import RETIRED_SERVERS, Candidate, Evidence, Tradeoff
from streaming.schema.config import Config, redact_url

RETIRED_LABEL = "(retired servers, summed)"
"""The row of the servers forgotten once retired: their pairs still count in the advice."""
TARGETS = {"99%": 0.99, "99.9%": 0.999, "99.99%": 0.9999}


def tables(tradeoff: Tradeoff, target: float, behind: float, current: int, best: int | None,
           regions: Mapping[str, str]) -> None:
    """Per server, the delay that meets the target; every candidate delay and what it drops, as a chart and a
    table."""
    rows = []
    for server in tradeoff.servers:
        enough = tradeoff.evidence(target, [server]).enough
        rec = tradeoff.recommend(target, [server]) if enough else None
        pairs = tradeoff.candidates([server])[0].pairs
        name = RETIRED_LABEL if server == RETIRED_SERVERS else server
        rows.append({"Server": name, "Pairs": f"{pairs:,}",
                     "Recommended delay": model.delay_text(rec) if enough else "too few late events",
                     "Window closes after (wall clock)": "-" if rec is None else human_ms(rec + behind)})
    ui.table(st, rows, hide_index=True, key="per_server_delay")
    ui.draw(st, model.tradeoff_chart(tradeoff, current, best, regions), "tradeoff_chart")
    ui.table(st, [{"Delay": model.delay_text(c.delay_ms), "Dropped pairs": f"{c.dropped:,}",
                   "Of": f"{c.pairs:,}", "Dropped": percent(c.dropped_share)} for c in tradeoff.candidates()],
                 hide_index=True, key="tradeoff_table")


def headline(evidence: Evidence, best: int | None, current: int, cands: dict[int, Candidate]) -> None:
    """The recommended delay (or "keep" the current one, and why), the current delay, what the recommended drops."""
    cols = st.columns(3)
    label = f"Recommended delay for {st.session_state.get('delay_target') or '99.9%'}"
    if evidence.enough:
        cols[0].metric(label, model.delay_text(best),
                       help="The smallest candidate delay that would have dropped at most the allowed share of pairs.")
    else:
        cols[0].metric(label, f"keep {human_ms(current) if current else '0 s'}", help=evidence.why_not())
    cols[1].metric("Current delay", human_ms(current) if current else "0 s",
                   help="The delay the pipeline runs with now.")
    if best is not None:
        c = cands[best]
        cols[2].metric("Dropped at the recommended delay", percent(c.dropped_share),
                       help=f"{c.dropped:,} of {c.pairs:,} pairs")


def render(cfg: Config) -> None:
    st.segmented_control("Target completeness", list(TARGETS), default="99.9%", key="delay_target",
                         help="Share of (event, window) pairs that must be counted, not dropped as late.")
    target = TARGETS.get(st.session_state.get("delay_target") or "99.9%", 0.999)
    view = ui.current_view()
    lane = ui.selected_lane(cfg)
    now = ui.now_ms()
    try:
        snap = ui.lane_snapshot(cfg, lane, view, now)
        tradeoff = loaders.load_tradeoff(cfg.redis_url, lane.namespace, view.tick(now))
    except redis.RedisError as exc:
        ui.show_status([unreachable(redact_url(cfg.redis_url), exc)])
        return
    ui.show_status(assess(snap, now, demo=cfg.demo))
    if snap.state is None or not tradeoff.hist:
        st.info("No batch has been processed yet: the trade-off appears with the first events.")
        return
    current = snap.state.delay_ms
    evidence = tradeoff.evidence(target)
    best = tradeoff.recommend(target) if evidence.enough else None
    st.caption(f"{ui.params_caption(snap)} · every (event, window) pair since the namespace started")
    cands = {c.delay_ms: c for c in tradeoff.candidates()}
    headline(evidence, best, current, cands)
    now_share = cands[current].dropped_share if current in cands else None  # exact only on the grid
    lags = [b.batch_ts_ms - b.running_max_event_us // 1000 for b in snap.batches if b.running_max_event_us]
    behind = statistics.median(lags) if lags else 0
    if best is not None:
        best_text = model.delay_text(best)
        st.markdown(f"With **{best_text}** a window closes {best_text} of event time after its end, "
                    f"about **{human_ms(best + behind)}** after its end on the wall clock (the newest event time "
                    f"trails the clock by {human_ms(behind)} here); the current {human_ms(current)} closes it after "
                    f"about {human_ms(current + behind)}"
                    + (f" and would have dropped {percent(now_share)} of pairs." if now_share is not None else "."))
    if not evidence.enough:
        st.info(f"Keep the current delay: {evidence.why_not()}. The history below is what each delay would have "
                "dropped so far.")
    tables(tradeoff, target, behind, current, best, snap.regions)
    if best is not None and best != current:
        st.button(f"Restart the query with {model.delay_text(best)} (history kept)", key="apply_recommended",
                  on_click=ui.submit_control, args=(cfg, lambda: {"delay_ms": best}))
    result = st.session_state.pop(ui.CONTROL_RESULT, None)
    if result is not None:
        ui.show_status([result])
    with st.expander("How this is computed"):
        st.markdown(
            "Under delay *d* the watermark for a batch is *M − d*, with *M* the newest event time before it (per "
            "server pipelines: the min or max of each server's). A pair is dropped iff `window end <= M − d`, i.e. "
            "iff *d* ≤ *M* − window end. The sink adds each window's pairs to a histogram of that slack at every "
            "batch, so the share dropped is exact for every candidate, over all history, at no cost to the query. "
            "The batches are the ones that ran; a different delay would not have changed them.")


def percent(share: float) -> str:
    """A share for people: ``1.02%``, ``0.013%``, ``0%``; small shares keep two significant digits."""
    if share == 0:
        return "0%"
    pct = 100 * share
    return f"{pct:.2f}%" if pct >= 0.1 else f"{pct:.2g}%"


def main() -> None:
    ui.page("Choosing the delay", render)

