"""A running job whose Redis goes back to an older copy of itself, as a failover to a replica that had not received
the last commit does: what it held after batch 1, with batch 2's input, while Spark has committed batch 2."""

from __future__ import annotations

import uuid
from pathlib import Path

import redis
from pyspark.sql import SparkSession

from streaming.schema.keys import KeySchema
from streaming.spark.query import pipeline_sink, start_query
from tests.pipeline.test_exactly_once import seeded_entries
from tests.pipeline.test_faults import chunks
from tests.pipeline.test_followers import clean_run, everything, follower_cfg, renamed
from watermark_client.events import PAYLOAD_FIELD

Saved = dict[bytes, tuple[bytes, int]]
"""Each key's ``DUMP`` and its ``PTTL``."""


def keys_of(client: redis.Redis, namespace: str) -> list[bytes]:
    """Every key of the namespace and of its lanes (``{ns}.{lane}``)."""
    return sorted(client.scan_iter(match=f"{namespace}*", count=1_000))


def add_and_save(client: redis.Redis, namespace: str, stream: str, entries: list[tuple[str, bytes]]) -> Saved:
    """``entries`` added to the input and every key saved, in one transaction: what a replica holds that received
    everything up to this moment and nothing after."""
    names = sorted({*keys_of(client, namespace), stream.encode()})
    pipe = client.pipeline(transaction=True)
    for entry_id, payload in entries:
        pipe.xadd(stream, {PAYLOAD_FIELD: payload}, id=entry_id)
    for name in names:
        pipe.dump(name)
        pipe.pttl(name)
    replies = pipe.execute()[len(entries):]
    return {name: (replies[2 * i], replies[2 * i + 1]) for i, name in enumerate(names) if replies[2 * i] is not None}


def go_back(client: redis.Redis, namespace: str, saved: Saved) -> None:
    """Redis as ``saved``, in one transaction (the running job sees it before or after, never between)."""
    pipe = client.pipeline(transaction=True)
    for name in keys_of(client, namespace):
        if name not in saved:
            pipe.delete(name)
    for name, (value, ttl) in saved.items():
        pipe.restore(name, max(ttl, 0), value, replace=True)
    pipe.execute()


def restored_run(spark: SparkSession, redis_url: str, tmp_path: Path) -> tuple[object, object, KeySchema,
                                                                              redis.Redis]:
    """The same entries through a clean run and through a run whose Redis lost batch 2's commits: what each left."""
    client = redis.Redis.from_url(redis_url)
    run = uuid.uuid4().hex[:6]
    parts = chunks(seeded_entries(seed=23, count=600), 4)
    expected = clean_run(spark, client, follower_cfg(redis_url, tmp_path, f"clean-{run}", "global"), parts)

    cfg = follower_cfg(redis_url, tmp_path, f"lost-{run}", "global")
    keys = KeySchema(cfg.namespace)
    sink = pipeline_sink(cfg, background=True)
    assert sink.followers is not None
    query = start_query(spark, cfg, sink=sink, trigger_ms=0)
    try:
        for part in parts[:2]:
            add_and_save(client, cfg.namespace, keys.events, part)
            query.processAllAvailable()
        sink.followers.wait()  # batch 1 whole, its followers too
        saved = add_and_save(client, cfg.namespace, keys.events, parts[2])
        query.processAllAvailable()
        sink.followers.wait()
        assert int(client.hget(keys.state, "last_batch")) == 2
        go_back(client, cfg.namespace, saved)  # the failover: batch 2's commits are gone, its input is there
        assert int(client.hget(keys.state, "last_batch")) == 1
        add_and_save(client, cfg.namespace, keys.events, parts[3])
        query.processAllAvailable()
    finally:
        query.stop()
        sink.close()
    return renamed(expected, f"clean-{run}", f"lost-{run}"), everything(client, cfg), keys, client
