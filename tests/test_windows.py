"""The window math and late rule, as a table (no Spark)."""

from __future__ import annotations

import pytest

from streaming.windows import Verdict, Window, advance_watermark, classify, event_ms, is_closed, window_ranges

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


def test_event_ms_truncates_toward_zero_like_spark() -> None:
    assert event_ms(1999) == 1
    assert event_ms(-1999) == -1


def test_window_ranges_rejects_nonpositive_sizes() -> None:
    with pytest.raises(ValueError):
        window_ranges(0, 0, 1)
