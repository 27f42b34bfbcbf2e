"""The late events kept for the Events page (``streaming.rules.late``): the record, its verdicts by the same rule as
the stream's events, and the bounded, exactly-once keep against a real Redis."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest
import redis

from streaming.rules.commit.batch import BatchSummary
from streaming.rules.eventview import BatchSpan, Status, judge
from streaming.rules.late import LateEvent
from streaming.rules.windows import is_late
from streaming.schema.keys import KeySchema
from streaming.store.commit import commit_batch
from tests.schema.params import built_params
from watermark_client.events import Event

MIN = 60_000
T0 = 1_767_225_600_000


@pytest.mark.parametrize(("event_ms", "watermark_ms", "window", "slide", "status"), [
    (T0 + 30_000, T0 + 30_000, MIN, MIN, Status.ON_TIME),  # at the watermark: not late (not kept)
    (T0 + 29_999, T0 + 30_000, MIN, MIN, Status.LATE_ACCEPTED),  # its window [T0, T0+60s) still open
    (T0 + 59_999, T0 + 60_000, MIN, MIN, Status.DROPPED),  # window end == watermark: closed
    (T0 + 45_000, T0 + 60_000, MIN, 30_000, Status.PARTLY_DROPPED),  # [T0,T0+60) closed, [T0+30,T0+90) open
    (T0 + 10_000, T0 + 90_000, MIN, 30_000, Status.DROPPED),  # every window of it closed
])
def test_a_kept_event_is_judged_as_the_events_page_judges_it(event_ms: int, watermark_ms: int, window: int,
                                                              slide: int, status: Status) -> None:
    kept = LateEvent(f"{T0 + 120_000}-3", "B", "p7", "heartbeat", event_ms * 1000, 12, watermark_ms)
    point = kept.point(window, slide)
    span = BatchSpan(12, f"{T0}-0", f"{T0 + 200_000}-0", watermark_ms)
    (same,) = judge([(kept.entry_id, Event("B", "p7", event_ms * 1000, "heartbeat", kept.entry_id), 0)], [span],
                    f"{T0 + 200_000}-0", window, slide)
    assert point.status is status and is_late(event_ms * 1000, watermark_ms) == (status is not Status.ON_TIME)
    assert (point.windows, point.batch, point.watermark_ms, point.arrival_ms) == (
        same.windows, same.batch, same.watermark_ms, same.arrival_ms)


def test_the_record_reads_back_and_a_bad_one_says_what_it_is() -> None:
    e = LateEvent("17-2", "A", "p1", None, 5_000_000, 3, 4_000)
    assert LateEvent.from_fields(b"17-2", {k.encode(): v.encode() for k, v in e.fields().items()}) == e
    with pytest.raises(ValueError, match="17-2 in the late events is not a late-event record"):
        LateEvent.from_fields("17-2", {b"s": b"A", b"t": b"soon"})


PARAMS = built_params(MIN, MIN, 10_000, late_events_keep=3)


def batch(batch_id: int, late_ids: list[str]) -> BatchSummary:
    return BatchSummary(batch_id, T0 + 60_000, T0 + batch_id * 1_000, f"{batch_id}-0", f"{batch_id + 1}-0", [], {},
                        [], late_events=[LateEvent(i, "A", f"p{i}", "login", T0 * 1000, batch_id, T0 + 60_000)
                                         for i in late_ids])


def test_late_events_are_kept_once_within_the_bound_and_evictions_counted(r: redis.Redis) -> None:
    keys = KeySchema(f"late-{uuid.uuid4().hex[:6]}")
    assert commit_batch(r, keys, batch(0, ["1-1", "1-2"]), PARAMS)
    assert not commit_batch(r, keys, batch(0, ["1-1", "1-2"]), PARAMS)  # replayed: the guard skips it
    assert [i for i, _ in r.xrange(keys.late)] == [b"1-1", b"1-2"]
    # Redis lost the guard but kept the late events (a partial restore): nothing is added twice.
    r.hdel(keys.state, "last_batch")
    assert commit_batch(r, keys, batch(0, ["1-1", "1-2"]), PARAMS)
    assert int(r.hget(keys.totals, "kept")) == 2
    assert commit_batch(r, keys, batch(1, ["2-0", "2-5", "2-9"]), PARAMS)
    assert [i for i, _ in r.xrange(keys.late)] == [b"2-0", b"2-5", b"2-9"]  # exactly late_keep, the newest
    kept = int(r.hget(keys.totals, "kept"))
    assert kept == 5 and kept - r.xlen(keys.late) == 2  # the two the bound evicted
    assert LateEvent.from_fields(*r.xrange(keys.late, "2-5", "2-5")[0]) == batch(1, ["2-5"]).late_events[0]
    assert commit_batch(r, keys, replace(batch(2, []), late_events=[]), PARAMS)
    assert int(r.hget(keys.totals, "kept")) == 5
