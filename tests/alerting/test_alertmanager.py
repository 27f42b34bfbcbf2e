"""The monitor's alerts pushed to a real Alertmanager (Debian's prometheus-alertmanager, v2 API): an outage of
300 servers reaches its receiver as one notification listing them, a silence holds back the servers it matches,
and the resolve is one notification too. Alertmanager's own webhook posts to a real local HTTP receiver."""

from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from streaming.alerting.alertmanager import VALID_FOR_RESENDS, postable_alerts
from streaming.alerting.lifecycle import AlertState, Notice
from streaming.alerting.webhook import rfc3339
from streaming.apps.monitor.alertmanager import AlertmanagerPusher
from streaming.apps.redis_server import free_port
from streaming.runtime.clock import wall_ms
from tests.procs import Proc
from tests.receiver import Receiver, alert_lines, receiving

NOW = 1_764_000_000_000
SERVERS = [f"{r}-{i:03d}" for r in ("eu", "na", "as") for i in range(1, 101)]
AM = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


def silent(server: str, now: int = NOW) -> AlertState:
    return AlertState(rule="players_drop", subject=server, status="firing", since_ms=now - 5_000,
                      active_since_ms=now - 65_000, summary=f"no event from {server} for 1 min 5 s", value=65.0)


def test_the_pushed_alerts_are_alertmanagers_v2_postable_alerts() -> None:
    resolved = Notice(status="resolved", rule="players_drop", subject="eu-001", starts_at_ms=NOW - 60_000,
                      ends_at_ms=NOW - 1_000, at_ms=NOW - 1_000, summary="eu-001 is back")
    body = postable_alerts([silent("na-002")], [resolved], "wm", "http://wall:8501/", NOW, 60_000)
    assert body == [
        {"labels": {"alertname": "PlayersDrop", "severity": "critical", "namespace": "wm", "server": "na-002"},
         "annotations": {"summary": "no event from na-002 for 1 min 5 s", "value": "65"},
         "startsAt": rfc3339(NOW - 5_000), "endsAt": rfc3339(NOW + VALID_FOR_RESENDS * 60_000),
         "generatorURL": "http://wall:8501/alerts"},
        {"labels": {"alertname": "PlayersDrop", "severity": "critical", "namespace": "wm", "server": "eu-001"},
         "annotations": {"summary": "eu-001 is back"}, "startsAt": rfc3339(NOW - 60_000),
         "endsAt": rfc3339(NOW - 1_000), "generatorURL": "http://wall:8501/alerts"}]


@pytest.fixture()
def alertmanager(tmp_path: Path) -> Iterator[tuple[str, Receiver]]:
    assert AM, "Debian's prometheus-alertmanager is missing: `apt-get install prometheus-alertmanager` (.ci/run does)"
    with receiving() as receiver:
        # A group waits 10 s for its alerts to gather (Alertmanager's default is 30 s): taking in 300 alerts on a
        # busy machine took more than 1 s here, and a shorter wait splits them over two notifications.
        (tmp_path / "am.yml").write_text(json.dumps({  # YAML is a superset of JSON
            "route": {"receiver": "hook", "group_by": ["alertname"], "group_wait": "10s", "group_interval": "2s",
                      "repeat_interval": "1h"},
            "receivers": [{"name": "hook", "webhook_configs": [{"url": receiver.url, "send_resolved": True}]}]}))
        port = free_port()
        proc = Proc("alertmanager", [AM, f"--config.file={tmp_path / 'am.yml'}", f"--storage.path={tmp_path / 'data'}",
                                     f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                    {}, tmp_path)
        try:
            proc.wait_for(r"Listening", timeout=60)
            yield f"http://127.0.0.1:{port}", receiver
        finally:
            proc.stop()


def api(url: str, path: str, body: object | None = None) -> object:
    req = urllib.request.Request(url + path, data=None if body is None else json.dumps(body).encode(),
                                 method="GET" if body is None else "POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - the test's own Alertmanager
        text = resp.read()
    return json.loads(text) if text else None


def test_an_outage_of_300_servers_is_one_notification_silences_hold_and_the_resolve_is_one(
        alertmanager: tuple[str, Receiver]) -> None:
    url, receiver = alertmanager
    now = wall_ms()  # Alertmanager judges startsAt and endsAt by its own clock
    clock = [now]
    pusher = AlertmanagerPusher(url, "wm", external_url="http://wall:8501", resend_ms=60_000, timeout_ms=5_000,
                                clock=lambda: clock[0])
    # A silence an operator set for one server under maintenance: Alertmanager holds its alert back.
    api(url, "/api/v2/silences", {"matchers": [{"name": "server", "value": "eu-007", "isRegex": False}],
                                  "startsAt": rfc3339(now - 60_000), "endsAt": rfc3339(now + 3_600_000),
                                  "createdBy": "test", "comment": "maintenance"})
    states = {s.key: s for s in (silent(s, now) for s in SERVERS)}
    notices = [Notice(status="firing", rule="players_drop", subject=s, starts_at_ms=now - 5_000, at_ms=now)
               for s in SERVERS]
    pusher.update(states, notices)
    pusher.push()
    (body,) = receiver.wait_for(lambda b: len(b) >= 1, 60, "the firing notification")
    assert body["status"] == "firing" and body["groupLabels"] == {"alertname": "PlayersDrop"}
    assert sorted(line[2] for line in alert_lines(body)) == sorted(set(SERVERS) - {"eu-007"})
    shown = api(url, "/api/v2/alerts?silenced=true&active=true")
    assert isinstance(shown, list) and len(shown) == 300
    assert [a["labels"]["server"] for a in shown if a["status"]["state"] == "suppressed"] == ["eu-007"]
    # Pushed again (the resend) the same alerts are the same alerts: nothing new is sent.
    pusher.push()
    assert len(api(url, "/api/v2/alerts?active=true&silenced=false")) == 299  # type: ignore[arg-type]
    # The input back: every alert resolved, in one notification.
    clock[0] = back = wall_ms()
    ended = [Notice(status="resolved", rule="players_drop", subject=s, starts_at_ms=now - 5_000,
                    ends_at_ms=back, at_ms=back) for s in SERVERS]
    pusher.update({}, ended)
    pusher.push()
    bodies = receiver.wait_for(lambda b: any(x["status"] == "resolved" for x in b), 60, "the resolved notification")
    resolved = [b for b in bodies if b["status"] == "resolved"]
    assert len(resolved) == 1 and len(resolved[0]["alerts"]) == 299
    assert all(b["status"] == "firing" for b in bodies[:1]) and len(bodies) == 2
    assert pusher.pushed == 3


def test_a_push_that_fails_is_kept_until_alertmanager_takes_it() -> None:
    """With nothing listening the push raises and the resolved notices stay owed; once it is there they go."""
    port = free_port()
    pusher = AlertmanagerPusher(f"http://127.0.0.1:{port}", "wm", external_url="", resend_ms=60_000, timeout_ms=2_000,
                                clock=lambda: NOW)
    ended = Notice(status="resolved", rule="players_drop", subject="eu-001", starts_at_ms=NOW - 5_000,
                   ends_at_ms=NOW, at_ms=NOW)
    pusher.update({}, [ended])
    with pytest.raises(OSError):
        pusher.push()
    with receiving() as receiver:
        pusher.url = receiver.url
        pusher.push()
        (body,) = receiver.wait_for(lambda b: len(b) >= 1, 10, "the owed resolve")
    assert [a["labels"]["server"] for a in body] == ["eu-001"]
    pusher.push()  # said once: nothing more to push
    assert pusher.pushed == 1
