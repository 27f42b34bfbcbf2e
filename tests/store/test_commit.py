"""The exactly-once commit against a real Redis (no Spark): the guard, the running max, params."""

from __future__ import annotations

import statistics
import uuid
from dataclasses import replace

import numpy as np
import pytest
import redis

from streaming.rules.commit.batch import BadRow, BatchSummary, WindowAgg
from streaming.schema.keys import KeySchema
from streaming.schema.params import Params, ParamsMismatch
from streaming.schema.records import LagRecord, ServerRecord
from streaming.store.commit import check_params, commit_batch
from streaming.store.report import build_document
from tests.schema.params import built_params

PARAMS = built_params(600_000, 600_000, 300_000)
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z in ms


def summary(batch_id: int, watermark_ms: int, max_event_ms: int, events: int = 2, dropped: int = 0) -> BatchSummary:
    players = (2 if batch_id == 0 else 1) if events else 0  # p1 and p2, then a new player a batch
    w = WindowAgg(T0, T0 + 600_000, "A", events=events, dropped=dropped, players=players)
    st = ServerRecord(rows=events + dropped, events=events, dropped=dropped, min_event_us=T0 * 1000,
                      max_event_us=max_event_ms * 1000)
    return BatchSummary(batch_id, watermark_ms, T0, f"{batch_id}-0", f"{batch_id + 1}-0", [w], {"A": st},
                        [BadRow(f"{batch_id + 1}-0", "malformed_json", "x", "{")])


@pytest.fixture()
def keys() -> KeySchema:
    return KeySchema(f"t-{uuid.uuid4().hex[:8]}")


def dump(r: redis.Redis, keys: KeySchema) -> dict:
    out = {}
    for key in sorted(r.keys(keys.namespace + ":*")):
        kind = r.type(key)
        if kind == b"hash":
            out[key] = {f: v for f, v in r.hgetall(key).items() if f != b"updated_ms"}
        elif kind == b"set":
            out[key] = r.smembers(key)
        elif kind == b"zset":
            out[key] = r.zrange(key, 0, -1, withscores=True)
        elif kind == b"stream":
            out[key] = r.xrange(key)
    return out


def test_a_replayed_batch_is_skipped_and_changes_nothing(r: redis.Redis, keys: KeySchema) -> None:
    assert commit_batch(r, keys, summary(0, 0, T0 + 420_000), PARAMS)
    before = dump(r, keys)
    assert not commit_batch(r, keys, summary(0, 0, T0 + 420_000), PARAMS)
    assert dump(r, keys) == before
    assert r.hget(keys.totals, "events") == b"2"


def test_batches_accumulate_and_the_watermark_only_rises(r: redis.Redis, keys: KeySchema) -> None:
    commit_batch(r, keys, summary(0, 0, T0 + 900_000), PARAMS)
    state = r.hgetall(keys.state)
    assert int(state[b"next_watermark_ms"]) == T0 + 600_000
    # batch 1 holds only old events: the running max (and so the watermark) stays
    commit_batch(r, keys, summary(1, T0 + 600_000, T0 + 60_000, events=0, dropped=3), PARAMS)
    state = r.hgetall(keys.state)
    assert int(state[b"max_event_us"]) == (T0 + 900_000) * 1000
    assert int(state[b"next_watermark_ms"]) == T0 + 600_000
    assert int(state[b"last_batch"]) == 1
    doc = build_document(r, keys)
    assert doc["windows"] == [{"server": "A", "start": "2026-01-01T00:00:00.000Z", "end": "2026-01-01T00:10:00.000Z",
                               "events": 2, "players": 2, "dropped": 3, "final": True}]
    assert [(b["batch"], b["input"], b["dropped"]) for b in doc["batches"]] == [(0, 3, 0), (1, 4, 3)]
    assert r.xlen(keys.dead) == 2
    assert r.hget(keys.totals, "bad|malformed_json") == b"2"


def test_an_older_batch_after_a_newer_one_is_skipped(r: redis.Redis, keys: KeySchema) -> None:
    commit_batch(r, keys, summary(3, 0, T0), PARAMS)
    assert not commit_batch(r, keys, summary(2, 0, T0), PARAMS)
    assert r.hget(keys.state, "last_batch") == b"3"


def test_changed_window_params_are_refused(r: redis.Redis, keys: KeySchema) -> None:
    commit_batch(r, keys, summary(0, 0, T0), PARAMS)
    check_params(r, keys, PARAMS)  # same params: fine
    with pytest.raises(ParamsMismatch, match="use a fresh PIPELINE_NAMESPACE"):
        check_params(r, keys, built_params(60_000, 60_000, 300_000))


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


@pytest.mark.parametrize(
    ("values_us", "counts", "expected_ms"),
    [
        ([5_000], [1], LagRecord(5.0, 5.0, 5.0)),  # one event: every figure is its lag
        ([1_000, 3_000], [1, 1], LagRecord(2.0, 2.9, 3.0)),  # p50 halfway, p95 at 0.95 of the way
        ([1_000, 3_000], [3, 1], LagRecord(1.0, 3.0 - 0.15 * 2, 3.0)),  # ranks 0..3: p95 at 2.85, between 1 and 3 ms
        # negative lags (clock skew) sort first; p95 at 2.85
        ([-2_000, 0, 7_500], [1, 2, 1], LagRecord(0.0, 6.375, 7.5)),
        ([1, 2], [1, 1], LagRecord(0.0015, 0.00195, 0.002)),  # microseconds survive: no rounding to ms
    ],
)
def test_lag_from_histogram_is_the_exact_percentile(values_us: list[int], counts: list[int],
                                                    expected_ms: LagRecord) -> None:
    got = LagRecord.from_histogram(values_us, counts)
    assert (got.p50, got.p95, got.max) == pytest.approx((expected_ms.p50, expected_ms.p95, expected_ms.max))


def test_lag_from_histogram_equals_percentiles_of_the_expanded_values() -> None:
    values, counts = [-30, 0, 12, 13, 400, 9_000], [2, 1, 7, 1, 3, 1]
    flat = [v / 1000 for v, c in zip(values, counts, strict=True) for _ in range(c)]
    cuts = statistics.quantiles(flat, n=100, method="inclusive")
    got = LagRecord.from_histogram(values, counts)
    assert (got.p50, got.p95, got.max) == pytest.approx((cuts[49], cuts[94], max(flat)))


def test_many_histograms_end_to_end_give_each_one_its_own_exact_figures() -> None:
    """300 servers' lags a batch are read in one pass: each histogram's figures equal the quantiles of its own
    expanded values, and one value, one rank or an even split are edge cases of the interpolation."""
    rng = np.random.default_rng(7)
    hists = [([5], [1]), ([5], [3]), ([-4, 9], [1, 1]), ([1, 2, 3], [1, 1, 2])]
    for _ in range(40):
        k = int(rng.integers(1, 12))
        hists.append((sorted(rng.choice(np.arange(-5_000, 50_000), k, replace=False).tolist()),
                      rng.integers(1, 6, k).tolist()))
    starts = np.cumsum([0, *(len(v) for v, _ in hists[:-1])])
    got = LagRecord.from_histograms(np.array([x for v, _ in hists for x in v], np.int64),
                                    np.array([x for _, c in hists for x in c], np.int64), starts)
    for (values, counts), record in zip(hists, got, strict=True):
        flat = [v / 1000 for v, c in zip(values, counts, strict=True) for _ in range(c)]
        cuts = statistics.quantiles(flat, n=100, method="inclusive") if len(flat) > 1 else [flat[0]] * 99
        assert (record.p50, record.p95, record.max) == pytest.approx((cuts[49], cuts[94], max(flat)))


def test_an_empty_or_uneven_histogram_is_refused() -> None:
    with pytest.raises(ValueError, match="as many counts as values"):
        LagRecord.from_histogram([], [])
    with pytest.raises(ValueError, match="as many counts as values"):
        LagRecord.from_histogram([1, 2], [1])


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


@pytest.mark.parametrize(("params", "lost_at"), [
    (PARAMS, b"2"),  # the pipeline: Spark ran batches 0 and 1, Redis has no record of them
    (replace(PARAMS, trims=False), None),  # a lab lane starts its record whenever it was added: not a loss
])
def test_a_commit_record_gone_under_a_running_job_is_recorded_as_lost_history(
        r: redis.Redis, keys: KeySchema, params: Params, lost_at: bytes | None) -> None:
    assert commit_batch(r, keys, summary(0, 0, T0 + 60_000), params)
    assert commit_batch(r, keys, summary(1, 0, T0 + 70_000), params)
    assert r.hget(keys.state, "lost_at_batch") in (b"", None)  # a first batch 0 is a start, not a loss
    for key in list(r.scan_iter(match=f"{keys.namespace}:*")):
        r.delete(key)  # Redis came back empty
    assert commit_batch(r, keys, summary(2, 0, T0 + 80_000), params)
    assert commit_batch(r, keys, summary(3, 0, T0 + 90_000), params)
    assert (r.hget(keys.state, "lost_at_batch") or None) == lost_at  # and it stays said


def test_a_batch_record_reads_back_exactly_and_a_bad_one_says_what_is_wrong(r: redis.Redis, keys: KeySchema) -> None:
    from streaming.schema.records import BatchRecord, CommitEntry, RecordError

    assert commit_batch(r, keys, summary(0, 0, T0 + 420_000), PARAMS)
    raw = r.hget(keys.batch(0), "sink")
    rec = BatchRecord.decode(raw, "batch 0")
    assert rec.encode() == raw and rec.batch == 0 and rec.servers["A"].events == 2 and rec.bad == {"malformed_json": 1}
    ((_, fields),) = r.xrange(keys.commits)
    assert CommitEntry.from_fields(fields, "commit") == CommitEntry(0, "1-0")
    with pytest.raises(RecordError, match=r"batch 0 is not a BatchRecord: Object missing required field `end_id`"):
        BatchRecord.decode(raw.replace(b'"end_id"', b'"the_end"'), "batch 0")
    with pytest.raises(RecordError, match="commit is not a commit entry"):
        CommitEntry.from_fields({b"batch": b"one"}, "commit")


def test_read_pipeline_says_what_the_snapshot_says_in_a_fixed_number_of_commands(r: redis.Redis,
                                                                                keys: KeySchema) -> None:
    from streaming.store.pipeline_status import read_pipeline
    from streaming.store.views.snapshot import read_snapshot

    def commands(read: object) -> int:
        before = r.info("stats")["total_commands_processed"]
        read()  # type: ignore[operator]
        return r.info("stats")["total_commands_processed"] - before

    assert read_pipeline(r, keys).state is None
    for i in range(3):
        r.xadd(keys.events, {"e": b"{}"}, id=f"{i + 1}-0")
    first = BatchSummary(0, 0, T0, "0-0", "1-0", [], {"A": ServerRecord(rows=1, max_event_us=T0 * 1000)}, [])
    assert commit_batch(r, keys, first, PARAMS)  # entry 1-0 committed, two wait
    small = commands(lambda: read_pipeline(r, keys))
    status = read_pipeline(r, keys)
    snap = read_snapshot(r, keys, range_ms=3_600_000, now_ms=T0)
    assert (status.state, status.totals, status.servers, status.stream) == (snap.state, snap.totals, snap.servers,
                                                                          snap.stream)
    assert status.stream.waiting == 2 and status.stream.oldest_waiting_ms == 2 and status.state.last_batch == 0
    for i in range(1, 40):  # more batches, windows and entries: the same commands
        w = [WindowAgg(T0 + k * 600_000, T0 + (k + 1) * 600_000, "A", events=1, players=1) for k in range(i)]
        r.xadd(keys.events, {"e": b"{}"}, id=f"{i + 3}-0")
        s = BatchSummary(i, 0, T0, f"{i}-0", f"{i + 1}-0", w, {"A": ServerRecord(rows=i, events=i)}, [])
        assert commit_batch(r, keys, s, PARAMS)
    assert commands(lambda: read_pipeline(r, keys)) == small


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


def test_a_stop_is_said_on_the_commit_record_and_the_next_commit_clears_it(r: redis.Redis, keys: KeySchema) -> None:
    from streaming.apps.job import record_stop
    from streaming.store.pipeline_status import PipelineState

    record_stop(r, keys)
    assert not r.exists(keys.state)  # nothing committed: nothing to say
    assert commit_batch(r, keys, summary(0, 0, T0 + 60_000), PARAMS)
    record_stop(r, keys)
    state = PipelineState.from_hash(r.hgetall(keys.state))
    assert state is not None and state.stopped_ms is not None and state.last_batch == 0
    assert commit_batch(r, keys, summary(1, 0, T0 + 70_000), PARAMS)
    assert r.hget(keys.state, "stopped_ms") == b""
    assert PipelineState.from_hash(r.hgetall(keys.state)).stopped_ms is None  # type: ignore[union-attr]


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


def test_a_batch_record_past_the_history_leaves_redis_not_only_the_index(r: redis.Redis, keys: KeySchema) -> None:
    """Records out of ``PROGRESS_HISTORY`` were only taken out of the index and stayed a day (their TTL): 172,800 a
    query at the 500 ms trigger. Now they go with it; and ``PROGRESS_BYTES`` keeps fewer when records are big."""
    params = replace(PARAMS, progress_history=12)
    for b in range(30):
        assert commit_batch(r, keys, summary(b, 0, T0 + 420_000), params)
    kept = [int(m) for m in r.zrange(keys.batches, 0, -1)]
    assert kept == list(range(18, 30))
    assert sorted(int(k.rsplit(b":", 1)[1]) for k in r.scan_iter(f"{keys.namespace}:batch:*")) == kept
    size = len(r.hget(keys.batch(29), "sink"))
    small = replace(params, progress_bytes=size * 10 + size // 2)  # room for 10 records of this size
    assert commit_batch(r, keys, summary(30, 0, T0 + 420_000), small)
    assert [int(m) for m in r.zrange(keys.batches, 0, -1)] == list(range(21, 31))
    assert len(list(r.scan_iter(f"{keys.namespace}:batch:*"))) == 10


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


def test_a_reader_that_reads_again_decodes_only_the_batches_it_has_not_seen(r: redis.Redis, keys: KeySchema,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """``BatchPoints`` keeps the records it decoded: each read decodes the new ones only, ends equal to a fresh read,
    reads a record written again (its ``progress`` changed) again, and leaves out one that is gone."""
    from streaming.store.views import snapshot

    decoded: list[bytes] = []
    real = snapshot.batch_point
    monkeypatch.setattr(snapshot, "batch_point", lambda sink, progress: decoded.append(sink) or real(sink, progress))
    points = snapshot.BatchPoints()

    def read() -> snapshot.Snapshot:
        return snapshot.read_snapshot(r, keys, range_ms=3_600_000, now_ms=T0, points=points)

    for b in range(3):
        assert commit_batch(r, keys, summary(b, T0, T0 + 1000 * b), PARAMS)
    assert [p.batch for p in read().batches] == [0, 1, 2] and len(decoded) == 3
    assert commit_batch(r, keys, summary(3, T0, T0 + 3000), PARAMS)
    assert [p.batch for p in read().batches] == [0, 1, 2, 3] and len(decoded) == 4  # batch 3 only
    again = read()
    assert len(decoded) == 4
    fresh = snapshot.read_snapshot(r, keys, range_ms=3_600_000, now_ms=T0)
    assert again.batches == fresh.batches
    other = r.hget(keys.batch(3), "sink")
    r.hset(keys.batch(1), mapping={"sink": other, "progress": b'{"again": 1}'})  # a pipeline started afresh
    r.delete(keys.batch(2))
    assert [p.batch for p in read().batches] == [0, 3, 3]  # batch 1's record is now the one written again


def test_a_snapshot_without_windows_is_the_same_snapshot_but_its_windows(r: redis.Redis, keys: KeySchema) -> None:
    """Live ops reads the snapshot without windows but on its Windows tab: everything else it shows is the same."""
    from dataclasses import replace

    from streaming.store.views import snapshot

    for b in range(3):
        assert commit_batch(r, keys, summary(b, T0, T0 + 1000 * b), PARAMS)
    whole = snapshot.read_snapshot(r, keys, range_ms=3_600_000, now_ms=T0 + 5_000)
    bare = snapshot.read_snapshot(r, keys, range_ms=3_600_000, now_ms=T0 + 5_000, windows=False)
    assert whole.windows and not bare.windows  # a compare of something
    assert replace(bare, windows=whole.windows) == whole
