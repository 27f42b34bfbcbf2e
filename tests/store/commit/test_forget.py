"""Retired servers forgotten: their per-server fields and delay buckets, and a server that spoke again kept."""

from __future__ import annotations

import uuid

import pytest
import redis

from streaming.schema.keys import KeySchema


def test_retired_servers_per_server_fields_are_forgotten_and_a_server_that_spoke_again_is_kept(
        r: redis.Redis) -> None:
    """``forget_servers``: a fleet's per-server fields (seen, region, the servers set, per-server totals) stay
    bounded by the servers heard within RETIRE_AFTER; the overall totals keep every event; a server whose newest
    arrival moved after it was read is left as it is."""
    from streaming.rules.commit.plan import SERVER_METRICS
    from streaming.store.commit import forget_servers

    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    r.hset(keys.seen, mapping={"old": 1_000, "back": 1_000, "live": 600_000})
    r.hset(keys.regions, mapping={"old": "eu", "back": "eu", "live": "na"})
    r.sadd(keys.servers, "old", "back", "live")
    r.hset(keys.totals, mapping={"events": 30, **{f"{m}|{s}": 10 for m in SERVER_METRICS
                                                  for s in ("old", "back", "live")}})
    real_hgetall = r.hgetall

    def speaks_meanwhile(key: str) -> dict:  # "back" sends an event between the read and the script
        out = real_hgetall(key)
        r.hset(keys.seen, "back", 650_000)
        return out

    r.hgetall = speaks_meanwhile  # type: ignore[method-assign]
    assert forget_servers(r, keys, now_ms=700_000, retire_after_ms=600_000) == 1
    r.hgetall = real_hgetall  # type: ignore[method-assign]
    assert sorted(r.hkeys(keys.seen)) == [b"back", b"live"] and sorted(r.hkeys(keys.regions)) == [b"back", b"live"]
    assert sorted(r.smembers(keys.servers)) == [b"back", b"live"]
    totals = {k.decode() for k in r.hkeys(keys.totals)}
    assert "events" in totals and not [f for f in totals if f.endswith("|old")]
    assert {f"{m}|back" for m in SERVER_METRICS} <= totals
    assert forget_servers(r, keys, now_ms=700_000, retire_after_ms=600_000) == 0


@pytest.mark.parametrize("follows_fleet", [True, False])
def test_a_forgotten_servers_delay_buckets_join_the_retired_ones_and_the_advice_holds(
        r: redis.Redis, follows_fleet: bool) -> None:
    """The delay trade-off's per-server buckets of a forgotten server are added to the retired servers' histogram:
    the hash stays bounded by the live fleet, and the advice over every server is the same as before. A namespace
    following the fleet forgets the server's running max too; one with fixed servers keeps it."""
    from streaming.rules.tradeoff import RETIRED_SERVERS, Tradeoff
    from streaming.store.commit import forget_servers

    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    r.hset(keys.seen, mapping={"m1": 1_000, "m2": 2_000, "live": 650_000})
    r.hset(keys.tradeoff, mapping={"m1|0": 5, "m1|3": 2, "m2|3": 4, "m2|17": 1, "live|0": 7, "*|3": 1})
    r.hset(keys.state, mapping={"max_event_us|m1": 9, "max_event_us|live": 10, "last_batch": 3})
    before = Tradeoff.from_hash(r.hgetall(keys.tradeoff))
    assert forget_servers(r, keys, now_ms=700_000, retire_after_ms=600_000, follows_fleet=follows_fleet) == 2
    after = Tradeoff.from_hash(r.hgetall(keys.tradeoff))
    assert after.servers == sorted(["live", RETIRED_SERVERS])
    assert after.hist[RETIRED_SERVERS] == {0: 5, 3: 7, 17: 1}
    assert after.candidates() == before.candidates() and after.recommend(0.9) == before.recommend(0.9)
    state = {k.decode() for k in r.hkeys(keys.state)}
    assert ("max_event_us|m1" in state) is not follows_fleet and "max_event_us|live" in state


def test_a_server_with_fields_but_no_arrival_is_forgotten_too(r: redis.Redis) -> None:
    """Idle markers the job queued before it forgot a server are committed after: they write the server's fields
    (the servers set, ``ticks|S``) again but no arrival. The next sweep forgets it, or it would count as a live
    server for ever; one that sends a real event meanwhile is kept."""
    from streaming.store.commit import forget_servers

    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    r.hset(keys.seen, mapping={"live": 650_000})
    r.sadd(keys.servers, "ghost", "live")
    r.hset(keys.totals, mapping={"ticks": 3, "ticks|ghost": 3, "ticks|live": 0})
    assert forget_servers(r, keys, now_ms=700_000, retire_after_ms=600_000) == 1
    assert r.smembers(keys.servers) == {b"live"} and r.hkeys(keys.totals) != [] and not r.hexists(keys.totals,
                                                                                                  "ticks|ghost")
    assert r.hget(keys.totals, "ticks") == b"3"
