"""The sink's recovery: batches Spark has committed but Redis has not all of, committed again from the input.

Called once before each batch (:meth:`Recovery.before`), never on a batch's normal path, which reads its input once,
through Spark. Two cases, both read the missing batches again from the input (decision 0027 says why they must):

- *catch-up* (:meth:`Recovery.catch_up`, the first batch of a run): the followers (lab lanes, the online view)
  commit on a thread of their own after Spark's commit (decision 0004); a job stopped in between leaves them
  behind the pipeline by the batches Spark will not replay;
- *mend* (:meth:`Recovery.mend`, every batch): Redis lost commits it had acknowledged (a failover to a replica
  that did not have them yet, a restore from an older copy: decision 0023) and kept an older one.

Each batch read again is judged against the watermark Spark's offset log kept for it and committed in order, each
commit guarded by its own ``last_batch`` as on the normal path.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

import pyarrow as pa

from streaming.rules.commit.batch import no_players
from streaming.rules.commit.judge import judge
from streaming.schema.shards import START, Position
from streaming.spark import local_agg
from streaming.spark.checkpoint import OffsetEntry, batch_range, read_offset_log
from streaming.spark.listener import Phases
from streaming.spark.source import SourceOptions, ranges, read_partition
from streaming.store.batch.arrow_pack import ARROW_SCHEMA
from streaming.store.commit import commit_batch
from streaming.store.redis_conn import with_retry

if TYPE_CHECKING:
    from streaming.spark.sink import RedisSink

log = logging.getLogger(__name__)


def reread(source_options: Mapping[str, str], start_id: str, end_id: str, players: bool = False) -> pa.Table:
    """Called by the recovery only, never on a batch's normal path (decision 0027). The aggregate of the entries
    ``(start_id, end_id]`` (positions: with shards, each shard's range) read again on the driver with the source's
    own partition read (one partition a shard: a sum does not depend on the split), for a batch Spark has already
    committed. With ``players``, its windows' players are added to their sets and counted under the batch again, as
    its partitions did (:mod:`streaming.spark.window_players`: a player the set has already counts 0, so a count that
    survived is not counted twice)."""
    opts = SourceOptions(source_options)
    parts = ranges(start_id, end_id, opts.shards, batch_end=end_id if players else "")
    rows = pa.Table.from_batches([b for r in parts for b in read_partition(opts, r)], schema=ARROW_SCHEMA)
    return local_agg.aggregate_arrow(rows.select([*local_agg.COLUMNS, "blob"]))


class Recovery:
    """The recovery of one sink (``sink``: its Redis client, keys, parameters, followers and ``source_options``).
    It reads nothing of the batch the sink is running: only Spark's offset log (``spark``: the job's session, where
    the checkpoint is not a local path) and the input."""

    def __init__(self, sink: RedisSink, spark: object | None = None) -> None:
        self.sink = sink
        self._spark = spark
        self._caught_up = False

    @property
    def spark(self) -> object | None:
        """The session that reads the offset log where it is not a local path: the job's (``pipeline_sink`` hands
        it over), else the active one (the same context's Hadoop configuration either way)."""
        if self._spark is None:
            from pyspark.sql import SparkSession

            self._spark = SparkSession.getActiveSession()
        return self._spark

    def before(self, batch_id: int) -> bool:
        """Called by the sink before batch ``batch_id``'s partitions run (its players are counted after the mended
        batches'): the lost commits mended, and on the run's first batch its followers caught up. Returns True when
        a follower has no commit yet (it starts with this batch)."""
        self.mend(batch_id)
        if self._caught_up:
            return False
        self._caught_up = True
        return self.catch_up(batch_id)

    def catch_up(self, batch_id: int) -> bool:
        """Commit to the followers the batches before ``batch_id`` that Spark has committed and they have not
        (the job stopped between the two), in order, each read again from the stream: the trim keeps every
        entry a follower has not committed, and the offset log keeps each batch's range and watermark.
        Returns True when a follower has no commit yet (it starts with this batch)."""
        sink = self.sink
        lasts = sink.followers_last()
        lanes_last = lasts[:len(sink.lanes)]
        behind = [last for last in lasts if last is not None and last < batch_id - 1]
        for k in range(min(behind, default=batch_id - 1) + 1, batch_id):
            entry, start_id, end_id = batch_range(sink.checkpoint_dir, k, self.spark)
            table = with_retry(lambda s=start_id, e=end_id: reread(sink.source_options, s, e),
                               f"read of batch {k} again")
            # The batch's counts of players added are kept while a lane still needs them (the online view does not).
            lane_behind = any(last is not None and last < k for last in lanes_last)
            added = sink.players_added(start_id, end_id) if lane_behind else no_players()
            batch = local_agg.read(table, k, entry, sink.params, added, sink.guard_of(k, entry),
                                   sink.online_timeout_ms is not None)
            summary = judge(batch, k, entry.watermark_ms, entry.batch_ts_ms, start_id, end_id, sink.params, None)
            if sink.params.per_server:  # the watermark Spark went on with: this run's model starts afresh
                summary.next_watermark_ms = read_offset_log(sink.checkpoint_dir, k + 1, self.spark).watermark_ms
            log.info("batch %d: committing it to the lanes and the online view, which the last run stopped "
                     "before", k)
            sink.follow(batch, summary, entry, Phases())
        return None in lasts

    def mend(self, batch_id: int) -> list[int]:
        """Commit again the batches before ``batch_id`` whose commits Redis lost while it kept an older one (a
        failover to a replica that did not have them yet, Redis restored from an older copy: decision 0023), in
        order, then their followers: each read again from the input with its players, judged against the watermark
        Spark's offset log kept for it, as :meth:`catch_up` does for the followers. Sound while their input is
        there: every trim Redis kept was made by a commit it kept, at or before the first lost batch's start, which
        is checked. Where it cannot be done (the offset log or the input gone, or no ``source_options``) the
        commit of ``batch_id`` records the run as lost and the status line says so
        (:func:`streaming.store.commit.read_prior`). Returns the batches committed again."""
        sink = self.sink
        if not sink.params.trims or not sink.source_options or batch_id < 2:
            return []
        raw = with_retry(lambda: sink.client.hget(sink.keys.state, "last_batch"), "the pipeline's last batch",
                         refresh=sink.refresh)
        if raw is None or int(raw) >= batch_id - 1:
            return []  # none committed (Redis came back empty: the commit says so), or nothing missing
        lost = range(int(raw) + 1, batch_id)
        try:
            bounds = [batch_range(sink.checkpoint_dir, k, self.spark) for k in lost]
        except (OSError, ValueError) as exc:
            log.error("batches %d to %d: Redis lost their commits, and they cannot be read again (%s): they stay "
                      "lost, and the status line says so", lost[0], lost[-1], exc)
            return []
        if not with_retry(lambda: self.input_kept(bounds[0][1]), "the input of the lost batches"):
            log.error("batches %d to %d: Redis lost their commits, and their input has been trimmed: they stay "
                      "lost, and the status line says so", lost[0], lost[-1])
            return []
        if sink.followers is not None:
            sink.followers.wait()  # the followers of the batch before: theirs are committed first
        log.warning("batches %d to %d: Redis lost their commits and kept batch %d's (a failover?); committing them "
                    "again from the input", lost[0], lost[-1], lost[0] - 1)
        for k, (entry, start_id, end_id) in zip(lost, bounds, strict=True):
            self.commit_again(k, entry, start_id, end_id)
        return list(lost)

    def commit_again(self, k: int, entry: OffsetEntry, start_id: str, end_id: str) -> None:
        """Batch ``k`` read again from the input, committed to the pipeline and then to its followers (:meth:`mend`)."""
        sink = self.sink
        table = with_retry(lambda: reread(sink.source_options, start_id, end_id, players=True),
                           f"read of batch {k} again")
        batch = local_agg.read(table, k, entry, sink.params, sink.players_added(start_id, end_id),
                               sink.guard_of(k, entry), sink.online_timeout_ms is not None)
        summary = judge(batch, k, entry.watermark_ms, entry.batch_ts_ms, start_id, end_id, sink.params, None)
        if sink.params.per_server:  # the watermark Spark went on with
            summary.next_watermark_ms = read_offset_log(sink.checkpoint_dir, k + 1, self.spark).watermark_ms
        with_retry(lambda: commit_batch(sink.client, sink.keys, summary, sink.params), f"commit of batch {k} again",
                   when_full=sink.free_memory, refresh=sink.refresh)
        sink.follow(batch, summary, entry, Phases())

    def input_kept(self, start_id: str) -> bool:
        """Whether the input still holds every entry after position ``start_id``: trims go from the front and keep
        the entry a kept commit's batch started at, so that entry still being there says none after it went."""
        sink = self.sink
        for shard, entry_id in enumerate(Position.of(start_id).ids):
            if entry_id != START and not sink.client.xrange(sink.keys.input_shard(shard), entry_id, entry_id, count=1):
                return False
        return True
