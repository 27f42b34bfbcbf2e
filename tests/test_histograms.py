"""The source's lag histograms (streaming.histograms): exact against a plain count of the events, however the
events are folded, and as the source emits them from a real Redis stream."""

from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa
import pytest
import redis

from streaming.events import Event, idle_marker
from streaming.histograms import EVENT_TIME, INGEST_LAG, PartitionHistograms
from streaming.source import READ_CHUNK, StreamRange, _Options, read_range

S = 1_000_000


def as_counts(server: pa.Array, histogram: pa.StructArray) -> dict[tuple, tuple]:
    """(of, server, key) -> (n, min event, max event); a key twice would be a histogram not folded."""
    out: dict[tuple, tuple] = {}
    for s, h in zip(server.to_pylist(), histogram.to_pylist(), strict=True):
        key = (h["of"], s, h["key_us"])
        assert key not in out
        out[key] = (h["n"], h["min_event_us"], h["max_event_us"])
    return out


def oracle(events: list[tuple[str, int, int]]) -> dict[tuple, tuple]:
    """(server, ingest, event) triples counted one at a time."""
    n: Counter = Counter()
    lo: dict[tuple, int] = {}
    hi: dict[tuple, int] = {}
    for server, ingest, ev in events:
        for key in ((INGEST_LAG, server, ingest - ev), (EVENT_TIME, server, ev)):
            n[key] += 1
            lo[key] = min(lo.get(key, ev), ev)
            hi[key] = max(hi.get(key, ev), ev)
    return {k: (n[k], lo[k], hi[k]) for k in n}


def random_events(seed: int, count: int) -> list[tuple[str, int, int]]:
    """Few distinct keys, so that folding merges: event times on a 10 ms grid, lags of 0-30 ms."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        ev = 1_767_225_600 * S + rng.randrange(0, 2_000) * 10_000 - rng.choice([0, 3_600 * S * 24 * 365 * 60])
        out.append((rng.choice("ABC"), ev + rng.randrange(0, 30) * 1000, ev))
    return out


@pytest.mark.parametrize(("seed", "chunk", "fold_at"), [
    (0, 1_000, 1 << 18),  # one fold, at the end
    (1, 1_000, 1),  # a fold after every chunk
    (2, 7, 50),  # folds every few chunks, partial histograms merged with new events
    (3, 5_000, 5_000),  # the whole set in one chunk, folded as it arrives
])
def test_histograms_equal_a_plain_count(seed: int, chunk: int, fold_at: int) -> None:
    events = random_events(seed, 5_000)  # some before 1970: negative event times
    h = PartitionHistograms(fold_at=fold_at)
    for i in range(0, len(events), chunk):
        part = events[i:i + chunk]
        h.add(*(pa.array([e[j] for e in part], typ) for j, typ in enumerate((pa.string(), pa.int64(), pa.int64()))))
    got = as_counts(*h.rows())
    expected = oracle(events)
    assert got == expected
    assert sum(v[0] for k, v in got.items() if k[0] == INGEST_LAG) == len(events)
    assert len(got) < len(events)  # the point of it: fewer rows than events


def test_no_events_no_rows() -> None:
    h = PartitionHistograms()
    h.add(pa.array([], pa.string()), pa.array([], pa.int64()), pa.array([], pa.int64()))
    server, histogram = h.rows()
    assert len(server) == 0 and len(histogram) == 0


def test_fold_at_must_be_positive() -> None:
    with pytest.raises(ValueError, match="fold_at must be at least 1, got 0"):
        PartitionHistograms(fold_at=0)


@pytest.mark.parametrize("value", ["yes", "1", ""])
def test_the_source_option_takes_true_or_false(value: str) -> None:
    with pytest.raises(ValueError, match="option lagHistograms must be 'true' or 'false'"):
        _Options({"url": "redis://127.0.0.1:1", "stream": "s", "lagHistograms": value})


def test_a_partition_ends_with_its_histograms(r: redis.Redis, redis_url: str) -> None:
    """Read from a real stream across chunk boundaries: the last batch holds the histograms of exactly the
    accepted events before it (no quarantined entries, no idle markers), every other column null."""
    stream = "test:histograms:source"
    r.delete(stream)
    rng = random.Random(7)
    t0 = 1_767_225_600_000
    expected_events = []
    pipe = r.pipeline()
    for i in range(2_500):
        arrival_ms = t0 + i
        ev_us = (arrival_ms - rng.randrange(0, 40)) * 1000
        roll = rng.random()
        if roll < 0.05:
            pipe.xadd(stream, {"payload": b"{not json"}, id=f"{arrival_ms}-0")
        elif roll < 0.1:
            pipe.xadd(stream, idle_marker("B", ev_us).fields(), id=f"{arrival_ms}-0")
        else:
            server = rng.choice("AB")
            pipe.xadd(stream, Event(server, f"p{i % 50}", ev_us, "heartbeat").fields(), id=f"{arrival_ms}-0")
            expected_events.append((server, arrival_ms * 1000, ev_us))
    pipe.execute()
    batches = list(read_range(redis_url, stream,
                              StreamRange("0-0", f"{t0 + 10_000}-0"), chunk=300,
                              histograms=PartitionHistograms(fold_at=1_000)))
    assert sum(b.num_rows for b in batches[:-1]) == 2_500  # one row per entry, then the histograms
    last = batches[-1]
    assert last.column("entry_id").null_count == last.num_rows
    assert last.column("event_time").null_count == last.num_rows
    assert as_counts(last.column("server"), last.column("histogram")) == oracle(expected_events)
    assert all(b.column("histogram").null_count == b.num_rows for b in batches[:-1])
    plain = list(read_range(redis_url, stream, StreamRange("0-0", f"{t0 + 10_000}-0"), chunk=READ_CHUNK))
    assert sum(b.num_rows for b in plain) == 2_500  # without histograms: entries only
    r.delete(stream)

