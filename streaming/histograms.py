"""Exact per-server histograms of the accepted events a source partition reads, built where they are read.

The sink's lag figures are exact percentiles over every accepted event of a batch: the ingest lag (arrival,
from the entry ID, minus event time) and the processing lag (batch time minus event time). Counted in Spark
they were two of the three items each event became in the sink's aggregation (side by side on 1,000,000
events, bench/compare.py: 291k vs 308k events/s, 1.06x). The source's Python workers hold each chunk as
Arrow already, and Arrow's hash aggregation turns a partition's events into one row per server and
distinct key, which Spark then only sums across partitions. No pyspark here.

Two histograms, told apart by ``of``, each row ``(server, key_us, n, min_event_us, max_event_us)``:

- ``ingest_lag``: keyed by arrival minus event time (microseconds), with the earliest and latest event time
  among its events (the latest arrival is ``max_event_us + key_us``);
- ``event_time``: keyed by the event time itself; the sink subtracts it from the batch time.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

INGEST_LAG, EVENT_TIME = "ingest_lag", "event_time"
HISTOGRAM_TYPE = pa.struct([("of", pa.string()), ("key_us", pa.int64()), ("n", pa.int64()),
                            ("min_event_us", pa.int64()), ("max_event_us", pa.int64())])
# As Spark declares the same column (streaming.source.SCHEMA).
HISTOGRAM_DDL = "histogram struct<of: string, key_us: bigint, n: bigint, min_event_us: bigint, max_event_us: bigint>"

_KEYS = ["server", "key_us"]
_AGGS = [("n", "sum"), ("min_event_us", "min"), ("max_event_us", "max")]
_COLUMNS = ["server", "key_us", "n", "min_event_us", "max_event_us"]
_FOLDED = [*_KEYS, *(f"{c}_{op}" for c, op in _AGGS)]  # group_by's names for the same columns


class PartitionHistograms:
    """Both histograms of one partition, fed chunk by chunk.

    Events are kept as they come and folded into the histograms whenever ``fold_at`` are waiting, so memory
    stays bounded by the number of distinct keys, however long the partition."""

    def __init__(self, fold_at: int = 1 << 18) -> None:
        if fold_at < 1:
            raise ValueError(f"fold_at must be at least 1, got {fold_at}")
        self.fold_at = fold_at
        self._parts: dict[str, list[pa.Table]] = {INGEST_LAG: [], EVENT_TIME: []}
        self._waiting = 0

    def add(self, server: pa.Array, ingest_us: pa.Array, event_us: pa.Array) -> None:
        """Accepted events only, each with its server, arrival and event time (int64 microseconds, no nulls)."""
        n = len(server)
        if not n:
            return
        ones = pa.array(np.ones(n, np.int64))
        self._parts[INGEST_LAG].append(pa.table([server, pc.subtract(ingest_us, event_us), ones, event_us, event_us],
                                                names=_COLUMNS))
        self._parts[EVENT_TIME].append(pa.table([server, event_us, ones, event_us, event_us], names=_COLUMNS))
        self._waiting += n
        if self._waiting >= self.fold_at:
            self._fold()

    def _fold(self) -> None:
        for of, parts in self._parts.items():
            if len(parts) > 1 or (parts and self._waiting):
                table = pa.concat_tables(parts).group_by(_KEYS, use_threads=False).aggregate(_AGGS)
                self._parts[of] = [table.select(_FOLDED).rename_columns(_COLUMNS)]
        self._waiting = 0

    def rows(self) -> tuple[pa.Array, pa.StructArray]:
        """Every histogram row: the server column and the ``histogram`` column, ``ingest_lag`` rows first."""
        self._fold()
        tables = [(of, parts[0]) for of, parts in self._parts.items() if parts]
        if not tables:
            return pa.array([], pa.string()), pa.array([], HISTOGRAM_TYPE)
        server = pa.concat_arrays([t.column("server").combine_chunks() for _, t in tables])
        of = pa.concat_arrays([pa.repeat(pa.scalar(name, pa.string()), t.num_rows) for name, t in tables])
        fields = [pa.concat_arrays([t.column(c).combine_chunks() for _, t in tables]) for c in _COLUMNS[1:]]
        return server, pa.StructArray.from_arrays([of, *fields], fields=list(HISTOGRAM_TYPE))
