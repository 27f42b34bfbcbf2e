"""Each window's distinct players, counted where the window's events are read (decision 0019). No pyspark.

A window's events are a sum, which Spark adds up across partitions; its distinct players are not: a player heard
from in two batches, or by two partitions, counts once. Until decision 0019 every accepted event's player reached
the driver, which put it in its windows and sent one SADD per window to each namespace's own set (the pipeline and
its two lanes: three SADDs a player). Now the partition that reads the events does it, once for every namespace:

- it adds each (window, server)'s players to one set in the pipeline's namespace (:meth:`KeySchema.players`),
  shared by the configured pipeline and its lanes, and records in the same script how many members SADD added, in
  a hash of the batch (:meth:`KeySchema.players_added`, keyed by the batch's end position, which Spark's offset
  log keeps);
- a namespace's commit adds those counts to the windows it accepts (``players`` in the window's hash). Exact,
  because a watermark never goes back: a namespace that accepts a window in a batch accepted it in every batch
  before, so the players the set had before this batch are the ones it already counted, and SADD's reply is
  exactly the players it has not;
- a task run again (a retry, a batch replayed after a crash: the same ranges, so the same hash) adds members that are
  there already: SADD says 0 and nothing is counted twice;
- a set goes once every namespace has closed its window, and the partitions then add nothing to it (``{ns}:state``
  ``sets_closed_below_ms``, which the pipeline's commit raises: :func:`streaming.store.commit.commit_batch`); a
  batch's hash goes once the pipeline and every lane have committed the batch.

This module gathers a partition's players (:class:`PartitionPlayers`); the partition writes them through the store's
one port for it, :func:`streaming.store.batch.window_players.write_partition_players`, the one place Spark code
writes Redis outside the sink's commit.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from streaming.schema.keys import KeySchema, WindowKey
from streaming.spark.partial import in_windows


class PartitionPlayers:
    """One partition's accepted events as (window start, server, player), distinct, fed chunk by chunk and folded
    whenever ``fold_at`` rows wait, so memory stays bounded by the distinct triples."""

    def __init__(self, window_ms: int, slide_ms: int, fold_at: int = 1 << 18) -> None:
        self.window_ms, self.slide_ms, self.fold_at = window_ms, slide_ms, fold_at
        self._parts: list[pa.Table] = []
        self._waiting = 0

    def add(self, server: pa.Array, player: pa.Array, event_us: pa.Array, placed: pa.Table | None = None) -> None:
        """Accepted events: each one's server, player and event time. ``placed``: the same events already in their
        windows (:func:`streaming.spark.partial.in_windows` with ``server`` and ``player``)."""
        if not len(server):
            return
        # the partitions' own placement (partial.in_windows): a player lands in the windows its event is counted in
        w = placed if placed is not None else in_windows(event_us, self.window_ms, self.slide_ms, server=server,
                                                         player=player)
        self._parts.append(w.select(["start", "server", "player"]))
        self._waiting += w.num_rows
        if self._waiting >= self.fold_at:
            self._fold()

    def _fold(self) -> None:
        if len(self._parts) > 1 or self._waiting:
            table = pa.concat_tables(self._parts)
            self._parts = [table.group_by(["start", "server", "player"], use_threads=False).aggregate([])]
        self._waiting = 0

    def windows(self) -> list[tuple[WindowKey, pa.Array]]:
        """Each (window, server) of the partition's events with its distinct players."""
        if not self._parts:
            return []
        t = pa.concat_tables(self._parts).group_by(["start", "server"], use_threads=False).aggregate(
            [("player", "distinct")])
        lists = t.column("player_distinct").combine_chunks()
        return [(WindowKey(start // 1000, start // 1000 + self.window_ms, server), lists[i].values)
                for i, (start, server) in enumerate(zip(t.column("start").to_pylist(), t.column("server").to_pylist(),
                                                        strict=True))]


@dataclass(frozen=True)
class Counting:
    """Where a streaming batch's partitions count their windows' players (the source's ``windowPlayers`` options)."""

    keys: KeySchema
    """The pipeline's keys: its sets, its batches' hashes, its state."""
    ttl_s: int
    """The sets' and hashes' TTL."""
    wait_replicas: int = 0
    """``REDIS_WAIT_REPLICAS``: a partition is done once this many replicas have its players (0: off). Else a primary
    lost between the partition's write and the commit's WAIT would take players with it that the commit, retried
    on the new primary with the counts it had read, still counts."""
    wait_timeout_ms: int = 1_000
