"""The sink's aggregation, with Arrow on the driver.

A batch comes to the driver already folded into partial aggregates by the source
partitions (bounded by the source's cap on entries per batch), and Arrow's own
hash aggregation sums them into one table of items, which
:class:`watermark.spark.sink.BatchTable` reads. No pyspark here.

Items (tag, server, a, b, c, n, lo, hi), one per row:
- a partial row of the source (:mod:`watermark.spark.partial`): a WINDOW item keyed by the window's start (``a``,
  microseconds; its distinct players are counted by the partitions in Redis: :mod:`watermark.spark.window_players`), an
  INGEST_LAG item keyed by ``ingest - event`` or a PROCESSING_LAG item keyed by ``-event``, each with the row's
  count and event time range;
- an idle marker: one TICK item; a quarantined entry: one BAD item whose ``b`` is the entry as JSON;
- a player row (one accepted event): a PLAYER item with the event time in ``a``, the player in ``b``, the
  entry ID in ``c``, the kind's code (:data:`watermark.rules.online.fold.KIND_CODES`) in ``lo`` and the input
  shard the entry came from in ``shard``; unique by its entry, so the sum leaves it as it is.
Summed per (tag, server, a, b, c): ``n``, and ``min_ev``/``max_ev`` the least ``lo`` and greatest ``hi``
(``shard`` only on PLAYER items: an entry ID is unique only within its shard).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from watermark.rules.online.fold import KIND_CODES
from watermark.schema.events import IDLE_KIND
from watermark.schema.timeutil import iso_from_us
from watermark.spark import partial

# Tags of the items (column ``tag``), shared with watermark.spark.sink.
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
                      "preAggregate=true (watermark.spark.query.read_events)")


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
    codes = {code: name for name, code in KIND_CODES.items()}
    docs = [json.dumps({"entry_id": entry, "error": reason, "error_detail": detail, "shard": shard or 0,
                        "raw": json.dumps({"server": server, "player_id": player, "kind": codes.get(code),
                                           "event_time": iso_from_us(event_us)})})
            for server, player, entry, code, event_us, shard in zip(
                *(events.column(c).to_pylist() for c in ("server", "b", "c", "min_ev", "a", "shard")), strict=True)]
    bad = _items(BAD, events.column("server"), pa.array(np.zeros(events.num_rows, np.int64)),
                 pa.array(docs, pa.string()), None, None, None)
    bad = bad.append_column("shard", pa.nulls(bad.num_rows, pa.int32()))
    kept = t.filter(pc.or_(pc.invert(mine), pc.equal(tags, TICK)))
    return pa.concat_tables([kept, bad.rename_columns(NAMES).cast(kept.schema)]), newest
