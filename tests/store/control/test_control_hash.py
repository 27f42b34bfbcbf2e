"""The lab's control plane: the control hash and its CLI (``wm-control``: set, show, forget) on real Redis."""

from __future__ import annotations

import json
import math
import uuid
from urllib.parse import urlsplit

import pytest
import redis

from streaming.apps.control import cli_user, main
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

WHO = {"by": "test", "role": "operator"}  # who the control changes' audit records


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


def test_read_lab_reads_both_hashes(rd: redis.Redis, keys: KeySchema) -> None:
    assert read_lab(rd, keys) == (None, None)
    ctl = write_control(rd, keys, **WHO, delay_ms=5_000, now_ms=1)
    status = GeneratorStatus("stopped", "", 0.0, 1, 0, 1, 2)
    rd.hset(keys.generator_status, mapping=status.to_hash())
    assert read_lab(rd, keys) == (ctl, status)


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
