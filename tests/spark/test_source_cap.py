"""The source's batch end under a cap on entries per batch, against a real Redis.

The end is the newest entry when the entries waiting after ``start`` fit the cap, and the cap-th one when they
do not. How many wait is taken from the sink's commit record (``XLEN + trimmed - input``) only when that
record describes ``start``; otherwise the stream is walked. Both ways must give the same end.
"""

from __future__ import annotations

import uuid

import pytest
import redis
from pyspark.sql.streaming.datasource import ReadMaxRows

from streaming.schema.keys import KeySchema
from streaming.spark.source import RedisStreamReader

IDS = [f"{i}-0" for i in range(1, 11)]  # entries 1-0 .. 10-0


def reader(keys: KeySchema, url: str, committed_by: bool = True) -> RedisStreamReader:
    opts = {"url": url, "stream": keys.events, "maxEventsPerBatch": "100"}
    if committed_by:
        opts["committedBy"] = keys.namespace
    return RedisStreamReader(opts)


@pytest.fixture()
def keys(r: redis.Redis) -> KeySchema:
    keys = KeySchema(f"cap-{uuid.uuid4().hex[:8]}")
    for i in IDS:
        r.xadd(keys.events, {"e": "{}"}, id=i)
    return keys


def commit_record(r: redis.Redis, keys: KeySchema, committed: str, input_total: int, trim_below: str | None) -> None:
    """What the sink leaves after committing up to ``committed``, having trimmed below ``trim_below``."""
    r.hset(keys.state, "committed_id", committed)
    r.hset(keys.totals, "input", input_total)
    if trim_below:
        r.set(keys.trimmed, r.xtrim(keys.events, minid=trim_below))


@pytest.mark.parametrize(("record", "start", "cap", "end"), [
    (None, "0-0", 100, "10-0"),  # the first batch: everything fits
    (None, "0-0", 3, "3-0"),  # the first batch, capped
    (("4-0", 4, None), "4-0", 100, "10-0"),  # the record describes the start: 6 wait, they fit
    (("4-0", 4, None), "4-0", 6, "10-0"),  # exactly the cap
    (("4-0", 4, None), "4-0", 5, "9-0"),  # one over: the 5th after the start
    (("4-0", 4, "3-0"), "4-0", 100, "10-0"),  # two trimmed and counted: still 6 waiting
    (("4-0", 4, "3-0"), "4-0", 2, "6-0"),
    (("5-0", 5, None), "4-0", 2, "6-0"),  # a record of another start (a replay): walked, same answer
    (("10-0", 10, None), "10-0", 100, None),  # nothing waits: the start again
])
def test_the_batch_end_with_a_cap(r: redis.Redis, redis_url: str, keys: KeySchema, record: tuple | None,
                                  start: str, cap: int, end: str | None) -> None:
    if record is not None:
        commit_record(r, keys, *record)
    got = reader(keys, redis_url).latestOffset({"id": start}, ReadMaxRows(cap))
    walked = reader(keys, redis_url, committed_by=False).latestOffset({"id": start}, ReadMaxRows(cap))
    assert got == walked == {"id": end or start}


def test_committed_by_must_name_the_stream_it_trims(redis_url: str) -> None:
    with pytest.raises(ValueError, match="option committedBy 'other' trims 'other:events', not 'wm:events'"):
        RedisStreamReader({"url": redis_url, "stream": "wm:events", "committedBy": "other"})


def test_the_record_spares_the_walk_when_it_describes_the_start(r: redis.Redis, redis_url: str,
                                                               keys: KeySchema) -> None:
    """Proof that the count comes from the record, not a walk: a record claiming 8 entries committed up to
    4-0 says 2 wait, so a cap of 3 is not walked (the walk would stop at 7-0)."""
    commit_record(r, keys, "4-0", 8, None)
    assert reader(keys, redis_url).latestOffset({"id": "4-0"}, ReadMaxRows(3)) == {"id": "10-0"}
    assert reader(keys, redis_url, committed_by=False).latestOffset({"id": "4-0"}, ReadMaxRows(3)) == {"id": "7-0"}
