"""The lab's control plane: the generator following the control hash on real Redis.

The follower runs in the test's thread on a scripted :class:`ManualClock`: the
presenter's changes happen at given clock times, so a whole run with switches
takes no sleeping, and what was written can be compared with the simulations.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from urllib.parse import urlsplit

import pytest
import redis

from streaming.apps.follow import Follower
from streaming.rules.simulate import Simulator, record_payload
from streaming.schema.clock import ManualClock
from streaming.schema.keys import KeySchema
from streaming.schema.records import GeneratorStatus
from streaming.store.control_store import (
    read_control,
    write_control,
)
from streaming.store.redis_conn import connect
from tests.store.control.test_control_hash import WHO
from tests.store.generator.test_writer import no_sleeping
from watermark_client.timeutil import parse_iso_us

START = parse_iso_us("2026-01-01T00:00:00Z")
S = 1_000_000


class ScriptedClock(ManualClock):
    """A manual clock that runs the presenter's actions when time passes them."""

    def __init__(self, start_us: int, script: list[tuple[int, Callable[[], None]]]) -> None:
        super().__init__(start_us)
        self.script = sorted(script, key=lambda a: a[0])

    def sleep_until(self, us: int) -> None:
        while self.script and self.script[0][0] <= us:
            at, action = self.script.pop(0)
            super().sleep_until(at)
            action()
        super().sleep_until(us)


def follower(client: redis.Redis, keys: KeySchema, clock: ManualClock, stop: threading.Event, redis_url: str,
             **kw: object) -> Follower:
    args: dict = {"scenario": "steady", "rate": 100.0, "seed": 11, "explicit_ids": True, "batch_size": 64, **kw}
    return Follower(client, keys, clock=clock, stop=stop, reconnect=lambda: connect(redis_url), **args)


def stream(client: redis.Redis, keys: KeySchema) -> list[bytes]:
    return [f[b"e"] for _, f in client.xrange(keys.events)]


def split_into_runs(written: list[bytes], sims: list[Simulator]) -> list[int]:
    """How many events of each simulation were written, asserting the stream is exactly a prefix
    of each one, in order: nothing invented, nothing reordered, nothing skipped within a run."""
    counts = []
    rest = written
    for i, sim in enumerate(sims):
        n = 0
        for rec in sim.records():
            if n == len(rest) or record_payload(rec) != rest[n]:
                break
            n += 1
        if i == len(sims) - 1:
            assert n == len(rest), "entries after the last run's prefix"
        counts.append(n)
        rest = rest[n:]
    return counts


def test_a_scenario_switch_restarts_the_simulation_and_b_goes_silent_on_time(
        r: redis.Redis, rd: redis.Redis, redis_url: str, keys: KeySchema, monkeypatch: pytest.MonkeyPatch) -> None:
    stop = threading.Event()
    seen: dict[str, dict] = {}
    script = [
        (START + 10 * S, lambda: seen.update(switch=write_control(rd, keys, **WHO, scenario="idle-server").__dict__)),
        (START + 10 * S + 600_000, lambda: seen.update(after=rd.hgetall(keys.generator_status))),
        (START + 35 * S, lambda: seen.update(steady=rd.hgetall(keys.generator_status))),
        (START + 80 * S, lambda: seen.update(b_silent=rd.hgetall(keys.generator_status))),
        (START + 145 * S, stop.set),
    ]
    clock = ScriptedClock(START, script)
    no_sleeping(monkeypatch)
    stats = follower(r, keys, clock, stop, redis_url).follow()

    after = GeneratorStatus.from_hash(seen["after"])
    assert (after.state, after.scenario, after.rev) == ("running", "idle-server", seen["switch"]["rev"]) == \
        ("running", "idle-server", 2)  # rev 1 was the generator's own seeding
    switched_us = after.since_ms * 1000
    assert START + 10 * S <= switched_us <= START + 10 * S + 500_000  # picked up at the next check
    written = stream(r, keys)
    # The follower pulled one record beyond what it wrote of the first run (the one due after the switch), so
    # the first run had generated that far: whoever was online then plays on in the second run.
    before = Simulator("steady", seed=11, start_us=START, rate=100)
    pulled = before.records()
    first = next(n for n, (rec, got) in enumerate(zip(pulled, written, strict=False)) if record_payload(rec) != got)
    carried = before.online_now()
    (second,) = split_into_runs(written[first:], [Simulator("idle-server", seed=12, start_us=switched_us, rate=100,
                                                            online=carried)])
    assert first > 900 and second > 10_000 and stats.written == len(written) == first + second
    online = {p for players in carried.values() for p in players}
    kinds = [(e["player_id"], e["kind"]) for e in map(json.loads, written[first:first + len(online)])]
    assert len(online) > 50 and not [k for k in kinds if k[1] == "login" and k[0] in online], "the players carry on"
    # The second run is idle-server from the switch on: B silent for [30 s, 120 s) after it, events before and after.
    b = [json.loads(p)["event_time"] for p in written[first:] if b'"server":"B"' in p]
    offsets = sorted(parse_iso_us(t) - switched_us for t in b)
    assert not [o for o in offsets if 30 * S <= o < 120 * S]
    assert any(29 * S <= o < 30 * S for o in offsets) and any(120 * S <= o < 121 * S for o in offsets)
    final = GeneratorStatus.from_hash(rd.hgetall(keys.generator_status))
    assert (final.state, final.written, final.rev) == ("exited", len(written), 2)
    # the rate it reports is what it wrote over the last 5 s of the clock: 100/s asked, and about a third
    # less while B (one of three servers) is silent
    assert 90 <= GeneratorStatus.from_hash(seen["steady"]).achieved <= 110
    assert 55 <= GeneratorStatus.from_hash(seen["b_silent"]).achieved <= 75
    assert 0 < after.achieved and final.achieved == 0.0  # measured from the switch on; none once exited
    assert after.lag_ms == 0  # a manual clock: every write is on time


def test_stop_pauses_and_start_resumes_from_now(r: redis.Redis, rd: redis.Redis, redis_url: str, keys: KeySchema,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    stop = threading.Event()
    seen: dict[str, object] = {}

    def look(name: str) -> Callable[[], None]:
        return lambda: seen.update({name: (GeneratorStatus.from_hash(rd.hgetall(keys.generator_status)),
                                           rd.xlen(keys.events))})

    script = [
        (START + 5 * S, lambda: write_control(rd, keys, **WHO, running=False)),
        (START + 6 * S, look("paused")),
        (START + 19 * S, look("still_paused")),
        (START + 20 * S, lambda: write_control(rd, keys, **WHO, running=True)),
        (START + 21 * S, look("resumed")),
        (START + 30 * S, stop.set),
    ]
    clock = ScriptedClock(START, script)
    no_sleeping(monkeypatch)
    follower(r, keys, clock, stop, redis_url).follow()

    paused, n_paused = seen["paused"]  # type: ignore[misc]
    still, n_still = seen["still_paused"]  # type: ignore[misc]
    resumed, _ = seen["resumed"]  # type: ignore[misc]
    assert (paused.state, paused.rev, paused.scenario) == ("stopped", 2, "")
    assert n_still == n_paused > 0 and still.updated_ms > paused.updated_ms  # nothing written, status kept fresh
    assert (resumed.state, resumed.rev, resumed.scenario) == ("running", 3, "steady")
    restarted_us = resumed.since_ms * 1000
    assert START + 20 * S <= restarted_us <= START + 20 * S + 500_000
    written = stream(r, keys)
    first, second = split_into_runs(written, [Simulator("steady", seed=11, start_us=START, rate=100),
                                              Simulator("steady", seed=12, start_us=restarted_us, rate=100)])
    assert first == n_paused and second > 800
    times = sorted(parse_iso_us(json.loads(p)["event_time"]) for p in written)
    assert not [t for t in times if START + 5_500_000 < t < restarted_us]  # no events for the pause


def test_a_restarted_generator_keeps_the_presenters_choice(r: redis.Redis, rd: redis.Redis, redis_url: str,
                                                          keys: KeySchema, monkeypatch: pytest.MonkeyPatch) -> None:
    write_control(rd, keys, **WHO, scenario="clock-skew", running=False)
    stop = threading.Event()
    clock = ScriptedClock(START, [(START + 3 * S, stop.set)])
    no_sleeping(monkeypatch)
    follower(r, keys, clock, stop, redis_url, scenario="late-burst", rate=500.0).follow()
    control = read_control(rd, keys)
    assert control is not None
    assert (control.scenario, control.running, control.rate, control.rev) == ("clock-skew", False, 500.0, 2)
    assert r.xlen(keys.events) == 0
    assert GeneratorStatus.from_hash(rd.hgetall(keys.generator_status)).rev == 2


def test_a_bad_hand_written_value_is_reported_and_the_run_goes_on(
        r: redis.Redis, rd: redis.Redis, redis_url: str, keys: KeySchema, monkeypatch: pytest.MonkeyPatch) -> None:
    stop = threading.Event()
    seen: dict[str, dict] = {}
    script = [
        (START + 2 * S, lambda: rd.hset(keys.control, "scenario", "nope")),  # redis-cli, not write_control
        (START + 3 * S, lambda: seen.update(bad=rd.hgetall(keys.generator_status), n=rd.xlen(keys.events))),
        (START + 4 * S, lambda: write_control(rd, keys, **WHO, scenario="steady")),
        (START + 5 * S, lambda: seen.update(good=rd.hgetall(keys.generator_status))),
        (START + 6 * S, stop.set),
    ]
    no_sleeping(monkeypatch)
    follower(r, keys, ScriptedClock(START, script), stop, redis_url).follow()
    bad, good = GeneratorStatus.from_hash(seen["bad"]), GeneratorStatus.from_hash(seen["good"])
    assert (bad.state, bad.scenario, bad.rev) == ("running", "steady", 1)
    assert "scenario 'nope' is unknown" in bad.error
    assert (good.error, good.rev) == ("", 2)  # the hand-written value did not bump rev; write_control did
    assert r.xlen(keys.events) > seen["n"] > 0  # type: ignore[operator]
    written = stream(r, keys)
    assert split_into_runs(written, [Simulator("steady", seed=11, start_us=START, rate=100)]) == [len(written)]


def test_the_follower_survives_losing_its_redis_connection(
        r: redis.Redis, redis_url: str, keys: KeySchema, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Its connections are killed mid-run (as a Redis restart would); it reconnects and goes on."""
    name, password = f"gen-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    r.acl_setuser(name, enabled=True, passwords=[f"+{password}"], keys=[f"{keys.namespace}:*"], commands=["+@all"])
    parts = urlsplit(redis_url)
    url = f"redis://{name}:{password}@{parts.hostname}:{parts.port}/0"
    stop = threading.Event()
    seen: dict[str, int] = {}
    script = [
        # between two checks, so it lands while the writer holds its connection (redis-py itself
        # reconnects transparently for a plain command issued after the kill)
        (START + 5_250_000, lambda: seen.update(killed=r.client_kill_filter(user=name), before=r.xlen(keys.events))),
        (START + 10 * S, stop.set),
    ]
    try:
        no_sleeping(monkeypatch)
        follower(connect(url), keys, ScriptedClock(START, script), stop, url).follow()
    finally:
        r.acl_deluser(name)
    assert seen["killed"] >= 1
    assert any(m.startswith("lost Redis") for m in caplog.messages), "the writer's connection was not hit"
    assert r.xlen(keys.events) > seen["before"] + 300  # ~5 s at 100/s after the kill (a batch may be lost)
    assert GeneratorStatus.from_hash(r.hgetall(keys.generator_status)).state == "exited"


class StarvedClock(ScriptedClock):
    """Time runs on while the generator works: every look at the clock finds 1.5 s more gone by, as when the
    generator (or Redis) gets too little CPU."""

    def now_us(self) -> int:
        self.advance(1_500_000)
        return super().now_us()


def test_a_generator_behind_its_schedule_says_so(r: redis.Redis, rd: redis.Redis, redis_url: str, keys: KeySchema,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    stop = threading.Event()
    seen: dict[str, dict] = {}
    clock = StarvedClock(START, [(START + 20 * S, lambda: seen.update(late=rd.hgetall(keys.generator_status))),
                                 (START + 30 * S, stop.set)])
    no_sleeping(monkeypatch)
    follower(r, keys, clock, stop, redis_url).follow()
    assert GeneratorStatus.from_hash(seen["late"]).lag_ms >= 1_500
