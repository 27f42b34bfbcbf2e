"""The sharded source under a real Spark streaming query: compound offsets (one entry ID a shard) go through
Spark's offset log and back, a capped run shares its cap among the shards, and a restart from the checkpoint reads
every entry of every shard once (``streaming.schema.shards``)."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path

import pytest
import redis
from pyspark.sql import DataFrame, SparkSession

from streaming.schema.keys import KeySchema
from streaming.schema.shards import Position, shard_key
from tests.spark.test_source_shards import SHARDS, write
from watermark_client.stream import shard_of

pytestmark = pytest.mark.spark


def run_once(spark: SparkSession, redis_url: str, keys: KeySchema, checkpoint: Path, seen: list) -> None:
    """Every entry there is now, in batches of at most 500, into ``seen``."""
    def collect(df: DataFrame, batch_id: int) -> None:
        seen.extend((batch_id, r.server, r.entry_id, r.error) for r in df.select("server", "entry_id", "error")
                    .collect())

    df = (spark.readStream.format("redis_stream").option("url", redis_url).option("stream", keys.events)
          .option("shards", str(SHARDS)).option("maxEventsPerBatch", "500").option("partitions", "2").load())
    q = df.writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint)).start()
    q.processAllAvailable()  # batches of the cap until nothing is left (availableNow would ignore the cap)
    q.stop()
    assert q.exception() is None


def test_a_sharded_stream_through_spark_and_a_restart_reads_every_entry_once(
        spark: SparkSession, redis_url: str, tmp_path: Path) -> None:
    keys = KeySchema(f"sharded-{uuid.uuid4().hex[:8]}")
    r = redis.Redis.from_url(redis_url)
    write(r, keys, 1_300, SHARDS, seed=1)
    first: list = []
    run_once(spark, redis_url, keys, tmp_path / "ckpt", first)
    write(r, keys, 700, SHARDS, seed=2, t0=1_800_000_000_000)  # more, later, then the query again
    second: list = []
    run_once(spark, redis_url, keys, tmp_path / "ckpt", second)

    every = {(k, e[0].decode()) for k in range(SHARDS) for e in r.xrange(shard_key(keys.events, k))}
    assert len(every) == 2_000
    # An entry's shard: its server's, or for the few malformed (no server) the one stream that holds its ID
    # (``write`` gives every entry an ID of its own across the shards).
    by_id: dict[str, list[int]] = {}
    for k, eid in every:
        by_id.setdefault(eid, []).append(k)
    assert all(len(v) == 1 for v in by_id.values())
    got = Counter((shard_of(srv, SHARDS) if srv else by_id[eid][0], eid) for _, srv, eid, _ in first + second)
    assert set(got) == every and max(got.values()) == 1  # every entry of every shard, once
    sizes = Counter(b for b, *_ in first)
    assert [sizes[b] for b in sorted(sizes)] == [500, 500, 300]  # the cap, whole, shared among the shards
    assert min(b for b, *_ in second) > max(sizes)  # the restart went on from the checkpoint
    offsets = sorted((tmp_path / "ckpt" / "offsets").iterdir(), key=lambda p: int(p.name))
    last = json.loads(offsets[-1].read_text().splitlines()[-1])["id"]
    newest = [r.xrevrange(shard_key(keys.events, k), count=1)[0][0].decode() for k in range(SHARDS)]
    assert Position.parse(last, SHARDS) == Position(tuple(newest))  # Spark's log holds one ID a shard
