"""Alerts: what is firing now and since when, what is held because its data is late, the last day's history,
and whether the webhook delivers. The monitor (``wm-monitor``) evaluates; this page only reads what it wrote.
"""

from __future__ import annotations

import os

import pandas as pd
import redis
import streamlit as st

from dashboard import alertview, loaders, ui
from dashboard.charts import has_data
from dashboard.status import clock, human_ms, unreachable
from dashboard.text import md
from streaming.schema.config import Config, ConfigError, redact_url
from streaming.schema.records import ANNOTATION_KINDS
from streaming.store.alert_store import OUTBOX_KEEP, AlertView, WebhookStatus
from watermark_client.timeutil import iso_from_ms

STALE_ROUNDS = 5  # the monitor counts as stopped when it has not evaluated for this many rounds


def monitor_line(v: AlertView, now_ms: int) -> None:
    firing = [a for a in v.alerts.values() if a.status == "firing"]
    if v.round_ms is None:
        st.warning("No monitor has evaluated alerts for this pipeline yet. `./run.sh` starts one (`wm-monitor`).")
    elif now_ms - v.round_ms > STALE_ROUNDS * v.interval_ms:
        st.warning(f"The monitor last evaluated at {clock(v.round_ms)}, {human_ms(now_ms - v.round_ms)} ago: is "
                   "`wm-monitor` running? What is shown here is as it stood then.")
    if firing:
        st.error(alertview.firing_text(firing))
    elif v.round_ms is not None:
        st.success(f"Nothing firing (evaluated at {clock(v.round_ms)}).")
    if v.health:
        st.markdown(alertview.health_text(v.health))


def webhook_line(w: WebhookStatus) -> str:
    if not w.url:
        return ("No webhook configured: set `url` in `[webhook]` of ops/alerts.toml or ALERT_WEBHOOK_URL to have "
                "firing and resolved alerts posted (Alertmanager's webhook format), or ALERTMANAGER_URL to push them "
                "to a Prometheus Alertmanager (docs/alerts.md).")
    text = f"Webhook {md(w.url)}: {w.delivered:,} delivered"
    if w.waiting:
        text += f", {w.waiting:,} waiting to be delivered"
    if w.dropped:
        text += (f", {w.dropped:,} never sent: the receiver refused for longer than the outbox holds "
                 f"({OUTBOX_KEEP:,} notices; the history keeps them)")
    if w.last_error and (w.last_ok_ms is None or (w.last_error_ms or 0) > w.last_ok_ms):
        # the receiver's reply is its text, not ours: shown as text, never as Markdown (links, images)
        said = md(w.last_error[:300])
        text += f"; last attempt failed at {clock(w.last_error_ms or 0)}: {said} (retrying with backoff)"
    return text + "."


def render(v: AlertView, now_ms: int) -> None:
    monitor_line(v, now_ms)
    states = list(v.alerts.values())
    firing = [a for a in states if a.status == "firing"]
    if firing:
        st.subheader("Firing now")
        ui.table(st, alertview.alert_rows(firing, now_ms), hide_index=True)
    held = [a for a in states if a.status == "held"]
    if held:
        st.subheader("Held: the data is late, not the players gone")
        st.caption("These conditions hold, but what they judge is delayed (a server's events, or the pipeline), "
                   "so they do not alert; they fire if the condition still holds once the data has caught up.")
        ui.table(st, alertview.held_rows(held, now_ms), hide_index=True)
    pending = [a for a in states if a.status == "pending"]
    if pending:
        st.caption("Pending (fire if they hold for their `for`): " + "; ".join(
            f"{a.alertname} {md(alertview.subject_text(a.rule, a.subject))} since {clock(a.since_ms)}"
            for a in pending))
    st.subheader("The last day")
    fig = alertview.timeline(alertview.spans(v.history, firing, now_ms), now_ms)
    if has_data(fig):
        ui.draw(st, fig, "alert_timeline")
        ui.table(st, alertview.history_rows(v.history), hide_index=True)
    else:
        st.info("No alert has fired in the last day.")
    st.caption(webhook_line(v.webhook))
    annotate()
    control_changes(v)
    if v.watching:
        st.caption(f"Watching for {v.watching} (ops/alerts.toml; each explained in docs/alerts.md).")


ANNOTATED = "annotation_result"


def annotate() -> None:
    """An operator marks what happened (a deploy, maintenance, an incident) for every time chart; a viewer is told
    who may."""
    st.subheader("Mark what happened")
    if not ui.current_access().operator:
        st.caption(f"Read-only: {ui.ANNOTATION_OPERATOR_NEEDED}.")
        return
    with st.form("annotate", clear_on_submit=True, border=False):
        text = st.text_input("What happened", max_chars=200, placeholder="deploy 1.42 to eu")
        left, mid, right = st.columns(3)
        kind = left.selectbox("Kind", ANNOTATION_KINDS)
        region = mid.text_input("Region (empty: every region)")
        lasting = right.text_input("For (empty: a moment; e.g. 30m)")
        if st.form_submit_button("Add annotation"):
            cfg = Config.from_env(os.environ)
            st.session_state[ANNOTATED] = ui.submit_annotation(
                cfg, {"text": text, "kind": kind, "region": region.strip() or None, "for": lasting.strip() or None})
    if (result := st.session_state.get(ANNOTATED)) is not None:
        ui.show_status([result])


def control_changes(v: AlertView) -> None:
    """Who changed the lab's control settings (the job's delay, the generator), beside the annotations."""
    cfg = Config.from_env(os.environ)
    changes = v.control_changes
    if not changes and not cfg.lab_control:
        return
    st.subheader("Lab control changes")
    if not cfg.lab_control:
        st.caption("Lab control is off here (`LAB_CONTROL`): the job follows none of these.")
    if not changes:
        st.caption("Nobody has changed the lab's control settings.")
        return
    last = changes[0]
    st.caption(f"Last: {md(last.change)} by {md(last.by)} ({md(last.role)}) at {clock(last.at_ms)}.")
    ui.table(st, pd.DataFrame({"When (UTC)": [iso_from_ms(c.at_ms) for c in changes], "Who": [c.by for c in changes],
                               "Role": [c.role for c in changes], "Change": [c.change for c in changes],
                               "Rev": [c.rev for c in changes]}), hide_index=True)


def main() -> None:
    st.title("Alerts")
    view = ui.current_view()

    @ui.refreshing("alerts")
    def tick() -> None:
        now = ui.now_ms()
        try:
            cfg = Config.from_env(os.environ)
        except ConfigError as exc:
            st.error(f"Configuration error: {exc}")
            return
        try:
            v = loaders.load_alerts(cfg.redis_url, cfg.namespace, view.tick(now), now)
        except redis.RedisError as exc:
            ui.show_status([unreachable(redact_url(cfg.redis_url), exc)])
            return
        render(v, now)

    tick()

