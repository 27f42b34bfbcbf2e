"""Annotations: ``wm-annotate`` and ``POST /annotations`` on the monitor's real HTTP server (beside ``/metrics``)
write them to a real Redis, a range reads back those that overlap it, a bad one is refused with why, and the
store keeps them bounded."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime

import pytest
import redis

from watermark.alerting.config import AlertConfig
from watermark.apps import annotate
from watermark.apps.monitor import Monitor, serve_metrics
from watermark.apps.redis_server import free_port
from watermark.schema.keys import KeySchema
from watermark.schema.records import Annotation
from watermark.store import annotation_store
from watermark.store.annotation_store import add_annotation, read_annotations

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
HOUR = 3_600_000


def note(text: str, start: int, end: int | None = None, region: str | None = None) -> Annotation:
    return Annotation(id=text, text=text, kind="deploy", start_ms=start, end_ms=end, region=region, created_ms=start)


def test_a_range_reads_the_annotations_that_overlap_it(r: redis.Redis) -> None:
    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    for a in (note("before", T0 - 2 * HOUR), note("long maintenance", T0 - 2 * HOUR, T0 + HOUR),
              note("patch 1.4.2", T0 + 30 * 60_000, region="eu"), note("after", T0 + 3 * HOUR)):
        add_annotation(r, keys, a, 8, T0)
    got = read_annotations(r, keys, T0, T0 + 2 * HOUR)
    assert [(a.text, a.region) for a in got] == [("long maintenance", None), ("patch 1.4.2", "eu")]


def test_the_time_charts_read_the_annotations_and_the_alerts_of_their_range(r: redis.Redis) -> None:
    from watermark.alerting.lifecycle import Decision, Notice
    from watermark.store.alert_store import apply_decision
    from watermark.store.annotation_store import read_happenings

    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    add_annotation(r, keys, note("patch 1.4.2", T0 + HOUR), 8, T0)
    fired = [Notice(status="firing", rule="server_silent", subject=s, starts_at_ms=at, at_ms=at)
             for s, at in (("old", T0 - 3 * HOUR), ("eu-001", T0 + 2 * HOUR))]
    apply_decision(r, keys, Decision(states={}, removed=(), notices=tuple(fired)), T0 + 2 * HOUR, outbox=False)
    h = read_happenings(r, keys, T0, T0 + 3 * HOUR)
    assert [a.text for a in h.annotations] == ["patch 1.4.2"]
    assert [n.subject for n in h.notices] == ["eu-001"]  # the one before the range is left out


def test_old_annotations_leave_and_at_most_a_bound_are_kept(r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    add_annotation(r, keys, note("ten days ago", T0 - 10 * 86_400_000), 8, T0)
    add_annotation(r, keys, note("a week ago", T0 - 7 * 86_400_000), 8, T0)
    assert [a.text for a in read_annotations(r, keys, 0, T0)] == ["a week ago"]
    monkeypatch.setattr(annotation_store, "ANNOTATIONS_KEEP", 3)
    for i in range(5):
        add_annotation(r, keys, note(f"n{i}", T0 + i), 8, T0)
    assert [a.text for a in read_annotations(r, keys, 0, T0 + 10)] == ["n2", "n3", "n4"]


def test_the_command_adds_one_and_lists_them(redis_url: str, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    ns = f"t-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", ns)
    assert annotate.main(["patch 1.4.2", "--kind", "deploy", "--region", "eu", "--for", "30m"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert (made["text"], made["kind"], made["region"], made["end_ms"] - made["start_ms"]) == \
        ("patch 1.4.2", "deploy", "eu", 30 * 60_000)
    assert annotate.main(["--list", "--since", "1h"]) == 0
    assert [a["text"] for a in json.loads(capsys.readouterr().out)] == ["patch 1.4.2"]
    assert annotate.main(["oops", "--at", "yesterday"]) == 2
    assert "start must be an ISO-8601 time" in capsys.readouterr().err


def call(url: str, body: object | None = None) -> tuple[int, object]:
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_monitors_port_takes_annotations_over_http_beside_metrics(redis_url: str) -> None:
    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    client = redis.Redis.from_url(redis_url)
    monitor = Monitor(client=client, keys=keys, cfg=AlertConfig(), started_ms=T0)
    port = free_port()
    assert serve_metrics("127.0.0.1", port, redis_url, keys, monitor, 8) is None
    base = f"http://127.0.0.1:{port}"
    start = (int(time.time()) // 3600 - 2) * HOUR  # within the days kept
    iso = datetime.fromtimestamp(start / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status, made = call(f"{base}/annotations", {"text": "incident: login queue", "kind": "incident",
                                                 "start": iso, "end": start + 30 * 60_000})
    assert status == 201 and isinstance(made, dict)
    assert (made["start_ms"], made["end_ms"], made["region"]) == (start, start + 30 * 60_000, None)
    stored = read_annotations(client, keys, start, start + 1)
    assert [(a.text, a.kind) for a in stored] == [("incident: login queue", "incident")]
    status, error = call(f"{base}/annotations", {"text": "x", "kind": "party"})
    assert status == 400 and "kind 'party' must be one of" in str(error)
    status, listed = call(f"{base}/annotations?since=1d")
    assert status == 200 and [a["text"] for a in listed] == ["incident: login queue"]  # type: ignore[union-attr]
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as resp:  # /metrics is still there
        assert b"# HELP" in resp.read()
