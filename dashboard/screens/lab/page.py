"""Watermark lab: the configured pipeline and its lab lanes side by side over the same events.

Each lane is the whole pipeline with another watermark strategy (one watermark,
per-server combined by min or max, with or without idleness), so the presenter
can show what an idle or slow server does to each, live.
"""

from __future__ import annotations

import redis
import streamlit as st

from dashboard import loaders, ui
from dashboard.screens.lab import model
from dashboard.status import assess, clock, human_ms, unreachable
from streaming.rules.fleet import IdleDecision
from streaming.schema.config import DEFAULT_IDLE_TIMEOUT_MS, Config, redact_url

SETUP_HINT = ("No lab lanes run beside this pipeline. Start the job with `LAB_LANES=per-server-min,"
              "per-server-min-idle,per-server-max` (`./run.sh` starts the first two by default), then switch to the "
              "`idle-server` scenario on the Lab control page.")
PRODUCTION_SETUP_HINT = ("No lab lanes run beside this pipeline. To compare watermark strategies over your own "
                         "events, start the job with `LAB_LANES=per-server-min,per-server-min-idle,per-server-max` "
                         "(`DEMO=off ./run.sh` starts the first two by default): the lanes follow every server from "
                         "its first event.")


IDLE_DECISIONS_SHOWN = 12


def idle_decisions(decisions: list[tuple[str, IdleDecision]], idle_after_ms: int) -> None:
    """The job's idle decisions and why: the only way a server is declared idle (a producer's marker is
    quarantined)."""
    st.subheader("Idle decisions")
    if not decisions:
        st.caption(f"No server has been declared idle: the job declares one silent for "
                   f"{human_ms(idle_after_ms)} or more (a marker written by anyone else is quarantined).")
        return
    ui.table(st, [{"Declared at": clock(d.at_ms), "Server": d.server, "Why": d.reason(), "Marker entry": marker}
                  for marker, d in decisions], hide_index=True, key="idle_decisions", width="stretch")
    st.caption(f"The job's newest {len(decisions)} decisions. Only the job declares a server idle: it signs "
               "its markers, and the pipeline quarantines any other (Pipeline health, *forged idle marker*).")


def render(cfg: Config) -> None:
    view = ui.current_view()

    @ui.refreshing("lab")
    def tick() -> None:
        now = ui.now_ms()
        lanes = ui.available_lanes()
        try:
            snaps = [ui.lane_snapshot(cfg, lane, view, now) for lane in lanes]
            seen = loaders.load_seen(cfg.redis_url, cfg.namespace, view.tick(now))
            decisions = loaders.load_idleness(cfg.redis_url, cfg.namespace, view.tick(now))
        except redis.RedisError as exc:
            ui.show_status([unreachable(redact_url(cfg.redis_url), exc)])
            return
        # The pipeline all lanes read from: live, behind, down.
        ui.show_status(assess(snaps[0], now, demo=cfg.demo)[:1])
        if len(lanes) < 2:
            st.info(SETUP_HINT if cfg.demo else PRODUCTION_SETUP_HINT)
        idle_after = next((lane.idle_timeout_ms for lane in lanes if lane.idle_timeout_ms), DEFAULT_IDLE_TIMEOUT_MS)
        ui.table(st, model.lane_table([model.lane_row(lane, snap)
                                         for lane, snap in zip(lanes, snaps, strict=True)]),
                     hide_index=True, key="lanes_table", width="stretch")
        st.caption("Accepted, dropped late and late accepted are totals since each pipeline started; final "
                   "windows and idle markers count the range shown.")
        ui.draw(st, ui.marked(model.lanes_watermarks(lanes, snaps, now)), "lanes_watermarks")
        # What each lane's watermark is doing, in words: under the table and the chart they explain (data first).
        for lane, snap in zip(lanes, snaps, strict=True):
            ui.show_status(model.findings(lane, snap, seen, now, idle_after, reference=snaps[0]))
        per_server = [(lane, snap) for lane, snap in zip(lanes, snaps, strict=True) if lane.mode == "per-server"]
        for i in range(0, len(per_server), 2):
            cols = st.columns(2)
            for col, (lane, snap) in zip(cols, per_server[i:i + 2], strict=False):
                ui.draw(col, ui.marked(model.server_watermarks(lane, snap)), f"server_wm_{lane.name}")
        if any(lane.idle for lane in lanes):
            idle_decisions(decisions, idle_after)

    tick()
    with st.expander("How the lanes differ"):
        st.markdown(
            "* **global**: one `withWatermark` over all events; the newest event time anywhere drives it.\n"
            "* **per-server-min**: each server is its own input with its own `withWatermark`; Spark combines them "
            "with `spark.sql.streaming.multipleWatermarkPolicy=min`. The slowest server, or one that fell silent, "
            "holds every window open.\n"
            "* **per-server-min-idle**: the same, and a server silent for `IDLE_TIMEOUT` gets idle markers from the "
            "job (like Flink's `withIdleness`), so it stops holding the watermark back until its data returns.\n"
            "* **per-server-max**: combined by `max`: the fastest server drives the watermark and a slow server's "
            "events fall behind it and are dropped.\n\n"
            "Spark keeps the per-input watermarks in memory only: after a restart each input counts as 0 until it "
            "has data again, so under `min` the watermark does not move until every server has sent something.")


def main() -> None:
    ui.page("Watermark lab", render)

