"""The sink's aggregation with Arrow on the driver, for live batches.

A live batch is small (a trigger's worth of entries, already folded into
partial aggregates by the source partitions); Spark's aggregation of it costs
a shuffle, a second stage and its planning, more than the counting. Such
batches come to the driver as Arrow and the same items are summed by Arrow's
own hash aggregation, with the same result table, so everything after it
(:func:`streaming.sink._from_aggregate`) is shared. No pyspark here.

Items, as in ``SummaryQuery`` (tag, server, a, b, n, lo, hi), one per row:
- a partial row of the source (:mod:`streaming.partial`): a WINDOW item keyed by the window's start (``a``,
  microseconds) and the player (``b``), an INGEST_LAG item keyed by ``ingest - event`` or a PROCESSING_LAG
  item keyed by ``-event``, each with the row's count and event time range;
- an idle marker: one TICK item; a quarantined entry: one BAD item whose ``b`` is the entry as JSON.
Summed per (tag, server, a, b): ``n``, and ``min_ev``/``max_ev`` the least ``lo`` and greatest ``hi``.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streaming import partial
from streaming.events import IDLE_KIND

# Tags of the items (column ``tag``), shared with streaming.sink.
WINDOW, INGEST_LAG, PROCESSING_LAG, BAD, TICK = 0, 1, 2, 3, 4

# The columns of the batch the aggregation reads.
COLUMNS = ("server", "player_id", "kind", "event_time", "error", "entry_id", "error_detail", "raw", "partial")
_KEYS = ["tag", "server", "a", "b"]
_AGGS = [("n", "sum"), ("lo", "min"), ("hi", "max")]
NAMES = ["tag", "server", "a", "b", "n", "min_ev", "max_ev"]
BAD_FIELDS = ("entry_id", "error", "error_detail", "raw")  # a quarantined entry's document, as Spark's to_json
NOT_PRE_AGGREGATED = ("a row of one accepted event reached the sink: the source must be read with "
                      "preAggregate=true (streaming.query.read_events)")


def _items(tag: int | pa.Array, server: pa.Array, a: pa.Array, b: pa.Array | None, n: pa.Array | None,
           lo: pa.Array | None, hi: pa.Array | None) -> pa.Table:
    size = len(server)
    return pa.table({
        "tag": pa.array(np.full(size, tag, np.int32)) if isinstance(tag, int) else tag,
        "server": server,
        "a": a,
        "b": b if b is not None else pa.nulls(size, pa.string()),
        "n": n if n is not None else pa.array(np.ones(size, np.int64)),
        "lo": lo if lo is not None else pa.nulls(size, pa.int64()),
        "hi": hi if hi is not None else pa.nulls(size, pa.int64()),
    })


def aggregate(batch: pa.Table) -> pa.Table:
    """The table ``SummaryQuery.run`` returns for the same rows (row order aside)."""
    batch = batch.combine_chunks()
    bad = pc.is_valid(batch.column("error"))
    part = pc.and_(pc.invert(bad), batch.column("partial").is_valid())
    tick = pc.and_(pc.invert(pc.or_(bad, part)), pc.fill_null(pc.equal(batch.column("kind"), IDLE_KIND), False))
    if not pc.all(pc.or_(pc.or_(bad, part), tick), min_count=0).as_py():
        raise ValueError(NOT_PRE_AGGREGATED)
    parts: list[pa.Table] = []

    rows = batch.filter(part)
    if rows.num_rows:
        p = rows.column("partial").combine_chunks()
        of, key = p.field("of"), p.field("key_us")
        event_time, window = pc.equal(of, partial.EVENT_TIME), pc.equal(of, partial.WINDOW)
        tag = pc.if_else(window, np.int32(WINDOW), pc.if_else(event_time, np.int32(PROCESSING_LAG),
                                                              np.int32(INGEST_LAG)))
        parts.append(_items(tag, rows.column("server"), pc.if_else(event_time, pc.negate(key), key),
                            pc.if_else(window, rows.column("player_id"), pa.scalar(None, pa.string())),
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

    if not parts:
        return pa.table({name: pa.array([], typ) for name, typ in zip(
            NAMES, (pa.int32(), pa.string(), pa.int64(), pa.string(), pa.int64(), pa.int64(), pa.int64()),
            strict=True)})
    items = pa.concat_tables([p.cast(parts[0].schema) for p in parts])
    out = items.group_by(_KEYS, use_threads=False).aggregate(_AGGS)
    return out.select([*_KEYS, "n_sum", "lo_min", "hi_max"]).rename_columns(NAMES)
