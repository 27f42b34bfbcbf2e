"""Redis credentials: ACL users work, a read-only user is enough for the dashboard, secrets never leak."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import redis

from streaming.rules.commit.batch import BatchSummary, WindowAgg
from streaming.schema.config import Config, redact_url
from streaming.schema.keys import KeySchema
from streaming.schema.records import ServerRecord
from streaming.store.commit import commit_batch
from streaming.store.pipeline_status import read_pipeline
from streaming.store.views.snapshot import read_snapshot
from tests.schema.params import built_params


@pytest.fixture()
def acl_user(r: redis.Redis, redis_url: str) -> Iterator[tuple[str, str, str]]:
    """A user that may only read keys of one namespace: what the dashboard should be given."""
    name, password, ns = f"dash-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex, f"ro-{uuid.uuid4().hex[:6]}"
    r.acl_setuser(name, enabled=True, passwords=[f"+{password}"], keys=[f"{ns}:*"],
                  commands=["-@all", "+@read", "+@connection"])
    parts = urlsplit(redis_url)
    yield f"redis://{name}:{password}@{parts.hostname}:{parts.port}/0", password, ns
    r.acl_deluser(name)


def test_the_dashboard_reads_with_a_read_only_acl_user(r: redis.Redis, acl_user: tuple[str, str, str]) -> None:
    url, _, ns = acl_user
    keys = KeySchema(ns)
    params = built_params(60_000, 60_000, 10_000)
    summary = BatchSummary(batch_id=0, watermark_ms=0, batch_ts_ms=1_000, start_id="0-0", end_id="1-0",
                           windows=[WindowAgg(0, 60_000, "A", events=2, players=2)],
                           servers={"A": ServerRecord(rows=2, events=2, min_event_us=1, max_event_us=2)}, bad=[])
    assert commit_batch(r, keys, summary, params)  # the job writes with full rights
    r.xadd(keys.events, {"e": b"{}"})
    reader = redis.Redis.from_url(url)
    snap = read_snapshot(reader, keys, range_ms=3_600_000, now_ms=2_000)
    assert snap.totals.events == 2 and snap.windows[0].players == 2 and snap.stream.length == 1
    status = read_pipeline(reader, keys)  # what a metrics process reads, with the same rights
    assert (status.state, status.totals, status.stream) == (snap.state, snap.totals, snap.stream)
    with pytest.raises(redis.exceptions.NoPermissionError):
        reader.hset(keys.state, "last_batch", 99)  # and it really is read-only
    with pytest.raises(redis.exceptions.NoPermissionError):
        reader.hgetall("other-namespace:state")  # and limited to its namespace


def test_the_job_side_works_with_an_acl_user_and_password_in_the_url(r: redis.Redis, redis_url: str) -> None:
    name, password, ns = f"job-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex, f"acl-{uuid.uuid4().hex[:6]}"
    r.acl_setuser(name, enabled=True, passwords=[f"+{password}"], keys=[f"{ns}:*"], commands=["+@all"])
    try:
        parts = urlsplit(redis_url)
        url = f"redis://{name}:{password}@{parts.hostname}:{parts.port}/0"
        cfg = Config.from_env({"REDIS_URL": url, "PIPELINE_NAMESPACE": ns})
        assert password not in redact_url(cfg.redis_url) and name in redact_url(cfg.redis_url)
        with pytest.raises(redis.AuthenticationError):
            redis.Redis.from_url(url.replace(password, "wrong")).ping()
        keys = KeySchema(ns)
        summary = BatchSummary(batch_id=0, watermark_ms=0, batch_ts_ms=1_000, start_id="0-0", end_id="1-0",
                               windows=[], servers={}, bad=[])
        assert commit_batch(redis.Redis.from_url(url), keys, summary, built_params(60_000, 60_000, 0))
    finally:
        r.acl_deluser(name)


@pytest.mark.parametrize("url", [
    "redis://:hunter2@db.example:6379/0",  # password only
    "redis://dash:hunter2@db.example:6379/0",  # ACL user
    "rediss://dash:hunter2@db.example:6380/0",  # TLS
])
def test_passwords_are_redacted_wherever_urls_are_shown(url: str) -> None:
    shown = redact_url(Config.from_env({"REDIS_URL": url}).redis_url)
    assert "hunter2" not in shown and "***" in shown and shown.split("://")[0] == url.split("://")[0]
