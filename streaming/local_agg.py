"""The sink's aggregation done by Arrow on the driver, for batches too small to repay a Spark shuffle.

:class:`streaming.sink.SummaryQuery` explodes each row into tagged items and
counts them in one Spark hash aggregation. On a live batch (50,000 events at
50,000 events/s and a 1 s trigger) the aggregation, its shuffle and its
second stage cost about as much as reading the batch. Here the batch's rows
come to the driver as Arrow and the same items are counted by Arrow's own
hash aggregation, with the same result table, so everything after it
(:func:`streaming.sink._from_aggregate`) is shared. No pyspark here.

Items, as in ``SummaryQuery`` (tag, server, a, b, late, n, lo, hi):
- an accepted event: one WINDOW item per window it falls in, keyed by the window's start (``a``, microseconds)
  and the player (``b``), ``late`` when its event time is before the watermark, ``n`` 1, ``lo``/``hi`` its
  event time;
- a row of the source's lag histograms (:mod:`streaming.histograms`): one INGEST_LAG item keyed by
  ``ingest - event`` or one PROCESSING_LAG item keyed by ``-event`` (microseconds), with the row's count and
  event time range;
- an idle marker: one TICK item; a quarantined entry: one BAD item whose ``b`` is the entry as JSON.
Summed per (tag, server, a, b): ``n``, ``late``, and ``min_ev``/``max_ev`` the least ``lo`` and greatest ``hi``.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streaming import histograms
from streaming.events import IDLE_KIND

# Tags of the items (column ``tag``), shared with streaming.sink.
WINDOW, INGEST_LAG, PROCESSING_LAG, BAD, TICK = 0, 1, 2, 3, 4

# The columns of the batch the aggregation reads.
COLUMNS = ("server", "player_id", "kind", "event_time", "error", "entry_id", "error_detail", "raw", "histogram")
_KEYS = ["tag", "server", "a", "b"]
_AGGS = [("n", "sum"), ("late", "sum"), ("lo", "min"), ("hi", "max")]
NAMES = ["tag", "server", "a", "b", "n", "late", "min_ev", "max_ev"]
_BAD_FIELDS = ("entry_id", "error", "error_detail", "raw")  # a quarantined entry's document, as Spark's to_json


def _micros(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    return pc.cast(col, pa.int64())


def _items(tag: int | pa.Array, server: pa.Array, a: pa.Array, b: pa.Array | None, late: pa.Array | None,
           lo: pa.Array | None, hi: pa.Array | None = None, n: pa.Array | None = None) -> pa.Table:
    """``hi`` defaults to ``lo`` and ``n`` to 1: one event."""
    size = len(server)
    lo = lo if lo is not None else pa.nulls(size, pa.int64())
    return pa.table({
        "tag": pa.array(np.full(size, tag, np.int32)) if isinstance(tag, int) else tag,
        "server": server,
        "a": a,
        "b": b if b is not None else pa.nulls(size, pa.string()),
        "late": late if late is not None else pa.array(np.zeros(size, np.int32)),
        "n": n if n is not None else pa.array(np.ones(size, np.int64)),
        "lo": lo,
        "hi": hi if hi is not None else lo,
    })


def aggregate(batch: pa.Table, watermark_ms: int, window_ms: int, slide_ms: int) -> pa.Table:
    """The table ``SummaryQuery.run`` returns for the same rows and watermark (row order aside)."""
    batch = batch.combine_chunks()
    error = batch.column("error")
    bad = pc.is_valid(error)
    hist = pc.and_(pc.invert(bad), batch.column("histogram").is_valid())
    tick = pc.and_(pc.invert(pc.or_(bad, hist)), pc.fill_null(pc.equal(batch.column("kind"), IDLE_KIND), False))
    good = pc.invert(pc.or_(pc.or_(bad, hist), tick))
    parts: list[pa.Table] = []

    rows = batch.filter(good)
    if rows.num_rows:
        server, player = rows.column("server"), rows.column("player_id")
        ev_arr = _micros(rows.column("event_time"))
        ev = pc.fill_null(ev_arr, 0).to_numpy()  # int64 even with nulls (to_numpy would make them float NaN)
        # no event time: no window (Spark's `keep` is null)
        valid = ev_arr.is_valid().to_numpy(zero_copy_only=False) if ev_arr.null_count else None
        length_us, slide_us, wm_us = window_ms * 1000, slide_ms * 1000, watermark_ms * 1000
        late = pa.array((ev < wm_us).astype(np.int32))
        last_start = ev - np.mod(ev, slide_us)  # floor, as windows.window_ranges
        for k in range(-(-length_us // slide_us)):
            start = last_start - k * slide_us
            keep = start + length_us > ev
            if valid is not None:
                keep &= valid
            idx = pa.array(np.flatnonzero(keep))
            parts.append(_items(WINDOW, server.take(idx), pa.array(start[keep]), player.take(idx), late.take(idx),
                                ev_arr.take(idx)))

    lags = batch.filter(hist)
    if lags.num_rows:
        h = lags.column("histogram").combine_chunks()
        ingest = pc.equal(h.field("of"), histograms.INGEST_LAG)
        key = h.field("key_us")
        parts.append(_items(pc.if_else(ingest, np.int32(INGEST_LAG), np.int32(PROCESSING_LAG)), lags.column("server"),
                            pc.if_else(ingest, key, pc.negate(key)), None, None, h.field("min_event_us"),
                            h.field("max_event_us"), h.field("n")))

    ticks = batch.filter(tick)
    if ticks.num_rows:
        parts.append(_items(TICK, ticks.column("server"), pa.array(np.zeros(ticks.num_rows, np.int64)), None, None,
                            _micros(ticks.column("event_time"))))

    quarantined = batch.filter(bad)
    if quarantined.num_rows:
        docs = [json.dumps({k: v for k, v in zip(_BAD_FIELDS, row, strict=True) if v is not None})
                for row in zip(*(quarantined.column(c).to_pylist() for c in _BAD_FIELDS), strict=True)]
        parts.append(_items(BAD, quarantined.column("server"), pa.array(np.zeros(quarantined.num_rows, np.int64)),
                            pa.array(docs, pa.string()), None, None))

    if not parts:
        return pa.table({name: pa.array([], typ) for name, typ in zip(
            NAMES, (pa.int32(), pa.string(), pa.int64(), pa.string(), pa.int64(), pa.int64(), pa.int64(),
                     pa.int64()), strict=True)})
    items = pa.concat_tables([p.cast(parts[0].schema) for p in parts])
    out = items.group_by(_KEYS, use_threads=False).aggregate(_AGGS)
    return out.select([*_KEYS, "n_sum", "late_sum", "lo_min", "hi_max"]).rename_columns(NAMES)
