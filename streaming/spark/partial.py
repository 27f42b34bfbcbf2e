"""A source partition's partial aggregate of its accepted events: aggregation pushed down into the scan.

The sink needs, per batch, each (window, server) pair's events and distinct players, and exact lag figures.
Spark used to get one row per event and turn each into items (one per window it falls in, two for the lags)
for a hash aggregation: most of a 1,000,000-event batch's JVM time. The source's Python workers hold each
chunk as Arrow already, and Arrow's hash aggregation folds a partition's events into far fewer rows, which
Spark then only sums across partitions. No pyspark here.

Rows, each ``(server, of, key_us, n, min_event_us, max_event_us)``, told apart by ``of``:

- ``window``: keyed by the window's start (``key_us``): the (event, window) pairs of that window (an
  event is in every window containing it: :func:`streaming.rules.windows.window_ranges`). A window's distinct
  players are not here: the partition counts them in Redis (:mod:`streaming.spark.window_players`; keying the
  window rows by player made them about one row per event, each with the player's id, packed, moved by Spark and
  unpacked on the driver);
- ``ingest_lag``: keyed by arrival minus event time; the latest arrival among its events is
  ``max_event_us + key_us``;
- ``event_time``: keyed by the event time itself. The sink subtracts it from the batch time
  (processing lag) and counts from it, exactly, the events before the watermark in each open window (late).

Every accepted event also comes as a ``player`` row of its own (``key_us`` its event time, ``n`` 1, its
``entry_id``, ``player_id`` and ``kind`` set, :func:`player_partial`): the online-players rule needs each player's
events in order.

``min_event_us``/``max_event_us`` are the earliest and latest event time among the row's events; a window
row's ``max_event_us`` is also its ``event_time``, so that ``withWatermark`` sees every batch's maximum.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streaming.store.batch.arrow_pack import PARTIAL_TYPE

WINDOW, INGEST_LAG, EVENT_TIME, PLAYER = "window", "ingest_lag", "event_time", "player"
# As Spark declares the same column (streaming.spark.source.SCHEMA).
PARTIAL_DDL = "partial struct<of: string, key_us: bigint, n: bigint, min_event_us: bigint, max_event_us: bigint>"

_COLUMNS = ["server", "key_us", "n", "min_event_us", "max_event_us"]
_KEYS = {WINDOW: ["server", "key_us"], INGEST_LAG: ["server", "key_us"], EVENT_TIME: ["server", "key_us"]}
_AGGS = [("n", "sum"), ("min_event_us", "min"), ("max_event_us", "max")]


def window_starts(event_us: np.ndarray, window_ms: int, slide_ms: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each k, the k-th newest window start of every event and which events that window contains: the
    vectorised :func:`streaming.rules.windows.window_ranges` (epoch-aligned, floor for negatives too)."""
    length_us, slide_us = window_ms * 1000, slide_ms * 1000
    last_start = event_us - np.mod(event_us, slide_us)
    out = []
    for k in range(-(-length_us // slide_us)):
        start = last_start - k * slide_us
        out.append((start, start + length_us > event_us))
    return out


def in_windows(event_us: pa.Array | pa.ChunkedArray, window_ms: int, slide_ms: int,
               **columns: pa.Array | pa.ChunkedArray) -> pa.Table:
    """Each event once for every window containing it: the window's ``start`` (microseconds), the event's
    ``event_us`` and ``columns``, taken alike. The partitions count a window's (event, window) pairs with it and
    put each player in its windows with it (:class:`streaming.spark.window_players.PartitionPlayers`), so both place
    an event in the same windows."""
    pieces = []
    for start, keep in window_starts(event_us.to_numpy(), window_ms, slide_ms):
        taken = {"event_us": event_us, **columns}
        if not keep.all():
            idx = pa.array(np.flatnonzero(keep))
            start, taken = start[keep], {name: c.take(idx) for name, c in taken.items()}
        pieces.append(pa.table({"start": start, **taken}))
    return pa.concat_tables(pieces)


class PartitionPartials:
    """The three partial aggregates of one partition, fed chunk by chunk.

    Rows are kept as they come and folded whenever ``fold_at`` events are waiting, so memory stays bounded
    by the number of distinct groups, however long the partition."""

    def __init__(self, window_ms: int, slide_ms: int, fold_at: int = 1 << 18) -> None:
        if window_ms <= 0 or slide_ms <= 0 or slide_ms > window_ms:
            raise ValueError(f"window ({window_ms} ms) and slide ({slide_ms} ms) must be positive, "
                             "the slide no longer than the window")
        if fold_at < 1:
            raise ValueError(f"fold_at must be at least 1, got {fold_at}")
        self.window_ms, self.slide_ms, self.fold_at = window_ms, slide_ms, fold_at
        self._parts: dict[str, list[pa.Table]] = {WINDOW: [], INGEST_LAG: [], EVENT_TIME: []}
        self._waiting = 0

    def add(self, server: pa.Array, ingest_us: pa.Array, event_us: pa.Array, placed: pa.Table | None = None) -> None:
        """Accepted events only, each with its server, arrival and event time (int64 microseconds, no nulls).
        ``placed``: the same events already in their windows (:func:`in_windows` with ``server``), when the caller
        placed them once for the windows' players too."""
        n = len(server)
        if not n:
            return
        ones = pa.array(np.ones(n, np.int64))
        self._parts[INGEST_LAG].append(pa.table(
            [server, pc.subtract(ingest_us, event_us), ones, event_us, event_us], names=_COLUMNS))
        self._parts[EVENT_TIME].append(pa.table([server, event_us, ones, event_us, event_us], names=_COLUMNS))
        w = placed if placed is not None else in_windows(event_us, self.window_ms, self.slide_ms, server=server)
        ev = w.column("event_us")
        self._parts[WINDOW].append(pa.table(
            [w.column("server"), w.column("start"), pa.array(np.ones(w.num_rows, np.int64)), ev, ev], names=_COLUMNS))
        self._waiting += n
        if self._waiting >= self.fold_at:
            self._fold()

    def _fold(self) -> None:
        for of, parts in self._parts.items():
            if len(parts) > 1 or (parts and self._waiting):
                keys = _KEYS[of]
                table = pa.concat_tables(parts).group_by(keys, use_threads=False).aggregate(_AGGS)
                folded = (table.select([*keys, *(f"{c}_{op}" for c, op in _AGGS)])
                          .rename_columns([*keys, *(c for c, _ in _AGGS)]))
                self._parts[of] = [folded.select(_COLUMNS)]
        self._waiting = 0

    def rows(self) -> tuple[pa.Array, pa.StructArray]:
        """Every partial row: the ``server`` and ``partial`` columns."""
        self._fold()
        tables = [(of, parts[0]) for of, parts in self._parts.items() if parts]
        if not tables:
            return pa.array([], pa.string()), pa.array([], PARTIAL_TYPE)

        def column(name: str) -> pa.Array:
            return pa.concat_arrays([t.column(name).combine_chunks() for _, t in tables])

        of = pa.concat_arrays([pa.repeat(pa.scalar(name, pa.string()), t.num_rows) for name, t in tables])
        fields = [column(c) for c in _COLUMNS[1:]]
        return column("server"), pa.StructArray.from_arrays([of, *fields], fields=list(PARTIAL_TYPE))


def player_partial(event_us: pa.Array) -> pa.StructArray:
    """The ``partial`` column of player rows: one per accepted event, keyed by its event time."""
    n = len(event_us)
    return pa.StructArray.from_arrays(
        [pa.repeat(pa.scalar(PLAYER, pa.string()), n), event_us, pa.array(np.ones(n, np.int64)), event_us, event_us],
        fields=list(PARTIAL_TYPE))
