"""Redis at its ``maxmemory`` (policy ``noeviction``: it refuses writes), against a redis-server of its own: the
job's commit writes nothing partial, waits, frees what the input keeps only for look-back, and lands once memory
is freed; the producer holds its events and sends them once Redis takes writes again, none lost, none twice; the
monitor and the status line say so."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import redis

from streaming.apps.redis_server import RedisServer
from streaming.rules.commit.batch import BatchSummary
from streaming.schema.keys import KeySchema
from streaming.store.commit import commit_batch, free_committed_input
from streaming.store.redis_conn import with_retry
from tests.store.commit.batches import PARAMS, T0, dump, summary
from watermark_client import Producer, ProducerTimeout
from watermark_client.connection import is_full

BALLAST = "ballast"


@pytest.fixture()
def r(tmp_path: Path) -> Iterator[redis.Redis]:
    """A redis-server of its own: its maxmemory is the test's to set."""
    server = RedisServer(str(tmp_path / "redis"), port=0)
    server.start()
    client = redis.Redis.from_url(server.url, socket_timeout=30)
    client.config_set("maxmemory-policy", "noeviction")
    try:
        yield client
    finally:
        client.close()
        server.stop()


def fill(r: redis.Redis, headroom_mb: int = 2) -> None:
    """maxmemory a little above what Redis uses now, then a ballast stream until Redis refuses a write."""
    r.config_set("maxmemory", int(r.info("memory")["used_memory"]) + headroom_mb * 2**20)
    payload = b"x" * 1_000
    while True:
        pipe = r.pipeline(transaction=False)
        for _ in range(500):
            pipe.xadd(BALLAST, {"e": payload})
        replies = pipe.execute(raise_on_error=False)
        if any(isinstance(x, Exception) for x in replies):
            assert all(is_full(x) for x in replies if isinstance(x, Exception)), replies
            return


def test_a_commit_refused_while_full_writes_nothing_waits_and_lands_once_when_memory_is_freed(
        r: redis.Redis, keys: KeySchema, caplog: pytest.LogCaptureFixture) -> None:
    fill(r)
    pauses: list[float] = []
    partial: list[dict] = []

    def pause(seconds: float) -> None:  # with_retry's sleep: the test frees memory on the third pause
        pauses.append(seconds)
        partial.append(dump(r, keys))
        if len(pauses) == 3:
            r.delete(BALLAST)

    with caplog.at_level(logging.ERROR, logger="streaming.store.redis_conn"):
        applied = with_retry(lambda: commit_batch(r, keys, summary(0, 0, T0 + 420_000), PARAMS), "commit of batch 0",
                             sleep=pause, when_full=lambda: "nothing to free here")
    assert applied
    assert partial == [{}, {}, {}], "a refused commit wrote something"
    assert int(r.hget(keys.state, "last_batch")) == 0
    assert r.hget(keys.totals, "events") == b"2" and r.hget(keys.totals, "quarantined") == b"1"
    said = [rec.getMessage() for rec in caplog.records]
    assert len(said) == 1, said  # once, not at every retry
    assert said[0].startswith("commit of batch 0: Redis is full (")
    assert "command not allowed when used memory" in said[0]
    assert "; nothing to free here, for 0 s: nothing of it was written; waiting for memory" in said[0], said[0]


def test_when_full_the_commit_frees_the_input_kept_for_look_back_and_goes_on_by_itself(
        r: redis.Redis, keys: KeySchema) -> None:
    """Committed entries the trim keeps to look back at (10 minutes here) go first: nothing a reader still needs
    (everything after the committed ID stays), and the count of what went stays exact."""
    pipe = r.pipeline(transaction=False)
    for i in range(20_000):
        pipe.xadd(keys.events, {"e": b"y" * 200}, id=f"{T0 + i}-0")
    pipe.execute()
    first = BatchSummary(0, 0, T0 + 20_000, "0-0", f"{T0 + 18_999}-0", [], {}, [])
    assert commit_batch(r, keys, first, PARAMS)
    assert r.xlen(keys.events) == 20_000  # all kept: within the 10 minutes of look-back
    r.config_set("maxmemory", int(r.info("memory")["used_memory"]) - 2**20)  # full now
    second = BatchSummary(1, 0, T0 + 21_000, f"{T0 + 18_999}-0", f"{T0 + 19_999}-0", [], {}, [])
    with pytest.raises(redis.ResponseError) as refused:
        commit_batch(r, keys, second, PARAMS)
    assert is_full(refused.value)
    freed: list[str] = []

    def free() -> str:
        freed.append(free_committed_input(r, keys, PARAMS))
        return freed[-1]

    assert with_retry(lambda: commit_batch(r, keys, second, PARAMS), "commit of batch 1", sleep=lambda _s: None,
                      when_full=free)
    assert freed and freed[0].startswith("trimmed ") and "committed entries kept for look-back" in freed[0], freed
    left = r.xrange(keys.events, count=1)
    assert int(left[0][0].split(b"-")[0]) - T0 <= 18_999, "an entry not committed by every reader was trimmed"
    assert int(r.get(keys.trimmed)) == 20_000 - r.xlen(keys.events), "the trimmed count is exact"
    assert int(r.hget(keys.state, "last_batch")) == 1


def test_the_producer_holds_its_events_while_redis_is_full_and_writes_each_once_after(r: redis.Redis,
                                                                                       keys: KeySchema) -> None:
    fill(r)
    url = r.connection_pool.connection_kwargs
    producer = Producer(f"redis://{url['host']}:{url['port']}/0", namespace=keys.namespace, batch_size=100,
                        max_backoff_s=0.2)
    try:
        for i in range(1_000):
            producer.send({"server": "A", "player_id": f"p{i % 50}", "kind": "heartbeat",
                           "event_time": "2026-11-26T10:00:00Z", "event_id": f"A-{i}"})
        while producer.stats.refused_full == 0:  # flush waits on the producer's own condition, not a sleep
            with pytest.raises(ProducerTimeout):
                producer.flush(timeout=0.5)
        assert r.xlen(keys.events) == 0 and producer.pending == 1_000  # held, none written, none dropped
        r.config_set("maxmemory", 0)  # memory freed
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=60)
    ids = [orjson.loads(f[b"e"])["event_id"] for _, f in r.xrange(keys.events)]
    assert sorted(ids) == sorted(f"A-{i}" for i in range(1_000)), "an event lost or written twice"
    assert producer.stats.written == 1_000


def test_the_monitor_pages_and_the_status_line_says_redis_is_full(r: redis.Redis, keys: KeySchema) -> None:
    """What the monitor and the pages read from a full Redis: the RedisFull alert's condition, the metric's
    figures and the status line's first message."""
    from dashboard.status import Level, assess
    from streaming.alerting.conditions import evaluate
    from streaming.alerting.config import AlertConfig
    from streaming.alerting.observation import Memory
    from streaming.store.observe import read_stack
    from streaming.store.views.snapshot import read_snapshot

    assert commit_batch(r, keys, summary(0, 0, T0 + 420_000), PARAMS)
    fill(r)
    now = int(r.time()[0]) * 1000
    obs = read_stack(r, keys, {}, now, None, 0).obs
    assert obs.redis_maxmemory_bytes == int(r.config_get("maxmemory")["maxmemory"])
    assert obs.redis_used_bytes >= obs.redis_maxmemory_bytes * 0.95
    memory = Memory(started_ms=now, reach_ms=60_000)
    memory.remember(obs)
    (finding,) = [f for f in evaluate(obs, memory, AlertConfig()) if f.rule == "redis_full"]
    assert finding.active is True and "maxmemory" in finding.summary
    first = assess(read_snapshot(r, keys, range_ms=600_000, now_ms=now), now)[0]
    assert first.level is Level.ERROR and first.text.startswith("Redis is full: it uses "), first
    r.delete(BALLAST)
    first = assess(read_snapshot(r, keys, range_ms=600_000, now_ms=now), now)[0]
    assert not first.text.startswith("Redis is full"), first


def test_the_backlog_gate_holds_a_writer_at_the_bound_until_the_readers_make_room(r: redis.Redis,
                                                                                  keys: KeySchema) -> None:
    from watermark_client.batch_channel import BacklogGate

    for i in range(100):
        r.xadd(keys.events, {"e": b"{}"}, id=f"{i + 1}-0")
    assert BacklogGate(r, keys.events, 101, every_s=0).admit(lambda _s: pytest.fail("no wait below the bound"))
    assert BacklogGate(r, keys.events, None).admit(lambda _s: pytest.fail("no bound, no wait"))
    gate = BacklogGate(r, keys.events, 100, every_s=0)
    pauses: list[float] = []

    def pause(seconds: float) -> bool:  # the writer's pause: the readers catch up on the second
        pauses.append(seconds)
        if len(pauses) == 2:
            r.xtrim(keys.events, minid="50-0", approximate=False)
        return False

    assert gate.admit(pause) and len(pauses) == 2 and gate.waited == 1
    assert r.xlen(keys.events) == 51
    r.xadd(keys.events, {"e": b"{}"}, id="200-0", maxlen=None)
    stopping = BacklogGate(r, keys.events, 10, every_s=0)
    assert stopping.admit(lambda _s: True) is False  # asked to stop while waiting: says so


def test_the_producer_holds_its_events_while_the_stream_is_at_its_bound(r: redis.Redis, keys: KeySchema) -> None:
    """Backpressure (issue 27): the readers behind by the bound, the producer sends nothing more, keeps every event,
    and writes each once when the job's trim makes room."""
    for i in range(1_000):
        r.xadd(keys.events, {"e": b"{}"}, id=f"{i + 1}-0")
    url = r.connection_pool.connection_kwargs
    producer = Producer(f"redis://{url['host']}:{url['port']}/0", namespace=keys.namespace, batch_size=50,
                        max_stream_entries=1_000)
    try:
        for i in range(200):
            producer.send({"server": "A", "player_id": f"p{i}", "kind": "login", "event_time": "2026-11-26T10:00:00Z",
                           "event_id": f"A-{i}"})
        with pytest.raises(ProducerTimeout):
            producer.flush(timeout=1)
        assert r.xlen(keys.events) == 1_000 and producer.pending == 200  # held, none written, none dropped
        r.xtrim(keys.events, minid="901-0", approximate=False)  # the job committed and trimmed 900
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=60)
    produced = [orjson.loads(f[b"e"])["event_id"] for _, f in r.xrange(keys.events, min="1001-0")]
    assert sorted(produced) == sorted(f"A-{i}" for i in range(200))
    assert r.xlen(keys.events) == 300  # the 100 kept and the 200 written
