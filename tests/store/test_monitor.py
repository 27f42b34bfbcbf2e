"""The monitor's rounds against a real redis-server, with time passed in: Redis going away and coming back, and a
restart in the middle of a firing (no Spark)."""

from __future__ import annotations

import queue
import uuid

import pytest
import redis

from streaming.alerting.config import AlertConfig, WatermarkFlat
from streaming.apps.monitor import Monitor, load_config, monitor_client, read_config, shown_url
from streaming.apps.monitor.notify import Notifier, Outgoing
from streaming.apps.redis_server import free_port
from streaming.schema.config import Config, ConfigError
from streaming.schema.keys import KeySchema
from streaming.store.alert_store import THRESHOLDS_FIELD, read_alert_view, read_alerts, thresholds_from

T0 = 1_800_000_000_000


class Collecting(Notifier):
    """A notifier that is never started: what the monitor hands it stays in its queue to be looked at."""

    def taken(self) -> list[Outgoing]:
        out = []
        while True:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                return out
            assert item is not None
            out.append(item)


def monitor(client: redis.Redis, keys: KeySchema, started: int = T0) -> tuple[Monitor, Collecting]:
    n = Collecting("http://127.0.0.1:9/", client, keys, external_url="", timeout_ms=1_000, max_backoff_ms=1_000)
    return Monitor(client, keys, AlertConfig(), started, n), n


def test_redis_away_fires_from_memory_and_the_history_gets_it_when_redis_is_back(redis_url: str) -> None:
    keys = KeySchema(f"mon-{uuid.uuid4().hex[:8]}")
    dead = monitor_client(f"redis://127.0.0.1:{free_port()}/0")
    m, n = monitor(dead, keys)
    assert m.round(T0).notices == ()  # pending: RedisUnreachable waits 5 s
    d = m.round(T0 + 5_000)
    assert [(x.status, x.alertname) for x in d.notices] == [("firing", "RedisUnreachable")]
    assert [(o.notice.alertname, o.outbox_id) for o in n.taken()] == [("RedisUnreachable", None)]  # sent from memory
    m.client = redis.Redis.from_url(redis_url)  # Redis answers again
    m.round(T0 + 6_000)
    d = m.round(T0 + 11_000)  # gone for its clear (5 s): resolved, through the outbox now
    assert [(x.status, x.alertname) for x in d.notices] == [("resolved", "RedisUnreachable")]
    assert [(o.notice.status, o.outbox_id is not None) for o in n.taken()] == [("resolved", True)]
    history = read_alert_view(m.client, keys, T0 + 11_000).history
    assert [(x.status, x.alertname) for x in history] == [("firing", "RedisUnreachable"),
                                                          ("resolved", "RedisUnreachable")]


def test_a_monitor_publishes_its_thresholds_for_the_status_line(redis_url: str) -> None:
    """What the dashboard judges "behind" and "stalled" with: this monitor's thresholds, no receiver URL."""
    client = redis.Redis.from_url(redis_url)
    keys = KeySchema(f"mon-{uuid.uuid4().hex[:8]}")
    assert thresholds_from(client.hget(keys.alerts_monitor, THRESHOLDS_FIELD)) == AlertConfig()  # none yet
    cfg = AlertConfig(watermark_flat=WatermarkFlat(after_ms=7_000)).with_webhook_url("http://u:pw@hook/x", "test")
    m = Monitor(client, keys, cfg, T0)
    m.round(T0)
    raw = client.hget(keys.alerts_monitor, THRESHOLDS_FIELD)
    assert thresholds_from(raw) == cfg.without_urls() and b"pw" not in raw


def test_a_restarted_monitor_continues_the_firing_and_owes_what_was_not_delivered(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    keys = KeySchema(f"mon-{uuid.uuid4().hex[:8]}")
    dead = monitor_client(f"redis://127.0.0.1:{free_port()}/0")
    first, _ = monitor(dead, keys)
    first.round(T0)
    first.round(T0 + 5_000)
    first.client = client
    first.round(T0 + 5_500)  # written: the alert firing, its notice in the history, nothing owed (sent from memory)
    assert read_alerts(client, keys)["redis_unreachable|"].status == "firing"

    again, n = monitor(client, keys, started=T0 + 6_000)
    assert again.round(T0 + 6_000).notices == ()  # read back first: nothing fired again
    assert again.states == read_alerts(client, keys) and n.taken() == []  # and nothing owed
    assert [x.status for x in again.round(T0 + 11_000).notices] == ["resolved"]


def test_the_webhook_address_shown_keeps_no_secret(monkeypatch: object) -> None:
    # a chat integration's token lives in the path: only the scheme, host and port are shown, on pages and in logs
    assert shown_url("https://user:pw@hooks.example:8443/alert/x?token=s3cret") == "https://hooks.example:8443/…"
    assert shown_url("https://hooks.example/services/T0/B0/XXXX") == "https://hooks.example/…"
    assert shown_url("") == ""


def test_the_environment_names_the_webhook() -> None:
    env = Config.from_env({"ALERT_WEBHOOK_URL": "http://127.0.0.1:9/hook"})
    assert load_config("ops/alerts.toml", env).webhook.url == "http://127.0.0.1:9/hook"


def test_a_missing_file_says_so() -> None:
    with pytest.raises(ConfigError, match="alerts configuration /nonexistent.toml: No such file"):
        read_config("/nonexistent.toml")


def test_a_server_the_job_forgot_but_the_online_view_keeps_is_judged_by_its_clock(redis_url: str) -> None:
    """The job forgets a retired server's fields (``forget_servers``) while the online view may still keep a logout of
    it: its last arrival is then its clock's, so it is retired, not a server in the live views that never spoke."""
    import uuid

    from streaming.apps.monitor.metrics import in_view
    from streaming.schema.records import ClockRecord, OnlineStateRecord
    from streaming.store.observe import read_stack

    client = redis.Redis.from_url(redis_url)
    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    now = 10_000_000
    clock = ClockRecord(watermark_ms=0, clock_us=0, heard_ms=now - 700_000, clock_at_heard_us=0)
    client.hset(keys.online_state, mapping=OnlineStateRecord(last_batch=3, clocks={"gone": clock,
                                                                                       "here": clock}).to_hash())
    client.hset(keys.online_counts, mapping={"gone": 0, "here": 1})
    client.hset(keys.seen, "here", now - 1_000)
    servers = {s.name: s for s in read_stack(client, keys, {}, now, None, 0, retire_after_ms=600_000).obs.servers}
    assert servers["gone"].retired and servers["gone"].last_arrival_ms == now - 700_000
    assert not servers["here"].retired and servers["here"].last_arrival_ms == now - 1_000
    assert [s for s in servers.values() if in_view(s)] == [servers["here"]]


@pytest.mark.parametrize(("lab_alerts", "sent"), [(False, ["main"]), (True, ["per-server-min", "main"])])
def test_a_lab_lanes_alerts_page_nobody_unless_asked(redis_url: str, lab_alerts: bool, sent: list[str]) -> None:
    """Issue 65: in production (``LAB_ALERTS`` off) a lane's notices reach neither the webhook's outbox nor its
    queue; the history keeps them all, for the Alerts page."""
    from streaming.alerting.lifecycle import Decision, Notice
    from streaming.store.alert_store import read_outbox

    client = redis.Redis.from_url(redis_url)
    keys = KeySchema(f"mon-{uuid.uuid4().hex[:8]}")
    m, n = monitor(client, keys)
    m.lab_alerts = lab_alerts
    notices = tuple(Notice(status="firing", rule="watermark_flat", subject=lane, starts_at_ms=T0, at_ms=T0)
                    for lane in ("per-server-min", "main"))
    m.save(Decision({}, (), notices), T0)
    assert [o.notice.subject for o in n.taken()] == sent
    assert [x.subject for _, x in read_outbox(client, keys)] == sent
    assert [x.subject for x in read_alert_view(client, keys, T0).history] == ["per-server-min", "main"]
