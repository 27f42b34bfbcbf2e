"""The per-event view's pure parts: judging each event, the watermark steps, window boundaries, the figure."""

from __future__ import annotations

import pytest

from dashboard.screens.events import figures as event_charts
from streaming.rules.eventview import (
    BatchSpan,
    Status,
    Step,
    count_statuses,
    dropped_pairs,
    judge,
    watermark_steps,
    window_boundaries,
)
from streaming.rules.windows import Verdict, Window
from watermark_client.events import Event

T = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a window boundary
S, MIN = 1_000, 60_000
ON, LATE, DROP = Verdict.ON_TIME, Verdict.LATE_ACCEPTED, Verdict.DROPPED


def ev(offset_ms: int, server: str = "A", extra_us: int = 0) -> Event:
    return Event(server=server, player_id="p1", event_time_us=(T + offset_ms) * 1000 + extra_us, kind="heartbeat")


def one(window: int, slide: int, event: Event, watermark: int, entry: str = f"{T + 5 * MIN}-0",
        committed: str = f"{T + 9 * MIN}-0", spans: list[BatchSpan] | None = None):  # noqa: ANN202
    spans = [BatchSpan(7, f"{T}-0", committed, watermark)] if spans is None else spans
    [point] = judge([(entry, event, 0)], spans, committed, window, slide)
    return point


@pytest.mark.parametrize(("window", "slide", "event", "watermark", "status", "verdicts"), [
    # tumbling, well ahead of the watermark: on time
    (MIN, MIN, ev(30 * S), T, Status.ON_TIME, [ON]),
    # event time == watermark is not late: late means event time < watermark
    (MIN, MIN, ev(30 * S), T + 30 * S, Status.ON_TIME, [ON]),
    # 1 ms below the watermark, window still open: late but accepted
    (MIN, MIN, ev(30 * S - 1), T + 30 * S, Status.LATE_ACCEPTED, [LATE]),
    # 1 microsecond below the watermark counts too (events are microseconds, the watermark milliseconds)
    (MIN, MIN, ev(30 * S - 1, extra_us=999), T + 30 * S, Status.LATE_ACCEPTED, [LATE]),
    # window end == watermark: the window is closed, the event dropped
    (MIN, MIN, ev(30 * S), T + MIN, Status.DROPPED, [DROP]),
    # window end one ms above the watermark: still open, late but accepted
    (MIN, MIN, ev(30 * S), T + MIN - 1, Status.LATE_ACCEPTED, [LATE]),
    # an event on the window start belongs to that window only (tumbling)
    (MIN, MIN, ev(MIN), T + MIN, Status.ON_TIME, [ON]),
    # sliding 1m/30s: the older window [0, 60s) closed at 60s, the newer [30s, 90s) open: partly dropped
    (MIN, 30 * S, ev(45 * S), T + MIN, Status.PARTLY_DROPPED, [DROP, LATE]),
    # sliding: both windows closed
    (MIN, 30 * S, ev(45 * S), T + 90 * S, Status.DROPPED, [DROP, DROP]),
    # sliding: both open, the event behind the watermark in both
    (MIN, 30 * S, ev(45 * S), T + 50 * S, Status.LATE_ACCEPTED, [LATE, LATE]),
    # sliding: an event on a slide boundary is in [0, 60s) and [30s, 90s); the first closed exactly at 60s
    (MIN, 30 * S, ev(30 * S), T + MIN, Status.PARTLY_DROPPED, [DROP, LATE]),
    # sliding 1m/20s: three windows, the two older closed
    (MIN, 20 * S, ev(50 * S), T + 90 * S, Status.PARTLY_DROPPED, [DROP, DROP, LATE]),
    # a watermark of 0 (before the first batch with data) drops nothing
    (MIN, MIN, ev(30 * S), 0, Status.ON_TIME, [ON]),
])
def test_each_event_is_judged_per_window(window: int, slide: int, event: Event, watermark: int, status: Status,
                                         verdicts: list[Verdict]) -> None:
    p = one(window, slide, event, watermark)
    assert p.status is status
    assert [w.verdict for w in p.windows] == verdicts
    assert p.watermark_ms == watermark and p.batch == 7


SPANS = [BatchSpan(0, "0-0", f"{T}-3", 0), BatchSpan(1, f"{T}-3", f"{T + 10}-0", T - MIN),
         BatchSpan(2, f"{T + 10}-0", f"{T + 20}-5", T - 30 * S)]


@pytest.mark.parametrize(("entry", "committed", "status", "batch"), [
    # inside batch 0
    (f"{T - 5}-0", f"{T + 20}-5", Status.ON_TIME, 0),
    # exactly batch 0's end ID: batch 0 (ends are inclusive)
    (f"{T}-3", f"{T + 20}-5", Status.ON_TIME, 0),
    # the same millisecond, next sequence number: batch 1 (starts are exclusive)
    (f"{T}-4", f"{T + 20}-5", Status.ON_TIME, 1),
    # exactly the committed offset: the last batch read it
    (f"{T + 20}-5", f"{T + 20}-5", Status.ON_TIME, 2),
    # one past the committed offset: pending, not judged
    (f"{T + 20}-6", f"{T + 20}-5", Status.PENDING, None),
    # committed, but the batch that read it is not among the spans (its record is gone): unknown
    (f"{T + 30}-0", f"{T + 40}-0", Status.UNKNOWN, None),
])
def test_the_batch_that_read_an_entry_is_found_by_entry_id(entry: str, committed: str, status: Status,
                                                           batch: int | None) -> None:
    p = one(MIN, MIN, ev(5 * MIN), 0, entry=entry, committed=committed, spans=SPANS)
    assert (p.status, p.batch) == (status, batch)
    if batch is None:
        assert p.watermark_ms is None and [w.verdict for w in p.windows] == [None]
    else:
        assert p.watermark_ms == SPANS[batch].watermark_ms


def test_points_carry_the_event_and_its_arrival() -> None:
    e = Event(server="C", player_id="p9", event_time_us=T * 1000 + 1, kind="login", event_id="C-1")
    [p] = judge([(f"{T + 1234}-2", e, 0)], SPANS, f"{T + 20}-5", MIN, MIN)
    assert (p.entry_id, p.arrival_ms, p.server, p.player_id, p.kind, p.event_id, p.event_time_us) == (
        f"{T + 1234}-2", T + 1234, "C", "p9", "login", "C-1", T * 1000 + 1)
    assert p.windows[0].window == Window(T, T + MIN)


# Two shards: batch 0 read shard 0 to T+10 and shard 1 to T+3; batch 1 only shard 0 (shard 1 had nothing new);
# batch 2 both. The same entry ID in the two shards is two entries, each found by its own shard's bounds.
SHARDED = [BatchSpan(0, "0-0,0-0", f"{T + 10}-0,{T + 3}-0", T - MIN),
           BatchSpan(1, f"{T + 10}-0,{T + 3}-0", f"{T + 20}-0,{T + 3}-0", T - 30 * S),
           BatchSpan(2, f"{T + 20}-0,{T + 3}-0", f"{T + 30}-0,{T + 25}-0", T)]


@pytest.mark.parametrize(("entry", "shard", "batch", "status"), [
    (f"{T + 5}-0", 0, 0, Status.ON_TIME),
    (f"{T + 5}-0", 1, 2, Status.ON_TIME),  # the same ID in shard 1 came after its T+3: read by batch 2
    (f"{T + 3}-0", 1, 0, Status.ON_TIME),
    (f"{T + 15}-0", 0, 1, Status.ON_TIME),
    (f"{T + 25}-0", 1, 2, Status.ON_TIME),
    (f"{T + 26}-0", 1, None, Status.PENDING),  # past shard 1's committed ID though shard 0's is later
    (f"{T + 29}-0", 0, 2, Status.ON_TIME),
])
def test_with_shards_an_entry_is_found_by_its_own_shards_bounds(entry: str, shard: int, batch: int | None,
                                                                 status: Status) -> None:
    [p] = judge([(entry, ev(5 * MIN), shard)], SHARDED, f"{T + 30}-0,{T + 25}-0", MIN, MIN)
    assert (p.batch, p.status, p.shard) == (batch, status, shard)


def test_with_shards_a_batchs_arrivals_run_between_its_positions_newest_ids() -> None:
    assert [(s.start_ms, s.end_ms) for s in SHARDED] == [(0, T + 10), (T + 10, T + 20), (T + 20, T + 30)]
    assert watermark_steps(SHARDED, T + 15, T + 40, f"{T + 30}-0,{T + 25}-0", T + MIN)[-1] == \
        Step(T + 30, T + 40, T + MIN, None)


@pytest.mark.parametrize(("lo", "hi", "committed", "next_wm", "steps"), [
    # every batch, clipped to the range; the first batch starts at 0-0, so at lo
    (T - 10, T + 20, None, None, [Step(T - 10, T, 0, 0), Step(T, T + 10, T - MIN, 1),
                                  Step(T + 10, T + 20, T - 30 * S, 2)]),
    # a range inside batch 2 only
    (T + 12, T + 15, None, None, [Step(T + 12, T + 15, T - 30 * S, 2)]),
    # pending tail: from the committed offset to the range's end, at the next watermark
    (T + 5, T + 50, f"{T + 20}-5", T - 10 * S, [Step(T + 5, T + 10, T - MIN, 1), Step(T + 10, T + 20, T - 30 * S, 2),
                                                Step(T + 20, T + 50, T - 10 * S, None)]),
])
def test_watermark_steps_against_arrival_time(lo: int, hi: int, committed: str | None, next_wm: int | None,
                                              steps: list[Step]) -> None:
    assert watermark_steps(SPANS, lo, hi, committed, next_wm) == steps


@pytest.mark.parametrize(("lo", "hi", "window", "slide", "want"), [
    # tumbling: every window start is the previous one's end
    (T, T + 2 * MIN, MIN, MIN, [T, T + MIN, T + 2 * MIN]),
    # bounds in between boundaries
    (T + 1, T + 2 * MIN - 1, MIN, MIN, [T + MIN]),
    # sliding 1m/30s: boundaries every 30 s
    (T, T + MIN, MIN, 30 * S, [T, T + 30 * S, T + MIN]),
    # a window that is no multiple of the slide (50s/20s): starts every 20 s, ends 10 s off them
    (T, T + MIN, 50 * S, 20 * S, [T, T + 10 * S, T + 20 * S, T + 30 * S, T + 40 * S, T + 50 * S, T + MIN]),
])
def test_window_boundaries(lo: int, hi: int, window: int, slide: int, want: list[int]) -> None:
    assert window_boundaries(lo, hi, window, slide) == want


def test_counts_and_dropped_pairs_per_window() -> None:
    entries = [(f"{T + i}-0", e, 0) for i, e in enumerate([ev(45 * S), ev(45 * S, "B"), ev(5 * MIN), ev(10 * S)])]
    spans = [BatchSpan(0, "0-0", f"{T + 2}-0", T + MIN)]  # the 4th entry is pending
    points = judge(entries, spans, f"{T + 2}-0", MIN, 30 * S)
    assert [p.status for p in points] == [Status.PARTLY_DROPPED, Status.PARTLY_DROPPED, Status.ON_TIME,
                                          Status.PENDING]
    counts = count_statuses(points)
    assert list(counts) == list(Status)
    assert counts == {Status.ON_TIME: 1, Status.LATE_ACCEPTED: 0, Status.PARTLY_DROPPED: 2, Status.DROPPED: 0,
                      Status.PENDING: 1, Status.UNKNOWN: 0}
    assert dropped_pairs(points) == {(T, T + MIN, "A"): 1, (T, T + MIN, "B"): 1}


# --------------------------------------------------------------------------- the figure


def test_figure_has_a_trace_per_status_the_watermark_steps_and_the_boundaries() -> None:
    entries = [(f"{T + 10}-{i}", e, 0) for i, e in enumerate([ev(45 * S), ev(2 * MIN), ev(10 * S), ev(3 * MIN)])]
    spans = [BatchSpan(0, "0-0", f"{T + 10}-2", T + 90 * S)]
    points = judge(entries, spans, f"{T + 10}-2", MIN, MIN)
    assert [p.status for p in points] == [Status.DROPPED, Status.ON_TIME, Status.DROPPED, Status.PENDING]
    steps = watermark_steps(spans, T, T + 20, f"{T + 10}-2", T + 2 * MIN)
    fig = event_charts.events_figure(points, steps, MIN, MIN, T, T + 20)
    by_name = {t.name: t for t in fig.data}
    assert set(by_name) == {"window boundary", "on time (1)", "dropped (2)", "pending (1)", "watermark in force",
                            "next watermark (pending)"}
    # boundaries of every window of the events shown (0 to 4 min), each a vertical over the range
    assert len([x for x in by_name["window boundary"].x if x is not None]) == 2 * 5
    assert list(by_name["watermark in force"].x) == [event_charts.ts(T + 90 * S)] * 2
    assert list(by_name["watermark in force"].y) == [event_charts.ts(T), event_charts.ts(T + 10)]
    assert by_name["next watermark (pending)"].line.dash == "dash"
    dropped = by_name["dropped (2)"]
    assert list(dropped.x) == [event_charts.ts(T + 45 * S), event_charts.ts(T + 10 * S)]
    assert list(dropped.y) == [event_charts.ts(T + 10)] * 2


def test_hover_says_the_event_its_windows_the_batch_and_the_watermark_met() -> None:
    p = one(MIN, 30 * S, ev(45 * S), T + MIN)
    text = event_charts.hover_text(p)
    assert "partly dropped" in text and "server A" in text and "player p1" in text and "heartbeat" in text
    assert "batch 7 · watermark met 00:01:00.000" in text
    assert "window 00:00:00.000–00:01:00.000: dropped" in text
    assert "window 00:00:30.000–00:01:30.000: late but accepted" in text
    pending = one(MIN, MIN, ev(45 * S), T, entry=f"{T + 10 * MIN}-0")
    assert "not processed yet" in event_charts.hover_text(pending)
    assert "not judged yet" in event_charts.hover_text(pending)
    assert "shard" not in text  # one stream: the entry ID alone names it
    [sharded] = judge([(f"{T + 5}-0", ev(5 * MIN), 2)], SHARDED, f"{T + 30}-0,{T + 25}-0,{T + 9}-0", MIN, MIN)
    assert f"entry {T + 5}-0 of input shard 2" in event_charts.hover_text(sharded)  # IDs repeat across shards


def test_too_many_boundaries_are_not_drawn_and_the_title_says_so() -> None:
    points = [one(S, S, ev(0), 0), one(S, S, ev(event_charts.MAX_BOUNDARIES * S), 0)]
    fig = event_charts.events_figure(points, [], S, S, T, T + 1)
    assert "window boundary" not in {t.name for t in fig.data}
    assert "not drawn" in fig.layout.title.text
