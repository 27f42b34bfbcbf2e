"""The dashboard's status line, its view controls, what it says when Redis is away, empty or came back empty,
and the alerts the monitor has firing."""

from __future__ import annotations

import json

import pytest
import redis
from streamlit.testing.v1 import AppTest

from dashboard import loaders
from streaming.alerting.config import AlertConfig, ServerSilent, WatermarkFlat
from streaming.apps.redis_server import free_port
from streaming.schema.keys import KeySchema
from streaming.store.alert_store import THRESHOLDS_FIELD, publish_thresholds
from tests.seed import Seeded
from tests.ui.app.apptest import LAB_PAGES, PAGES, run_page, statuses

pytestmark = pytest.mark.spark

# --------------------------------------------------------------------------- the status line and controls


def test_status_line_follows_the_injected_clock(env: Seeded, direct: tuple[redis.Redis, KeySchema]) -> None:
    client, keys = direct
    updated = int(client.hget(keys.state, "updated_ms"))
    fresh = statuses(run_page(now_ms=updated + 500))
    assert not any("Idle" in s for s in fresh)
    # the seed ends with batches of late-burst stragglers only: the watermark stands still, for less than the
    # WatermarkFlat alert's minute; a monitor judging after 1 ms makes it a stall on the status line too (with
    # ServerSilent's `after` past the seed's quiet servers, whose silence is said first otherwise)
    assert not any("watermark has not moved" in s for s in fresh)
    # the seed's events arrived minutes before its last commit (explicit entry IDs): every server is silent by
    # ServerSilent's rule, and the status line says so, with when the numbers last moved
    assert any(s.startswith("Stalled: 3 of 3 servers silent since ") for s in fresh), fresh
    with client.pipeline() as pipe:
        publish_thresholds(pipe, keys, AlertConfig(watermark_flat=WatermarkFlat(after_ms=1),
                                                   server_silent=ServerSilent(after_ms=86_400_000)))
        pipe.execute()
    # The snapshot (and the thresholds with it) is read once a refresh tick and shared by every session in the
    # process: an earlier test may hold this tick's read, from before the thresholds changed.
    loaders.forget()
    try:
        assert any("watermark has not moved" in s for s in statuses(run_page(now_ms=updated + 501)))
    finally:
        client.hdel(keys.alerts_monitor, THRESHOLDS_FIELD)
        loaders.forget()
    later = statuses(run_page(now_ms=updated + 3_600_000))  # every server silent an hour, players on them
    assert any(s.startswith("Stalled: 3 of 3 servers silent") for s in later), later


def test_time_range_and_pause_controls(env: Seeded, direct: tuple[redis.Redis, KeySchema]) -> None:
    client, keys = direct
    head_ms = int(client.hget(keys.state, "max_event_us")) // 1000
    members = client.zrange(keys.windows, 0, -1)
    at = run_page(ops_tab="Windows")
    at.segmented_control(key="range").set_value("5 min").run()
    assert not at.exception
    expected = [m for m in members if int(m.split(":")[1]) > head_ms - 300_000]
    (table,) = [df.value for df in at.dataframe if "Start (UTC)" in df.value.columns]
    assert 0 < len(table) == len(expected) < len(members)
    assert view_settings_label(at) == "View: 5 min · every 2 s"
    at.toggle(key="paused").set_value(True).run()
    assert any(c.value.startswith("Paused") for c in at.caption)
    assert view_settings_label(at) == "View: 5 min · paused"


def view_settings_label(at: AppTest) -> str:
    """The label of the sidebar's popover holding the shared controls (the view they set, while it is closed)."""
    (label,) = [b.proto.popover.label for b in at.sidebar.children.values() if b.type == "popover"]
    return label


def test_unreachable_redis_is_a_status_message_not_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()  # nobody listens there
    monkeypatch.setenv("REDIS_URL", f"redis://:s3cret@127.0.0.1:{port}/0")
    for page in [None, *PAGES[1:], *LAB_PAGES]:
        at = run_page(page)
        errors = [e.value for e in at.error]
        assert len(errors) == 1 and "is unreachable" in errors[0]
        shown = errors[0].replace("\\", "").replace("\u2060", "")  # the Markdown text as it reads
        assert "s3cret" not in shown and ":***@" in shown and "redis://:***@127.0.0.1" in shown
        assert not at.get("plotly_chart")


def test_a_config_error_is_a_status_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPELINE_NAMESPACE", "no spaces allowed")
    at = run_page()
    assert [e.value for e in at.error] == [
        "Configuration error: PIPELINE_NAMESPACE 'no spaces allowed' must be 1-64 characters of letters, digits, "
        "'_', '-', '.', optionally in braces at its start ('{wm}', for a Redis Cluster)"]


def test_an_empty_namespace_says_how_to_start(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", "nothing-here")
    at = run_page()
    assert any("Start the pipeline" in s for s in statuses(at))
    assert not at.get("plotly_chart")


def test_the_pages_mark_where_redis_came_back_empty(env: Seeded, direct: tuple[redis.Redis, KeySchema]) -> None:
    client, keys = direct
    batches = [int(b) for b in client.zrange(keys.batches, 0, -1)]
    lost = batches[len(batches) // 2]
    client.hset(keys.state, "lost_at_batch", lost)  # what the job records when it finds Redis empty
    try:
        loaders.load_snapshot.clear()  # read afresh: a test at the same refresh tick may have cached the snapshot
        now = int(client.hget(keys.state, "updated_ms")) + 7_777
        at = run_page("watermark", now_ms=now)
        assert any(f"Totals count from batch {lost}" in c.value for c in at.caption)
        assert any(f"History lost at batch {lost}" in s for s in statuses(at))
        traces = [t for c in at.get("plotly_chart") for t in json.loads(c.proto.spec)["data"]]
        assert sum(t.get("name") == f"history lost (batch {lost})" for t in traces) == 2  # watermark, dropped
        at = run_page(now_ms=now, ops_tab="Windows")
        assert any(f"Counted from batch {lost}" in c.value for c in at.caption)
    finally:
        client.hdel(keys.state, "lost_at_batch")


def test_live_ops_shows_what_the_monitor_has_firing(env: Seeded, direct: tuple[redis.Redis, KeySchema]) -> None:
    """A wall screen on the headline page sees an alert without a click; without one it shows nothing more."""
    from streaming.alerting.conditions import Finding
    from streaming.alerting.config import Timing
    from streaming.alerting.lifecycle import step_all
    from streaming.store.alert_store import apply_decision

    client, keys = direct
    now = int(client.hget(keys.state, "updated_ms"))
    assert not run_page(now_ms=now).error
    d = step_all({}, [Finding("players_drop", "B", True, 80.0, "B: 10 players online, down 80 % from 50")], now,
                 {"players_drop": Timing(0, 0)})
    apply_decision(redis.Redis.from_url(env.cfg.redis_url), keys, d, now, outbox=False)
    try:
        at = run_page(now_ms=now + 60_000)  # the next tick: read afresh
        assert [e.value for e in at.error] == ["1 alert firing: PlayersDrop (server B)."]
    finally:
        client.delete(keys.alerts, keys.alerts_history, keys.alerts_monitor)
