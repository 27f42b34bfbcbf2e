"""The source over N shards against a real Redis: the same entries as one stream, each once, under a cap shared by
backlog, and the sink's re-read of a batch between two positions (``streaming.schema.shards``,
``streaming.spark.source``)."""

from __future__ import annotations

import random
import uuid
from collections import Counter

import pyarrow as pa
import pytest
import redis
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from streaming.schema.keys import KeySchema
from streaming.schema.shards import Position, shard_key
from streaming.spark import local_agg
from streaming.spark.local_agg import aggregate_arrow
from streaming.spark.recovery import reread
from streaming.spark.source import COUNT_AFTER_LUA, RedisStreamBatchReader, RedisStreamReader
from streaming.store.batch.arrow_pack import ARROW_SCHEMA
from watermark_client.events import Event, parse_entry_id
from watermark_client.stream import shard_of

SHARDS = 4
T0 = 1_767_225_600_000
SERVERS = [f"srv-{i}" for i in range(11)]


def write(r: redis.Redis, keys: KeySchema, n: int, shards: int, seed: int = 7, t0: int = 1_700_000_000_000,
          ) -> list[tuple[str, str, int]]:
    """``n`` events, each to its server's shard, with arrival times that interleave across the shards; a few
    malformed entries too. Returns (server, player, event time) of the events."""
    rng = random.Random(seed)
    pipe = r.pipeline(transaction=False)
    events = []
    last = [0] * shards
    for i in range(n):
        server = rng.choice(SERVERS)
        k = shard_of(server, shards)
        arrival = max(last[k] + 1, t0 + i)
        last[k] = arrival
        ev_us = (arrival - rng.randint(0, 3_000)) * 1000
        if rng.random() < 0.03:
            pipe.xadd(shard_key(keys.events, k), {"payload": b"{bad"}, id=f"{arrival}-0")
            continue
        player = f"p{rng.randint(0, 40)}"
        pipe.xadd(shard_key(keys.events, k), Event(server, player, ev_us, "heartbeat").fields(), id=f"{arrival}-0")
        events.append((server, player, ev_us))
    pipe.execute()
    return events


def opts(keys: KeySchema, url: str, shards: int, **more: str) -> dict[str, str]:
    return {"url": url, "stream": keys.events, "shards": str(shards), **more}


def read_all(reader: RedisStreamReader, start: dict, end: dict) -> pa.Table:
    parts = reader.partitions(start, end)
    return pa.Table.from_batches([b for p in parts for b in reader.read(p)], schema=ARROW_SCHEMA)


def rows(t: pa.Table) -> Counter:
    return Counter(zip(t.column("server").to_pylist(), t.column("player_id").to_pylist(),
                       t.column("error").to_pylist(), strict=True))


@pytest.fixture()
def keys() -> KeySchema:
    return KeySchema(f"shard-{uuid.uuid4().hex[:8]}")


def test_four_shards_read_the_same_entries_as_one_stream(r: redis.Redis, redis_url: str, keys: KeySchema) -> None:
    one, four = KeySchema(keys.namespace + "-one"), keys
    assert write(r, one, 3_000, 1) == write(r, four, 3_000, SHARDS)  # the same events, laid out two ways
    assert all(r.xlen(shard_key(four.events, k)) for k in range(SHARDS))  # every shard has some
    got = {}
    for ks, shards in ((one, 1), (four, SHARDS)):
        reader = RedisStreamReader(opts(ks, redis_url, shards, partitions="2"))
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        parts = reader.partitions(start, end)
        assert {p.shard for p in parts} == set(range(shards))  # at least one partition a shard
        got[shards] = read_all(reader, start, end)
    assert got[1].num_rows == got[SHARDS].num_rows == 3_000
    assert rows(got[1]) == rows(got[SHARDS])


def test_a_capped_run_reads_every_entry_once_and_shares_the_cap_by_backlog(r: redis.Redis, redis_url: str,
                                                                             keys: KeySchema) -> None:
    write(r, keys, 2_000, SHARDS)
    sizes = [r.xlen(shard_key(keys.events, k)) for k in range(SHARDS)]
    reader = RedisStreamReader(opts(keys, redis_url, SHARDS, maxEventsPerBatch="300"))
    start, seen, batches = reader.initialOffset(), Counter(), []
    while (end := reader.latestOffset(start, ReadMaxRows(300))) != start:
        t = read_all(reader, start, end)
        batches.append(t.num_rows)
        seen.update(zip(t.column("server").to_pylist(), t.column("entry_id").to_pylist(), strict=False))
        a, b = Position.parse(start["id"], SHARDS), Position.parse(end["id"], SHARDS)
        assert all(parse_entry_id(y) >= parse_entry_id(x) for x, y in zip(a.ids, b.ids, strict=True))  # none goes back
        start = end
    assert sum(batches) == sum(sizes) == 2_000
    assert batches[:-1] == [300] * (len(batches) - 1) and 0 < batches[-1] <= 300  # the cap, whole, till the end
    assert max(seen.values()) == 1  # (server, entry ID) once: a server lives in one shard
    newest = [r.xrevrange(shard_key(keys.events, k), count=1)[0][0].decode() for k in range(SHARDS)]
    assert Position.parse(start["id"], SHARDS) == Position(tuple(newest))


def test_a_shard_left_alone_with_a_backlog_is_still_capped(r: redis.Redis, redis_url: str, keys: KeySchema) -> None:
    """Once the other shards are read to their end, one shard's backlog alone is capped too: its count goes one
    past the cap, so a backlog of more than the cap never reads as one that fits (found by the SIGKILL test at four
    shards: the last batch read 421 entries under a cap of 60)."""
    for k, n in ((0, 30), (1, 500)):
        pipe = r.pipeline()
        for i in range(n):
            pipe.xadd(shard_key(keys.events, k), {"e": b"{}"}, id=f"{T0 + i}-0")
        pipe.execute()
    reader = RedisStreamReader(opts(keys, redis_url, 2, maxEventsPerBatch="60"))
    start, batches = reader.initialOffset(), []
    while (end := reader.latestOffset(start, ReadMaxRows(60))) != start:
        batches.append(read_all(reader, start, end).num_rows)
        start = end
    assert batches == [60] * 8 + [50]


def test_a_following_reader_counts_backlogs_without_walking_and_ends_where_a_walk_would(
        r: redis.Redis, redis_url: str, keys: KeySchema) -> None:
    """Redis 7 counts what a stream ever had appended: a reader that ended its last batch at a shard's head knows
    the shard's backlog from that count, with no walk, and its ends are those of a reader that walks."""
    r.xadd(keys.events, {"e": b"{}"}, id=f"{T0}-0")
    if r.xinfo_stream(keys.events).get("entries-added") is None:
        pytest.skip("Redis 6.2 does not count appended entries: the reader walks there")
    rng = random.Random(7)
    follower = RedisStreamReader(opts(keys, redis_url, 2, maxEventsPerBatch="100"))
    walks: list[int] = []
    real_eval = follower.redis.eval

    def spy(script: str, *args: object) -> object:
        walks.append(script == COUNT_AFTER_LUA)
        return real_eval(script, *args)

    follower.redis.eval = spy  # type: ignore[method-assign]
    start, t = follower.initialOffset(), T0
    for step in range(12):
        for _ in range(rng.choice([0, 20, 60, 150])):  # now under the cap, now over it
            t += 1
            r.xadd(shard_key(keys.events, rng.randrange(2)), {"e": b"{}"}, id=f"{t}-0")
        fresh = RedisStreamReader(opts(keys, redis_url, 2, maxEventsPerBatch="100"))
        expected = fresh.latestOffset(start, ReadMaxRows(100))  # no memory: walks every shard that moved
        end = follower.latestOffset(start, ReadMaxRows(100))
        assert end == expected, step
        start = end
    # a walk only for a shard not read to its head last time (its first batch, a capped one)
    assert 0 < sum(walks) < 12 and len(walks) > sum(walks)


def test_the_sink_rereads_a_batch_between_two_positions(r: redis.Redis, redis_url: str, keys: KeySchema) -> None:
    write(r, keys, 1_500, SHARDS)
    o = opts(keys, redis_url, SHARDS, preAggregate="true", windowMs="1000", slideMs="1000")
    reader = RedisStreamReader(o)
    s0 = reader.initialOffset()
    s1 = reader.latestOffset(s0, ReadMaxRows(500))
    s2 = reader.latestOffset(s1, ReadAllAvailable())
    for a, b in ((s0, s1), (s1, s2)):
        streamed = aggregate_arrow(read_all(reader, a, b).select([*local_agg.COLUMNS, "blob"]))
        again = reread(o, a["id"], b["id"])
        assert again.num_rows and sorted(again.to_pylist(), key=repr) == sorted(streamed.to_pylist(), key=repr)

@pytest.mark.parametrize("start", ["0-0", "-"])
def test_a_batch_read_covers_every_shard(r: redis.Redis, redis_url: str, keys: KeySchema, start: str) -> None:
    events = write(r, keys, 800, SHARDS)
    reader = RedisStreamBatchReader(opts(keys, redis_url, SHARDS, partitions="8", startId=start))
    t = pa.Table.from_batches([b for p in reader.partitions() for b in reader.read(p)], schema=ARROW_SCHEMA)
    accepted = t.filter(t.column("error").is_null())
    assert Counter(zip(accepted.column("server").to_pylist(), accepted.column("player_id").to_pylist(),
                       strict=True)) == Counter((s, p) for s, p, _ in events)


def test_lowering_the_shards_under_a_position_is_refused(redis_url: str, keys: KeySchema) -> None:
    reader = RedisStreamReader(opts(keys, redis_url, 2))
    with pytest.raises(ValueError, match="covers 3 shards and the input has 2"):
        reader.latestOffset({"id": "1-0,2-0,3-0"}, ReadAllAvailable())


def test_one_shard_keeps_the_offsets_of_before(redis_url: str, keys: KeySchema) -> None:
    assert RedisStreamReader(opts(keys, redis_url, 1)).initialOffset() == {"id": "0-0"}
    assert RedisStreamReader(opts(keys, redis_url, 3)).initialOffset() == {"id": "0-0,0-0,0-0"}
    assert parse_entry_id("0-0") == (0, 0)
