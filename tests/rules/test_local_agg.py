"""The sink's aggregation (streaming.spark.local_agg) against a plain-Python oracle built on the window math: the
source's partial aggregates (streaming.spark.partial) and player rows of random entries, summed across partitions;
and the real source's packed rows through Spark, unpacked on the driver, against the same rows read in-process."""

from __future__ import annotations

import json
import random
from collections import Counter

import pyarrow as pa
import pytest

from streaming.rules.commit.batch import Added
from streaming.rules.commit.judge import BatchTable
from streaming.rules.online.fold import KIND_CODES
from streaming.rules.windows import event_ms, is_late, window_ranges
from streaming.schema.keys import WindowKey
from streaming.schema.records import NONE_CLOSED_MS
from streaming.spark import local_agg
from streaming.spark.local_agg import BAD, INGEST_LAG, PLAYER, PROCESSING_LAG, TICK, WINDOW, batch_table
from streaming.spark.partial import PartitionPartials
from streaming.spark.window_players import PartitionPlayers
from streaming.store.batch.arrow_pack import PARTIAL_TYPE

S = 1_000_000
_TS = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema([("server", pa.string()), ("player_id", pa.string()), ("kind", pa.string()),
                    ("event_time", _TS), ("ingest_time", _TS), ("error", pa.string()), ("entry_id", pa.string()),
                    ("error_detail", pa.string()), ("raw", pa.string()), ("shard", pa.int32()),
                    ("partial", PARTIAL_TYPE)])
# (seed, window, slide), windows in ms
CASES = [
    (0, 60_000, 60_000),  # tumbling 1m
    (1, 600_000, 300_000),  # sliding 10m/5m
    (2, 900_000, 300_000),  # sliding 15m/5m: three windows per event
    (3, 25_000, 10_000),  # 25s every 10s: 2 or 3 windows, ends at :05 and :15 hit by boundary events
    (4, 60_000, 60_000),  # tumbling again, other rows
    (5, 600_000, 300_000),  # sliding again, other rows
]


def random_entries(seed: int, n: int = 400) -> list[dict]:
    """The source's rows for entries: accepted events around a base time (some before 1970, some on window
    boundaries, few players so that groups merge), idle markers (some without a time) and quarantined
    entries."""
    rng = random.Random(seed)
    base = rng.choice([1_767_225_600 * S, -3_600 * S, 0])
    rows = []
    for i in range(n):
        ev = base + rng.randrange(-30 * 60 * S, 30 * 60 * S)
        if rng.random() < 0.15:  # on a window boundary: a minute, or 25s/10s windows' ends at :05 and :15
            ev = ev - ev % (60 * S) + rng.choice([0, 5 * S, 15 * S])
        row = {"server": rng.choice("ABC"), "player_id": f"p{rng.randrange(12)}",
               "kind": rng.choice([None, "login", "heartbeat"]), "event_time": ev,
               "ingest_time": ev + rng.randrange(0, 5_000) * 1000, "error": None, "entry_id": f"{i + 1}-0",
               "error_detail": None, "raw": None, "shard": rng.randrange(3), "partial": None}
        roll = rng.random()
        if roll < 0.05:
            row.update(server=rng.choice([None, "A"]), player_id=None, kind=None, event_time=None,
                       error=rng.choice(["malformed_json", "bad_timestamp"]),
                       error_detail=rng.choice([None, "line 1"]), raw=rng.choice(['{"x": "é\\""}', None]))
        elif roll < 0.1:
            row.update(kind="idle", player_id=None, event_time=rng.choice([None, ev]))
        rows.append(row)
    return rows


def accepted(row: dict) -> bool:
    return row["error"] is None and row["kind"] != "idle"


def as_read(entries: list[dict], window_ms: int, slide_ms: int, partitions: int = 2) -> list[dict]:
    """What the source returns with preAggregate for these entries split into contiguous partitions: the
    other rows one each, then each partition's partial rows."""
    out = [r for r in entries if not accepted(r)]
    size = -(-len(entries) // partitions) if entries else 0
    for p in range(partitions):
        h = PartitionPartials(window_ms, slide_ms, fold_at=7)  # folds many times: partial groups are merged too
        for r in entries[p * size:(p + 1) * size]:
            if accepted(r):
                h.add(*(pa.array([r[c]], typ) for c, typ in (("server", pa.string()), ("ingest_time", pa.int64()),
                                                               ("event_time", pa.int64()))))
        for server, partial in zip(*(c.to_pylist() for c in h.rows()), strict=True):
            out.append({**{k: None for k in SCHEMA.names}, "server": server, "partial": partial,
                        "event_time": partial["max_event_us"] if partial["of"] == "window" else None})
    for r in entries:  # and every accepted event as a player row
        if accepted(r):
            ev = r["event_time"]
            out.append({**{k: None for k in SCHEMA.names}, **{k: r[k] for k in ("server", "player_id", "kind",
                                                                                 "event_time", "entry_id", "shard")},
                        "partial": {"of": "player", "key_us": ev, "n": 1, "min_event_us": ev, "max_event_us": ev}})
    return out


def oracle(entries: list[dict], window_ms: int, slide_ms: int) -> dict[tuple, tuple]:
    """(tag, server, a, b, c, shard) -> (n, min_ev, max_ev), one entry at a time, windows from
    windows.window_ranges; a player item has its kind's code in min_ev and its entry's shard (a quarantined
    entry's shard is in its document)."""
    n: Counter = Counter()
    evs: dict[tuple, list[int]] = {}

    def add(key: tuple, ev: int | None) -> None:
        n[key] += 1
        if ev is not None:
            evs.setdefault(key, []).append(ev)

    for r in entries:
        ev, server = r["event_time"], r["server"]
        if r["error"] is not None:
            doc = {k: r[k] for k in ("entry_id", "error", "error_detail", "raw", "shard") if r[k] is not None}
            add((BAD, server, 0, json.dumps(doc), None, None), None)
        elif r["kind"] == "idle":
            add((TICK, server, 0, None, None, None), ev)
        else:
            for w in window_ranges(ev, window_ms, slide_ms):
                add((WINDOW, server, w.start_ms * 1000, None, None, None), ev)
            add((INGEST_LAG, server, r["ingest_time"] - ev, None, None, None), ev)
            add((PROCESSING_LAG, server, -ev, None, None, None), ev)
    out = {k: (n[k], min(evs[k]) if k in evs else None, max(evs[k]) if k in evs else None) for k in n}
    for r in entries:
        if accepted(r):
            out[(PLAYER, r["server"], r["event_time"], r["player_id"], r["entry_id"], r["shard"])] = (
                1, KIND_CODES[r["kind"]], r["event_time"])
    return out


def as_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def as_dict(t: pa.Table) -> dict[tuple, tuple]:
    """The aggregate keyed like the oracle; a quarantined entry's document compared as JSON, not as text."""
    out = {}
    for row in t.to_pylist():
        b = row["b"]
        if row["tag"] == BAD:
            b = json.dumps(json.loads(b))
        out[(row["tag"], row["server"], row["a"], b, row["c"], row["shard"])] = (row["n"], row["min_ev"], row["max_ev"])
    return out


@pytest.mark.parametrize(("seed", "window_ms", "slide_ms"), CASES)
def test_local_aggregate_matches_the_oracle(seed: int, window_ms: int, slide_ms: int) -> None:
    entries = random_entries(seed)
    table = local_agg.aggregate(as_table(as_read(entries, window_ms, slide_ms)))
    assert all(table.schema.field(c).type == pa.int64() for c in ("a", "n", "min_ev", "max_ev"))
    got = as_dict(table)
    expected = oracle(entries, window_ms, slide_ms)
    assert got == expected
    tags = Counter(k[0] for k in expected)
    assert all(tags[t] for t in (WINDOW, INGEST_LAG, PROCESSING_LAG, BAD, TICK, PLAYER))  # every kind of item
    assert any(v[0] > 1 for k, v in expected.items() if k[0] == WINDOW)  # groups of several events


@pytest.mark.parametrize(("seed", "window_ms", "slide_ms"), CASES[:3])
def test_the_late_events_filter_is_the_late_rule(seed: int, window_ms: int, slide_ms: int) -> None:
    """local_agg.late_events (one vectorised comparison with the rule's bound, windows.late_below_us) keeps exactly
    the accepted events windows.is_late calls late, one event at a time: at watermarks on each event's own
    millisecond and next to it (an event on the bound is not late, a microsecond below it is), before every event
    and after every one."""
    entries = random_entries(seed)
    table = local_agg.aggregate(as_table(as_read(entries, window_ms, slide_ms)))
    events = [r for r in entries if accepted(r)]
    rng = random.Random(seed)
    times = [r["event_time"] for r in rng.sample(events, 6)]
    marks = {m for t in times for m in (event_ms(t), event_ms(t) + 1, t // 1000)}
    marks |= {min(r["event_time"] for r in events) // 1000 - 1, max(r["event_time"] for r in events) // 1000 + 1}
    for watermark_ms in sorted(marks):
        got = local_agg.late_events(table, 3, watermark_ms)
        expected = sorted(((r["shard"], tuple(map(int, r["entry_id"].split("-")))), r["entry_id"], r["server"],
                           r["player_id"], r["kind"], r["event_time"])
                          for r in events if is_late(r["event_time"], watermark_ms))
        assert [(e.entry_id, e.server, e.player_id, e.kind, e.event_time_us) for e in got] == [e[1:] for e in expected]
        assert all(e.batch == 3 and e.watermark_ms == watermark_ms for e in got)


def test_one_event_by_hand() -> None:
    # 00:01:30 in the sliding 2m/1m windows [00:00, 00:02) and [00:01, 00:03)
    ev = 90 * S
    entries = [{"server": "A", "player_id": "p1", "kind": "login", "event_time": ev, "ingest_time": ev + 2_500_000,
                "error": None, "entry_id": "1-0", "error_detail": None, "raw": None, "shard": 2, "partial": None}]
    got = as_dict(local_agg.aggregate(as_table(as_read(entries, 120_000, 60_000))))
    assert got == {
        (WINDOW, "A", 0, None, None, None): (1, ev, ev),  # its players come from the PLAYER item
        (WINDOW, "A", 60 * S, None, None, None): (1, ev, ev),
        (INGEST_LAG, "A", 2_500_000, None, None, None): (1, ev, ev),  # keyed by ingest - event, in microseconds
        (PROCESSING_LAG, "A", -ev, None, None, None): (1, ev, ev),  # keyed by -event: the batch time is added later
        # the event itself, for the online view, with the shard it was read from (its ID is unique only there)
        (PLAYER, "A", ev, "p1", "1-0", 2): (1, KIND_CODES["login"], ev),
    }


def partition_players(entries: list[dict], window_ms: int, slide_ms: int,
                      partitions: int = 2) -> dict[tuple[int, str], set[str]]:
    """Each window's players as the partitions count them (streaming.spark.window_players), each partition's
    distinct ones put together as the shared set in Redis does."""
    out: dict[tuple[int, str], set[str]] = {}
    size = -(-len(entries) // partitions) if entries else 0
    for p in range(partitions):
        part = PartitionPlayers(window_ms, slide_ms, fold_at=7)  # folds many times: distinct across folds too
        for r in filter(accepted, entries[p * size:(p + 1) * size]):
            part.add(pa.array([r["server"]]), pa.array([r["player_id"]]), pa.array([r["event_time"]], pa.int64()))
        for wk, members in part.windows():
            assert wk.end_ms == wk.start_ms + window_ms
            names = members.to_pylist()
            assert len(names) == len(set(names))  # distinct, not one per event
            out.setdefault((wk.start_ms, wk.server), set()).update(names)
    return out


@pytest.mark.parametrize(("seed", "window_ms", "slide_ms"), CASES)
def test_each_windows_events_and_distinct_players_match_the_oracle(seed: int, window_ms: int, slide_ms: int) -> None:
    """The (event, window) pairs from the partitions' WINDOW items and the distinct players the partitions count,
    both as a plain loop over the accepted entries counts them (window_ranges); BatchTable pairs each window's
    events with the players the batch added to it."""

    entries = random_entries(seed)
    want: dict[tuple[int, str], tuple[int, set[str]]] = {}
    for r in filter(accepted, entries):
        for w in window_ranges(r["event_time"], window_ms, slide_ms):
            n, players = want.get((w.start_ms, r["server"]), (0, set()))
            want[(w.start_ms, r["server"])] = (n + 1, players | {r["player_id"]})
    players = partition_players(entries, window_ms, slide_ms)
    assert players == {k: p for k, (_, p) in want.items()}
    assert any(n > len(p) for n, p in want.values())  # a player with several events in a window
    table = local_agg.aggregate(as_table(as_read(entries, window_ms, slide_ms)))
    added = Added({WindowKey(start, start + window_ms, server).member(): len(p)
                   for (start, server), p in players.items()}, 0)
    windows = batch_table(table, 0, window_ms, added).windows
    assert {(start_ms, server): (n, k) for start_ms, server, n, k in windows} == {
        key: (n, len(p)) for key, (n, p) in want.items()}
    assert len(windows) == len(want)  # one entry a window


def test_a_window_without_its_count_of_players_is_refused_unless_closed() -> None:
    """A batch whose open windows came without their count of players would show them with none: an error. A window
    every namespace has closed is counted by no partition: none, no error."""

    entries = random_entries(0, 50)
    table = local_agg.aggregate(as_table(as_read(entries, 60_000, 60_000)))
    with pytest.raises(ValueError, match=r"no count of its players: .*windowPlayers"):
        batch_table(table, 0, 60_000, Added({}, NONE_CLOSED_MS))
    closed = batch_table(table, 0, 60_000, Added({}, 1 << 62)).windows
    assert closed and all(k == 0 for *_, k in closed)


def test_an_empty_batch_gives_an_empty_table() -> None:
    out = local_agg.aggregate(as_table([]))
    assert out.num_rows == 0 and out.column_names == ["tag", "server", "a", "b", "c", "n", "min_ev", "max_ev",
                                                      "shard"]


def test_a_row_of_one_event_is_refused() -> None:
    """Read without preAggregate, an event would be counted in no window: a clear error, not a silent loss."""
    entries = random_entries(0, 20)
    with pytest.raises(ValueError, match="preAggregate=true"):
        local_agg.aggregate(as_table(entries))


@pytest.mark.spark
def test_packed_rows_cross_spark_whole(spark, redis_url: str) -> None:  # noqa: ANN001
    """The source's rows through Spark and unpacked on the driver (streaming.spark.local_agg.aggregate_frame) give the
    same aggregate as the same partitions read in this process, with no JVM between: packing loses nothing."""
    import uuid

    import redis

    from streaming.spark.local_agg import aggregate_frame as aggregate
    from streaming.spark.source import StreamRange, read_range
    from streaming.store.batch.arrow_pack import unpack_rows as unpack
    from watermark_client.events import PAYLOAD_FIELD, Event

    stream = f"pack-{uuid.uuid4().hex[:8]}:events"
    client = redis.Redis.from_url(redis_url)
    pipe = client.pipeline()
    written = 0
    for r in random_entries(7, 600):
        if r["error"] is not None:
            pipe.xadd(stream, {PAYLOAD_FIELD: b"{not json"})
        elif accepted(r):
            pipe.xadd(stream, Event(r["server"], r["player_id"], r["event_time"], kind=r["kind"]).fields())
            written += 1
    pipe.execute()
    df = (spark.read.format("redis_stream").option("url", redis_url).option("stream", stream)
          .option("partitions", "3").option("preAggregate", "true")
          .option("windowMs", "600000").option("slideMs", "300000").load())
    through_spark = as_dict(aggregate(df))
    ids = [e[0].decode() for e in client.xrange(stream)]
    local = pa.Table.from_batches(list(read_range(redis_url, stream, StreamRange(ids[0], ids[-1], True),
                                                  partials=PartitionPartials(600_000, 300_000))))
    in_process = as_dict(local_agg.aggregate(unpack(local).select(list(local_agg.COLUMNS))))
    assert through_spark == in_process
    assert sum(1 for k in in_process if k[0] == PLAYER) == written > 400  # every accepted event, once


def test_a_batch_judged_with_servers_too_far_apart_to_key_together_counts_the_same() -> None:
    """BatchTable's late counts: every server at once (Histograms), or server by server where the servers' event
    times span more than one int64 key holds; both give each window the same count."""
    import numpy as np

    from streaming.schema.records import ServerRecord
    from tests.schema.params import built_params

    hist = {"A": (np.array([1_000_000, 5_000_000], np.int64), np.array([2, 3])),
            "B": (np.array([2**61, 2**61 + 1_000_000], np.int64), np.array([1, 4]))}
    windows = [(0, "A", 5, 1), (2**61 // 1000, "B", 5, 1)]
    params = built_params(10_000, 10_000, 0)
    servers = {"A": ServerRecord(), "B": ServerRecord()}
    far = BatchTable(windows, servers, hist, [])
    assert far.hists is None  # judged server by server
    near = BatchTable(windows[:1], servers, {"A": hist["A"]}, [])
    assert near.hists is not None
    for table, watermark_ms, want in ((far, 3_000, [2, 0]), (far, 2**61 // 1000 + 500, [0, 1]),  # A closed
                                      (near, 3_000, [2])):
        got = [w.late for w in table.summary(0, watermark_ms, 0, "0-0", "0-1", params).windows]
        assert got == want
