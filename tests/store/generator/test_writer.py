"""The paced XADD writer on real Redis, on a manual clock; and the input's other writer, the job's idle markers."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import pytest
import redis

from streaming.rules.simulate import Simulator, generate
from streaming.schema.clock import ManualClock
from streaming.store.stream_writer import StreamWriter, WriteError, WriteStats, stream_last_id, write
from tests.seed import arrival_ids
from tests.store.generator import START
from watermark_client.events import Event, parse_entry, parse_entry_id


def test_manual_clock() -> None:
    clock = ManualClock(1_000)
    clock.advance(500)
    assert clock.now_us() == 1_500
    clock.sleep_until(1_200)  # in the past: no effect
    assert clock.now_us() == 1_500
    clock.sleep_until(9_000)
    assert clock.now_us() == 9_000
    with pytest.raises(ValueError, match="cannot go back"):
        clock.advance(-1)


def no_sleeping(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test's own thread must not sleep; other threads (py4j's, when Spark runs in the session) may."""
    me = threading.current_thread()
    real_sleep, real_wait = time.sleep, threading.Event.wait

    def forbidden_sleep(*args: object, **kw: object) -> object:
        if threading.current_thread() is me:
            raise AssertionError("the writer slept for real")
        return real_sleep(*args, **kw)  # type: ignore[arg-type]

    def forbidden_wait(self: threading.Event, *args: object, **kw: object) -> object:
        if threading.current_thread() is me:
            raise AssertionError("the writer slept for real")
        return real_wait(self, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(time, "sleep", forbidden_sleep)
    monkeypatch.setattr(threading.Event, "wait", forbidden_wait)


def test_manual_clock_writer_writes_exactly_the_generated_entries(
        r: redis.Redis, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    events = generate("late-burst", seed=9, start_us=START, rate=200, count=5_000)  # 25 s, with one burst
    clock = ManualClock(START)
    seen: list[tuple[int, int]] = []
    no_sleeping(monkeypatch)

    stats = write(r, key, events, clock=clock, explicit_ids=True, batch_size=64, linger_us=0,
                  on_batch=lambda s: seen.append((clock.now_us(), s.written)))

    entries = r.xrange(key)
    assert [eid.decode() for eid, _ in entries] == arrival_ids(events)
    assert [fields[b"e"] for _, fields in entries] == [e.payload() for _, e in events]
    assert [parse_entry(f, eid.decode()) for eid, f in entries] == [e for _, e in events]
    assert stats.written == len(events) and stats.last_id == entries[-1][0].decode()
    assert stats.per_server == dict(Counter(e.server for _, e in events))
    # Paced by the clock: it ended at the last arrival, and no batch ran ahead of it.
    assert clock.now_us() == events[-1][0]
    assert len(seen) > len(events) // 64
    for now, written in seen:
        assert events[written - 1][0] <= now


class BusyClock(ManualClock):
    """A clock that moves on by ``work_us`` each time it is read: building and sending a batch takes time."""

    def __init__(self, start_us: int, work_us: int) -> None:
        super().__init__(start_us)
        self.work_us = work_us

    def now_us(self) -> int:
        self.advance(self.work_us)
        return super().now_us()


@pytest.mark.parametrize("batch_size", [2_000, 300])
def test_a_busy_writer_sends_a_batch_at_most_every_linger_unless_the_last_was_full(
        r: redis.Redis, key: str, monkeypatch: pytest.MonkeyPatch, batch_size: int) -> None:
    """At 100,000 events/s an event is always due by the time a batch is sent: the batches are a linger apart (500
    events), not a round trip apart; a full batch is followed at once (catching up)."""
    events = generate("steady", seed=3, start_us=START, rate=100_000, count=20_000)  # 0.2 s
    clock = BusyClock(START, work_us=150)
    sizes: list[int] = []
    no_sleeping(monkeypatch)

    stats = write(r, key, events, clock=clock, explicit_ids=True, batch_size=batch_size, linger_us=5_000,
                  on_batch=lambda s: sizes.append(s.written - sum(sizes)))

    assert stats.written == r.xlen(key) == len(events)
    span_us = events[-1][0] - events[0][0]
    if batch_size == 2_000:
        assert len(sizes) <= span_us // 5_000 + 2 and max(sizes) < batch_size
    else:  # 500 events a linger do not fit in 300: each full batch is followed at once by the rest
        assert sizes.count(batch_size) >= len(sizes) // 3 and len(sizes) <= 2 * (span_us // 5_000) + 2


def test_writer_star_ids_and_simulator_input(r: redis.Redis, key: str) -> None:
    sim = Simulator("overseas-lag", seed=4, start_us=START, rate=0, count=7_000)
    stats = write(r, key, sim, batch_size=1_000)
    entries = r.xrange(key)
    assert stats.written == len(entries) == 7_000
    assert [f[b"e"] for _, f in entries] == [e.payload() for _, e in sim]
    ids = [tuple(map(int, eid.split(b"-"))) for eid, _ in entries]
    assert ids == sorted(ids)
    assert stats.batches == 7


def test_explicit_ids_stay_above_the_streams_last_id(r: redis.Redis, key: str) -> None:
    r.xadd(key, {"e": b"old"}, id="9999999999999-5")
    r.xadd(key, {"e": b"old"}, id="9999999999999-6")
    r.xdel(key, "9999999999999-6")  # the last *generated* ID counts, not the last entry
    assert stream_last_id(r, key) == (9_999_999_999_999, 6)
    events = generate("steady", seed=2, start_us=START, rate=1000, count=300)
    write(r, key, events, explicit_ids=True)
    ids = [eid.decode() for eid, _ in r.xrange(key)][1:]
    assert ids == arrival_ids(events, last=(9_999_999_999_999, 6))
    assert ids[0] == "9999999999999-7"
    assert stream_last_id(r, f"{key}:missing") == (0, 0)


def test_a_sharded_writer_puts_each_servers_events_in_its_shard_in_arrival_order(r: redis.Redis, key: str) -> None:
    from streaming.schema.shards import shard_key
    from watermark_client.stream import shard_of

    events = generate("overseas-lag", seed=3, start_us=START, rate=1000, count=3_000)
    r.xadd(shard_key(key, 2), {"e": b"old"}, id="9999999999999-5")  # one shard's last ID holds all explicit IDs
    stats = write(r, key, events, explicit_ids=True, batch_size=256, shards=3)
    got = {k: [(i, f[b"e"]) for i, f in r.xrange(shard_key(key, k))] for k in range(3)}
    assert got[2][0][1] == b"old"
    del got[2][0]
    for k in range(3):
        mine = [e.payload() for _, e in events if shard_of(e.server, 3) == k]
        assert [p for _, p in got[k]] == mine  # every event once, in its server's shard, in order
    assert sum(map(len, got.values())) == stats.written == len(events)
    assert {shard_of(e.server, 3) for _, e in events} == {1, 2} and got[0] == []  # A and C in 2, B in 1
    assert min(parse_entry_id(i) for k in range(3) for i, _ in got[k]) == (9_999_999_999_999, 6)


def test_writer_stops_when_asked(r: redis.Redis, key: str) -> None:
    stop = threading.Event()
    events = generate("steady", seed=2, start_us=START, rate=1000, count=5_000)

    def on_batch(_stats: WriteStats) -> None:
        stop.set()

    stats = write(r, key, events, batch_size=100, stop=stop, on_batch=on_batch)
    assert 0 < stats.written < len(events)
    assert r.xlen(key) == stats.written  # everything sent was confirmed


def test_rejected_xadds_raise_and_leave_the_connection_usable(r: redis.Redis, key: str) -> None:
    r.set(key, "not a stream")
    events = generate("steady", seed=2, start_us=START, rate=1000, count=10)
    with pytest.raises(WriteError, match="10 of 10 XADDs .* failed: WRONGTYPE"):
        StreamWriter(r, key).run(events)
    assert r.ping()
    assert r.get(key) == b"not a stream"


def test_writer_falls_back_to_redis_py_replies_without_hiredis(
        r: redis.Redis, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("watermark_client.connection.hiredis", None)
    events = generate("steady", seed=2, start_us=START, rate=1000, count=500)
    assert write(r, key, events, batch_size=128).written == r.xlen(key) == 500
    r.delete(key)
    r.set(key, "x")
    with pytest.raises(WriteError, match="3 of 3 XADDs"):
        write(r, key, events[:3])
    assert r.ping()


def test_the_jobs_idle_markers_go_in_signed_with_their_decision(r: redis.Redis) -> None:
    """The job's other writer of the input: each marker and its decision in one script call, the script
    registered once a run, which keeps working after Redis lost its script cache (a restart)."""
    from streaming.apps.fleet_upkeep import IDLE_LUA, idle_ticker, tick_idle
    from streaming.rules.fleet import IdleDecision
    from streaming.schema.config import Config
    from streaming.schema.keys import KeySchema
    from watermark_client.events import IDLE_KIND, Rules

    ns = f"idle-{uuid.uuid4().hex[:6]}"
    keys, secret = KeySchema(ns), b"k" * 32
    watcher = Config(namespace=ns, known_servers=frozenset("AB"), watermark_mode="per-server", idle_timeout_ms=1_000,
                     trigger_ms=1_000)
    ticker = idle_ticker(r, watcher)
    ticker.started_ms -= 5_000  # both servers silent since the job started, five seconds ago
    script = r.register_script(IDLE_LUA)
    tick_idle(r, ticker, watcher, secret, keys, script)
    r.script_flush()
    ticker.last_marker_ms.clear()
    tick_idle(r, ticker, watcher, secret, keys, script)
    markers = r.xrange(keys.events)
    decisions = [f for _, f in r.xrange(keys.idleness)]
    assert [f[b"marker_id"] for f in decisions] == [i for i, _ in markers] and len(markers) == 4
    assert [IdleDecision.from_record(f).server for f in decisions] == ["A", "B", "A", "B"]
    parsed = [parse_entry(f, i.decode(), Rules(idle_key=secret)) for i, f in markers]
    assert all(isinstance(e, Event) and e.kind == IDLE_KIND for e in parsed), parsed
    # with shards, each marker goes to its server's shard, read in order with the server's events
    from streaming.schema.shards import shard_key
    from watermark_client.stream import shard_of
    sharded = watcher.with_(stream_shards=4)
    ticker.last_marker_ms.clear()
    tick_idle(r, ticker, sharded, secret, keys, script)
    for server in "AB":
        k = shard_of(server, 4)
        [(_, fields)] = r.xrange(shard_key(keys.events, k))  # A's is 3, B's 1: not shard 0 (one stream's key)
        marker = parse_entry(fields, "1-0", Rules(idle_key=secret))
        assert isinstance(marker, Event) and marker.server == server
