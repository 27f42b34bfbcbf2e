"""The online view per minute and per day (watermark.rules.presence_rollup) as tables, and through the real commit
against Redis: the minute records, the open minute and the day's peaks the dashboard reads."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import redis

from watermark.rules.presence_batch import KIND_CODES
from watermark.rules.presence_rollup import DAY_MS, MINUTE_MS, TOTAL, Minute, day_of, raise_peaks, roll
from watermark.schema.keys import KeySchema
from watermark.store.commit import Params
from watermark.store.presence_store import PresenceBatch, PresenceEvents, PresenceMirror, commit_presence, read_online

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


def events(*rows: tuple[str, str, int, str]) -> PresenceEvents:
    return PresenceEvents(np.array([r[0] for r in rows], object), np.array([r[1] for r in rows], object),
                          np.array([r[2] * 1000 for r in rows], np.int64), np.arange(len(rows), dtype=np.int64),
                          np.array([KIND_CODES[r[3]] for r in rows], np.int8))


def test_the_commit_keeps_minutes_and_the_days_peaks(r: redis.Redis) -> None:
    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    params, mirror = Params(60_000, 60_000, 5_000), PresenceMirror()
    batches = [  # (batch time, events): two minutes, then a batch of the next day
        (T0 + 1_000, [("A", "p1", 100_000, "login"), ("A", "p2", 100_000, "login")]),
        (T0 + 2_000, [("A", "p1", 101_000, "logout"), ("B", "p3", 101_000, "login")]),
        (T0 + MINUTE_MS + 1_000, [("B", "p4", 102_000, "login")]),
        (T0 + DAY_MS + 1_000, [("C", "p5", 103_000, "login")]),
    ]
    for i, (ts, evs) in enumerate(batches):
        assert commit_presence(r, keys, PresenceBatch(i, 0, ts, f"{i + 1}-0", events(*evs), 5_000), params, 60_000,
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
