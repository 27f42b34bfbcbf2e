"""watermark.store.redis_conn.execute: a commit's transaction sent and read raw gives what redis-py's execute gives
(the same writes, a watched key that changed refuses it whole, a refused command raises), on a real redis-server,
over RESP2 and RESP3 and without hiredis."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from watermark.store import redis_conn


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def client(request: pytest.FixtureRequest, redis_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url, protocol=request.param)
    yield c
    c.close()


@pytest.fixture(params=["raw", "redis-py"])
def execute(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Callable:
    if request.param == "redis-py":  # the fallback: without hiredis, redis-py's own execute
        monkeypatch.setattr("watermark.store.redis_conn.hiredis", None)
    return redis_conn.execute


def _k() -> str:
    return f"resp-{uuid.uuid4().hex[:8]}"


def test_a_transaction_of_many_writes_applies_them_all(client: redis.Redis, execute: Callable) -> None:
    guard, h, s = _k(), _k(), _k()
    with client.pipeline() as pipe:
        pipe.watch(guard)
        assert pipe.get(guard) is None
        pipe.multi()
        for i in range(500):
            pipe.hincrby(h, f"f{i % 7}", i)
        pipe.sadd(s, *[f"p{i}" for i in range(1000)])
        pipe.expire(h, 60)
        pipe.set(guard, 1)
        replies = execute(pipe)
    assert len(replies) == 503
    assert replies[-3] == 1000 and replies[-2] in (1, True)
    assert {k.decode(): int(v) for k, v in client.hgetall(h).items()} == {
        f"f{j}": sum(i for i in range(500) if i % 7 == j) for j in range(7)}
    assert client.scard(s) == 1000 and client.get(guard) == b"1" and 0 < client.ttl(h) <= 60


def test_a_watched_key_that_changed_refuses_the_whole_transaction(client: redis.Redis, execute: Callable) -> None:
    guard, h = _k(), _k()
    with client.pipeline() as pipe:
        pipe.watch(guard)
        pipe.get(guard)
        client.set(guard, "someone else")
        pipe.multi()
        pipe.hset(h, "a", 1)
        pipe.set(guard, "mine")
        with pytest.raises(redis.WatchError):
            execute(pipe)
    assert client.get(guard) == b"someone else" and not client.exists(h)
    assert client.ping()  # the connection is still good for the next command


def test_a_command_refused_when_run_raises_naming_it(client: redis.Redis, execute: Callable) -> None:
    guard, text = _k(), _k()
    client.set(text, "x")
    with client.pipeline() as pipe:
        pipe.watch(guard)
        pipe.multi()
        pipe.set(guard, 1)
        pipe.hincrby(text, "f", 1)  # WRONGTYPE: refused when run; a transaction does not roll back the rest
        with pytest.raises(redis.ResponseError, match=r"Command # 2 \(HINCRBY.*WRONGTYPE"):
            execute(pipe)
    assert client.get(guard) == b"1"


def test_a_command_refused_when_queued_applies_nothing(client: redis.Redis, execute: Callable) -> None:
    guard = _k()
    with client.pipeline() as pipe:
        pipe.watch(guard)
        pipe.multi()
        pipe.set(guard, 1)
        pipe.execute_command("HSET", guard + "h", "odd")  # wrong number of arguments: EXECABORT
        with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
            execute(pipe)
    assert not client.exists(guard)
    assert client.ping()


def test_bulk_increments_land_in_the_transaction_with_their_expiry(client: redis.Redis, execute: Callable,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Many keys' counters as script calls (split at the argument bound: 3 here), the same as a HINCRBY each: zeros
    skipped, every key then given the TTL, a key only expired keeps its fields, and None leaves the keys
    without one."""
    monkeypatch.setattr(redis_conn, "_BULK_ARGS", 3)
    guard, a, b, c, kept = _k(), _k(), _k(), _k(), _k()
    client.hset(c, "x", 1)
    client.hset(kept, "x", 1)
    with client.pipeline() as pipe:
        pipe.watch(guard)
        pipe.multi()
        bulk = redis_conn.Bulk()
        bulk.hincrby(a, {"events": 5, "late": 0, "dropped": 2})
        bulk.hincrby(b, {"events": 1})
        bulk.hincrby(a, {"events": 3})
        bulk.expire(c)
        bulk.queue(pipe, 600)
        forever = redis_conn.Bulk()
        forever.hincrby(kept, {"x": 4})
        forever.queue(pipe, None)
        execute(pipe)
    assert client.hgetall(a) == {b"events": b"8", b"dropped": b"2"}
    assert client.hgetall(b) == {b"events": b"1"}
    assert client.hgetall(c) == {b"x": b"1"}
    assert all(0 < client.ttl(k) <= 600 for k in (a, b, c))
    assert client.hgetall(kept) == {b"x": b"5"} and client.ttl(kept) == -1
