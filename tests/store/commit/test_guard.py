"""The exactly-once commit against a real Redis (no Spark): the guard, the running max, the params, the
record of each batch and of a stop, the history's bound."""

from __future__ import annotations

from dataclasses import replace

import pytest
import redis

from streaming.schema.keys import KeySchema
from streaming.schema.params import Params, ParamsMismatch
from streaming.store.commit import check_params, commit_batch
from streaming.store.report import build_document
from tests.schema.params import built_params
from tests.store.commit.batches import PARAMS, T0, dump, summary


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
