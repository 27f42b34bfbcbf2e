"""The online view per minute and per day (streaming.rules.online.rollup) as tables, and through the real commit
against Redis: the minute records, the open minute and the day's peaks the dashboard reads; a week of minutes as
tables: the slot layout, the ranges read back, the resampling a week's chart uses, when a day's record goes, the
regions' peaks (a week through Redis: tests/store/test_history.py)."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import redis

from streaming.rules.online.fold import KIND_CODES
from streaming.rules.online.rollup import (
    DAY_BYTES,
    DAY_MS,
    MINUTE_MS,
    SLOT_BYTES,
    TOTAL,
    Minute,
    Point,
    arrival_ms,
    day_of,
    day_span,
    days,
    decode,
    encode_slot,
    expire_in_s,
    minute_points,
    minute_slots,
    raise_peaks,
    region_key,
    resample,
    roll,
    shifted,
    slot_offset,
    step_for,
)
from streaming.rules.online.table import OnlineBatch, OnlineEvents
from streaming.schema.keys import KeySchema
from streaming.store.online.commit import OnlineMirror, commit_online
from streaming.store.views.online import read_online
from tests.schema.params import built_params

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a minute and a day boundary


@pytest.mark.parametrize(("current", "batch_ts", "closes", "open_minute"), [
    # the first batch opens its minute
    (None, T0 + 5_000, None, T0),
    # a batch of the same minute (its last millisecond) adds to it
    (Minute(T0, {"A": 1}, {"A": 1, TOTAL: 1}), T0 + MINUTE_MS - 1, None, T0),
    # the first millisecond of the next minute closes it
    (Minute(T0, {"A": 1}, {"A": 1, TOTAL: 1}), T0 + MINUTE_MS, T0, T0 + MINUTE_MS),
    # a gap of minutes (the job was stopped) closes the old one; the empty ones in between are not invented
    (Minute(T0, {"A": 1}, {"A": 1, TOTAL: 1}), T0 + 10 * MINUTE_MS + 1, T0, T0 + 10 * MINUTE_MS),
])
def test_roll_closes_a_minute_when_a_later_one_begins(current: Minute | None, batch_ts: int, closes: int | None,
                                                     open_minute: int) -> None:
    closed, now = roll(current, batch_ts, {"A": 2}, {"A": {"login": 1}})
    assert (closed.minute_ms if closed else None, now.minute_ms) == (closes, open_minute)
    assert now.last == {"A": 2}


def test_a_minute_keeps_the_last_counts_the_peaks_and_the_sum_of_transitions() -> None:
    m = None
    for counts, causes in [({"A": 3, "B": 1}, {"A": {"login": 3}, "B": {"login": 1}}),
                           ({"A": 5, "B": 0}, {"A": {"login": 2}, "B": {"logout": 1}}),
                           ({"A": 4, "B": 2}, {"A": {"timeout": 1}, "B": {"heartbeat": 2}})]:
        _, m = roll(m, T0 + 1_000, counts, causes)
    assert m is not None
    assert m.last == {"A": 4, "B": 2}
    assert m.peak == {"A": 5, "B": 2, TOTAL: 6}  # the total's peak is of one batch, not the sum of peaks
    assert m.causes == {"A": {"login": 5, "timeout": 1}, "B": {"login": 1, "logout": 1, "heartbeat": 2}}
    assert Minute.from_json(m.to_json()) == m


@pytest.mark.parametrize(("peaks", "counts", "raised"), [
    ({}, {"A": 2}, {"A": (2, 7), TOTAL: (2, 7)}),  # the first batch of the day sets every peak
    ({"A": (2, 1), TOTAL: (2, 1)}, {"A": 2}, {}),  # equal: the peak keeps the time it was first reached
    ({"A": (2, 1), TOTAL: (2, 1)}, {"A": 1, "B": 2}, {"B": (2, 7), TOTAL: (3, 7)}),  # a new server, a new total
])
def test_raise_peaks(peaks: dict, counts: dict, raised: dict) -> None:
    assert raise_peaks(peaks, counts, 7) == raised


def test_a_bad_minute_record_is_refused_with_what_it_is() -> None:
    with pytest.raises(ValueError, match="not a minute record of the online view"):
        Minute.from_json('{"minute_ms": 1}')


def events(*rows: tuple[str, str, int, str]) -> OnlineEvents:
    return OnlineEvents(np.array([r[0] for r in rows], object), np.array([r[1] for r in rows], object),
                          np.array([r[2] * 1000 for r in rows], np.int64), np.arange(len(rows), dtype=np.int64),
                          np.array([KIND_CODES[r[3]] for r in rows], np.int8))


def test_the_commit_keeps_minutes_and_the_days_peaks(r: redis.Redis) -> None:
    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    params, mirror = built_params(60_000, 60_000, 5_000), OnlineMirror()
    batches = [  # (arrival, events): two minutes, then a batch of the next day; its newest entry arrived then
        (T0 + 1_000, [("A", "p1", 100_000, "login"), ("A", "p2", 100_000, "login")]),
        (T0 + 2_000, [("A", "p1", 101_000, "logout"), ("B", "p3", 101_000, "login")]),
        (T0 + MINUTE_MS + 1_000, [("B", "p4", 102_000, "login")]),
        (T0 + DAY_MS + 1_000, [("C", "p5", 103_000, "login")]),
    ]
    for i, (ts, evs) in enumerate(batches):
        assert commit_online(r, keys, OnlineBatch(i, 0, ts + 400, f"{ts}-0", events(*evs), 5_000), params, 60_000,
                               mirror)
    first_day = read_online(r, keys, now_ms=T0 + MINUTE_MS + 30_000)
    assert first_day is not None
    assert [m.minute_ms for m in first_day.minutes] == [T0, T0 + MINUTE_MS, T0 + DAY_MS]
    first = first_day.minutes[0]
    assert (first.last, first.peak) == ({"A": 1, "B": 1}, {"A": 2, "B": 1, TOTAL: 2})
    assert first.causes == {"A": {"login": 2, "logout": 1}, "B": {"login": 1}}
    assert first_day.peaks == {"A": (2, T0 + 1_000), "B": (2, T0 + MINUTE_MS + 1_000),
                               TOTAL: (3, T0 + MINUTE_MS + 1_000)}
    next_day = read_online(r, keys, now_ms=T0 + DAY_MS + 5_000)
    assert next_day is not None and day_of(T0 + DAY_MS + 5_000) == T0 + DAY_MS
    assert next_day.peaks == {"A": (1, T0 + DAY_MS + 1_000), "B": (2, T0 + DAY_MS + 1_000),
                              "C": (1, T0 + DAY_MS + 1_000), TOTAL: (4, T0 + DAY_MS + 1_000)}
    assert [m.minute_ms for m in next_day.minutes] == [T0 + DAY_MS]  # the hour before it had no batch


REGIONS = {"eu-001": "eu", "eu-002": "eu", "us-001": "us"}


@pytest.mark.parametrize(("end_id", "fallback", "expected"), [
    ("1767225600123-4", 99, 1_767_225_600_123),  # the newest entry's arrival (Redis' clock, or a replay's)
    ("0-0", 99, 99),  # a batch that names no entry: its trigger time
    ("", 99, 99),
])
def test_a_batch_is_timed_by_its_newest_entry(end_id: str, fallback: int, expected: int) -> None:
    assert arrival_ms(end_id, fallback) == expected


@pytest.mark.parametrize(("last", "peak"), [(0, 0), (0, 5), (7, 7), (250_000, 251_003)])
def test_a_slot_reads_back_what_was_written_and_zero_players_is_not_no_data(last: int, peak: int) -> None:
    raw = b"\0" * SLOT_BYTES + encode_slot(last, peak) + b"\0" * SLOT_BYTES
    assert decode(T0, raw) == [Point(T0 + MINUTE_MS, last, peak)]  # the zero slots around it are no data


def test_a_day_is_1440_slots_in_minute_order() -> None:
    assert DAY_BYTES == 11_520
    assert [slot_offset(T0 + m * MINUTE_MS + 59_999) for m in (0, 1, 1439)] == [0, 8, 11_512]
    assert slot_offset(T0 + DAY_MS) == 0  # the next day's first minute starts its own record


@pytest.mark.parametrize(("start", "end", "expected_days", "first_span"), [
    # an hour inside a day: one record, its 60 slots
    (T0 + 3_600_000, T0 + 7_200_000, [T0], (480, 480 + 60 * 8 - 1)),
    # across midnight: the tail of one day, the head of the next
    (T0 + DAY_MS - 120_000, T0 + DAY_MS + 60_000, [T0, T0 + DAY_MS], (DAY_BYTES - 16, DAY_BYTES - 1)),
    # seven whole days from midnight: seven records, each whole
    (T0, T0 + 7 * DAY_MS, [T0 + d * DAY_MS for d in range(7)], (0, DAY_BYTES - 1)),
    # a range ending inside a minute reads that minute too (the open minute of now)
    (T0, T0 + 30_000, [T0], (0, 7)),
    (T0, T0, [], None),
])
def test_a_range_reads_one_span_per_day(start: int, end: int, expected_days: list[int],
                                        first_span: tuple[int, int] | None) -> None:
    assert days(start, end) == expected_days
    if first_span is not None:
        assert day_span(expected_days[0], start, end) == first_span


def test_a_minute_gives_every_series_its_slot_with_each_ones_own_peak() -> None:
    m: Minute | None = None
    for counts in ({"eu-001": 5, "eu-002": 1, "us-001": 2}, {"eu-001": 1, "eu-002": 4, "us-001": 3},
                   {"eu-001": 2, "eu-002": 2, "us-001": 0}):
        _, m = roll(m, T0 + 1_000, counts, {}, REGIONS)
    assert m is not None
    points = minute_points(m, REGIONS)
    # last: the minute's last batch; peaks: the series' own highest batch, for a region the sum of one batch
    # (eu: 6, 5, 4 -> 6; not 5 + 4, the servers' peaks at different moments)
    assert points == {"eu-001": Point(T0, 2, 5), "eu-002": Point(T0, 2, 4), "us-001": Point(T0, 0, 3),
                      region_key("eu"): Point(T0, 4, 6), region_key("us"): Point(T0, 0, 3),
                      TOTAL: Point(T0, 4, 8)}
    slots = minute_slots(m, REGIONS)
    assert {k: decode(T0, v)[0] for k, v in slots.items()} == points


def test_a_closed_minute_keeps_its_own_regions_whatever_the_batch_that_closes_it_says() -> None:
    """One rule for a minute's regions: its last batch's (Minute.regions). The history's day record and Live ops'
    last hour (dashboard.fleet) both read them; a server that moves region in the batch that closes the minute, or
    a record read when the servers' regions are forgotten, change nothing."""
    _, m = roll(None, T0 + 1_000, {"eu-001": 4, "us-001": 1}, {}, REGIONS)
    closed, _ = roll(m, T0 + MINUTE_MS, {"eu-001": 3, "us-001": 1}, {}, {"eu-001": "us", "us-001": "us"})
    assert closed is not None and closed.regions == {"eu": 4, "us": 1}
    for regions in ({"eu-001": "us", "us-001": "us"}, {}, None):
        points = minute_points(closed, regions)
        assert (points[region_key("eu")].last, points[region_key("us")].last, points[TOTAL].last) == (4, 1, 5)
        assert {k: decode(T0, v)[0] for k, v in minute_slots(closed, regions).items()} == points
    old = Minute(T0, last={"eu-001": 4, "us-001": 1}, peak={})  # a record from before minutes kept their regions
    assert minute_points(old, REGIONS)[region_key("eu")].last == 4


def test_servers_without_a_region_are_in_the_total_only() -> None:
    _, m = roll(None, T0, {"A": 2, "eu-001": 1}, {}, {"eu-001": "eu"})
    assert set(minute_points(m, {"eu-001": "eu"})) == {"A", "eu-001", region_key("eu"), TOTAL}


@pytest.mark.parametrize(("peaks", "counts", "raised"), [
    # a region's peak is raised by its sum, with the batch's time
    ({}, {"eu-001": 2, "eu-002": 3}, {"eu-001": (2, 7), "eu-002": (3, 7), region_key("eu"): (5, 7), TOTAL: (5, 7)}),
    # an equal sum keeps the first time; a server going down while another goes up can raise the region alone
    ({"eu-001": (3, 1), "eu-002": (3, 1), region_key("eu"): (5, 1), TOTAL: (5, 1)}, {"eu-001": 1, "eu-002": 5},
     {"eu-002": (5, 7), region_key("eu"): (6, 7), TOTAL: (6, 7)}),
])
def test_region_peaks(peaks: dict, counts: dict, raised: dict) -> None:
    assert raise_peaks(peaks, counts, 7, REGIONS) == raised


def test_a_weeks_chart_is_5_minute_buckets_of_last_and_highest() -> None:
    pts = [Point(T0 + m * MINUTE_MS, last, peak) for m, last, peak in
           [(0, 3, 4), (1, 5, 9), (4, 2, 5), (5, 7, 7), (9, 1, 1), (11, 6, 6)]]
    assert resample(pts, 5 * MINUTE_MS) == [Point(T0, 2, 9), Point(T0 + 5 * MINUTE_MS, 1, 7),
                                            Point(T0 + 10 * MINUTE_MS, 6, 6)]
    assert resample(pts, MINUTE_MS) == pts
    assert step_for(DAY_MS) == MINUTE_MS and step_for(7 * DAY_MS) == 5 * MINUTE_MS
    assert shifted(pts[:1], 7 * DAY_MS) == [Point(T0 + 7 * DAY_MS, 3, 4)]


@pytest.mark.parametrize(("now", "keep", "floor", "expected_s"), [
    # live: the day is kept 8 whole days after it ends (9 records a series at most)
    (T0 + 3_600_000, 8, 86_400, (9 * DAY_MS - 3_600_000) // 1000),
    # a replay of a month-old week: as long as the namespace's other keys
    (T0 + 40 * DAY_MS, 8, 86_400, 86_400),
])
def test_how_long_a_day_is_kept(now: int, keep: int, floor: int, expected_s: int) -> None:
    assert expire_in_s(T0, keep, now, floor) == expected_s


def test_a_minute_keeps_the_total_every_region_and_only_the_busiest_servers() -> None:
    """A fleet of matches names thousands of servers a day: a day record each would grow with every name, so a
    minute is kept for the total, each region and the SERVER_SERIES busiest servers only."""
    from streaming.rules.online.rollup import SERVER_SERIES, kept_series, minute_slots

    last = {f"m-{i:04d}": i % 50 for i in range(1_000)}
    regions = {s: ("eu" if i % 2 else "na") for i, s in enumerate(last)}
    m = Minute(0, last=last, peak={})
    kept = kept_series(m, regions)
    servers = [k for k in kept if k != TOTAL and not k.startswith("region|")]
    assert len(servers) == SERVER_SERIES and all(last[s] == 49 for s in servers)
    assert servers == sorted(s for s in last if last[s] == 49)[:SERVER_SERIES]  # equals by name
    assert kept[TOTAL] == sum(last.values())
    assert kept["region|eu"] + kept["region|na"] == kept[TOTAL]
    assert set(minute_slots(m, regions)) == set(kept)
    small = Minute(0, last={"A": 3, "B": 0, "C": 7}, peak={})
    assert set(kept_series(small)) == {"A", "B", "C", TOTAL}  # a few servers: every one of them
