"""The lab's control plane: the control hash, its CLI, and the generator following it on real Redis.

The follower runs in the test's thread on a scripted :class:`ManualClock`: the
presenter's changes happen at given clock times, so a whole run with switches
takes no sleeping, and what was written can be compared with the simulations.
"""

from __future__ import annotations

import json
import math
import threading
import uuid
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import pytest
import redis

from streaming.apps.control import cli_user, main
from streaming.apps.follow import Follower
from streaming.rules.simulate import Simulator, record_payload
from streaming.schema.clock import ManualClock
from streaming.schema.config import ConfigError
from streaming.schema.keys import KeySchema, WindowKey
from streaming.schema.records import Control, ControlChange, GeneratorStatus
from streaming.store.control_store import (
    CONTROL_AUDIT_KEEP,
    read_control,
    read_control_audit,
    read_lab,
    seed_control,
    write_control,
)
from streaming.store.redis_conn import connect
from tests.store.test_generator import no_sleeping
from watermark_client.timeutil import parse_iso_us

WHO = {"by": "test", "role": "operator"}  # who the control changes' audit records

START = parse_iso_us("2026-01-01T00:00:00Z")
S = 1_000_000


@pytest.fixture()
def keys() -> KeySchema:
    return KeySchema(f"ctl-{uuid.uuid4().hex[:8]}")


@pytest.fixture()
def rd(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


# --------------------------------------------------------------------------- the hash


def test_keys() -> None:
    k = KeySchema("live")
    assert (k.control, k.generator_status) == ("live:control", "live:generator")


@pytest.mark.parametrize("control", [
    Control(),  # nothing asked yet
    Control("idle-server", 250.5, True, 20_000, rev=3, updated_ms=1_700_000_000_000),  # everything set
    Control("steady", 0.0, False),  # rate 0 = as fast as possible; stopped
    Control(delay_ms=0, rev=1, updated_ms=5),  # only a delay: the dashboard wrote before any generator ran
])
def test_control_hash_round_trip(control: Control) -> None:
    raw = {k.encode(): v.encode() for k, v in control.to_hash().items()}  # as Redis returns it
    assert Control.from_hash(raw) == control


def test_generator_status_round_trip() -> None:
    status = GeneratorStatus("running", "clock-skew", 1000.0, 4, 12_345, 1_000, 2_000, "", 997.5, 12)
    assert GeneratorStatus.from_hash(status.to_hash()) == status
    with pytest.raises(ConfigError, match="generator status hash is malformed"):
        GeneratorStatus.from_hash({"state": "running"})


@pytest.mark.parametrize(("raw", "message"), [
    ({"scenario": "nope"}, "scenario 'nope' is unknown; choose one of: steady"),  # typed by hand
    ({"rate": "fast"}, "control field rate='fast' is not a number"),
    ({"rate": "-1"}, "rate must be a finite number >= 0"),
    ({"rate": "inf"}, "rate must be a finite number >= 0"),
    ({"generator": "paused"}, "control field generator='paused' must be 'running' or 'stopped'"),
    ({"delay_ms": "20s"}, "control field delay_ms='20s' is not an integer"),
    ({"delay_ms": "-5"}, "delay_ms must be an integer >= 0"),
    ({"rev": "x"}, "control field rev='x' is not an integer"),
])
def test_a_hand_written_control_hash_is_a_precise_error(raw: dict[str, str], message: str, rd: redis.Redis,
                                                        keys: KeySchema) -> None:
    rd.hset(keys.control, mapping=raw)
    with pytest.raises(ConfigError) as info:
        read_control(rd, keys)  # what the generator and the job read (the record's forms, then the catalogue)
    assert message in str(info.value)


@pytest.mark.parametrize(("changes", "message"), [
    ({"scenario": "nope"}, "scenario 'nope' is unknown"),
    ({"rate": -1.0}, "rate must be a finite number >= 0"),
    ({"rate": math.nan}, "rate must be a finite number >= 0"),
    ({"rate": math.inf}, "rate must be a finite number >= 0"),
    ({"rate": True}, "rate must be a finite number >= 0"),  # a bool is not a rate
    ({"delay_ms": -1}, "delay_ms must be an integer >= 0"),
    ({"delay_ms": 1.5}, "delay_ms must be an integer >= 0"),
    ({"running": "yes"}, "running must be True or False"),
    ({"scenario": "steady", "delay_ms": -1}, "delay_ms must be"),  # one bad field: nothing written at all
    ({}, "nothing to change"),
])
def test_write_control_validates_before_writing(rd: redis.Redis, keys: KeySchema, changes: dict[str, object],
                                                message: str) -> None:
    with pytest.raises(ConfigError) as info:
        write_control(rd, keys, **WHO, **changes)  # type: ignore[arg-type]
    assert message in str(info.value)
    assert not rd.exists(keys.control)


def test_write_control_changes_only_the_given_fields_and_bumps_rev(rd: redis.Redis, keys: KeySchema) -> None:
    first = write_control(rd, keys, **WHO, scenario="idle-server", rate=200, now_ms=1_000)
    assert first == Control("idle-server", 200.0, None, None, rev=1, updated_ms=1_000)
    second = write_control(rd, keys, **WHO, running=False, delay_ms=20_000, now_ms=2_000)
    assert second == Control("idle-server", 200.0, False, 20_000, rev=2, updated_ms=2_000)
    assert read_control(rd, keys) == second
    assert rd.hgetall(keys.control) == {"scenario": "idle-server", "rate": "200.0", "generator": "stopped",
                                        "delay_ms": "20000", "rev": "2", "updated_ms": "2000"}
    assert read_control(rd, KeySchema(f"{keys.namespace}-none")) is None


def test_every_change_is_audited_with_who_role_and_when_and_the_audit_is_bounded(
        rd: redis.Redis, keys: KeySchema, monkeypatch: pytest.MonkeyPatch) -> None:
    write_control(rd, keys, by="ana@ops.example.com", role="operator", delay_ms=20_000, now_ms=1_000)
    write_control(rd, keys, by="root@build-7", role="Redis credential (wm-control)", scenario="steady", now_ms=2_000)
    assert read_control_audit(rd, keys) == [
        ControlChange(2_000, "root@build-7", "Redis credential (wm-control)", '{"scenario": "steady"}', 2),
        ControlChange(1_000, "ana@ops.example.com", "operator", '{"delay_ms": "20000"}', 1)]
    for who, role in (("", "operator"), ("ana", " ")):
        with pytest.raises(ConfigError, match="needs who makes it"):
            write_control(rd, keys, by=who, role=role, delay_ms=1)
    assert read_control(rd, keys).rev == 2  # type: ignore[union-attr]  # refused: nothing written
    for i in range(CONTROL_AUDIT_KEEP + 5):
        write_control(rd, keys, **WHO, rate=float(i + 1), now_ms=3_000 + i)
    assert rd.xlen(keys.control_audit) == CONTROL_AUDIT_KEEP
    newest = read_control_audit(rd, keys, count=1)[0]
    assert (newest.rev, newest.at_ms) == (CONTROL_AUDIT_KEEP + 7, 3_000 + CONTROL_AUDIT_KEEP + 4)


def test_the_command_records_its_user_and_host(rd: redis.Redis, keys: KeySchema, redis_url: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", keys.namespace)
    assert main(["set", "--delay", "20s"]) == 0
    (change,) = read_control_audit(rd, keys)
    assert change.by == cli_user() and "@" in change.by and change.role == "Redis credential (wm-control)"
    assert change.change == '{"delay_ms": "20000"}'


def test_seeding_fills_only_missing_fields(rd: redis.Redis, keys: KeySchema) -> None:
    write_control(rd, keys, **WHO, scenario="clock-skew", running=False, now_ms=1_000)  # the presenter's choice
    seeded = seed_control(rd, keys, scenario="late-burst", rate=1000, now_ms=2_000)
    assert seeded == Control("clock-skew", 1000.0, False, None, rev=2, updated_ms=2_000)
    again = seed_control(rd, keys, scenario="steady", rate=5, now_ms=3_000)
    assert again == seeded  # nothing missing: nothing written, rev unchanged
    fresh = KeySchema(f"{keys.namespace}-fresh")
    assert seed_control(rd, fresh, scenario="steady", rate=50, now_ms=7) == Control("steady", 50.0, True, None, 1, 7)


def test_cli_set_and_show(rd: redis.Redis, redis_url: str, keys: KeySchema, monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", keys.namespace)
    assert main(["set", "--scenario", "outage-and-backfill", "--rate", "250", "--delay", "20s", "--stop"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["control"] | {"updated_ms": 0} == {"scenario": "outage-and-backfill", "rate": 250.0, "running": False,
                                                   "delay_ms": 20_000, "delay": "20s", "rev": 1, "updated_ms": 0}
    assert doc["generator"] is None
    assert main(["set", "--start"]) == 0
    assert json.loads(capsys.readouterr().out)["control"]["running"] is True
    assert read_control(rd, keys).running is True  # type: ignore[union-attr]
    assert main(["show"]) == 0
    assert json.loads(capsys.readouterr().out)["control"]["rev"] == 2
    with pytest.raises(SystemExit):
        main(["set", "--scenario", "nope"])
    with pytest.raises(SystemExit):
        main(["set", "--delay", "soon"])
    assert "invalid duration 'soon'" in capsys.readouterr().err
    assert main(["set"]) == 2
    assert "nothing to change" in capsys.readouterr().err


# --------------------------------------------------------------------------- the generator following it


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


def test_read_lab_reads_both_hashes(rd: redis.Redis, keys: KeySchema) -> None:
    assert read_lab(rd, keys) == (None, None)
    ctl = write_control(rd, keys, **WHO, delay_ms=5_000, now_ms=1)
    status = GeneratorStatus("stopped", "", 0.0, 1, 0, 1, 2)
    rd.hset(keys.generator_status, mapping=status.to_hash())
    assert read_lab(rd, keys) == (ctl, status)


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


def test_forget_needs_an_operator_and_refuses_a_server_with_players_online(
        r: redis.Redis, redis_url: str, keys: KeySchema, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``wm-control forget`` (issue 65): a part's credential is refused, a server with players online is refused with
    who to log out, a server of which nothing is kept is said; a drained one goes (streaming.store.online.forget)."""
    monkeypatch.setenv("PIPELINE_NAMESPACE", keys.namespace)
    r.hset(keys.online_counts, mapping={"try-A": 0, "live": 2})
    r.hset(keys.online("live"), mapping={"p1": 1, "p2": 1})
    r.hset(keys.seen, mapping={"try-A": 1, "live": 1})
    r.sadd(keys.servers, "try-A", "live")
    windows = [WindowKey(1_000, 2_000, s) for s in ("try-A", "x:try-A", "live")]  # x:try-A: another server
    r.zadd(keys.windows, {w.member(): w.start_ms for w in windows})
    for w in windows:
        r.hset(keys.window(w), "events", 1)
    name, password = f"part-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    r.acl_setuser(name, enabled=True, passwords=[f"+{password}"], keys=[f"{keys.namespace}:*"], commands=["+@all"])
    parts = urlsplit(redis_url)
    try:
        monkeypatch.setenv("REDIS_URL", f"redis://{name}:{password}@{parts.hostname}:{parts.port}/0")
        assert main(["forget", "try-A"]) == 2
        assert f"takes an operator's credential (wm-admin: REDIS_URL=$(wm-redis url admin)), and REDIS_URL is " \
               f"{name}'s" in capsys.readouterr().err
    finally:
        r.acl_deluser(name)
    monkeypatch.setenv("REDIS_URL", redis_url)  # Redis' default user: the demo's, a Redis without users
    assert main(["forget", "live", "try-A"]) == 1
    assert "live has 2 player(s) online: log them out first, then forget it (docs/ingest.md: " \
           "producer.stop_server('live', ['p1', 'p2']))" in capsys.readouterr().err
    assert r.hexists(keys.seen, "try-A") and not r.exists(keys.forget)  # nothing done
    assert main(["forget", "try-A", "never-seen"]) == 0
    out = capsys.readouterr().out
    assert f"nothing of never-seen is kept in {keys.namespace}" in out and f"forgot try-A in {keys.namespace}" in out
    assert not r.hexists(keys.seen, "try-A") and r.smembers(keys.servers) == {b"live"}
    assert [k.decode() for k in r.hkeys(keys.forget)] == ["try-A"]  # for the online view's next batch
    assert set(r.zrange(keys.windows, 0, -1)) == {w.member().encode() for w in windows[1:]}  # its, no other's
    assert [bool(r.exists(keys.window(w))) for w in windows] == [False, True, True]
