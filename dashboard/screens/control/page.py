"""Lab control: switch, start and stop the generator's scenario, and ask the job for another watermark delay.

The one page that writes to Redis, and only when a button is pressed: it
stores the request in ``{ns}:control`` (``streaming.store.control_store``); the generator
in follow mode and the job apply it and say so. With a read-only Redis user the
page still shows everything and says why it cannot change anything.

In production mode (``DEMO=off``: no generator) the page is in the navigation only with ``LAB_CONTROL=on``,
and then offers only the delay, which the job applies by itself.

With sign-in (decision 0022) only an operator changes anything: a viewer sees the same page with every input
disabled, no button wired to a write, and a note saying the operator role is needed (``ui.submit_control`` asks
again, for a press that reaches the server anyway).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis
import streamlit as st

from dashboard import loaders, ui
from dashboard.screens.control.model import delay_line, generator_line, rate_text
from dashboard.status import assess, unreachable
from streaming.rules.scenarios import SCENARIOS
from streaming.schema.config import Config, ConfigError, Lane, redact_url
from streaming.schema.keys import KeySchema
from streaming.schema.records import Control
from watermark_client.timeutil import format_duration_ms, parse_duration_ms

DEFAULT_RATE = 1000.0


def _status(cfg: Config) -> None:
    view = ui.current_view()

    @ui.refreshing("control")
    def tick() -> None:
        now = ui.now_ms()
        try:
            control, status = loaders.load_lab(cfg.redis_url, cfg.namespace, view.tick(now))
            snap = ui.lane_snapshot(cfg, Lane.main(cfg.namespace), view, now)
        except (redis.RedisError, ConfigError):
            return  # said once above the form
        line = assess(snap, now, demo=cfg.demo)[:1]
        ui.show_status([generator_line(control, status, now), *line] if cfg.demo else line)

    tick()


def render(cfg: Config) -> None:
    keys = KeySchema(cfg.namespace)
    view = ui.current_view()
    try:
        control, _ = loaders.load_lab(cfg.redis_url, cfg.namespace, view.tick(ui.now_ms()))
    except redis.RedisError as exc:
        ui.show_status([unreachable(redact_url(cfg.redis_url), exc)])
        return
    except ConfigError as exc:
        held = f"`{keys.control}` or `{keys.generator_status}`" if cfg.demo else f"`{keys.control}`"
        st.error(f"{held} holds a value this page cannot read ({exc}); saving new settings below overwrites it.")
        control = None
    control = control or Control()
    _status(cfg)
    operator = ui.current_access().operator
    if not operator:
        st.info(f"Read-only: {ui.OPERATOR_NEEDED}", icon=":material/lock:")
    if cfg.demo:
        generator(cfg, control, operator)
    delay_form(cfg, control, operator)
    result = st.session_state.pop(ui.CONTROL_RESULT, None)
    if result is not None:
        ui.show_status([result])


def generator(cfg: Config, control: Control, operator: bool = True) -> None:
    """The demo's generator: its scenario, its rate, start and stop (for a viewer, shown but disabled)."""
    off = not operator
    st.subheader("Generator")
    names = list(SCENARIOS)
    current = control.scenario if control.scenario in SCENARIOS else names[0]
    st.selectbox("Scenario", names, index=names.index(current), key="lab_scenario",
                 format_func=lambda n: f"{n} — {SCENARIOS[n].description}", disabled=off,
                 help="Switching restarts the simulation from now; events still in flight are abandoned.")
    st.number_input("Rate (events/s across all servers; 0 = as fast as possible)", min_value=0.0, step=100.0,
                    value=control.rate if control.rate is not None else DEFAULT_RATE, key="lab_rate", disabled=off)
    requested = "nothing yet" if control.running is None else "running" if control.running else "stopped"
    rate = "-" if control.rate is None else rate_text(control.rate)
    st.caption(f"Requested now: `{control.scenario or '-'}` at {rate}, {requested} (rev {control.rev}).")
    cols = st.columns(3)
    cols[0].button("Apply scenario and rate", key="lab_apply", type="primary", **_write(cfg, operator, lambda: {
        "scenario": st.session_state["lab_scenario"], "rate": float(st.session_state["lab_rate"])}))
    cols[1].button("Start", key="lab_start", icon=":material/play_arrow:",
                   **_write(cfg, operator, lambda: {"running": True}))
    cols[2].button("Stop", key="lab_stop", icon=":material/stop:", **_write(cfg, operator, lambda: {"running": False}))


def delay_form(cfg: Config, control: Control, operator: bool = True) -> None:
    """Another watermark delay: the job applies it (restarting its query), with or without a generator."""
    st.subheader("Watermark delay")
    state = loaders.load_state(cfg.redis_url, cfg.namespace, ui.current_view().tick(ui.now_ms()))
    job_delay = None if state is None else state.delay_ms
    delay = control.delay_ms if control.delay_ms is not None else job_delay if job_delay is not None else cfg.delay_ms
    st.text_input("Delay (e.g. 20s, 2m)", value=format_duration_ms(delay), key="lab_delay", disabled=not operator,
                  help="How far behind the newest event time the watermark trails.")
    st.button("Apply delay (restarts the query, history kept)", key="lab_apply_delay", **_write(
        cfg, operator, lambda: {"delay_ms": parse_duration_ms(st.session_state["lab_delay"])}))
    st.caption(delay_line(control, job_delay))


def _write(cfg: Config, operator: bool, changes: Callable[[], dict[str, object]]) -> dict[str, Any]:
    """A write button's arguments: wired to ``ui.submit_control`` for an operator; disabled, wired to nothing,
    for a viewer."""
    if operator:
        return {"on_click": ui.submit_control, "args": (cfg, changes)}
    return {"disabled": True}


def main() -> None:
    ui.page("Lab control", render)

