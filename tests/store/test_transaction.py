"""streaming.store.redis_conn.Transaction: a commit's transaction on a connection of its own, through redis-py's
public API, gives what redis-py's pipeline gives (the same writes, a watched key that changed refuses it whole, a
refused command raises naming it), on a real redis-server, over RESP2 and RESP3; its connection goes back to the
pool unwatched, and one lost while watching is never read on without the WATCH."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest
import redis

from streaming.store import redis_conn
from streaming.store.batch.arrow_pack import queue_packed
from streaming.store.redis_conn import Transaction, with_retry


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def client(request: pytest.FixtureRequest, redis_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url, protocol=request.param)
    yield c
    c.close()


def _k() -> str:
    return f"resp-{uuid.uuid4().hex[:8]}"


def test_a_transaction_of_many_writes_applies_them_all(client: redis.Redis) -> None:
    guard, h, s = _k(), _k(), _k()
    with Transaction(client) as pipe:
        pipe.watch(guard)
        assert pipe.get(guard) is None
        pipe.multi()
        for i in range(500):
            pipe.hincrby(h, f"f{i % 7}", i)
        pipe.sadd(s, *[f"p{i}" for i in range(1000)])
        pipe.expire(h, 60)
        pipe.set(guard, 1)
        replies = pipe.execute()
    assert len(replies) == 503
    assert replies[-3] == 1000 and replies[-2] in (1, True)
    assert {k.decode(): int(v) for k, v in client.hgetall(h).items()} == {
        f"f{j}": sum(i for i in range(500) if i % 7 == j) for j in range(7)}
    assert client.scard(s) == 1000 and client.get(guard) == b"1" and 0 < client.ttl(h) <= 60


def test_a_watched_key_that_changed_refuses_the_whole_transaction(client: redis.Redis) -> None:
    guard, h = _k(), _k()
    with Transaction(client) as pipe:
        pipe.watch(guard)
        pipe.get(guard)
        client.set(guard, "someone else")
        pipe.multi()
        pipe.hset(h, "a", 1)
        pipe.set(guard, "mine")
        with pytest.raises(redis.WatchError):
            pipe.execute()
    assert client.get(guard) == b"someone else" and not client.exists(h)
    assert client.ping()  # the connection is still good for the next command


def test_a_guarded_commit_whose_record_changed_is_decided_again_and_lands_once(client: redis.Redis) -> None:
    """The job forgets a retired server's running max in a lane's record while the lane commits (``forget_servers``):
    the commit's transaction is refused (``WatchError``), and ``with_retry`` reads and decides again."""

    state, total = _k(), _k()
    client.hset(state, mapping={"last_batch": 4, "max_event_us|gone": 9, "max_event_us|live": 7})
    calls = []

    def commit() -> int:
        calls.append(1)
        with Transaction(client) as pipe:
            pipe.watch(state)
            fields = pipe.hgetall(state)
            if len(calls) == 1:  # the sweep runs between the read and the transaction
                client.hdel(state, "max_event_us|gone")
            pipe.multi()
            pipe.hset(state, "last_batch", 5)
            pipe.incrby(total, sum(int(v) for k, v in fields.items() if k.startswith(b"max_event_us|")))
            pipe.execute()
        return len(calls)

    assert with_retry(commit, "a commit", sleep=lambda _: None) == 2
    assert client.get(total) == b"7" and client.hget(state, "last_batch") == b"5"


def test_a_command_refused_when_run_raises_naming_it(client: redis.Redis) -> None:
    guard, text = _k(), _k()
    client.set(text, "x")
    with Transaction(client) as pipe:
        pipe.watch(guard)
        pipe.multi()
        pipe.set(guard, 1)
        pipe.hincrby(text, "f", 1)  # WRONGTYPE: refused when run; a transaction does not roll back the rest
        with pytest.raises(redis.ResponseError, match=r"Command # 2 \(HINCRBY.*WRONGTYPE"):
            pipe.execute()
    assert client.get(guard) == b"1"


def test_a_command_refused_when_queued_applies_nothing(client: redis.Redis) -> None:
    guard = _k()
    with Transaction(client) as pipe:
        pipe.watch(guard)
        pipe.multi()
        pipe.set(guard, 1)
        pipe.execute_command("HSET", guard + "h", "odd")  # wrong number of arguments: EXECABORT
        with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
            pipe.execute()
    assert not client.exists(guard)
    assert client.ping()


FEW = ["p1", "joueur-é", "玩家", "", "with space", "x" * 300]
FIELDS = [f"{f}{i}" for i in range(100) for f in FEW]  # past PACK_BULK: packed with Arrow
VALUES = [v + i for i in range(100) for v in (0, 1, -7, 2**62, 1_700_000_000_123_456, 42)]


@pytest.mark.parametrize(("command", "columns"), [
    ("HSET", (np.array(FIELDS, object), np.array(VALUES, np.int64))),
    ("HSET", (FIELDS, VALUES)),
    ("SADD", (pa.array(["pad", *FIELDS]).slice(1),)),  # a slice of a window's list: its offset is not 0
    ("SADD", (pa.array(range(1_000)),)),
])
def test_a_command_queued_packed_is_the_one_the_connection_packs(client: redis.Redis, command: str,
                                                                 columns: tuple) -> None:
    with Transaction(client) as pipe:
        pipe.multi()
        queue_packed(pipe, command, "wm:online:é", *columns)
        (packed,) = pipe.queued or []
        lists = [c.to_pylist() if isinstance(c, pa.Array) else list(c) for c in columns]
        flat = [x.item() if isinstance(x, np.generic) else x for row in zip(*lists, strict=True) for x in row]
        assert packed == b"".join(pipe.conn.pack_command(command, "wm:online:é", *flat))
        assert pipe.names == [command]


def test_a_short_column_is_queued_as_a_plain_command(client: redis.Redis) -> None:
    with Transaction(client) as pipe:
        pipe.multi()
        queue_packed(pipe, "SADD", "k", np.array(FEW, object))
        assert pipe.queued == [b"".join(pipe.conn.pack_command("SADD", "k", *FEW))]


def test_the_connection_goes_back_to_the_pool_unwatched(client: redis.Redis) -> None:
    """A guarded commit that finds its batch in Redis leaves without a transaction: the pool's next user of that
    connection must not inherit the WATCH (its own transaction would then be refused for a stranger's key)."""
    guard, other = _k(), _k()
    with Transaction(client) as pipe:
        pipe.watch(guard)
        assert pipe.get(guard) is None
        conn = pipe.conn
    client.set(guard, "changed")  # after the watch: a transaction still watching it would be refused
    with Transaction(client) as again:
        assert again.conn is conn  # the same connection, from the pool
        again.multi()
        again.set(other, 1)
        assert again.execute() in ([True], [b"OK"])
    assert client.get(other) == b"1"


def test_a_connection_lost_while_watching_ends_the_transaction(client: redis.Redis) -> None:
    """redis-py's client would reconnect and read on, without the WATCH, and the transaction would then run
    unguarded; this one raises, and the caller starts again on a new connection."""
    guard = _k()
    with Transaction(client) as pipe:
        pipe.watch(guard)
        client.client_kill_filter(_id=pipe.execute_command("CLIENT", "ID"))
        with pytest.raises(redis.ConnectionError):
            pipe.get(guard)
    with Transaction(client) as again:  # the pool's next connection works
        again.watch(guard)
        again.multi()
        again.set(guard, 1)
        again.execute()
    assert client.get(guard) == b"1"


@pytest.mark.parametrize("n", [len(FEW), len(FIELDS)])
def test_a_hash_queued_packed_lands_in_the_transaction(client: redis.Redis, n: int) -> None:
    guard, h = _k(), _k()
    with Transaction(client) as pipe:
        pipe.watch(guard)
        pipe.multi()
        pipe.set(guard, 1)
        queue_packed(pipe, "HSET", h, np.array(FIELDS[:n], object), np.array(VALUES[:n], np.int64))
        pipe.expire(h, 60)
        replies = pipe.execute()
    assert replies[1] == n
    assert {k.decode(): int(v) for k, v in client.hgetall(h).items()} == dict(zip(FIELDS[:n], VALUES[:n], strict=True))
    assert client.get(guard) == b"1" and 0 < client.ttl(h) <= 60


def test_bulk_increments_land_in_the_transaction_with_their_expiry(client: redis.Redis,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Many keys' counters as script calls (split at the argument bound: 3 here), the same as a HINCRBY each: zeros
    skipped, every key then given the TTL, a key only expired keeps its fields, and None leaves the keys
    without one."""
    monkeypatch.setattr(redis_conn, "_BULK_ARGS", 3)
    guard, a, b, c, kept = _k(), _k(), _k(), _k(), _k()
    client.hset(c, "x", 1)
    client.hset(kept, "x", 1)
    with Transaction(client) as pipe:
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
        pipe.execute()
    assert client.hgetall(a) == {b"events": b"8", b"dropped": b"2"}
    assert client.hgetall(b) == {b"events": b"1"}
    assert client.hgetall(c) == {b"x": b"1"}
    assert all(0 < client.ttl(k) <= 600 for k in (a, b, c))
    assert client.hgetall(kept) == {b"x": b"5"} and client.ttl(kept) == -1
