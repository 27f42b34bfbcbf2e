"""The public producer against a real redis-server: the contract checked client-side, backpressure that never
drops, and every event exactly once across killed connections and Redis restarts (decision 0010). The
generator's writer shares the path and is faulted the same way."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import redis

from streaming.apps.redis_server import RedisServer
from streaming.rules.simulate import generate
from streaming.schema.keys import KeySchema
from streaming.store.stream_writer import StreamWriter
from tests.procs import until
from tests.writers import write_through_losses
from watermark_client import Producer, ProducerError, ProducerTimeout, ShardedProducer, encode_event
from watermark_client.batch_channel import Batch, BatchChannel, xadd_head
from watermark_client.events import Event, parse_entry, parse_payload
from watermark_client.timeutil import parse_iso_us

T0 = "2026-11-22T10:00:00.000Z"


def ev(i: int, **over: Any) -> dict[str, Any]:  # noqa: ANN401
    return {"event_id": f"e{i}", "server": "ABC"[i % 3], "player_id": f"p{i % 997}", "kind": "heartbeat",
            "event_time": T0, **over}


wait_until = partial(until, timeout=30.0, every=0.002)
"""Poll Redis (or the producer) until a condition holds: only where there is nothing to wait on."""


def stream_ids(client: redis.Redis, key: str) -> Counter[str]:
    out: Counter[str] = Counter()
    for entry_id, fields in client.xrange(key):
        parsed = parse_entry(fields, entry_id.decode())
        assert isinstance(parsed, Event), parsed
        out[parsed.event_id or ""] += 1
    return out


@pytest.fixture()
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own, which it may restart."""
    server = RedisServer(data_dir=str(tmp_path / "redis"), port=0)
    server.start()
    yield server
    server.stop()


@pytest.fixture()
def ns() -> str:
    return f"test-producer-{uuid.uuid4().hex[:8]}"


# --------------------------------------------------------------------------- the contract, client-side

VALID = [
    ({"server": "A", "player_id": "p1", "event_time": T0},
     '{"server":"A","player_id":"p1","event_time":"2026-11-22T10:00:00.000Z"}'),
    (ev(1, region="eu-west"),
     '{"event_id":"e1","server":"B","player_id":"p1","kind":"heartbeat","event_time":"2026-11-22T10:00:00.000Z",'
     '"region":"eu-west"}'),
    ({"server": "A", "player_id": 42, "event_time": "2026-11-22T12:00:00+02:00", "kind": "login", "event_id": 7},
     '{"event_id":"7","server":"A","player_id":"42","kind":"login","event_time":"2026-11-22T10:00:00.000Z"}'),
    ({"server": "A", "player_id": "p", "kind": "logout",
      "event_time": datetime(2026, 11, 22, 11, 0, 0, 250_000, tzinfo=timezone(timedelta(hours=1)))},
     '{"server":"A","player_id":"p","kind":"logout","event_time":"2026-11-22T10:00:00.250Z"}'),
    (Event("A", "p", parse_iso_us(T0), "login", "x-1"),
     '{"event_id":"x-1","server":"A","player_id":"p","kind":"login","event_time":"2026-11-22T10:00:00.000Z"}'),
]


@pytest.mark.parametrize(("event", "payload"), VALID)
def test_valid_events_are_sent_in_the_canonical_form_the_pipeline_parses(event: Any, payload: str) -> None:  # noqa: ANN401
    assert encode_event(event).decode() == payload
    assert isinstance(parse_payload(payload.encode(), "1-0"), Event)


INVALID = [
    ({"player_id": "p", "event_time": T0}, "server is missing"),
    ({"server": "A", "event_time": T0}, "player_id is missing"),
    ({"server": "A", "player_id": "p"}, "event_time is missing"),
    ({"server": "", "player_id": "p", "event_time": T0}, "server must be a non-empty string"),
    ({"server": 3, "player_id": "p", "event_time": T0}, "server must be a non-empty string"),
    ({"server": "A", "player_id": True, "event_time": T0}, "player_id must be a non-empty string or integer"),
    ({"server": "A", "player_id": "", "event_time": T0}, "player_id must be a non-empty string or integer"),
    ({"server": "A", "player_id": "p", "event_time": 1_700_000_000}, "event_time must be an ISO-8601 string"),
    ({"server": "A", "player_id": "p", "event_time": "yesterday"}, "event_time 'yesterday' does not parse"),
    ({"server": "A", "player_id": "p", "event_time": datetime(2026, 1, 1)}, "event_time is a datetime without"),
    ({"server": "A", "player_id": "p", "event_time": T0, "kind": "jump"}, "kind must be one of"),
    ({"server": "A", "player_id": "p", "event_time": T0, "kind": "idle"}, "kind must be one of login, heartbeat, "
                                                                          "logout, got 'idle'"),
    ({"server": "A", "player_id": "p", "event_time": T0, "event_id": 1.5}, "event_id must be a string"),
    ({"server": "A", "player_id": "p", "event_time": T0, "region": 7}, "region must be a string"),
    ({"server": "A", "player_id": "p", "event_time": T0, "regoin": "eu"}, "'regoin' is not a field"),
    ({"server": "A", "player_id": "p", "event_time": T0, "event_id": {1, 2}}, "invalid event: Type is not JSON"),
]


@pytest.mark.parametrize(("event", "message"), INVALID)
def test_invalid_events_raise_a_value_error_naming_the_field(event: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match="^invalid event: ") as err:
        encode_event(event)
    assert message in str(err.value)


def test_send_refuses_an_invalid_event_and_keeps_going(r: redis.Redis, redis_url: str, ns: str) -> None:
    with Producer(redis_url, namespace=ns) as producer:
        producer.send(ev(1))
        with pytest.raises(ValueError, match="player_id is missing"):
            producer.send({"server": "A", "event_time": T0})
        producer.send(ev(2))
    assert stream_ids(r, KeySchema(ns).events) == {"e1": 1, "e2": 1}
    assert producer.stats.accepted == producer.stats.written == 2
    with pytest.raises(ProducerError, match="closed"):
        producer.send(ev(3))


def test_many_threads_send_at_once(r: redis.Redis, redis_url: str, ns: str) -> None:
    with Producer(redis_url, namespace=ns, batch_size=100, max_pending=500) as producer:
        def work(t: int) -> None:
            for i in range(2_000):
                producer.send(ev(t * 10_000 + i))

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        producer.flush()
        assert producer.pending == 0
    ids = stream_ids(r, KeySchema(ns).events)
    assert len(ids) == 8_000 and set(ids.values()) == {1}
    assert r.ttl(producer.marker_key) > 6 * 86_400  # the marker expires, a week after the last batch


# --------------------------------------------------------------------------- backpressure


def test_send_blocks_when_redis_takes_nothing_then_times_out_and_drops_nothing(
        own_redis: RedisServer, ns: str) -> None:
    admin = redis.Redis.from_url(own_redis.url)
    producer = Producer(own_redis.url, namespace=ns, batch_size=50, max_pending=200, send_timeout_s=0.3)
    admin.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")  # the transactions' EXEC waits
    try:
        for i in range(200):
            producer.send(ev(i))  # room for max_pending events: none blocks
        t = time.monotonic()
        with pytest.raises(ProducerTimeout, match=r"send timed out after 0.3 s: 200 events are waiting for Redis "
                                                  r"\(max_pending=200\).*this event was not accepted"):
            producer.send(ev(200))
        assert time.monotonic() - t >= 0.3
        with pytest.raises(ProducerTimeout, match="flush timed out after 0.1 s: 200 events not acknowledged"):
            producer.flush(timeout=0.1)
        assert admin.xlen(KeySchema(ns).events) == 0
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
    producer.send(ev(201))
    producer.close()
    assert stream_ids(admin, KeySchema(ns).events) == {f"e{i}": 1 for i in (*range(200), 201)}


def test_with_redis_down_send_blocks_and_everything_goes_in_once_it_is_back(own_redis: RedisServer,
                                                                          ns: str) -> None:
    admin = redis.Redis.from_url(own_redis.url)
    with Producer(own_redis.url, namespace=ns, batch_size=10, max_pending=40, send_timeout_s=0.2,
                  max_backoff_s=0.05) as producer:
        producer.send(ev(0))
        producer.flush()
        own_redis.stop()
        for i in range(1, 41):
            producer.send(ev(i))
        with pytest.raises(ProducerTimeout, match="last error: ConnectionError"):
            producer.send(ev(41))
        own_redis.start()
        producer.flush(timeout=30)
        assert producer.stats.reconnects >= 1
    assert stream_ids(admin, KeySchema(ns).events) == {f"e{i}": 1 for i in range(41)}


# --------------------------------------------------------------------------- exactly once under faults


def send_through_faults(server: RedisServer, producer: Producer | ShardedProducer, events: Sequence[dict[str, Any]],
                        faults: int) -> list[str]:
    """Send ``events`` while ``faults`` times, at even steps of what Redis acknowledged, every client connection is
    killed or (every other time) Redis is restarted; then close. The faults, in order."""
    n, done = len(events), []

    def inject() -> None:
        for k in range(faults):
            target = (k + 1) * n // (faults + 2)
            wait_until(lambda t=target: producer.stats.written >= t, what=f"fault {k}")
            if k % 2 == 0:
                admin = redis.Redis.from_url(server.url)
                admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
                admin.close()
                done.append("kill")
            else:
                server.stop()  # SHUTDOWN: the append-only file is flushed, every acknowledged batch kept
                server.start()
                done.append("restart")

    injector = threading.Thread(target=inject)
    injector.start()
    for e in events:
        producer.send(e)
    injector.join()
    producer.close(timeout=60)
    return done


def test_every_event_exactly_once_across_killed_connections_and_redis_restarts(own_redis: RedisServer,
                                                                               ns: str) -> None:
    n, faults = 30_000, 8
    producer = Producer(own_redis.url, namespace=ns, batch_size=300, max_pending=3_000, max_backoff_s=0.1,
                        send_timeout_s=60)
    done = send_through_faults(own_redis, producer, [ev(i) for i in range(n)], faults)
    assert done == ["kill", "restart"] * (faults // 2)
    ids = stream_ids(redis.Redis.from_url(own_redis.url), KeySchema(ns).events)
    assert not [k for k, c in ids.items() if c > 1], "doubled"
    assert set(ids) == {f"e{i}" for i in range(n)}, "lost"
    stats = producer.stats
    assert stats.accepted == stats.written == n
    # the faults were felt (how many reconnects they cost depends on where each lands: a kill between two
    # batches, or a restart while reconnecting, costs none of its own)
    assert stats.reconnects >= 1 and stats.last_error
    print(f"reconnects {stats.reconnects}, batches resent {stats.resent_batches}, "
          f"found in Redis {stats.recovered_batches}")


def channel_client_id(channel: BatchChannel) -> int:
    assert channel._server is not None
    return channel._server[1]


def one_batch(key: str, n: int) -> bytes:
    head = xadd_head(key).encode()
    return b"".join(b"%s$%d\r\n%s\r\n" % (head, len(p), p) for p in (encode_event(ev(i)) for i in range(n)))


def test_a_batch_redis_has_is_not_sent_again(r: redis.Redis, ns: str) -> None:
    keys = KeySchema(ns)
    channel = BatchChannel(keys.events, keys.producer("p"))
    channel.attach(r)
    channel.send(one_batch(keys.events, 10), 10)
    wait_until(lambda: r.get(keys.producer("p")) == b"1", what="the batch")  # committed, reply not read
    channel.detach(broken=True)  # the connection is lost before its replies are read
    settled = channel.attach(r)
    assert [b.seq for b in settled] == [1] and (channel.recovered, channel.resent) == (1, 0)
    assert r.xlen(keys.events) == 10
    channel.detach()


def test_batches_settled_by_an_attach_that_fails_are_reported_by_the_next(r: redis.Redis, ns: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The connection lost again while the batches in flight are sent again: the one Redis had is still
    reported once (its events would otherwise never count as written, and a flush would wait for ever)."""
    keys = KeySchema(ns)
    channel = BatchChannel(keys.events, keys.producer("p"))
    channel.attach(r)
    channel.send(one_batch(keys.events, 10), 10)
    wait_until(lambda: r.get(keys.producer("p")) == b"1", what="the first batch")
    channel.inflight.append(Batch(2, one_batch(keys.events, 5), 5, None))  # in flight, never sent
    channel.seq = 2
    channel.detach(broken=True)
    real_send = channel._send

    def lost(batch: Batch) -> None:
        raise redis.ConnectionError("lost again while sending")
    monkeypatch.setattr(channel, "_send", lost)
    with pytest.raises(redis.ConnectionError):
        channel.attach(r)  # batch 1 found in Redis, batch 2's resend fails
    monkeypatch.setattr(channel, "_send", real_send)
    settled = channel.attach(r)
    assert [b.seq for b in settled] == [1, 2]  # each once, in order
    assert r.xlen(keys.events) == 15
    assert channel.attach(r) == []
    channel.detach()


def test_a_transaction_held_by_a_pause_when_the_connection_is_lost_is_written_once(own_redis: RedisServer,
                                                                                  ns: str) -> None:
    """The client gives up on a connection whose transaction a pause holds (what a socket timeout does):
    the recovery finds the marker below the batch and sends it again; the old transaction never runs (the server
    saw the close here; where it cannot, a half-open connection, the recovery's CLIENT KILL closes it first)."""
    admin = redis.Redis.from_url(own_redis.url)
    client = redis.Redis.from_url(own_redis.url)
    keys = KeySchema(ns)
    channel = BatchChannel(keys.events, keys.producer("p"))
    channel.attach(client)
    old = channel_client_id(channel)
    admin.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
    try:
        channel.send(one_batch(keys.events, 10), 10)
        wait_until(lambda: any(c["id"] == str(old) and "b" in c["flags"] for c in admin.client_list()),
                   what="the transaction held by the pause")  # (Redis 6.2 holds the first XADD)
        channel.detach(broken=True)  # what a socket timeout does: the client side gives up
        settled: list[Any] = []
        recovery = threading.Thread(target=lambda: settled.extend(channel.attach(client)))
        recovery.start()
        wait_until(lambda: all(c["id"] != str(old) for c in admin.client_list()), what="the old connection gone")
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
    recovery.join()
    assert [b.seq for b in settled] == [1] and channel.resent == 1
    assert admin.xlen(keys.events) == 10
    channel.detach()


def test_the_generators_writer_resumes_exactly_once_after_a_lost_connection(r: redis.Redis, redis_url: str,
                                                                           ns: str) -> None:
    key = KeySchema(ns).events
    events = generate("steady", seed=4, start_us=parse_iso_us(T0), rate=1000, count=20_000)
    killer = redis.Redis.from_url(redis_url)
    kills = 0

    def on_batch(stats: Any) -> None:  # noqa: ANN401
        nonlocal kills
        if stats.batches % 7 == 0 and kills < 4:
            kills += 1
            killer.client_kill_filter(_id=writer.channels[0]._server[1])  # type: ignore[index]

    writer = StreamWriter(r, key, batch_size=250, on_batch=on_batch)
    lost = write_through_losses(writer, iter(events))
    assert kills == 4 and lost >= 1
    ids = stream_ids(r, key)
    assert set(ids.values()) == {1} and set(ids) == {e.event_id for _, e in events}
    assert writer.stats.written == len(events)


def test_datetime_now_is_accepted() -> None:
    assert b'"event_time":"' in encode_event({"server": "A", "player_id": "p", "event_time": datetime.now(UTC)})


def test_the_producer_library_loads_no_arrow_numpy_pandas_or_spark() -> None:
    """A game server imports the producer and nothing of the pipeline's: the commits' Arrow packing lives in
    store.commit, which the producer does not import."""
    probe = ("import sys, watermark_client\n"
             "print(sorted(m for m in ('numpy', 'pyarrow', 'pandas', 'pyspark') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
