"""The input's trim against a real Redis: below what every reader committed, whole nodes, each shard, ten
minutes kept, and what waits counted exactly; waiting for a commit."""

from __future__ import annotations

from dataclasses import replace

import pytest
import redis

from streaming.rules.commit.batch import BadRow, BatchSummary
from streaming.schema.keys import KeySchema
from streaming.schema.params import ParamsMismatch
from streaming.schema.records import ServerRecord
from streaming.store.commit import check_params, commit_batch
from tests.schema.params import built_params
from tests.store.commit.batches import PARAMS, T0, summary


@pytest.mark.parametrize(("batch_ts_ms", "keep_from"), [
    # old entries (a replay, a backlog): everything before the batch's start is committed by Spark and goes
    (T0 + 86_400_000, 3_000),
    # recent entries: the last 10 minutes of stream are kept for looking back, even if committed
    (T0 + 601_000, 1_000),
])
def test_trimming_follows_the_committed_offset_never_a_length(r: redis.Redis, keys: KeySchema, batch_ts_ms: int,
                                                             keep_from: int) -> None:
    pipe = r.pipeline()
    for i in range(5_000):  # IDs T0+i ms: enough entries for Redis' approximate trim to free whole nodes
        pipe.xadd(keys.events, {"e": b"{}"}, id=f"{T0 + i}-0")
    pipe.execute()
    s = BatchSummary(0, 0, batch_ts_ms, f"{T0 + 3_000}-0", f"{T0 + 4_000}-0", [], {}, [])
    assert commit_batch(r, keys, s, PARAMS)
    ids = [int(e[0].split(b"-")[0]) - T0 for e in r.xrange(keys.events)]
    assert ids[-1] == 4_999 and ids == list(range(ids[0], 5_000)), "nothing at or after the batch start is touched"
    assert 0 < ids[0] <= keep_from, "entries before the keep point were trimmed (approximately: whole nodes only)"
    assert int(r.get(keys.trimmed)) == ids[0] == 5_000 - r.xlen(keys.events), "the trimmed count is exact"


def test_one_commit_trims_every_whole_node_below_the_keep_point(r: redis.Redis, keys: KeySchema) -> None:
    """An approximate XTRIM frees at most 10,000 entries a call unless told otherwise (``LIMIT 0``): at two commits
    a second the stream outgrew its bound above about 20,000 events/s (issue 27). 60,000 old entries committed:
    one commit leaves less than one stream node (100 entries) of them."""
    pipe = r.pipeline(transaction=False)
    for i in range(60_000):
        pipe.xadd(keys.events, {"e": b"{}"}, id=f"{T0 + i}-0")
        if i % 10_000 == 9_999:
            pipe.execute()
    s = BatchSummary(0, 0, T0 + 86_400_000, f"{T0 + 59_000}-0", f"{T0 + 59_999}-0", [], {}, [])
    assert commit_batch(r, keys, s, PARAMS)
    first = int(r.xrange(keys.events, count=1)[0][0].split(b"-")[0]) - T0
    assert 59_000 - 100 < first <= 59_000
    assert int(r.get(keys.trimmed)) == first == 60_000 - r.xlen(keys.events), "the trimmed count is exact"


def test_with_shards_each_shard_is_trimmed_below_its_own_start_and_the_count_is_the_sum(
        r: redis.Redis, keys: KeySchema) -> None:
    """Three shards read to different points (shard 2 not at all): each trimmed below its own start, the third
    kept whole; each shard counts what went from it (``{ns}:trimmed`` shard 0's), exactly (decisions 0017, 0018)."""

    pipe = r.pipeline(transaction=False)
    for k in range(3):
        for i in range(3_000):
            pipe.xadd(keys.input_shard(k), {"e": b"{}"}, id=f"{T0 + i}-0")
    pipe.execute()
    start = f"{T0 + 2_000}-0,{T0 + 1_000}-0,0-0"
    s = BatchSummary(0, 0, T0 + 86_400_000, start, f"{T0 + 2_999}-0,{T0 + 2_999}-0,{T0 + 2_999}-0", [], {}, [])
    assert commit_batch(r, keys, s, PARAMS)
    firsts = [int(r.xrange(keys.input_shard(k), count=1)[0][0].split(b"-")[0]) - T0 for k in range(3)]
    assert 2_000 - 100 < firsts[0] <= 2_000 and 1_000 - 100 < firsts[1] <= 1_000 and firsts[2] == 0
    left = sum(r.xlen(keys.input_shard(k)) for k in range(3))
    trimmed = [int(r.get(keys.trimmed_of(k)) or 0) for k in range(3)]
    assert trimmed == [firsts[0], firsts[1], 0] and sum(trimmed) == 9_000 - left, "each trimmed count is exact"


@pytest.mark.parametrize(("held_at", "keep_from"), [
    (None, 3_000),  # no reader behind: trimmed up to the batch's start, as above
    (1_200, 1_200),  # the online view (or a lane) committed only up to 1,200: nothing after it goes
    (0, 0),  # a reader that has committed nothing yet holds everything
])
def test_a_reader_held_back_keeps_what_it_still_needs(r: redis.Redis, keys: KeySchema, held_at: int | None,
                                                      keep_from: int) -> None:
    """Every reader of the input (each lab lane, the online view) names its state hash in ``readers``; the trim
    stops below the least ``committed_id`` among them."""
    pipe = r.pipeline()
    for i in range(5_000):
        pipe.xadd(keys.events, {"e": b"{}"}, id=f"{T0 + i}-0")
    pipe.execute()
    reader = f"{keys.namespace}.lane:state"
    if held_at:
        r.hset(reader, "committed_id", f"{T0 + held_at}-0")
    elif held_at is None:
        r.hset(reader, "committed_id", f"{T0 + 4_000}-0")
    s = BatchSummary(0, 0, T0 + 86_400_000, f"{T0 + 3_000}-0", f"{T0 + 4_000}-0", [], {}, [])
    assert commit_batch(r, keys, s, built_params(600_000, 600_000, 300_000, readers=(reader,)))
    ids = [int(e[0].split(b"-")[0]) - T0 for e in r.xrange(keys.events)]
    assert ids == list(range(ids[0], 5_000)) and ids[0] <= keep_from, "trimmed an entry a reader still needs"
    if keep_from:
        assert ids[0] > 0, "nothing was trimmed at all: the test would pass without trimming"
    r.delete(reader)


def test_wait_for_commit_answers_from_the_commits_stream(r: redis.Redis, keys: KeySchema) -> None:
    from streaming.store.report import wait_for_commit

    assert not wait_for_commit(r, keys, "1-0", timeout_s=0.05)  # nothing committed yet
    assert commit_batch(r, keys, summary(0, 0, T0), PARAMS)  # ends at entry 1-0
    assert wait_for_commit(r, keys, "1-0", timeout_s=5)
    assert wait_for_commit(r, keys, "0-5", timeout_s=5)  # anything at or below the committed offset
    assert not wait_for_commit(r, keys, "1-1", timeout_s=0.05)


@pytest.mark.parametrize(("start_id", "end_id", "entries", "kept_ms"), [
    (f"{T0}-0", f"{T0 + 1_000}-0", 50_000, 20_000),  # 50,000 entries/s: a million entries is 20 s
    (f"{T0}-0", f"{T0 + 1_000}-0", 200, 600_000),  # 200 entries/s: the 10 minutes hold far fewer
    ("0-0", f"{T0}-0", 50_000, 600_000),  # a run's first batch spans since 1970: no rate to judge by
    (f"{T0}-0", f"{T0 + 1_000}-0", 0, 600_000),  # nothing read
])
def test_the_trim_keeps_ten_minutes_or_about_a_million_entries(start_id: str, end_id: str, entries: int,
                                                               kept_ms: int) -> None:
    from streaming.rules.commit.plan import keep_ms

    s = BatchSummary(0, 0, T0, start_id, end_id, [], {"A": ServerRecord(rows=entries)}, [])
    assert keep_ms(s, built_params(60_000, 60_000, 0)) == kept_ms


def test_with_shards_what_waits_is_every_shards_and_the_oldest_is_the_oldest_of_any(r: redis.Redis,
                                                                                      keys: KeySchema) -> None:
    """Status and snapshot read every shard the committed position names (no setting of their own): waiting is
    the sum, the oldest waiting entry the oldest of each shard's first uncommitted one, the head the newest."""
    from streaming.store.pipeline_status import read_pipeline
    from streaming.store.views.snapshot import read_snapshot

    for k, ids in enumerate([(1, 5, 9), (2, 3, 4, 8), (6,)]):
        for i in ids:
            r.xadd(keys.input_shard(k), {"e": b"{}"}, id=f"{i}-0")
    # read 1 and 5 of shard 0, 2 of shard 1, nothing of shard 2: waiting 9 of shard 0; 3, 4, 8; 6
    first = BatchSummary(0, 0, T0, "0-0,0-0,0-0", "5-0,2-0,0-0", [],
                         {"A": ServerRecord(rows=3, max_event_us=T0 * 1000)}, [])
    assert commit_batch(r, keys, first, PARAMS)
    for _ in range(2):  # the second read starts from the three shards it learnt
        status = read_pipeline(r, keys)
        assert (status.stream.waiting, status.stream.oldest_waiting_ms) == (5, 3)
        assert (status.stream.length, status.stream.head_ms, status.stream.first_ms) == (8, 9, 1)
    snap = read_snapshot(r, keys, range_ms=3_600_000, now_ms=T0)
    assert snap.stream == status.stream


def test_fewer_shards_than_a_namespace_has_read_are_refused_at_start_more_are_not(r: redis.Redis,
                                                                                   keys: KeySchema) -> None:
    s = BatchSummary(0, 0, T0, "0-0,0-0", "5-0,2-0", [], {}, [])
    assert commit_batch(r, keys, s, replace(PARAMS, shards=2))
    assert check_params(r, keys, replace(PARAMS, shards=3)) == PARAMS.delay_ms
    with pytest.raises(ParamsMismatch, match="covers 2 shards and the input has 1: lowering STREAM_SHARDS"):
        check_params(r, keys, PARAMS)


def test_with_shards_wait_for_commit_waits_for_every_shard(r: redis.Redis, keys: KeySchema) -> None:
    from streaming.store.report import wait_for_commit

    s = BatchSummary(0, 0, T0, "0-0,0-0", "5-0,2-0", [], {}, [])
    assert commit_batch(r, keys, s, PARAMS)
    assert wait_for_commit(r, keys, "5-0,2-0", timeout_s=5) and wait_for_commit(r, keys, "3-0,1-0", timeout_s=5)
    assert not wait_for_commit(r, keys, "3-0,3-0", timeout_s=0.05)  # shard 1 is not there yet


def test_with_shards_late_events_and_dead_letters_go_to_their_shards_streams(r: redis.Redis,
                                                                             keys: KeySchema) -> None:
    """Two shards' entries with the same ID: each kept in its own shard's late or dead stream, none lost to the
    other's (one stream would refuse the second XADD of an ID, or drop it as not newer than the newest kept)."""
    from streaming.rules.late import LateEvent
    from streaming.schema.shards import shard_key

    late = [LateEvent(f"{T0 + 5}-0", server, "p1", None, T0 * 1000, 0, T0 + 60_000, shard)
            for server, shard in (("A", 0), ("B", 1))]
    bad = [BadRow(f"{T0 + 7}-0", "malformed_json", "x", "{", shard) for shard in (0, 1)]
    s = replace(BatchSummary(0, T0 + 60_000, T0, "0-0,0-0", f"{T0 + 9}-0,{T0 + 9}-0", [], {}, bad),
                late_events=late)
    assert commit_batch(r, keys, s, replace(PARAMS, shards=2))
    assert [[f[b"s"] for _, f in r.xrange(shard_key(keys.late, k))] for k in range(2)] == [[b"A"], [b"B"]]
    assert [[i for i, _ in r.xrange(shard_key(keys.dead, k))] for k in range(2)] == [[f"{T0 + 7}-0".encode()]] * 2
    assert r.hget(keys.totals, "kept") == b"2" and r.hget(keys.totals, "quarantined") == b"2"
    # the same batch's late events again (Redis came back without the commit record): none kept twice
    again = replace(s, batch_id=1, start_id=s.end_id, bad=[])
    assert commit_batch(r, keys, again, replace(PARAMS, shards=2))
    assert [r.xlen(shard_key(keys.late, k)) for k in range(2)] == [1, 1]


def test_what_waits_stays_exact_when_someone_else_trims_the_input_on_redis_7(r: redis.Redis, keys: KeySchema) -> None:
    """Redis 7 counts every entry ever appended (``entries-added``): an operator's XTRIM of entries the readers
    committed changes nothing of what waits. Redis 6.2 has no such count: there the job counts its own trims, and
    one by anyone else reads as fewer waiting (docs/operations.md); entries deleted before the job read them are
    no longer waiting either way once none follows the committed one."""
    from streaming.store.pipeline_status import read_pipeline

    for i in range(10):
        r.xadd(keys.events, {"e": b"{}"}, id=f"{i + 1}-0")
    first = BatchSummary(0, 0, T0, "0-0", "6-0", [], {"A": ServerRecord(rows=6, max_event_us=T0 * 1000)}, [])
    assert commit_batch(r, keys, first, PARAMS)
    assert read_pipeline(r, keys).stream.waiting == 4
    r.xtrim(keys.events, minid="5-0", approximate=False)  # not the job's: {ns}:trimmed does not hear of it
    assert r.xlen(keys.events) == 6
    version = r.info("server")["redis_version"]
    redis_7 = tuple(map(int, version.split("."))) >= (7, 0)
    assert read_pipeline(r, keys).stream.waiting == (4 if redis_7 else 0), version
    r.xdel(keys.events, "7-0", "8-0", "9-0", "10-0")  # deleted unread: nothing follows the commit any more
    assert read_pipeline(r, keys).stream.waiting == 0
