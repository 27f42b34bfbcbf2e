"""The event generator: reproducible simulated servers, and the paced XADD writer on real Redis; and the input's
other writer, the job's idle markers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import replace
from itertools import islice, pairwise
from statistics import median

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.apps.generator import main, parse_args
from streaming.rules.scenarios import SCENARIOS, BurstModel, DelayModel, Outage, Scenario, ServerProfile, get_scenario
from streaming.rules.simulate import Simulator, fast_payload, generate, record_payload
from streaming.schema.clock import ManualClock
from streaming.schema.config import ConfigError
from streaming.store.stream_writer import StreamWriter, WriteError, WriteStats, stream_last_id, write
from tests.seed import arrival_ids
from watermark_client.events import KINDS, Event, parse_entry, parse_entry_id
from watermark_client.timeutil import parse_iso_us

START = parse_iso_us("2026-01-01T00:00:00Z")
from tests.paths import ROOT as REPO  # noqa: E402


def delays_by_server(events: list[tuple[int, Event]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for arrival, ev in events:
        out[ev.server].append(arrival - ev.event_time_us)
    return out


@pytest.fixture(scope="module")
def overseas() -> list[tuple[int, Event]]:
    return generate("overseas-lag", seed=7, start_us=START, rate=1000, count=10_000)


@pytest.fixture(scope="module")
def burst() -> list[tuple[int, Event]]:
    # 30 s of event time covers the first held-back chunk, [20 s, 25 s).
    return generate("late-burst", seed=3, start_us=START, rate=1000, count=30_000)


@pytest.fixture()
def key() -> str:
    return f"test:gen:{uuid.uuid4().hex}:events"


# --------------------------------------------------------------------------- simulator


def test_same_seed_scenario_and_start_give_the_identical_sequence() -> None:
    a = generate("late-burst", seed=42, start_us=START, rate=500, count=3_000)
    b = generate("late-burst", seed=42, start_us=START, rate=500, count=3_000)
    assert a == b
    assert list(Simulator("late-burst", seed=42, start_us=START, rate=500, count=3_000).records()) == \
        list(Simulator("late-burst", seed=42, start_us=START, rate=500, count=3_000).records())


def test_different_seeds_or_starts_differ() -> None:
    a = generate("overseas-lag", seed=1, start_us=START, rate=500, count=2_000)
    b = generate("overseas-lag", seed=2, start_us=START, rate=500, count=2_000)
    assert [e for _, e in a] != [e for _, e in b]
    later = generate("overseas-lag", seed=1, start_us=START + 60_000_000, rate=500, count=2_000)
    assert [(arr - 60_000_000, replace(e, event_time_us=e.event_time_us - 60_000_000)) for arr, e in later] == a


def test_events_come_out_in_arrival_order(overseas: list[tuple[int, Event]]) -> None:
    arrivals = [a for a, _ in overseas]
    assert arrivals == sorted(arrivals)
    assert all(a >= e.event_time_us for a, e in overseas)


def test_overseas_c_arrives_out_of_event_time_order(overseas: list[tuple[int, Event]]) -> None:
    c_times = [e.event_time_us for _, e in overseas if e.server == "C"]
    inversions = sum(1 for x, y in pairwise(c_times) if y < x)
    assert inversions > len(c_times) // 4


def test_c_delays_are_much_larger_than_home_servers(overseas: list[tuple[int, Event]]) -> None:
    d = delays_by_server(overseas)
    assert set(d) == {"A", "B", "C"}
    home_max = max(max(d["A"]), max(d["B"]))
    assert home_max <= 151_000  # 150 ms, plus up to 1 ms from millisecond event times
    assert min(d["A"] + d["B"]) >= 20_000
    assert min(d["C"]) >= 500_000 > home_max
    assert 2_000_000 < median(d["C"]) < 8_000_000
    assert max(d["C"]) - min(d["C"]) > 5_000_000  # heavy jitter


def test_late_burst_delivers_a_chunk_of_c_minutes_late(burst: list[tuple[int, Event]]) -> None:
    late = [(a, e) for a, e in burst if a - e.event_time_us > 120_000_000]
    assert late, "no event arrived more than 2 minutes late"
    assert {e.server for _, e in late} == {"C"}
    # The chunk is C's events from [20 s, 25 s) of event time, delivered together after it ends.
    offsets = sorted(e.event_time_us - START for _, e in late)
    assert offsets[0] >= 20_000_000 and offsets[-1] < 25_000_000
    c_in_chunk = [e for _, e in burst if e.server == "C" and 20_000_000 <= e.event_time_us - START < 25_000_000]
    assert len(late) == len(c_in_chunk) > 1000  # 250/s for 5 s
    assert max(a - e.event_time_us for a, e in late) < 330_000_000  # 5 min + chunk + max delay


def test_steady_has_no_late_events() -> None:
    events = generate("steady", seed=3, start_us=START, rate=1000, count=10_000)
    assert max(a - e.event_time_us for a, e in events) <= 151_000


def test_count_stops_exactly() -> None:
    for count in (0, 1, 999, 4_321):
        assert len(generate("late-burst", seed=5, start_us=START, rate=1000, count=count)) == count
    endless = iter(Simulator("steady", seed=5, start_us=START, rate=1000))
    assert len(list(islice(endless, 5_000))) == 5_000


def test_event_and_player_ids(overseas: list[tuple[int, Event]]) -> None:
    ids = [e.event_id for _, e in overseas]
    assert len(set(ids)) == len(ids)
    for _, e in overseas:
        assert re.fullmatch(rf"{e.server}-\d{{9}}", e.event_id or ""), e
        assert re.fullmatch(rf"{e.server}-p\d{{5}}", e.player_id), e
    sim = Simulator("overseas-lag", seed=7, start_us=START, rate=1000, count=10_000)
    assert {e.player_id for _, e in overseas if e.server == "A"} <= set(sim.players("A"))


def test_players_follow_login_heartbeat_logout(overseas: list[tuple[int, Event]]) -> None:
    """In generation order (= event-id order per server) every player logs in first,
    and heartbeats or logs out only while logged in."""
    assert {e.kind for _, e in overseas} == set(KINDS)
    by_player: dict[str, list[Event]] = defaultdict(list)
    for _, e in sorted(overseas, key=lambda p: (p[1].server, p[1].event_id)):
        by_player[e.player_id].append(e)
    for player, events in by_player.items():
        assert events[0].kind == "login", player
        online = False
        for e in events:
            assert (e.kind == "login") != online, (player, e)
            online = e.kind != "logout"
        times = [e.event_time_us for e in events]
        assert times == sorted(times)


def test_rate_shares_and_heartbeat_interval() -> None:
    events = generate("steady", seed=11, start_us=START, rate=1000, count=20_000)
    times = [e.event_time_us for _, e in events]
    assert max(times) - min(times) == pytest.approx(20_000_000, rel=0.01)  # rate sets event-time spacing
    shares = Counter(e.server for _, e in events)
    assert shares["A"] / 20_000 == pytest.approx(0.40, abs=0.02)
    assert shares["C"] / 20_000 == pytest.approx(0.25, abs=0.02)
    last: dict[str, int] = {}
    gaps = []
    for e in sorted((e for _, e in events), key=lambda e: e.event_time_us):
        if e.kind == "heartbeat" and e.player_id in last:
            gaps.append(e.event_time_us - last[e.player_id])
        last[e.player_id] = e.event_time_us
    assert 4_000_000 < median(gaps) < 7_000_000  # "every few seconds" (5 s by default)


def test_outages_and_clock_skew_for_later_scenarios() -> None:
    base = get_scenario("steady")
    scen = base.replace_server("A", outages=(Outage(2_000, 3_000, backfill=True),)) \
        .replace_server("B", outages=(Outage(2_000, 3_000, backfill=False),)) \
        .replace_server("C", clock_skew_ms=-90_000)
    events = generate(scen, seed=1, start_us=START, rate=1000, count=10_000)
    a_in = [(a, e) for a, e in events if e.server == "A" and 2_000_000 <= e.event_time_us - START < 5_000_000]
    assert a_in and all(a >= START + 5_000_000 for a, _ in a_in)  # backfilled after the outage
    assert not [e for _, e in events if e.server == "B" and 2_000_000 <= e.event_time_us - START < 5_000_000]
    c = [(a, e) for a, e in events if e.server == "C"]
    assert all(89_800_000 < a - e.event_time_us < 90_200_000 for a, e in c)  # clock 90 s behind


def test_scenario_registry() -> None:
    assert list(SCENARIOS) == ["steady", "overseas-lag", "late-burst", "idle-server", "clock-skew",
                               "outage-and-backfill", "players-leave", "rolling-deploy", "matches"]
    for name, scen in SCENARIOS.items():
        assert scen.name == name and scen.description
        assert [s.name for s in scen.servers] == ["A", "B", "C"]
    assert SCENARIOS["late-burst"].server("C").burst is not None
    assert SCENARIOS["overseas-lag"].server("C").burst is None
    assert SCENARIOS["steady"].server("C").delay == SCENARIOS["steady"].server("A").delay


def by_id(events: list[tuple[int, Event]]) -> dict[str, tuple[int, Event]]:
    return {e.event_id: (a, e) for a, e in events if e.event_id}


def test_idle_server_b_is_silent_for_90_s_from_30_s_and_again_every_5_min() -> None:
    """Rate 100 for 400 s of event time covers the first outage and the start of the second."""
    idle = generate("idle-server", seed=6, start_us=START, rate=100, count=30_000)
    steady = generate("steady", seed=6, start_us=START, rate=100, count=30_000)
    b = sorted(e.event_time_us - START for _, e in idle if e.server == "B")
    silent = [(30_000_000, 120_000_000), (330_000_000, 420_000_000)]
    assert not [t for t in b for lo, hi in silent if lo <= t < hi]
    # events right up to each outage and right after the first one (B has ~35 events/s)
    assert 29_000_000 <= max(t for t in b if t < 30_000_000)
    assert min(t for t in b if t >= 30_000_000) < 121_000_000
    assert 329_000_000 <= max(t for t in b if t < 330_000_000)
    # A and C do not notice: over the event time both runs cover, their events are identical to steady's
    horizon = min(max(e.event_time_us for _, e in run) for run in (idle, steady))
    for server in ("A", "C"):
        assert [p for p in idle if p[1].server == server and p[1].event_time_us <= horizon] == \
            [p for p in steady if p[1].server == server and p[1].event_time_us <= horizon]
    assert len(idle) == 30_000  # the count is still exact: the slots B would have had stay empty


def test_clock_skew_puts_a_20_s_ahead_and_changes_nothing_else() -> None:
    skew = generate("clock-skew", seed=8, start_us=START, rate=1000, count=10_000)
    steady = generate("steady", seed=8, start_us=START, rate=1000, count=10_000)
    assert len(skew) == len(steady)
    for (a1, e1), (a2, e2) in zip(skew, steady, strict=True):
        assert a1 == a2  # same arrival: the event happened at the same true time
        assert e1.event_time_us - e2.event_time_us == (20_000_000 if e1.server == "A" else 0)
        assert replace(e1, event_time_us=e2.event_time_us) == e2
    a_ahead = [e.event_time_us - a for a, e in skew if e.server == "A"]
    # ahead of its ingest time by 20 s minus the network delay, well within MAX_FUTURE_SKEW (5 min)
    assert a_ahead and all(19_849_000 <= d <= 19_980_000 for d in a_ahead)


def test_outage_and_backfill_delivers_cs_backlog_at_once_when_the_link_returns() -> None:
    """Same events as steady (none lost); C's from the outage arrive at its end plus their own delay."""
    backfill = generate("outage-and-backfill", seed=4, start_us=START, rate=100, count=40_000)
    steady = by_id(generate("steady", seed=4, start_us=START, rate=100, count=40_000))
    assert len(backfill) == 40_000 and set(by_id(backfill)) == set(steady)
    held = 0
    for arrival, e in backfill:
        steady_arrival, steady_event = steady[e.event_id]
        assert e == steady_event
        offset = e.event_time_us - START
        if e.server == "C" and any(lo <= offset < lo + 60_000_000 for lo in (30_000_000, 330_000_000)):
            end = START + (offset - 30_000_000) // 300_000_000 * 300_000_000 + 90_000_000
            assert arrival == steady_arrival - e.event_time_us + end  # the link's return + the same delay
            held += 1
        else:
            assert arrival == steady_arrival
    assert held > 2 * 60 * 25 * 0.9  # C's ~25 events/s over both outages
    arrivals = sorted(a - START for a, e in backfill if e.server == "C" and 30_000_000 <= e.event_time_us - START
                      < 90_000_000)
    assert 90_000_000 < arrivals[0] and arrivals[-1] <= 90_151_000  # the whole backlog within one delay spread


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Simulator("nope", seed=1, start_us=START, rate=10), "unknown scenario 'nope'; choose one of: steady"),
        (lambda: Simulator("steady", seed=1, start_us=START, rate=-5), "rate must be a number >= 0"),
        (lambda: Simulator("steady", seed=1, start_us=START, rate=float("nan")), "rate must be a number >= 0"),
        (lambda: Simulator("steady", seed=1, start_us=START, rate=10, count=-1), "count must be an integer >= 0"),
        (lambda: DelayModel(min_ms=50, median_ms=10, max_ms=100), "median_ms (10) must be between min_ms (50)"),
        (lambda: BurstModel(period_ms=1000, duration_ms=2000, lateness_min_ms=0, lateness_max_ms=1),
         "duration_ms (2000) must be positive and at most period_ms (1000)"),
        (lambda: ServerProfile("A 1", 1.0, SCENARIOS["steady"].server("A").delay), "server 'A 1': name must be"),
        (lambda: ServerProfile("A", 0, SCENARIOS["steady"].server("A").delay),
         "server 'A': share must be a positive number, got 0"),
        (lambda: Scenario("x", "", (SCENARIOS["steady"].server("A"),) * 2), "duplicate server names A"),
        (lambda: SCENARIOS["steady"].replace_server("Z", share=1.0), "has no server 'Z'"),
        (lambda: Outage(0, 5_000, every_ms=5_000), "outage every_ms (5000) must be longer than duration_ms (5000)"),
    ],
)
def test_config_errors_are_precise(build: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        build()  # type: ignore[operator]
    assert message in str(info.value)


# --------------------------------------------------------------------------- payload fast path


def test_fast_payload_is_byte_identical_for_generated_events(burst: list[tuple[int, Event]]) -> None:
    sample = burst[::4]  # Event.payload() (orjson + strftime) is the slow part of this test
    assert [fast_payload(e) for _, e in sample] == [e.payload() for _, e in sample]
    records = list(Simulator("late-burst", seed=3, start_us=START, rate=1000, count=30_000).records())
    assert [(rec[0], Event(*rec[2:7])) for rec in records] == burst
    assert [record_payload(rec) for rec in records[::4]] == [e.payload() for _, e in sample]


@settings(max_examples=150, deadline=None)
@given(
    server=st.sampled_from(["A", "C", 'q"', "\\", "é"]) | st.text(min_size=1, max_size=4),
    player=st.text(min_size=1, max_size=8),
    time_us=st.integers(min_value=-10**15, max_value=4 * 10**15) | st.integers(0, 4 * 10**12).map(lambda ms: ms * 1000),
    kind=st.sampled_from([*KINDS, None, "weird"]),
    event_id=st.none() | st.text(max_size=6) | st.integers(0, 10**9).map(lambda n: f"A-{n:09d}"),
)
def test_fast_payload_matches_event_payload_for_any_event(server: str, player: str, time_us: int, kind: str | None,
                                                          event_id: str | None) -> None:
    ev = Event(server, player, time_us, kind, event_id)
    assert fast_payload(ev) == ev.payload()


def test_fast_payload_falls_back_on_characters_json_escapes() -> None:
    for text in ('quo"te', "back\\slash", "tab\t", "é", "\u2028", "nul\x00", "del\x7f"):
        ev = Event("A", text, START + 1_000, "login", f"A-{text}")
        assert fast_payload(ev) == ev.payload()
    assert fast_payload(Event("A", "p", START + 1, "login", "x")) == Event("A", "p", START + 1, "login", "x").payload()
    with_region = Event("A", "p", START + 1_000, "login", "x", region="eu")
    assert fast_payload(with_region) == with_region.payload() and b'"region":"eu"' in with_region.payload()


# --------------------------------------------------------------------------- clocks and the writer


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


# --------------------------------------------------------------------------- CLI


def test_cli_config_errors_exit_2_without_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--scenario", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown scenario 'nope'; choose one of: steady, overseas-lag, late-burst" in err
    assert "Traceback" not in err
    assert main(["--rate", "-3"]) == 2
    assert "rate must be a number >= 0" in capsys.readouterr().err
    assert main(["--start", "yesterday"]) == 2
    assert "yesterday" in capsys.readouterr().err
    assert main(["--follow", "--count", "5"]) == 2
    assert "--count and --start do not apply with --follow" in capsys.readouterr().err


def cli(redis_url: str, namespace: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "REDIS_URL": redis_url, "PIPELINE_NAMESPACE": namespace,
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "streaming.apps.generator", *args], cwd=REPO, env=env,
                            stderr=subprocess.PIPE, text=True)


def test_cli_exits_0_after_count(r: redis.Redis, redis_url: str) -> None:
    ns = f"gen{uuid.uuid4().hex[:8]}"
    proc = cli(redis_url, ns, "--scenario", "overseas-lag", "--seed", "5", "--rate", "0", "--count", "2500",
               "--start", "2026-01-01T00:00:00Z")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert r.xlen(f"{ns}:events") == 2500
    expected = [e.payload() for _, e in generate("overseas-lag", seed=5, start_us=START, rate=0, count=2500)]
    assert [f[b"e"] for _, f in r.xrange(f"{ns}:events")] == expected
    assert re.search(r"done written=2500 .*A=\d+ B=\d+ C=\d+", err)


def test_cli_stops_cleanly_on_sigterm(r: redis.Redis, redis_url: str) -> None:
    ns = f"gen{uuid.uuid4().hex[:8]}"
    proc = cli(redis_url, ns, "--rate", "2000", "--log-every", "0.1", "--seed", "1")
    assert proc.stderr is not None
    lines: Iterator[str] = iter(proc.stderr.readline, "")
    try:
        assert any(" progress written=" in line for line in lines)  # blocks until it has written
        proc.terminate()
        rest = "".join(lines)
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
    done = re.search(r"done written=(\d+)", rest)
    assert "SIGTERM" in rest and done and "Traceback" not in rest, rest
    assert r.xlen(f"{ns}:events") == int(done.group(1)) > 0


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


def online_counts(events: list[tuple[int, Event]], server: str, every_s: int) -> dict[int, int]:
    """Players online on ``server`` by event time, at the end of each ``every_s`` seconds."""
    online: set[str] = set()
    out: dict[int, int] = {}
    for _, e in sorted(events, key=lambda x: x[1].event_time_us):
        if e.server == server:
            (online.discard if e.kind == "logout" else online.add)(e.player_id)
            out[(e.event_time_us - START) // (every_s * 1_000_000)] = len(online)
    return out


def test_players_leave_logs_80_percent_of_b_out_from_30_s_for_90_s_while_b_keeps_sending() -> None:
    events = generate("players-leave", seed=3, start_us=START, rate=200, count=200 * 150)
    b = online_counts(events, "B", 10)
    assert b[2] == 350 and b[3] <= 71 and b[10] <= 71  # 20 % of 350 stay through 30-120 s
    assert b[12] >= 340  # back once it ends
    assert min(online_counts(events, "A", 10).values()) >= 390  # the others are untouched
    b_during = [e for _, e in events if e.server == "B" and 40e6 <= e.event_time_us - START < 110e6]
    assert len(b_during) > 0.3 * 200 * 70 * 0.9  # B's share of the rate goes on: its players really left


def test_a_scaled_timeline_brings_the_outage_forward_and_keeps_the_delays() -> None:
    scaled = SCENARIOS["idle-server"].scaled(0.2)
    (outage,) = scaled.server("B").outages
    assert (outage.start_ms, outage.duration_ms, outage.every_ms) == (6_000, 18_000, 60_000)
    assert scaled.server("B").delay == SCENARIOS["idle-server"].server("B").delay
    burst = SCENARIOS["late-burst"].scaled(0.2).server("C").burst
    assert burst is not None and (burst.period_ms, burst.lateness_min_ms) == (12_000, 24_000)
    assert SCENARIOS["steady"].scaled(1) is SCENARIOS["steady"]
    with pytest.raises(ConfigError, match="a timeline scale must be a positive number, got 0"):
        SCENARIOS["steady"].scaled(0)


# --------------------------------------------------------------------------- a fleet: --servers N --regions R


def test_a_fleet_deals_its_servers_over_regions_each_with_its_delay() -> None:
    from streaming.rules.scenarios import REGION_DELAYS, fleet, game

    f = fleet(300, 6)
    names = [s.name for s in f.servers]
    assert len(set(names)) == 300 and names[:7] == ["eu-001", "na-001", "sa-001", "as-001", "oc-001", "af-001",
                                                     "eu-002"]
    assert Counter(s.region for s in f.servers) == {r: 50 for r in ("eu", "na", "sa", "as", "oc", "af")}
    assert all(s.name.startswith(f"{s.region}-") for s in f.servers)
    assert f.server("as-017").delay == REGION_DELAYS["as"] and f.server("eu-017").delay == SCENARIOS["steady"].server(
        "A").delay
    assert f.server("eu-001").share > f.server("eu-050").share  # a few busy shards, a long tail
    assert game("steady", 12, 3) == fleet(12, 3) and game("steady") == SCENARIOS["steady"]
    for bad, said in ((lambda: fleet(5, 6), "servers must be 6"), (lambda: fleet(300, 13), "regions must be 1 to 12"),
                      (lambda: game("late-burst", 300, 6), "has its own three"), (lambda: game("steady", None, 6),
                                                                                 "--regions needs --servers")):
        with pytest.raises(ConfigError, match=said):
            bad()


def test_a_fleets_events_carry_their_region_through_every_payload_path(r: redis.Redis, key: str) -> None:
    from streaming.rules.scenarios import fleet

    sim = Simulator(fleet(30, 3), seed=5, start_us=START, rate=0, count=3_000)
    events = list(sim)
    assert {e.server for _, e in events} == {s.name for s in sim.scenario.servers}  # every server plays
    assert all(e.region == e.server.split("-")[0] for _, e in events)
    assert [record_payload(rec, sim.regions.get(rec[2])) for rec in sim.records()] == [e.payload() for _, e in events]
    assert [fast_payload(e) for _, e in events[:200]] == [e.payload() for _, e in events[:200]]
    write(r, key, sim, batch_size=500)  # the writer's own template
    assert [f[b"e"] for _, f in r.xrange(key)] == [e.payload() for _, e in events]
    assert [parse_entry(f, i.decode()) for i, f in r.xrange(key, count=50)] == [e for _, e in events[:50]]


def test_the_generator_says_why_servers_do_not_apply(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--scenario", "late-burst", "--servers", "300", "--count", "1"]) == 2
    assert "--servers plays the steady game on many servers" in capsys.readouterr().err


@pytest.mark.parametrize(("curve", "t_ms", "share"), [
    # 21:00 local on a Saturday (2026-01-03): the evening's peak on the busiest day
    ("utc", START // 1000 + 2 * 86_400_000 + 21 * 3_600_000, 1.0),
    # 05:00 on the same day: before dawn
    ("utc", START // 1000 + 2 * 86_400_000 + 5 * 3_600_000, 0.15),
    # between two hours, interpolated; a Thursday (2026-01-01)
    ("utc", START // 1000 + 21 * 3_600_000 + 1_800_000, (1.0 + 0.95) / 2 * 0.9),
    # eu is an hour ahead of UTC: its 21:00 is 20:00 UTC
    ("eu", START // 1000 + 2 * 86_400_000 + 20 * 3_600_000, 1.0),
    # a day compressed to 86.4 s: the same curve a thousand times faster
    ("fast", (START // 1000 + 2 * 86_400_000 + 21 * 3_600_000) // 1000, 1.0),
])
def test_the_daily_curve_peaks_in_the_local_evening_and_scales(curve: str, t_ms: int, share: float) -> None:
    from streaming.rules.scenarios import DailyCurve

    c = {"utc": DailyCurve(), "eu": DailyCurve(offset_ms=3_600_000), "fast": DailyCurve(day_ms=86_400)}[curve]
    assert c.share(t_ms) == pytest.approx(share)


def test_a_fleets_players_come_in_the_evening_and_leave_at_night_a_day_in_minutes() -> None:
    """A compressed day (``--timeline-scale 0.001``: 86.4 s) of eu-001 against its curve: the players online, as its
    logins and logouts say, are the curve's share of its full house at the evening's peak and before dawn."""
    from streaming.rules.scenarios import fleet

    f = fleet(3, 3).scaled(0.001)
    curve = f.server("eu-001").daily
    assert curve is not None and curve.day_ms == 86_400 and curve.offset_ms == 3_600
    day0 = START // 1000 // 86_400 * 86_400 + 2 * 86_400  # a compressed Saturday
    sim = Simulator(f, seed=4, start_us=day0 * 1000, rate=300, count=300 * 87)
    online: set[str] = set()
    at: dict[str, int] = {}
    peak_ms, dawn_ms = day0 + 20 * 3_600, day0 + 4 * 3_600  # eu's 21:00 and 05:00, in UTC
    for _, e in sorted(((e.event_time_us, e) for _, e in sim if e.server == "eu-001"), key=lambda x: x[0]):
        (online.discard if e.kind == "logout" else online.add)(e.player_id)
        for name, when in (("peak", peak_ms), ("dawn", dawn_ms)):
            if e.event_time_us // 1000 <= when:
                at[name] = len(online)
    full = round(300 * f.servers[0].share / sum(s.share for s in f.servers) * 5)  # a heartbeat every 5 s
    assert at["peak"] == pytest.approx(full, abs=2)
    assert at["dawn"] == pytest.approx(0.15 * full, abs=2)


def test_a_fleet_without_its_daily_curve_keeps_a_full_house() -> None:
    """DAILY_CURVE=off (the benchmark's): the same fleet, every server's players online whatever the hour."""
    from streaming.rules.scenarios import fleet, game

    assert all(p.daily is not None for p in fleet(30, 3).servers)
    flat = fleet(30, 3, daily=False)
    assert all(p.daily is None for p in flat.servers) and game("steady", 30, 3, daily=False) == flat
    assert [(p.name, p.region, p.share) for p in flat.servers] == [(p.name, p.region, p.share)
                                                                   for p in fleet(30, 3).servers]
    assert parse_args(["--servers", "30", "--daily-curve", "off"]).daily_curve == "off"


def test_players_online_carry_over_into_a_following_simulation() -> None:
    first = Simulator("steady", seed=1, start_us=START, rate=200)
    list(islice(first.records(), 3_000))
    online = first.online_now()
    assert {len(p) for p in online.values()} and all(online.values())
    stranger = {"A": ["nobody-here"], "Z": ["A-p00001"]}  # not in the population, or no such server: ignored
    then = Simulator("players-leave", seed=2, start_us=START + 60_000_000, rate=200, online={**stranger, **online})
    events = [e for _, e in islice(then, 200)]
    carried = {p for players in online.values() for p in players}
    assert not [e for e in events if e.kind == "login" and e.player_id in carried], "they were online already"
    assert {e.player_id for e in events if e.kind == "heartbeat"} <= carried
    assert "nobody-here" not in {e.player_id for e in events}
    assert Simulator("steady", seed=1, start_us=START, rate=200).online_now() == {}  # nothing generated yet


@pytest.mark.parametrize(("scenario", "servers"), [("rolling-deploy", None), ("matches", None), ("matches", 12)])
def test_a_fleet_that_is_replaced_as_it_plays_drains_each_server_and_keeps_its_players(
        r: redis.Redis, scenario: str, servers: int | None) -> None:
    """Rolling deploys and a server per match (``streaming.rules.scenarios.Churn``) through the online view's own
    fold: every replaced server ends drained (its players logged out there and in on its successor), none times a
    player out, and the players online in all never dip while servers come and go."""
    from streaming.rules.fleet import drained
    from streaming.rules.online.table import OnlineBatch, OnlineEvents
    from streaming.rules.scenarios import game
    from streaming.schema.keys import KeySchema
    from streaming.schema.records import OnlineStateRecord
    from streaming.store.online.commit import OnlineMirror, commit_online
    from tests.schema.params import built_params

    start_us = 1_800_000_000_000_000
    sim = Simulator(game(scenario, servers).scaled(0.1), seed=3, start_us=start_us, rate=300, count=30_000)
    keys, mirror = KeySchema(f"churn-{uuid.uuid4().hex[:8]}"), OnlineMirror()
    params = built_params(60_000, 60_000, 2_000, retire_after_ms=3_600_000)
    batches: dict[int, list[tuple[int, Event]]] = defaultdict(list)
    for arrival, ev in sim:
        batches[arrival // 1_000_000].append((arrival, ev))
    totals, causes, wm = [], Counter(), 0
    for i, second in enumerate(sorted(batches)):
        rows = batches[second]
        from tests.store.test_online import events as online_events  # (server, player, ms, kind, arrival ms)

        ev: OnlineEvents = online_events(*[(e.server, e.player_id, e.event_time_us // 1000, e.kind,
                                                a // 1000) for a, e in rows])
        assert commit_online(r, keys, OnlineBatch(i, wm, second * 1000, f"{second * 1000}-0", ev, 2_000),
                               params, 30_000, mirror)
        state = OnlineStateRecord.from_hash(r.hgetall(keys.online_state), "t")
        wm = state.watermark_ms
        last = json.loads(r.zrange(keys.online_history, -1, -1)[0])
        totals.append(sum(last["counts"].values()))
        for c in last["causes"].values():
            causes.update(c)
    clocks = OnlineStateRecord.from_hash(r.hgetall(keys.online_state), "t").clocks
    slots = {p.name for p in sim.scenario.servers}
    newest = {slot: max((s for s in clocks if s.rsplit("-", 1)[0] == slot), key=lambda s: clocks[s].heard_ms)
              for slot in slots}
    end_ms = max(c.heard_ms for c in clocks.values())
    # replaced, and drained since: its players move with their next event, within a heartbeat (5 s)
    replaced = [s for s in clocks if s not in newest.values() and clocks[s].heard_ms < end_ms - 10_000]
    assert len(replaced) >= len(slots)  # every slot was replaced at least once
    assert all(drained(clocks[s].heard_ms, clocks[s].drained_ms) for s in replaced), {s: v for s, v in {
        s: (clocks[s].drained_ms, clocks[s].heard_ms) for s in replaced}.items() if v[0] < v[1]}
    assert causes["timeout"] == 0, causes  # nobody vanished: each moved by a logout and a login
    steady = totals[len(totals) // 4:]  # once the game has filled up
    assert min(steady) >= 0.8 * max(steady), (min(steady), max(steady))
