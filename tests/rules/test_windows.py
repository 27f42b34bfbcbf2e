"""The window math and late rule, as a table (no Spark)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from streaming.rules.windows import (
    Verdict,
    Window,
    advance_pipeline,
    advance_watermark,
    classify,
    event_ms,
    is_closed,
    is_late,
    late_counts,
    server_watermark,
    window_ranges,
)

S = 1_000_000  # microseconds per second
M = 60 * S


@pytest.mark.parametrize(
    ("event_us", "length_ms", "slide_ms", "expected"),
    [
        # tumbling 10m: an event inside the first window
        (3 * M, 600_000, 600_000, [(0, 600_000)]),
        # tumbling: the end is exclusive, so an event exactly on a boundary opens the next window
        (10 * M, 600_000, 600_000, [(600_000, 1_200_000)]),
        # tumbling: one microsecond before the boundary still belongs to the earlier window
        (10 * M - 1, 600_000, 600_000, [(0, 600_000)]),
        # sliding 10m every 5m: every event is in two windows
        (7 * M, 600_000, 300_000, [(0, 600_000), (300_000, 900_000)]),
        # sliding: on a slide boundary the window ending there is excluded
        (10 * M, 600_000, 300_000, [(300_000, 900_000), (600_000, 1_200_000)]),
        # sliding 1m every 20s: three windows, oldest first
        (125 * S, 60_000, 20_000, [(80_000, 140_000), (100_000, 160_000), (120_000, 180_000)]),
        # length not a multiple of slide: 25s windows every 10s hold an event in 2 or 3 windows
        (21 * S, 25_000, 10_000, [(0, 25_000), (10_000, 35_000), (20_000, 45_000)]),
        (26 * S, 25_000, 10_000, [(10_000, 35_000), (20_000, 45_000)]),
        # before the epoch windows stay aligned (floor, not truncation)
        (-1, 600_000, 600_000, [(-600_000, 0)]),
        # sub-millisecond event times fall into the window that contains them
        (600_000_999, 600_000, 600_000, [(600_000, 1_200_000)]),
    ],
)
def test_window_ranges(event_us: int, length_ms: int, slide_ms: int, expected: list[tuple[int, int]]) -> None:
    assert window_ranges(event_us, length_ms, slide_ms) == [Window(s, e) for s, e in expected]


@pytest.mark.parametrize(
    ("event_us", "window", "watermark_ms", "verdict"),
    [
        # watermark at 0 (nothing seen yet): everything is on time
        (5 * M, Window(0, 600_000), 0, Verdict.ON_TIME),
        # event after the watermark: on time
        (9 * M, Window(0, 600_000), 300_000, Verdict.ON_TIME),
        # event before the watermark, window still open (end > watermark): late but accepted
        (2 * M, Window(0, 600_000), 300_000, Verdict.LATE_ACCEPTED),
        # window end equal to the watermark: closed, so the event is dropped
        (2 * M, Window(0, 600_000), 600_000, Verdict.DROPPED),
        # window end one millisecond above the watermark: still open
        (2 * M, Window(0, 600_000), 599_999, Verdict.LATE_ACCEPTED),
        # event exactly at the watermark is not below it: on time
        (5 * M, Window(0, 600_000), 300_000, Verdict.ON_TIME),
        # sliding: the same event is dropped from its closed window ...
        (7 * M, Window(0, 600_000), 600_000, Verdict.DROPPED),
        # ... and late-accepted into the open one
        (7 * M, Window(300_000, 900_000), 600_000, Verdict.LATE_ACCEPTED),
    ],
)
def test_classify(event_us: int, window: Window, watermark_ms: int, verdict: Verdict) -> None:
    assert classify(event_us, window, watermark_ms) is verdict
    assert is_closed(window.end_ms, watermark_ms) == (verdict is Verdict.DROPPED)


@pytest.mark.parametrize(
    ("watermark_ms", "event_times_us", "delay_ms", "expected"),
    [
        # first batch: max event time minus delay
        (0, [10 * M, 12 * M], 300_000, 420_000),
        # a batch of old events never lowers the watermark
        (420_000, [1 * M], 300_000, 420_000),
        # an empty batch leaves it where it is
        (420_000, [], 300_000, 420_000),
        # zero delay: the watermark is the max event time itself
        (0, [12 * M], 0, 720_000),
        # Spark tracks milliseconds: microseconds are truncated, not rounded
        (0, [12 * M + 999], 0, 720_000),
        # max is taken over the whole batch, wherever it sits
        (0, [3 * M, 30 * M, 4 * M], 600_000, 1_200_000),
    ],
)
def test_advance_watermark(watermark_ms: int, event_times_us: list[int], delay_ms: int, expected: int) -> None:
    assert advance_watermark(watermark_ms, event_times_us, delay_ms) == expected


@pytest.mark.parametrize(
    ("own_ms", "newest_ms", "delay_ms", "expected"),
    [
        (60_000, 200_000, 30_000, 170_000),  # the newest event minus the delay
        (60_000, 50_000, 30_000, 60_000),  # never below the input's own
        (60_000, 90_000, 30_000, 60_000),  # equal: as it was
        (None, 50_000, 30_000, 20_000),  # the input's first batch sets it, whatever it is
        (None, 10_000, 30_000, -20_000),  # ... below zero too, as Spark's per-input map keeps it
    ],
)
def test_one_inputs_watermark_advances_with_its_newest_event(own_ms: int | None, newest_ms: int, delay_ms: int,
                                                             expected: int) -> None:
    assert server_watermark(own_ms, newest_ms, delay_ms) == expected


@pytest.mark.parametrize(
    ("in_force_ms", "running_us", "newest_us", "combined_ms", "expected"),
    [
        (60_000, None, [], None, (None, 60_000)),  # no event ever: the one in force
        (60_000, 150 * S, [None], None, (150 * S, 120_000)),  # a batch without events: from the running max
        (60_000, 150 * S, [100 * S], None, (150 * S, 120_000)),  # an older batch: the running max stands
        (60_000, 150 * S, [100 * S, 200 * S], None, (200 * S, 170_000)),  # the newest of every share
        (60_000, None, [70 * S], None, (70 * S, 60_000)),  # never below the one in force
        (60_000, 150 * S, [200 * S], 90_000, (200 * S, 90_000)),  # per server: Spark's combined one
        (60_000, 150 * S, [200 * S], 40_000, (200 * S, 60_000)),  # ... never below the one in force
    ],
)
def test_the_pipelines_watermark_advances_over_its_running_max(in_force_ms: int, running_us: int | None,
                                                              newest_us: list[int | None], combined_ms: int | None,
                                                              expected: tuple[int | None, int]) -> None:
    assert advance_pipeline(in_force_ms, running_us, newest_us, 30_000, combined_ms) == expected


@pytest.mark.parametrize(("event_us", "watermark_ms", "late"),
                         [(60_000_000 - 1, 60_000, True), (60_000_000, 60_000, False), (-1, 0, True), (0, 0, False)])
def test_an_event_below_the_watermark_is_late(event_us: int, watermark_ms: int, late: bool) -> None:
    assert is_late(event_us, watermark_ms) is late


def test_event_ms_truncates_toward_zero_like_spark() -> None:
    assert event_ms(1999) == 1
    assert event_ms(-1999) == -1


def test_window_ranges_rejects_nonpositive_sizes() -> None:
    with pytest.raises(ValueError):
        window_ranges(0, 0, 1)


# A histogram: 2 events at 10 s, 1 at 29.999 s, 1 at 30 s, 3 at 45 s, 1 at -5 s (before 1970), 1 at 60 s.
HIST_US = [-5 * S, 10 * S, 29_999_000, 30 * S, 45 * S, 60 * S]
HIST_N = [1, 2, 1, 1, 3, 1]


@pytest.mark.parametrize(("start_ms", "end_ms", "watermark_ms", "expected"), [
    (0, 60_000, 30_000, 3),  # 10 s x2 and 29.999 s; the event at exactly the watermark is not late
    (0, 60_000, 30_001, 4),  # a millisecond later it is
    (0, 60_000, 0, 0),  # the window starts at the watermark: nothing in it is before it
    (60_000, 120_000, 30_000, 0),  # a window after the watermark
    (-60_000, 0, -10_000, 0),  # before 1970: -5 s is in [-60 s, 0) but after the watermark at -10 s
    (-60_000, 0, -1_000, 1),  # and before one at -1 s
    (0, 60_000, 90_000, 7),  # watermark past the end (a caller's closed window): capped at the end, 60 s excluded
    (30_000, 90_000, 50_000, 4),  # sliding: [30 s, 50 s) holds 30 s and 45 s x3, not 29.999 s
])
def test_late_counts(start_ms: int, end_ms: int, watermark_ms: int, expected: int) -> None:
    got = late_counts(np.array([start_ms]), np.array([end_ms]), np.array(HIST_US), np.array(HIST_N), watermark_ms)
    assert got.tolist() == [expected]


def test_late_counts_equal_classify_event_by_event() -> None:
    """Random histograms and windows against the late rule applied to each event (:func:`classify`)."""
    rng = random.Random(5)
    for _ in range(200):
        times = sorted(rng.sample(range(-200_000, 200_000, 250), 40))
        counts = [rng.randrange(1, 4) for _ in times]
        length, slide = rng.choice([(60, 60), (60, 30), (90, 30)])
        watermark_ms = rng.randrange(-150, 150) * 1000
        windows = sorted({w for t in times for w in window_ranges(t * 1000, length * 1000, slide * 1000)},
                         key=lambda w: w.start_ms)
        open_ = [w for w in windows if not is_closed(w.end_ms, watermark_ms)]
        got = late_counts(np.array([w.start_ms for w in open_], np.int64), np.array([w.end_ms for w in open_]),
                          np.array(times, np.int64) * 1000, np.array(counts), watermark_ms)
        expected = [sum(n for t, n in zip(times, counts, strict=True)
                        if w.start_ms <= t < w.end_ms and classify(t * 1000, w, watermark_ms) == Verdict.LATE_ACCEPTED)
                    for w in open_]
        assert got.tolist() == expected


def test_late_counts_of_many_servers_at_once_equal_one_server_at_a_time() -> None:
    """Histograms.late_counts against late_counts per server: random servers, events far apart and windows
    before, inside and past every server's events (the bounds clipped to its segment)."""
    from streaming.rules.windows import Histograms

    rng = random.Random(9)
    for _ in range(100):
        hists, windows = {}, []
        for s in range(rng.randrange(1, 12)):
            times = sorted(rng.sample(range(-3_000_000, 3_000_000, 50), rng.randrange(1, 30)))
            hists[f"s{s}"] = (np.array(times, np.int64) * 1000, np.array([rng.randrange(1, 5) for _ in times]))
            windows += [(f"s{s}", start, start + rng.choice([30, 60, 600]) * 1000)
                        for start in rng.sample(range(-3_600_000, 3_600_000, 1_000), 8)]
        watermark_ms = rng.randrange(-3_000, 3_000) * 1000
        many = Histograms.of(hists)
        assert many is not None
        got = many.late_counts([w[0] for w in windows], np.array([w[1] for w in windows], np.int64),
                               np.array([w[2] for w in windows], np.int64), watermark_ms)
        one = [int(late_counts(np.array([a], np.int64), np.array([b], np.int64), *hists[s], watermark_ms)[0])
               for s, a, b in windows]
        assert got.tolist() == one


def test_event_times_too_far_apart_to_key_together_say_so() -> None:
    from streaming.rules.windows import Histograms

    far = {"A": (np.array([0], np.int64), np.array([1])), "B": (np.array([2**61], np.int64), np.array([1]))}
    assert Histograms.of(far) is None
