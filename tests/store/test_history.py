"""A week of players online through the real online-view commit and a real Redis: every minute per server, region
and total, the day's peaks, the highest ever and the week-ago overlay read back equal an independent model
(tests/history_model.py) of players logging in and out on a daily curve, and a read costs a command per series and
day, whatever the number of players."""

from __future__ import annotations

import math
import uuid

import numpy as np
import redis

from streaming.rules.online.fold import KIND_CODES
from streaming.rules.online.rollup import DAY_MS, MINUTE_MS, TOTAL, WEEK_MS, Point, parse_peaks, shifted
from streaming.rules.online.table import OnlineBatch, OnlineEvents
from streaming.schema.keys import KeySchema
from streaming.store.history_store import HistoryRead, read_history
from streaming.store.online.commit import OnlineMirror, commit_online
from streaming.store.views.online import read_online
from tests import history_model
from tests.schema.params import built_params

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
REGIONS = {"eu-001": "eu", "eu-002": "eu", "eu-003": "eu", "us-001": "us", "us-002": "us"}
BASE = {"eu-001": 40, "eu-002": 9, "eu-003": 3, "us-001": 25, "us-002": 12, "solo": 6}  # "solo" has no region
TIMEOUT = 30 * DAY_MS  # nobody times out: the model is logins and logouts alone
STEP_MS = 17 * MINUTE_MS


def curve(at_ms: int) -> float:
    """An evening peak (21:00 UTC), a quiet night, Saturdays busier: any shape will do, the model follows it."""
    hour = (at_ms % DAY_MS) / 3_600_000
    day = (at_ms - T0) // DAY_MS
    return (0.55 + 0.45 * math.cos((hour - 21) / 24 * 2 * math.pi)) * (1.3 if day % 7 == 2 else 1.0)


def week_of_batches() -> list[tuple[int, list[tuple[str, str, str]]]]:
    """(arrival ms, events (server, player, kind)) for 8 days: a batch every 17 minutes, some minutes two."""
    online: dict[str, list[str]] = {s: [] for s in BASE}
    fresh = 0
    out = []
    at = T0 + 30_000
    while at < T0 + 8 * DAY_MS:
        for when in (at, at + 20_000) if len(out) % 5 == 0 else (at,):
            evs = []
            for s, base in BASE.items():
                target = round(base * curve(when)) + (len(out) % 3 if when != at else 0)
                while len(online[s]) < target:
                    fresh += 1
                    online[s].append(f"p{fresh}")
                    evs.append((s, f"p{fresh}", "login"))
                while len(online[s]) > target:
                    evs.append((s, online[s].pop(0), "logout"))
            out.append((when, evs))
        at += STEP_MS
    return out


def model_counts(batches: list[tuple[int, list[tuple[str, str, str]]]]) -> list[tuple[int, dict[str, int]]]:
    """Players online per server after each batch: logged in and not out since; a server counts from its first
    event."""
    online: dict[str, set[str]] = {}
    out = []
    for at, evs in batches:
        for s, p, kind in evs:
            (online.setdefault(s, set()).add if kind == "login" else online.setdefault(s, set()).discard)(p)
        out.append((at, {s: len(ps) for s, ps in online.items()}))
    return out


def commit_all(r: redis.Redis, keys: KeySchema, batches: list[tuple[int, list[tuple[str, str, str]]]]) -> None:
    params, mirror = built_params(60_000, 60_000, 5_000, history_days=8, retire_after_ms=9 * DAY_MS), OnlineMirror()
    r.hset(keys.regions, mapping=REGIONS)  # as the pipeline's own commit writes it from the events
    for i, (at, evs) in enumerate(batches):
        ev = OnlineEvents(np.array([e[0] for e in evs], object), np.array([e[1] for e in evs], object),
                            np.full(len(evs), at * 1000, np.int64), np.arange(len(evs), dtype=np.int64),
                            np.array([KIND_CODES[e[2]] for e in evs], np.int8), np.full(len(evs), at, np.int64))
        assert commit_online(r, keys, OnlineBatch(i, 0, at + 300, f"{at}-0", ev, 5_000), params, TIMEOUT,
                               mirror, now_ms=lambda at=at: at + 400)


def test_a_week_per_minute_per_server_region_and_total_equals_the_model(r: redis.Redis) -> None:
    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    batches = week_of_batches()
    commit_all(r, keys, batches)
    counts = model_counts(batches)
    expected = history_model.minutes(counts, REGIONS)
    end = T0 + 8 * DAY_MS
    got = read_history(r, keys, sorted(expected), T0, end)
    # the last minute is still open (no later batch closed it): the online view's state holds it
    view = read_online(r, keys, now_ms=end)
    assert view is not None
    open_minute = view.minutes[-1].minute_ms
    for series, by_minute in expected.items():
        want = [Point(m, last, peak) for m, (last, peak) in sorted(by_minute.items()) if m != open_minute]
        assert got[series] == want, series
    assert len(expected["region|eu"]) > 600  # the model saw the week: 8 days of batches, not a few
    assert {"eu-001", "region|eu", "region|us", TOTAL, "solo"} <= set(expected)
    assert "region|" not in expected and not any(k.startswith("region|solo") for k in got)


def test_the_days_peaks_the_highest_ever_and_the_week_ago_overlay_equal_the_model(r: redis.Redis) -> None:
    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    batches = week_of_batches()
    commit_all(r, keys, batches)
    counts = model_counts(batches)
    for day, want in history_model.peaks(counts, REGIONS, per_day=True).items():
        assert day is not None
        assert parse_peaks(r.hgetall(keys.online_peak(day))) == want, day
    ever = history_model.peaks(counts, REGIONS, per_day=False)[None]
    assert parse_peaks(r.hgetall(keys.online_peak_ever)) == ever
    assert 8 * 86_400 < r.ttl(keys.online_peak_ever) <= 9 * 86_400  # bounded: it goes when no job writes
    assert ever[TOTAL][1] // DAY_MS * DAY_MS == T0 + 2 * DAY_MS  # the busy Saturday holds the record
    # today 18:00-24:00 against the same hours a week ago, drawn over today
    today = T0 + 7 * DAY_MS
    series = ("region|eu", "region|us", TOTAL)
    week_ago = read_history(r, keys, series, today + 18 * 3_600_000 - WEEK_MS, today + DAY_MS - WEEK_MS)
    expected = history_model.minutes(counts, REGIONS)
    for s in series:
        want = [Point(m + WEEK_MS, *v) for m, v in sorted(expected[s].items())
                if today + 18 * 3_600_000 - WEEK_MS <= m < today - WEEK_MS + DAY_MS]
        assert shifted(week_ago[s], WEEK_MS) == want and want


def test_a_weeks_read_is_a_command_per_series_and_day() -> None:
    q = HistoryRead(("region|eu", "region|us", TOTAL), T0 + 3_600_000, T0 + 3_600_000 + 7 * DAY_MS)
    pipe = redis.Redis().pipeline(transaction=False)  # queued, never sent
    assert q.queue(pipe, KeySchema("t")) == 3 * 8 == len(pipe.command_stack)


def test_a_full_day_of_one_series_is_11520_bytes_and_its_memory_is_bounded(r: redis.Redis) -> None:
    """The figure docs/operations.md multiplies out: a series' day written minute by minute as the job writes it
    is 11,520 bytes and 12,344 bytes of Redis memory with its key (jemalloc's 12 KB class; SETRANGE's growth leaves
    no slack at the end), so 307 series x 9 days at 300 servers are 34.1 MB plus the keyspace: 34.3 MB measured."""
    from streaming.rules.online.rollup import Minute
    from streaming.store.history_store import queue_minute

    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    for m in range(0, 1440, 60):
        pipe = r.pipeline(transaction=True)
        for k in range(m, m + 60):
            queue_minute(pipe, keys, Minute(T0 + k * MINUTE_MS, {"eu-001": 7}, {"eu-001": 9}), {}, 86_400)
        pipe.execute()
    key = keys.history(T0, "eu-001")
    assert r.strlen(key) == 11_520 and 0 < r.ttl(key) <= 86_400
    usage = r.memory_usage(key)
    # jemalloc's 12 KB class and the key's own few hundred bytes (12,344 here, 12,440 on a CI machine); a string
    # that SETRANGE grew with slack would take the 16 KB class or more
    assert usage is not None and 11_520 < usage < 14_336, usage
    assert read_history(r, keys, ["eu-001", TOTAL], T0, T0 + DAY_MS)["eu-001"][-1] == Point(T0 + DAY_MS - MINUTE_MS,
                                                                                            7, 9)
