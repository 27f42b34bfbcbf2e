"""The source's partial aggregates (streaming.spark.partial): exact against a plain count of the events, however
the events are folded, and as the source emits them from a real Redis stream."""

from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import redis

from streaming.rules.windows import window_ranges
from streaming.spark.partial import (
    EVENT_TIME,
    INGEST_LAG,
    PLAYER,
    WINDOW,
    PartitionPartials,
)
from streaming.spark.source import READ_CHUNK, SourceOptions, StreamRange, read_range
from streaming.store.batch.arrow_pack import PACKED, PACKED_PLAYERS
from streaming.store.batch.arrow_pack import unpack_rows as unpack
from watermark_client.events import Event, idle_marker

S = 1_000_000


def as_counts(server: pa.Array, partial: pa.StructArray) -> dict[tuple, tuple]:
    """(of, server, key) -> (n, min event, max event); a key twice would be a group not folded."""
    out: dict[tuple, tuple] = {}
    for s, h in zip(server.to_pylist(), partial.to_pylist(), strict=True):
        key = (h["of"], s, h["key_us"])
        assert key not in out
        out[key] = (h["n"], h["min_event_us"], h["max_event_us"])
    return out


def oracle(events: list[tuple[str, str, int, int]], window_ms: int, slide_ms: int) -> dict[tuple, tuple]:
    """(server, player, ingest, event) counted one at a time, windows from streaming.rules.windows (a window's
    players are not the partials' business: the sink takes them from the player rows)."""
    n: Counter = Counter()
    lo: dict[tuple, int] = {}
    hi: dict[tuple, int] = {}
    for server, _player, ingest, ev in events:
        keys = [(INGEST_LAG, server, ingest - ev), (EVENT_TIME, server, ev)]
        keys += [(WINDOW, server, w.start_ms * 1000) for w in window_ranges(ev, window_ms, slide_ms)]
        for key in keys:
            n[key] += 1
            lo[key] = min(lo.get(key, ev), ev)
            hi[key] = max(hi.get(key, ev), ev)
    return {k: (n[k], lo[k], hi[k]) for k in n}


def random_events(seed: int, count: int) -> list[tuple[str, str, int, int]]:
    """Few distinct keys, so that folding merges: event times on a 10 ms grid over 20 s, lags of 0-30 ms,
    some 60 years before 1970 (negative times)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        ev = 1_767_225_600 * S + rng.randrange(0, 2_000) * 10_000 - rng.choice([0, 3_600 * S * 24 * 365 * 60])
        out.append((rng.choice("ABC"), f"p{rng.randrange(20)}", ev + rng.randrange(0, 30) * 1000, ev))
    return out


@pytest.mark.parametrize(("seed", "chunk", "fold_at", "window_ms", "slide_ms"), [
    (0, 1_000, 1 << 18, 10_000, 10_000),  # tumbling, one fold at the end
    (1, 1_000, 1, 10_000, 5_000),  # sliding (two windows an event), a fold after every chunk
    (2, 7, 50, 3_000, 1_000),  # three windows an event, folds every few chunks merge partial groups
    (3, 5_000, 5_000, 7_000, 3_000),  # a window not a multiple of the slide (three or two windows an event)
])
def test_partials_equal_a_plain_count(seed: int, chunk: int, fold_at: int, window_ms: int, slide_ms: int) -> None:
    events = random_events(seed, 5_000)
    h = PartitionPartials(window_ms, slide_ms, fold_at=fold_at)
    for i in range(0, len(events), chunk):
        part = events[i:i + chunk]
        h.add(*(pa.array([e[j] for e in part], typ) for j, typ in ((0, pa.string()), (2, pa.int64()),
                                                                    (3, pa.int64()))))
    got = as_counts(*h.rows())
    assert got == oracle(events, window_ms, slide_ms)
    assert sum(v[0] for k, v in got.items() if k[0] == INGEST_LAG) == len(events)
    items = sum(len(window_ranges(e[3], window_ms, slide_ms)) + 2 for e in events)
    assert len(got) < items / 2  # the point of it: Spark used to count one item per window and lag figure


def test_no_events_no_rows() -> None:
    h = PartitionPartials(60_000, 60_000)
    h.add(pa.array([], pa.string()), pa.array([], pa.int64()), pa.array([], pa.int64()))
    assert [len(c) for c in h.rows()] == [0, 0]


@pytest.mark.parametrize(("window_ms", "slide_ms", "fold_at", "message"), [
    (60_000, 60_000, 0, "fold_at must be at least 1, got 0"),
    (0, 60_000, 1, r"window \(0 ms\) and slide \(60000 ms\) must be positive"),
    (60_000, 120_000, 1, "the slide no longer than the window"),
])
def test_bad_parameters_are_refused(window_ms: int, slide_ms: int, fold_at: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PartitionPartials(window_ms, slide_ms, fold_at=fold_at)


@pytest.mark.parametrize(("options", "message"), [
    ({"preAggregate": "yes"}, "option preAggregate must be 'true' or 'false', got 'yes'"),
    ({"preAggregate": "true"}, "needs windowMs and slideMs as whole milliseconds, got None and None"),
    ({"preAggregate": "true", "windowMs": "1m", "slideMs": "60000"}, "got '1m' and '60000'"),
    ({"preAggregate": "true", "windowMs": "60000", "slideMs": "0"}, r"slide \(0 ms\) must be positive"),
])
def test_the_source_options_are_checked(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SourceOptions({"url": "redis://127.0.0.1:1", "stream": "s", **options})


def test_a_partition_returns_its_partials(r: redis.Redis, redis_url: str) -> None:
    """Read from a real stream across chunk boundaries: quarantined entries and idle markers come one row
    each, the accepted events only as the last batch's partial rows, packed one row per server carrying
    its servers' latest event as ``event_time`` (the watermark's input); unpacked, window rows carry their
    own latest event. Every accepted event also comes once as a player row, packed per chunk."""
    stream = "test:partial:source"
    r.delete(stream)
    rng = random.Random(7)
    t0 = 1_767_225_600_000
    expected_events, other = [], 0
    pipe = r.pipeline()
    for i in range(2_500):
        arrival_ms = t0 + i
        ev_us = (arrival_ms - rng.randrange(0, 40)) * 1000
        roll = rng.random()
        if roll < 0.05:
            pipe.xadd(stream, {"payload": b"{not json"}, id=f"{arrival_ms}-0")
            other += 1
        elif roll < 0.1:
            pipe.xadd(stream, idle_marker("B", ev_us).fields(), id=f"{arrival_ms}-0")
            other += 1
        else:
            server, player = rng.choice("AB"), f"p{i % 50}"
            pipe.xadd(stream, Event(server, player, ev_us, "heartbeat").fields(), id=f"{arrival_ms}-0")
            expected_events.append((server, player, arrival_ms * 1000, ev_us))
    pipe.execute()
    batches = list(read_range(redis_url, stream, StreamRange("0-0", f"{t0 + 10_000}-0"), chunk=300,
                              partials=PartitionPartials(1_000, 500, fold_at=1_000)))
    chunks, packed = pa.Table.from_batches(batches[:-1]), batches[-1]
    of = pc.struct_field(chunks.column("partial"), "of")
    entries = chunks.filter(of.is_null())
    assert entries.num_rows == other  # one row per quarantined entry or idle marker
    assert set(of.drop_null().to_pylist()) == {PACKED_PLAYERS}  # and each chunk's accepted events, packed
    assert sorted(packed.column("server").to_pylist()) == ["A", "B"]  # one packed row per server
    assert {p["of"] for p in packed.column("partial").to_pylist()} == {PACKED}
    last = unpack(pa.Table.from_batches([packed]))
    for server, latest in zip(packed.column("server").to_pylist(), packed.column("event_time").to_pylist(),
                              strict=True):
        assert int(latest.timestamp() * S) == max(e[3] for e in expected_events if e[0] == server)
    assert last.column("entry_id").null_count == last.num_rows
    assert last.column("player_id").null_count == last.num_rows  # a window's players come from player rows
    got = as_counts(last.column("server"), last.column("partial"))
    assert got == oracle(expected_events, 1_000, 500)
    rows = last.to_pylist()
    assert all(row["event_time"] is None for row in rows if row["partial"]["of"] != WINDOW)
    windows = [row for row in rows if row["partial"]["of"] == WINDOW]
    assert all(int(row["event_time"].timestamp() * S) == row["partial"]["max_event_us"] for row in windows)
    assert max(row["partial"]["max_event_us"] for row in windows) == max(e[3] for e in expected_events)
    plain = list(read_range(redis_url, stream, StreamRange("0-0", f"{t0 + 10_000}-0"), chunk=READ_CHUNK))
    assert sum(b.num_rows for b in plain) == 2_500  # without partials: one row per entry
    unpacked = unpack(chunks)
    players = unpacked.filter(pc.equal(pc.struct_field(unpacked.column("partial"), "of"), PLAYER))
    event_us = pc.struct_field(players.column("partial"), "key_us").to_pylist()
    assert sorted(zip(players.column("server").to_pylist(), players.column("player_id").to_pylist(), event_us,
                      strict=True)) == sorted((e[0], e[1], e[3]) for e in expected_events)
    assert set(players.column("kind").to_pylist()) == {"heartbeat"}
    r.delete(stream)
