"""A batch's aggregate on the driver: summed with Arrow, then read once.

A batch comes to the driver already folded into partial aggregates by the source partitions (bounded by the
source's cap on entries per batch), and Arrow's own hash aggregation sums them into one table of items
(:func:`aggregate`). :func:`read` is the one place that reads that table: it counts each server's accepted events
for the flood guard, quarantines what the guard refuses, and reads the rest into plain records
(:class:`BatchTable`): each window's pairs, each server's input figures and event-time histogram, the quarantined
entries, the late events the pipeline keeps, and the aggregate for the online view (read into its events by
:func:`online_events` on the followers' thread). From there on the sink and the lanes judge and commit records,
not rows. No pyspark here.

Items (tag, server, a, b, c, n, lo, hi), one per row:
- a partial row of the source (:mod:`streaming.spark.partial`): a WINDOW item keyed by the window's start (``a``,
  microseconds; its distinct players are counted by the partitions in Redis: :mod:`streaming.spark.window_players`), an
  INGEST_LAG item keyed by ``ingest - event`` or a PROCESSING_LAG item keyed by ``-event``, each with the row's
  count and event time range;
- an idle marker: one TICK item; a quarantined entry: one BAD item whose ``b`` is the entry as JSON;
- a player row (one accepted event): a PLAYER item with the event time in ``a``, the player in ``b``, the
  entry ID in ``c``, the kind's code (:data:`streaming.rules.online.fold.KIND_CODES`) in ``lo`` and the input
  shard the entry came from in ``shard``; unique by its entry, so the sum leaves it as it is.
Summed per (tag, server, a, b, c): ``n``, and ``min_ev``/``max_ev`` the least ``lo`` and greatest ``hi``
(``shard`` only on PLAYER items: an entry ID is unique only within its shard).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from dataclasses import replace as replace_table
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from msgspec.structs import replace

from streaming.rules.commit.batch import Added, BadRow
from streaming.rules.commit.judge import NO_REFUSAL, BatchTable, Refusal
from streaming.rules.fleet import FLOOD_REASON
from streaming.rules.late import LateEvent
from streaming.rules.online.fold import KIND_CODES
from streaming.rules.online.table import OnlineEvents
from streaming.rules.windows import late_below_us
from streaming.schema.keys import WindowKey
from streaming.schema.params import Params
from streaming.schema.records import LagRecord, ServerRecord
from streaming.spark import partial
from streaming.spark.checkpoint import OffsetEntry
from streaming.store.batch.arrow_pack import packed_regions, unpack_rows
from watermark_client.events import IDLE_KIND, parse_entry_id
from watermark_client.timeutil import iso_from_us

# Tags of the items (column ``tag``).
WINDOW, INGEST_LAG, PROCESSING_LAG, BAD, TICK, PLAYER = 0, 1, 2, 3, 4, 5

# The columns of the batch the aggregation reads.
COLUMNS = ("server", "player_id", "kind", "event_time", "error", "entry_id", "error_detail", "raw", "shard",
           "partial")
_KEYS = ["tag", "server", "a", "b", "c"]
_AGGS = [("n", "sum"), ("lo", "min"), ("hi", "max")]
NAMES = ["tag", "server", "a", "b", "c", "n", "min_ev", "max_ev", "shard"]
TYPES = (pa.int32(), pa.string(), pa.int64(), pa.string(), pa.string(), pa.int64(), pa.int64(), pa.int64(),
         pa.int32())
BAD_FIELDS = ("entry_id", "error", "error_detail", "raw", "shard")  # a quarantined entry's document
NOT_PRE_AGGREGATED = ("a row of one accepted event reached the sink: the source must be read with "
                      "preAggregate=true (streaming.spark.query.read_events)")


def _items(tag: int | pa.Array, server: pa.Array, a: pa.Array, b: pa.Array | None, n: pa.Array | None,
           lo: pa.Array | None, hi: pa.Array | None, c: pa.Array | None = None) -> pa.Table:
    size = len(server)
    return pa.table({
        "tag": pa.array(np.full(size, tag, np.int32)) if isinstance(tag, int) else tag,
        "server": server,
        "a": a,
        "b": b if b is not None else pa.nulls(size, pa.string()),
        "c": c if c is not None else pa.nulls(size, pa.string()),
        "n": n if n is not None else pa.array(np.ones(size, np.int64)),
        "lo": lo if lo is not None else pa.nulls(size, pa.int64()),
        "hi": hi if hi is not None else pa.nulls(size, pa.int64()),
    })


def aggregate(batch: pa.Table) -> pa.Table:
    """The items of a batch's rows (unpacked), summed per (tag, server, a, b, c)."""
    batch = batch.combine_chunks()
    bad = pc.is_valid(batch.column("error"))
    part = pc.and_(pc.invert(bad), batch.column("partial").is_valid())
    tick = pc.and_(pc.invert(pc.or_(bad, part)), pc.fill_null(pc.equal(batch.column("kind"), IDLE_KIND), False))
    if not pc.all(pc.or_(pc.or_(bad, part), tick), min_count=0).as_py():
        raise ValueError(NOT_PRE_AGGREGATED)
    parts: list[pa.Table] = []
    players = pc.and_(part, pc.fill_null(pc.equal(batch.column("partial").combine_chunks().field("of"),
                                                   partial.PLAYER), False))
    unique = _player_items(batch.filter(players)) if pc.any(players).as_py() else None
    part = pc.and_(part, pc.invert(players))

    rows = batch.filter(part)
    if rows.num_rows:
        p = rows.column("partial").combine_chunks()
        of, key = p.field("of"), p.field("key_us")
        event_time, window = pc.equal(of, partial.EVENT_TIME), pc.equal(of, partial.WINDOW)
        tag = pc.if_else(window, np.int32(WINDOW), pc.if_else(event_time, np.int32(PROCESSING_LAG),
                                                              np.int32(INGEST_LAG)))
        parts.append(_items(tag, rows.column("server"), pc.if_else(event_time, pc.negate(key), key), None,
                            p.field("n"), p.field("min_event_us"), p.field("max_event_us")))

    ticks = batch.filter(tick)
    if ticks.num_rows:
        ev = pc.cast(ticks.column("event_time"), pa.int64())
        parts.append(_items(TICK, ticks.column("server"), pa.array(np.zeros(ticks.num_rows, np.int64)), None, None,
                            ev, ev))

    quarantined = batch.filter(bad)
    if quarantined.num_rows:
        docs = [json.dumps({k: v for k, v in zip(BAD_FIELDS, row, strict=True) if v is not None})
                for row in zip(*(quarantined.column(c).to_pylist() for c in BAD_FIELDS), strict=True)]
        parts.append(_items(BAD, quarantined.column("server"), pa.array(np.zeros(quarantined.num_rows, np.int64)),
                            pa.array(docs, pa.string()), None, None, None))

    schema = pa.schema(list(zip(NAMES, TYPES, strict=True)))
    out = [unique] if unique is not None else []
    if parts:
        items = pa.concat_tables([p.cast(parts[0].schema) for p in parts])
        summed = items.group_by(_KEYS, use_threads=False).aggregate(_AGGS)
        summed = summed.select([*_KEYS, "n_sum", "lo_min", "hi_max"])
        summed = summed.append_column("shard", pa.nulls(summed.num_rows, pa.int32()))
        out.insert(0, summed.rename_columns(NAMES).cast(schema))
    return pa.concat_tables(out) if out else schema.empty_table()


def _player_items(rows: pa.Table) -> pa.Table:
    """Player rows as their items, already in the result's shape: each is unique by its entry."""
    event_us = rows.column("partial").combine_chunks().field("key_us")
    codes = pa.array(np.zeros(rows.num_rows, np.int64))
    kind = rows.column("kind")
    for name, code in KIND_CODES.items():
        if name is not None:
            codes = pc.if_else(pc.fill_null(pc.equal(kind, name), False), np.int64(code), codes)
    t = _items(PLAYER, rows.column("server"), event_us, rows.column("player_id"), None, codes, event_us,
               rows.column("entry_id"))
    t = t.append_column("shard", rows.column("shard"))
    return t.rename_columns(NAMES).cast(pa.schema(list(zip(NAMES, TYPES, strict=True))))


REGIONS_META = b"regions"
"""The aggregate's schema metadata key for each server's region (JSON), read off the packed rows."""


def aggregate_frame(df: Any) -> pa.Table:
    """The batch's items summed, from one Spark job whose result is small (``df``: the batch's DataFrame).

    The source has already folded each partition's accepted events into partial aggregates
    (:mod:`streaming.spark.partial`: per window, and the two lag histograms, exact integers) and player rows
    (the online view's input), counted each window's players in Redis (:mod:`streaming.spark.window_players`), and
    packed them (:func:`streaming.store.batch.arrow_pack.pack_rows`); quarantined entries and idle markers come one
    row each. The driver collects them as Arrow, unpacks them and sums the items with Arrow
    (:func:`aggregate`): the batch costs one Spark job and nothing is cached. The
    DataFrame must come from the source with ``preAggregate=true`` (:func:`streaming.spark.query.read_events`); a
    row of a single accepted event fails the batch with :data:`NOT_PRE_AGGREGATED`.

    Nothing in the query depends on the batch (watermark, batch time), so Spark's plan is the same for
    every batch: which windows are closed, which events are late and the processing lag follow from the
    result and the watermark afterwards (:func:`read`)."""
    return aggregate_arrow(df.select(*COLUMNS, "blob").toArrow())


def aggregate_arrow(rows: pa.Table) -> pa.Table:
    """:func:`aggregate_frame` of the source's rows as Arrow (the columns it selects), wherever they were read; the
    servers' regions ride along in the schema's metadata."""
    unpacked, regions = unpack_rows(rows), packed_regions(rows)
    t = aggregate(unpacked)
    return t.replace_schema_metadata({REGIONS_META: json.dumps(regions).encode()}) if regions else t


Guard = Callable[[Mapping[str, int]], Refusal]
"""The flood guard's decision: called by :func:`read` with each server's accepted events in the batch, once."""


def read(t: pa.Table, batch_id: int, entry: OffsetEntry, params: Params, added: Added, guard: Guard | None = None,
         online: bool = False) -> BatchTable:
    """The aggregate ``t`` of batch ``batch_id`` read once: ``guard`` decides which new names to refuse (none
    without it), their events are quarantined, and the rest is read into a :class:`BatchTable`, with the accepted
    events behind the pipeline's watermark in force (``entry``: the batch's offset log entry) kept as late events
    and, with ``online``, the aggregate kept for the online view's events. ``added``: what the batch's partitions
    added to its windows' players."""
    refusal = NO_REFUSAL
    if guard is not None:
        events = events_per_server(t)
        refusal = guard(events) if events else NO_REFUSAL
        if refusal.names:
            t, newest = refuse(t, frozenset(refusal.names), FLOOD_REASON, refusal.detail)
            refusal = replace_table(refusal, max_event_us=newest)
    return replace_table(batch_table(t, entry.batch_ts_ms, params.window_ms, added), refusal=refusal,
                         late=late_events(t, batch_id, entry.watermark_ms),
                         aggregate=t if online else None)


def batch_of(df: Any, batch_id: int, entry: OffsetEntry, params: Params, players: Callable[[], Added],
             guard: Guard | None, online: bool, phases: Callable[[str], AbstractContextManager[None]]) -> BatchTable:
    """The batch's DataFrame ``df`` as its records, in one Spark job: collected, unpacked and summed
    (:func:`aggregate_frame`, the ``read`` phase), then read once (:func:`read`, in the ``sum`` phase). ``players``
    is called once Spark has read the batch: what its partitions added to its windows' players. Called once a batch
    by the sink."""
    with phases("read"):  # Spark's job: the source partitions read, parse and pre-aggregate
        table = aggregate_frame(df)
    with phases("sum"):
        return read(table, batch_id, entry, params, players(), guard, online)


def online_events(t: pa.Table) -> OnlineEvents:
    """The batch's accepted events for the online view, from its PLAYER items."""
    part = t.filter(pc.equal(t.column("tag"), PLAYER))
    if not part.num_rows:
        return OnlineEvents.empty()
    ids = pc.split_pattern(part.column("c"), "-", max_splits=1)
    ms = pc.cast(pc.list_element(ids, 0), pa.int64()).to_numpy()
    seq = pc.cast(pc.list_element(ids, 1), pa.int64()).to_numpy()
    arrival = np.empty(len(ms), np.int64)
    arrival[np.lexsort((seq, ms))] = np.arange(len(ms))
    return OnlineEvents(part.column("server").to_numpy(zero_copy_only=False),
                          part.column("b").to_numpy(zero_copy_only=False), part.column("a").to_numpy(), arrival,
                          part.column("min_ev").to_numpy().astype(np.int8), ms)


_KIND_NAMES = {code: name for name, code in KIND_CODES.items()}


def late_events(t: pa.Table, batch_id: int, watermark_ms: int) -> list[LateEvent]:
    """The batch's accepted events behind ``watermark_ms``, in arrival order, to be kept
    (:mod:`streaming.rules.late`). Usually none: one vectorised filter finds them, by the late rule's bound
    (:func:`streaming.rules.windows.late_below_us`; tests/rules/test_local_agg.py proves it equal to
    :func:`streaming.rules.windows.is_late` event by event)."""
    tags = t.column("tag")
    part = t.filter(pc.and_(pc.equal(tags, PLAYER), pc.less(t.column("a"), late_below_us(watermark_ms))))
    out = [LateEvent(entry_id, server, player, _KIND_NAMES.get(code), event_us, batch_id, watermark_ms, shard or 0)
           for server, event_us, player, entry_id, code, shard in zip(
               *(part.column(c).to_pylist() for c in ("server", "a", "b", "c", "min_ev", "shard")), strict=True)]
    out.sort(key=lambda e: (e.shard, parse_entry_id(e.entry_id)))
    return out


def batch_table(t: pa.Table, batch_ts_ms: int, window_ms: int, added: Added) -> BatchTable:
    """The aggregate read into its records, everything in it that no watermark changes (:func:`read`). ``added``:
    what the batch's partitions added to each window's players
    (:func:`streaming.store.batch.window_players.read_added`)."""
    tags = t.column("tag")
    per_window = t.filter(pc.equal(tags, WINDOW)).group_by(["a", "server"], use_threads=False).aggregate(
        [("n", "sum")])
    windows = [(ws // 1000, server, n, added.of(WindowKey(ws // 1000, ws // 1000 + window_ms, server)))
               for ws, server, n in zip(*(per_window.column(c).to_pylist() for c in ("a", "server", "n_sum")),
                                        strict=True)]
    servers: dict[str, ServerRecord] = {}
    ingest = _Runs.of(t, INGEST_LAG)
    if ingest is not None:  # every server's figures in whole-array passes: 300 servers a batch
        at = ingest.starts
        rows = np.add.reduceat(ingest.n, at).tolist()
        lo, hi = np.minimum.reduceat(ingest.min_ev, at).tolist(), np.maximum.reduceat(ingest.max_ev, at).tolist()
        newest = np.maximum.reduceat(ingest.max_ev + ingest.a, at).tolist()  # the newest arrival
        lags = LagRecord.from_histograms(ingest.a, ingest.n, at)
        for i, server in enumerate(ingest.servers):
            servers[server] = ServerRecord(rows=rows[i], min_event_us=lo[i], max_event_us=hi[i],
                                           max_ingest_us=newest[i], ingest_lag_ms=lags[i])
    event_hist = {}
    processing = _Runs.of(t, PROCESSING_LAG)  # keyed by -event time: the batch time makes it a lag
    if processing is not None:
        lags = LagRecord.from_histograms(batch_ts_ms * 1000 + processing.a, processing.n, processing.starts)
        bounds = [*processing.starts.tolist(), len(processing.a)]
        for i, server in enumerate(processing.servers):
            servers[server] = replace(servers[server], processing_lag_ms=lags[i])
            neg_event_us, n = processing.a[bounds[i]:bounds[i + 1]], processing.n[bounds[i]:bounds[i + 1]]
            event_hist[server] = (-neg_event_us[::-1], n[::-1])
    ticks = t.filter(pc.equal(tags, TICK)).sort_by("server")
    for server, n, hi in zip(*(ticks.column(c).to_pylist() for c in ("server", "n", "max_ev")), strict=True):
        servers[server] = replace(servers.get(server, ServerRecord()), ticks=n, max_tick_us=hi)
    bad = [BadRow(d["entry_id"], d["error"], d.get("error_detail") or "", d.get("raw") or "", d.get("shard") or 0)
           for d in map(json.loads, t.filter(pc.equal(tags, BAD)).column("b").to_pylist())]
    bad.sort(key=lambda b: (b.shard, parse_entry_id(b.entry_id)))
    meta = t.schema.metadata or {}
    regions = json.loads(meta[REGIONS_META]) if REGIONS_META in meta else {}
    return BatchTable(windows, servers, event_hist, bad, regions)


@dataclass(frozen=True)
class _Runs:
    """A lag tag's rows, sorted by (server, lag key) as numpy columns, and where each server's run starts: a
    histogram per server, tens of thousands of rows a live batch, read in whole-array passes."""

    servers: list[str]
    starts: np.ndarray
    a: np.ndarray
    n: np.ndarray
    min_ev: np.ndarray
    max_ev: np.ndarray

    @classmethod
    def of(cls, t: pa.Table, tag: int) -> _Runs | None:
        part = t.filter(pc.and_(pc.and_(pc.equal(t.column("tag"), tag), pc.is_valid(t.column("a"))),
                                pc.is_valid(t.column("server"))))
        if not part.num_rows:
            return None
        # One sort by (server, lag), not a filter per server (O(servers x rows)).
        part = part.sort_by([("server", "ascending"), ("a", "ascending")]).combine_chunks()
        runs = pc.run_end_encode(part.column("server").combine_chunks())
        ends = runs.run_ends.to_numpy()
        return cls(runs.values.to_pylist(), np.concatenate([[0], ends[:-1]]).astype(np.int64),
                   *(part.column(c).to_numpy() for c in ("a", "n", "min_ev", "max_ev")))


def events_per_server(t: pa.Table) -> dict[str, int]:
    """Each server's accepted events in the aggregate (its INGEST_LAG items' counts)."""
    rows = t.filter(pc.equal(t.column("tag"), INGEST_LAG))
    if not rows.num_rows:
        return {}
    sums = rows.group_by("server", use_threads=False).aggregate([("n", "sum")])
    return dict(zip(sums.column("server").to_pylist(), sums.column("n_sum").to_pylist(), strict=True))


def refuse(t: pa.Table, servers: frozenset[str], reason: str, detail: str) -> tuple[pa.Table, int | None]:
    """The aggregate with ``servers``' accepted events quarantined: each of their PLAYER items (one an event)
    becomes a BAD item with ``reason`` and ``detail``, and their window and lag items go; idle markers stay.
    Also returns their newest event time (None: they had none)."""
    if not servers:
        return t, None
    mine = pc.fill_null(pc.is_in(t.column("server"), pa.array(sorted(servers), pa.string())), False)
    tags = t.column("tag")
    lags = t.filter(pc.and_(mine, pc.equal(tags, INGEST_LAG)))
    newest = pc.max(lags.column("max_ev")).as_py() if lags.num_rows else None
    events = t.filter(pc.and_(mine, pc.equal(tags, PLAYER)))
    docs = [json.dumps({"entry_id": entry, "error": reason, "error_detail": detail, "shard": shard or 0,
                        "raw": json.dumps({"server": server, "player_id": player, "kind": _KIND_NAMES.get(code),
                                           "event_time": iso_from_us(event_us)})})
            for server, player, entry, code, event_us, shard in zip(
                *(events.column(c).to_pylist() for c in ("server", "b", "c", "min_ev", "a", "shard")), strict=True)]
    bad = _items(BAD, events.column("server"), pa.array(np.zeros(events.num_rows, np.int64)),
                 pa.array(docs, pa.string()), None, None, None)
    bad = bad.append_column("shard", pa.nulls(bad.num_rows, pa.int32()))
    kept = t.filter(pc.or_(pc.invert(mine), pc.equal(tags, TICK)))
    return pa.concat_tables([kept, bad.rename_columns(NAMES).cast(kept.schema)]), newest
