"""The online view's commit and merge decisions (streaming.rules.online.view) as tables, without Redis: lost, rebuilt
and the mirror loaded; a group's part; the merge's record, next watermark, ``partial_until`` and ``lost_at_batch``."""

from __future__ import annotations

import numpy as np
import pytest

from streaming.rules.online.decide import ServerWrites
from streaming.rules.online.groups import Group
from streaming.rules.online.table import PlayerTimes
from streaming.rules.online.view import (
    Resume,
    by_server,
    group_part,
    merge,
    merge_step,
    partial_until,
    requests_done,
    resume,
)
from streaming.schema.records import ClockRecord, HandoffBatch, OnlinePart

S = 1_000_000  # one second in microseconds

# (Redis' last commit of the group, the batch, the mirror's batch, the mirror trusted) -> applied, lost, rebuilt, load
RESUME = [
    # committed already, or a later batch committed: nothing to do
    ((7, 7, 7, True), (True, False, False, False)),
    ((8, 7, 7, True), (True, False, False, False)),
    # the mirror reflects Redis' last commit: folded on as it is
    ((6, 7, 6, True), (False, False, False, False)),
    # the mirror is of another batch, or not trusted (a failed commit): loaded from Redis first
    ((6, 7, 5, True), (False, False, False, True)),
    ((6, 7, 6, False), (False, False, False, True)),
    # Redis has no commit while the mirror holds a batch and is trusted: Redis came back empty, the view is lost
    ((None, 7, 6, True), (False, True, False, False)),
    # Redis has no commit, the job no copy, batches ran before: rebuilt from new events
    ((None, 7, None, True), (False, False, True, False)),
    # ... and a copy not trusted is no copy: rebuilt, and loaded (from the nothing Redis holds)
    ((None, 7, 6, False), (False, False, True, True)),
    # the very first batch: nothing lost, nothing to rebuild, nothing to load
    ((None, 0, None, True), (False, False, False, False)),
]


@pytest.mark.parametrize(("given", "expected"), RESUME)
def test_a_commit_starts_from_what_redis_and_the_mirror_hold(given: tuple[int | None, int, int | None, bool],
                                                             expected: tuple[bool, bool, bool, bool]) -> None:
    committed, batch_id, mirror_batch, valid = given
    assert resume(committed, batch_id, mirror_batch, valid) == Resume(*expected)


def clock(heard_ms: int = 0, ahead_ms: int = 0) -> ClockRecord:
    return ClockRecord(watermark_ms=0, clock_us=0, heard_ms=heard_ms, clock_at_heard_us=0, ahead_ms=ahead_ms)


def writes(count: int, forget: bool = False, came: int = 0, went: int = 0,
           causes: dict[str, int] | None = None) -> ServerWrites:
    none = PlayerTimes(np.array([], object), np.array([], np.int64))
    return ServerWrites(none, none, [], [], count, causes or {}, came, went, forget=forget)


# (requests: server -> asked at, each server's writes (forgotten?), clocks heard at) -> requests the batch ends
REQUESTS = [
    ({"a": 100}, {"a": True}, {}, ["a"]),  # forgotten: done
    ({"a": 100}, {"a": False}, {"a": 101}, ["a"]),  # spoke after the request: void
    ({"a": 100}, {"a": False}, {"a": 100}, []),  # heard at the request, not after: it stands
    ({"a": 100}, {}, {}, []),  # not in the batch at all: it stands
    ({"a": 100, "b": 5}, {"a": True, "b": False}, {"b": 4}, ["a"]),
]


@pytest.mark.parametrize(("asked", "forget", "heard", "done"), REQUESTS)
def test_a_request_to_forget_is_done_once_forgotten_void_once_spoken_after(
        asked: dict[str, int], forget: dict[str, bool], heard: dict[str, int], done: list[str]) -> None:
    w = {s: writes(0, forget=f) for s, f in forget.items()}
    assert requests_done(asked, w, {s: clock(heard_ms=h) for s, h in heard.items()}) == done


def handoff(batch: int = 7, watermark_ms: int = 60_000, next_ms: int | None = None) -> HandoffBatch:
    return HandoffBatch(batch=batch, groups=2, watermark_ms=watermark_ms, batch_ts_ms=1_000, end_id="9-0",
                        delay_ms=30_000, timeout_ms=10_000, next_watermark_ms=next_ms)


def test_a_groups_part_keeps_counts_of_the_servers_it_keeps_and_sums_the_transitions() -> None:
    w = {"a": writes(3, came=2, went=1, causes={"login": 2}), "b": writes(0, forget=True),
         "c": writes(0, forget=True), "d": writes(1, came=1)}
    clocks = {"a": clock(ahead_ms=2_500), "d": clock(ahead_ms=900), "e": clock(ahead_ms=50)}
    part = group_part(Group(1, 2), handoff(), w, clocks, asked={"c": 5}, batch_servers=["a", "d", "a"],
                      newest_event_us=99, lost=False, rebuilt=True)
    assert part == OnlinePart(
        group=1, of=handoff(), counts={"a": 3, "d": 1}, forgotten=("b", "c"), erased=("c",),
        causes={"a": {"login": 2}}, came_online=3, went_offline=1,
        ahead_ms={"a": 2_500, "d": 900},  # "e" ran ahead in an earlier batch: not this one's
        clocks=clocks, newest_event_us=99, lost=False, rebuilt=True)


def part(group: int, of: HandoffBatch, counts: dict[str, int], newest_us: int | None = None,
         **kw: object) -> OnlinePart:
    return OnlinePart(group=group, of=of, counts=counts, newest_event_us=newest_us, **kw)  # type: ignore[arg-type]


# (the view's running max before, each part's newest event, the pipeline's combined watermark) -> running, next
WATERMARKS = [
    # the running max grows with the parts' newest events; the next watermark is it minus the delay
    (150 * S, [200 * S, 180 * S], None, (200 * S, 170_000)),
    # a part without events, and a batch older than the running max: the running max stands
    (150 * S, [None, 100 * S], None, (150 * S, 120_000)),
    # never below the one in force (60 s)
    (None, [70 * S], None, (70 * S, 60_000)),
    # no event ever: the one in force
    (None, [None, None], None, (None, 60_000)),
    # one input per server: Spark's combined watermark, never below the one in force
    (150 * S, [200 * S], 90_000, (200 * S, 90_000)),
    (150 * S, [200 * S], 40_000, (200 * S, 60_000)),
]


@pytest.mark.parametrize(("running", "newest", "combined", "expected"), WATERMARKS)
def test_the_merge_advances_the_pipelines_watermark_over_every_groups_events(
        running: int | None, newest: list[int | None], combined: int | None,
        expected: tuple[int | None, int]) -> None:
    of = handoff(next_ms=combined)
    m = merge([part(g, of, {}, us) for g, us in enumerate(newest)], running, None, None)
    assert (m.running_us, m.record.watermark_ms, m.record.in_force_ms) == (*expected, 60_000)


# (any part rebuilt, the running max, the prior partial_until) -> partial_until after
PARTIAL = [
    (False, 200 * S, None, None),  # whole: stays so
    (False, 200 * S, 150_000, 150_000),  # partial: until the time decided when it was rebuilt
    (True, 200 * S, 150_000, 210_000),  # rebuilt: the newest event seen + the timeout
    (True, None, None, 100_000),  # no event seen: the next watermark (the one in force, 60 s) + delay + timeout
]


@pytest.mark.parametrize(("rebuilt", "running", "prior", "until"), PARTIAL)
def test_a_rebuilt_view_is_partial_until_every_player_could_have_spoken_again(
        rebuilt: bool, running: int | None, prior: int | None, until: int | None) -> None:
    of = handoff()
    parts = [part(0, of, {}, rebuilt=rebuilt), part(1, of, {})]
    assert merge(parts, running, None, prior).partial_until_ms == until


def test_partial_until_is_the_newest_event_plus_the_timeout() -> None:
    assert partial_until(200 * S + 999, 0, 30_000, 10_000) == 210_000  # microseconds floored to ms
    assert partial_until(None, 170_000, 30_000, 10_000) == 210_000


# (each part's lost, rebuilt; the prior lost_at_batch) -> lost_at_batch after the batch (7)
LOST = [
    ([(False, False), (False, False)], None, None),
    ([(False, False), (False, False)], 3, 3),
    ([(True, False), (False, False)], 3, 7),
    ([(False, False), (False, True)], None, 7),
]


@pytest.mark.parametrize(("flags", "prior", "after"), LOST)
def test_the_view_records_the_batch_any_group_found_redis_empty_at(flags: list[tuple[bool, bool]], prior: int | None,
                                                                  after: int | None) -> None:
    of = handoff()
    parts = [part(g, of, {}, lost=lost, rebuilt=rebuilt) for g, (lost, rebuilt) in enumerate(flags)]
    assert merge(parts, None, prior, None).lost_at_batch == after


def test_the_merge_sums_the_groups_parts_in_server_order() -> None:
    of = handoff()
    parts = [part(0, of, {"b": 2, "d": 4}, 100, came_online=3, went_offline=1, causes={"b": {"login": 3}},
                  ahead_ms={"d": 2_100}, clocks={"b": clock(1)}, forgotten=("x",), erased=("x",)),
             part(1, of, {"a": 1}, None, came_online=1, went_offline=2, causes={"a": {"timeout": 2}},
                  clocks={"a": clock(2)}, forgotten=("y",))]
    m = merge(parts, None, None, None)
    assert list(m.record.counts.items()) == [("a", 1), ("b", 2), ("d", 4)]
    assert (m.record.online, m.record.offline, m.record.batch, m.record.batch_ts_ms) == (4, 3, 7, 1_000)
    assert m.record.causes == {"a": {"timeout": 2}, "b": {"login": 3}} and m.record.ahead_ms == {"d": 2_100}
    assert list(m.clocks) == ["a", "b"]
    assert (m.forgotten, m.erased) == (["x", "y"], ["x"])
    assert by_server([{"b": 1}, {}, {"a": 2}]) == {"a": 2, "b": 1}


# A batch's parts: merged once every group's is in; dropped when the view has the batch already or a group without
# a part has committed a later batch (its part can never come); otherwise waited for. (batch 7, 3 groups)
@pytest.mark.parametrize(("merged_last", "parts", "groups_last", "step"), [
    (6, [0, 1, 2], {}, "merge"),                 # every part in
    (None, [0, 1, 2], {}, "merge"),              # the view's first batch
    (7, [0, 1, 2], {}, "drop"),                  # merged already (by another group)
    (9, [0], {1: 9, 2: 9}, "drop"),              # merged already, parts missing
    (6, [0, 1], {2: 6}, "wait"),                 # group 2 has not committed batch 7 yet
    (6, [0, 1], {2: None}, "wait"),              # group 2 has committed nothing yet
    (6, [0, 1], {2: 7}, "drop"),                 # group 2 committed batch 7 without a part: never whole
    (6, [0], {1: 6, 2: 8}, "drop"),              # one missing group is past the batch
    (6, [], {0: 6, 1: 6, 2: 6}, "wait"),         # no part in yet
])
def test_a_batch_is_merged_once_whole_dropped_once_merged_or_never_whole(
        merged_last: int | None, parts: list[int], groups_last: dict[int, int | None], step: str) -> None:
    assert merge_step(7, merged_last, 3, parts, groups_last) == step
