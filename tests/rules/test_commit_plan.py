"""The pure half of a batch's commit (``streaming.rules.commit.plan.plan_commit``): what it writes, decided from the
batch and what Redis held before it, as a table; no Redis."""

from __future__ import annotations

from dataclasses import replace

import pytest

from streaming.rules.commit.batch import BatchSummary, WindowAgg
from streaming.rules.commit.plan import Prior, losses, plan_commit, players_added_done, players_closed
from streaming.rules.late import LateEvent
from streaming.schema.config import Config
from streaming.schema.params import Params
from streaming.schema.records import ServerRecord
from tests.schema.params import built_params

T0 = 1_767_225_600_000
PARAMS = built_params(60_000, 60_000, 10_000)
EMPTY = Prior(lost_at=None, max_event_us=None, sets_closed_below_ms=0, server_max={}, late_top={}, readers_done=())


def batch(max_event_ms: int | None = T0 + 30_000, start_id: str = f"{T0 + 900_000}-0", **kw: object) -> BatchSummary:
    st = ServerRecord(rows=2, events=2, min_event_us=T0 * 1000,
                      max_event_us=None if max_event_ms is None else max_event_ms * 1000,
                      max_ingest_us=(T0 + 950_000) * 1000)
    return BatchSummary(7, T0, T0 + 1_000_000, start_id, f"{T0 + 1_000_000}-0",
                        [WindowAgg(T0, T0 + 60_000, "A", events=2, players=1)], {"A": st}, [], **kw)


@pytest.mark.parametrize(("s", "prior", "next_wm"), [
    (batch(T0 + 30_000), EMPTY, T0 + 20_000),  # the batch's max - delay
    (batch(T0 + 30_000), replace(EMPTY, max_event_us=(T0 + 50_000) * 1000), T0 + 40_000),  # the running max
    (batch(T0 - 30_000), EMPTY, T0),  # never below the watermark in force
    (batch(None), EMPTY, T0),  # no event: it stays
    (batch(T0 + 30_000, next_watermark_ms=T0 + 5_000), EMPTY, T0 + 5_000),  # per-server: the sink's combination
])
def test_the_next_watermark(s: BatchSummary, prior: Prior, next_wm: int) -> None:
    w = plan_commit(s, PARAMS, prior, now_ms=1)
    assert w.state.next_watermark_ms == next_wm and w.record.next_watermark_ms == next_wm
    assert w.windows_end_below_ms == next_wm - PARAMS.retention_ms - PARAMS.window_ms


@pytest.mark.parametrize(("params", "readers", "trim_below"), [
    (PARAMS, (), f"{T0 + 400_000}-0"),  # ten minutes of arrival before the batch time
    (PARAMS, (f"{T0 + 300_000}-4",), f"{T0 + 300_000}-4"),  # a reader behind that: kept for it
    (PARAMS, (f"{T0 + 990_000}-0",), f"{T0 + 400_000}-0"),  # a reader ahead changes nothing
    (PARAMS, ("0-0",), None),  # a reader that has committed nothing: nothing is trimmed
    (replace(PARAMS, trims=False), (), None),  # a lane leaves the trim to its parent
])
def test_the_trim_keeps_what_every_reader_needs(params: Params, readers: tuple, trim_below: str | None) -> None:
    assert plan_commit(batch(), params, replace(EMPTY, readers_done=readers), now_ms=1).trim_below == trim_below


S = f"{T0 + 900_000}-0"  # where each shard's batch starts, below
KEEP = f"{T0 + 400_000}-0"  # ten minutes of arrival before the batch time


@pytest.mark.parametrize(("start", "readers", "trim_below"), [
    (f"{S},{S},{S}", (), f"{KEEP},{KEEP},{KEEP}"),  # every shard keeps the same ten minutes
    (f"{S},0-0,{T0 + 100_000}-0", (), f"{KEEP},0-0,{T0 + 100_000}-0"),  # a shard read less far: kept from there
    (f"{S},{S}", (f"{T0 + 300_000}-4,{T0 + 990_000}-0",), f"{T0 + 300_000}-4,{KEEP}"),  # a reader, shard by shard
    (f"{S},{S}", (f"{T0 + 300_000}-4",), f"{T0 + 300_000}-4,0-0"),  # a reader of before the shards: keep shard 1
    (f"{S},{S}", ("0-0",), None),
])
def test_with_shards_the_trim_keeps_each_shard_for_every_reader(start: str, readers: tuple,
                                                                trim_below: str | None) -> None:
    w = plan_commit(batch(start_id=start), PARAMS, replace(EMPTY, readers_done=readers), now_ms=1)
    assert w.trim_below == trim_below


def test_late_events_above_the_newest_kept_and_the_state_fields() -> None:
    late = [LateEvent(f"{T0 + 950_000}-{i}", "A", "p1", None, T0 * 1000, 7, T0) for i in range(3)]
    w = plan_commit(batch(late_events=late), PARAMS, replace(EMPTY, late_top={0: (T0 + 950_000, 0)}, lost_at=3),
                    now_ms=42)
    assert [e.entry_id for e in w.late] == [f"{T0 + 950_000}-1", f"{T0 + 950_000}-2"]
    assert w.state.lost_at_batch == 3 and w.state.updated_ms == 42 and w.state.committed_id == w.end_id
    assert w.totals["events"] == 2 and w.totals["events|A"] == 2 and w.seen == {"A": T0 + 950_000}


def test_late_events_are_filtered_by_their_own_shards_newest_kept() -> None:
    # shard 1's IDs are older than shard 0's newest kept: one top for both would drop them from the Events page
    late = [LateEvent(f"{T0 + 900_000}-0", "B", "p1", None, T0 * 1000, 7, T0, shard=1),
            LateEvent(f"{T0 + 950_000}-0", "A", "p1", None, T0 * 1000, 7, T0, shard=0),
            LateEvent(f"{T0 + 960_000}-0", "A", "p2", None, T0 * 1000, 7, T0, shard=0)]
    prior = replace(EMPTY, late_top={0: (T0 + 950_000, 0), 1: (T0 + 800_000, 0)})
    w = plan_commit(batch(late_events=late), replace(PARAMS, shards=2), prior, now_ms=42)
    assert [(e.shard, e.entry_id) for e in w.late] == [(1, f"{T0 + 900_000}-0"), (0, f"{T0 + 960_000}-0")]


@pytest.mark.parametrize(("keep", "shards", "each"), [(200_000, 1, 200_000), (10, 4, 3), (8, 4, 2), (1, 4, 1)])
def test_each_shard_keeps_its_share_of_the_late_events_rounded_up(keep: int, shards: int, each: int) -> None:
    assert replace(PARAMS, late_keep=keep, shards=shards).late_keep_per_shard == each


def test_the_state_hash_is_the_fields_the_commit_always_wrote() -> None:
    s = batch(server_watermarks={"A": T0 + 20_000}, next_watermark_ms=T0 + 20_000)
    w = plan_commit(s, replace(PARAMS, mode="per-server", servers=("A",)), EMPTY, now_ms=42)
    assert w.state.to_hash() == {
        "last_batch": "7", "watermark_ms": str(T0), "next_watermark_ms": str(T0 + 20_000),
        "max_event_us": str((T0 + 30_000) * 1000), "max_event_us|A": str((T0 + 30_000) * 1000),
        "server_watermarks": f'{{"A": {T0 + 20_000}}}', "delay_ms": "10000", "committed_id": f"{T0 + 1_000_000}-0",
        "lost_at_batch": "", "stopped_ms": "", "sets_closed_below_ms": str(T0 + 20_000),  # no lane: its own next
        "params": '{"delay_ms": 10000, "mode": "per-server", "policy": "min", "slide_ms": 60000, "window_ms": 60000}',
        "trigger_ms": str(Config.trigger_ms), "updated_ms": "42"}


@pytest.mark.parametrize(("lanes_next", "closed_before", "closed"), [
    ((), 0, T0 + 20_000),  # no lane: the pipeline's own watermark for its next batch
    ((T0 + 5_000, T0 + 30_000), 0, T0 + 5_000),  # the slowest of the configured pipeline and its lanes
    ((T0 + 5_000, None), 0, 0),  # a lane with no commit yet holds it where it is
    ((T0 + 5_000,), T0 + 8_000, T0 + 8_000),  # never lower than before
])
def test_a_windows_players_set_goes_once_every_namespace_has_closed_it(
        lanes_next: tuple[int | None, ...], closed_before: int, closed: int) -> None:
    prior = replace(EMPTY, sets_closed_below_ms=closed_before, lanes_next_ms=lanes_next)
    assert players_closed(T0 + 20_000, prior) == closed
    w = plan_commit(batch(), PARAMS, prior, now_ms=1)
    assert w.players is not None and w.players.closed_ms == w.state.sets_closed_below_ms == closed


@pytest.mark.parametrize(("lanes_last", "done"), [((), 7), ((5, 6), 5), ((None, 6), 6), ((None,), 7)])
def test_a_batchs_count_of_players_goes_once_every_lane_has_committed_it(lanes_last: tuple[int | None, ...],
                                                                        done: int) -> None:
    """A lane without a commit starts with the batch being committed: it needs no earlier count."""
    assert players_added_done(7, replace(EMPTY, lanes_last=lanes_last)) == done


def test_a_lane_keeps_no_sets_and_an_empty_batch_indexes_no_count() -> None:
    lane = plan_commit(batch(), replace(PARAMS, players_lanes=None), EMPTY, now_ms=1)
    assert lane.players is None and lane.state.sets_closed_below_ms == EMPTY.sets_closed_below_ms
    empty = plan_commit(batch(start_id=f"{T0 + 1_000_000}-0"), PARAMS, EMPTY, now_ms=1)
    assert empty.players is not None and empty.players.added is None
    assert plan_commit(batch(), PARAMS, EMPTY, now_ms=1).players.added == f"{T0 + 1_000_000}-0"


# (Redis' last batch, the losses it records already, the batch, the pipeline?) -> what Redis lost, after the read
LOSSES = [
    ((None, None, None, 0, True), (None, None)),  # the first batch: nothing before it
    ((None, None, None, 5, True), (5, None)),  # no record, yet batches ran: Redis came back empty before batch 5
    ((None, None, None, 5, False), (None, None)),  # a lane starts its record with its first batch: no loss
    ((4, None, None, 5, True), (None, None)),  # the batch after the last: nothing lost
    ((2, None, None, 5, True), (None, (3, 4))),  # an older record: the commits of 3 and 4 lost
    ((2, 1, (0, 0), 5, False), (1, (0, 0))),  # a lane: what the record says stands
    ((4, 1, (2, 3), 5, True), (1, (2, 3))),  # losses recorded before stand
    ((2, 1, (0, 0), 5, True), (1, (3, 4))),  # a new gap replaces the one recorded
]


@pytest.mark.parametrize(("read", "lost"), LOSSES)
def test_what_redis_lost_is_said_from_the_record_read_back(
        read: tuple[int | None, int | None, tuple[int, int] | None, int, bool],
        lost: tuple[int | None, tuple[int, int] | None]) -> None:
    assert losses(*read) == lost
