"""The foreachBatch sink: sum a micro-batch's partial aggregates in Spark, classify, commit to Redis once.

Stateless design: the query is ``source -> withWatermark -> foreachBatch``.
Spark still tracks the watermark and records the one in force for batch N in
``offsets/N``; the sink reads it there. The source has counted each
partition's (event, window) pairs per player and its events per event time
(:mod:`streaming.spark.partial`); the sink sums them across partitions, marks each
window's pairs dropped (``window.end <= watermark``) or accepted, counts the
late but accepted ones from the event-time histogram, and merges the small
result into Redis through :func:`streaming.store.commit.commit_batch`. Counting
raw pairs, not groups, is what makes the dropped counts exact.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import redis
from pyspark.sql import DataFrame

from streaming.rules.commit.batch import Added, BatchSummary, no_players
from streaming.rules.commit.judge import BatchTable, Refusal, judge, per_server
from streaming.rules.fleet import admit
from streaming.rules.online.rollup import MINUTE_MS
from streaming.rules.online.table import OnlineBatch, OnlineEvents
from streaming.rules.watermarks import ServerWatermarks
from streaming.schema.keys import KeySchema
from streaming.schema.params import Params, online_reader
from streaming.schema.records import StateRecord
from streaming.spark import local_agg
from streaming.spark.checkpoint import OffsetEntry, batch_range
from streaming.spark.followers import FollowerThread
from streaming.spark.listener import Phases
from streaming.spark.local_agg import Guard
from streaming.spark.recovery import Recovery
from streaming.store.batch.window_players import drop_replayed, read_added
from streaming.store.commit import commit_batch, free_committed_input, read_guard
from streaming.store.online.commit import follow_online, new_mirror
from streaming.store.redis_conn import DriverClient, with_retry
from watermark_client.timeutil import clock

log = logging.getLogger(__name__)


class FollowerBehind(RuntimeError):
    """A follower's commits are behind the batch by more than one (:meth:`RedisSink.followers_in_step`)."""


class RedisSink(DriverClient):
    """The callable handed to ``foreachBatch``; holds the Redis client on the driver.

    Everything of a batch comes from one read of the input and one aggregation: the configured pipeline's
    windows (watermark from Spark's ``offsets/N``), each lab lane's (:class:`LaneSink`: the same table under the
    lane's own watermark) and, with ``online_timeout_ms``, the online players. Each is committed in its own
    transaction guarded by its own ``last_batch``, so a batch replayed after a crash between them commits
    only what is missing, with the same numbers: a lane's watermark and the players' state are read back from
    what the previous batch committed.

    The lanes and the online view are the pipeline's *followers*. With ``background`` they commit a batch on a
    thread of their own (:class:`streaming.spark.followers.FollowerThread`) once the pipeline's commit is in, while
    Spark already plans and reads the next batch: the batch's path to its first commit stays as short as the
    pipeline alone. Spark marks a batch done when this call returns, so a job killed before its followers
    committed leaves them behind the pipeline; the first batch of every run therefore catches them up
    (:meth:`streaming.spark.recovery.Recovery.catch_up`, reading the missing batches again from
    ``source_options``)."""

    def __init__(self, redis_url: str, keys: KeySchema, params: Params, checkpoint_dir: str,
                 on_commit: Callable[[BatchSummary, bool], None] | None = None, lanes: Sequence[LaneSink] = (),
                 online_timeout_ms: int | None = None, background: bool = False,
                 source_options: Mapping[str, str] | None = None, online_groups: int = 0,
                 spark: object | None = None) -> None:
        if background and source_options is None:
            raise ValueError("a sink whose followers commit in the background needs source_options to catch "
                             "them up after a crash")
        self.redis_url = redis_url
        self.keys = keys
        self.params = params
        self.checkpoint_dir = checkpoint_dir
        self.on_commit = on_commit
        self.lanes = tuple(lanes)
        self.online_timeout_ms = online_timeout_ms
        self.online_groups = online_groups  # 0: the online view is folded here; N: handed off to N groups
        self.source_options = dict(source_options or {})
        self.mirror = new_mirror()
        self.followers = FollowerThread(f"followers-{keys.namespace}") if background else None
        self.recovery = Recovery(self, spark)
        # One sink per query run, like Spark's per-input watermark map, which is not checkpointed.
        self.watermarks = (ServerWatermarks(params.servers, params.delay_ms, params.policy)
                           if params.per_server else None)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Called by Spark once a batch, on the driver: the batch goes down once. The recovery first, off the batch's
        path (:class:`streaming.spark.recovery.Recovery`: before the batch's partitions run, whose players are
        counted after the mended batches'); then the DataFrame read into the batch's records in one Spark job
        (:func:`streaming.spark.local_agg.batch_of`), judged (:func:`streaming.rules.commit.judge.judge`), committed
        (:func:`streaming.store.commit.commit_batch`), and handed to its followers."""
        spark = df.sparkSession
        fresh = self.recovery.before(batch_id)
        entry, start_id, end_id = batch_range(self.checkpoint_dir, batch_id, spark)
        phases = Phases()
        batch = local_agg.batch_of(df, batch_id, entry, self.params, lambda: self.players_added(start_id, end_id),
                                   self.guard_of(batch_id, entry), self.online_timeout_ms is not None, phases)
        with phases("sum"):
            summary = judge(batch, batch_id, entry.watermark_ms, entry.batch_ts_ms, start_id, end_id, self.params,
                            self.watermarks)
        with phases("commit"):  # guarded by the batch id, so retrying after a lost reply cannot count twice
            applied = with_retry(lambda: commit_batch(self.client, self.keys, summary, self.params),
                                 f"commit of batch {batch_id}", when_full=self.free_memory, refresh=self.refresh)
        if not applied:
            log.info("batch %d already in Redis (replayed after a restart): skipped", batch_id)
            if start_id != end_id:  # the read wrote the batch's count of players again: not kept if nobody needs it
                with_retry(lambda: drop_replayed(self.client, self.keys, end_id), f"replayed count up to {end_id}",
                           refresh=self.refresh)

        def follow() -> None:
            self.follow(batch, summary, entry, phases)
            if applied:  # where the sink's time went, beside the batch's record (its TTL already set)
                with_retry(lambda: self.client.hset(self.keys.batch(batch_id), "phases", phases.to_json()),
                           f"phases of batch {batch_id}", when_full=self.free_memory, refresh=self.refresh)

        # A follower's first batch commits before Spark's does: nothing could catch it up otherwise.
        if self.followers is None or fresh:
            follow()
        else:
            self.followers.submit(follow)
        if self.on_commit is not None:
            self.on_commit(summary, applied)

    def free_memory(self) -> str:
        """Redis refused a commit because it is full: free what the input keeps only for look-back."""
        return free_committed_input(self.client, self.keys, self.params)

    def players_added(self, start_id: str, end_id: str) -> Added:
        """What the batch's partitions added to its windows' players; none for a batch that read nothing."""
        if start_id == end_id:
            return no_players()
        return with_retry(lambda: read_added(self.client, self.keys, end_id), f"players added up to {end_id}",
                          refresh=self.refresh)

    def guard_of(self, batch_id: int, entry: OffsetEntry) -> Guard | None:
        """The flood guard of batch ``batch_id`` for :func:`streaming.spark.local_agg.read` (None: no guard)."""
        if self.params.new_servers_per_minute <= 0:
            return None
        return lambda events: self.guard(events, batch_id, entry.batch_ts_ms)

    def guard(self, events: Mapping[str, int], batch_id: int, batch_ts_ms: int) -> Refusal:
        """The flood guard (:func:`streaming.rules.fleet.admit`) over the batch's accepted events per server: the
        new server names over the minute's limit are refused. Judged against what the pipeline committed before the
        batch; a batch it has committed already (read again for a follower, or replayed) refuses what it refused
        then."""
        limit = self.params.new_servers_per_minute
        prior = with_retry(lambda: read_guard(self.client, self.keys, batch_id, events),
                           f"the flood guard's names of batch {batch_id}", refresh=self.refresh)
        if prior.committed_refusal is not None:
            refused, record = frozenset(prior.committed_refusal), None
        else:
            refused, after = admit(prior.new, prior.record, batch_ts_ms, limit)
            record = None if after == prior.record else after
        if not refused:
            return Refusal(record=record)
        minute = batch_ts_ms - batch_ts_ms % MINUTE_MS
        detail = (f"a new server name over the flood guard: more than {limit:,} new names in the minute from "
                  f"{clock(minute)} (NEW_SERVERS_PER_MINUTE)")
        log.warning("batch %d: %d new server name(s) refused by the flood guard (%s)", batch_id, len(refused),
                    detail)
        return Refusal(tuple(sorted(refused)), detail, record=record)

    def follow(self, batch: BatchTable, summary: BatchSummary, entry: OffsetEntry, phases: Phases) -> None:
        """Commit the batch to every follower that does not have it yet: each lane, then the online view. A follower
        behind the batch by more than one is not built on (:meth:`followers_in_step`)."""
        batch_id = summary.batch_id
        self.followers_in_step(batch_id)
        with phases("lanes"):
            for lane in self.lanes:
                with_retry(lambda lane=lane: lane.commit(self.client, batch, summary),
                           f"lane {lane.keys.namespace} of batch {batch_id}", when_full=self.free_memory,
                           refresh=self.refresh)
        if self.online_timeout_ms is not None:
            with phases("online"):  # folded here, or handed off to its groups (decision 0020), once either way
                aggregate = batch.aggregate
                events = local_agg.online_events(aggregate) if aggregate is not None else OnlineEvents.empty()
                online = OnlineBatch(batch_id, entry.watermark_ms, entry.batch_ts_ms, summary.end_id, events,
                                     self.params.delay_ms, summary.next_watermark_ms)
                what = (f"the online view's share of batch {batch_id}" if self.online_groups
                        else f"online players of batch {batch_id}")
                with_retry(lambda: follow_online(self.client, self.keys, online, self.params, self.online_timeout_ms,
                                                 self.online_groups, self.mirror),
                           what, when_full=self.free_memory, refresh=self.refresh)

    def followers_last(self) -> list[int | None]:
        """Each follower's last committed batch (None: it has not committed one)."""
        guards = [lane.keys.state for lane in self.lanes]
        if self.online_timeout_ms is not None:
            guards.append(online_reader(self.keys, self.online_groups))
        pipe = self.client.pipeline(transaction=False)
        for guard in guards:
            pipe.hget(guard, "last_batch")
        return [None if v is None else int(v) for v in with_retry(pipe.execute, "the followers' last batches")]

    def followers_in_step(self, batch_id: int) -> None:
        """Raise :class:`FollowerBehind` when a follower's last batch is behind ``batch_id`` by more than one. In a
        run they commit batch after batch (the first batch of a run catches them up, a failed commit fails the job),
        so that is Redis having lost their commits and kept older ones (a failover without ``REDIS_WAIT_REPLICAS``:
        decision 0023). The batch fails; the job starts the query again and :meth:`catch_up` commits the missing
        batches to them from the input, in order."""
        behind = [(last, name) for last, name in zip(self.followers_last(), self.follower_names(), strict=True)
                  if last is not None and last < batch_id - 1]
        if behind:
            said = ", ".join(f"{name} at batch {last}" for last, name in behind)
            raise FollowerBehind(f"batch {batch_id}: {said}: Redis lost their later commits (a failover?); the job "
                                 "starts again and commits the missing batches to them from the input")

    def follower_names(self) -> list[str]:
        """The followers as :meth:`followers_last` reads them."""
        names = [f"lane {lane.keys.namespace}" for lane in self.lanes]
        return names + (["the online view"] if self.online_timeout_ms is not None else [])

    def close(self) -> None:
        """Wait for the followers' pending commit; a failure is logged (the next run catches them up)."""
        if self.followers is None:
            return
        try:
            self.followers.close()
        except Exception as exc:  # noqa: BLE001 - stopping: said, and mended by the next run's catch_up
            log.warning("the followers' last commit failed: %s", exc)


@dataclass(frozen=True)
class LaneSink:
    """A lab lane: the pipeline's batch under another watermark strategy, in the lane's namespace.

    The lane reads nothing itself: it takes the batch's aggregate and judges it against its own watermark,
    which it keeps where the previous batch committed it (``next_watermark_ms`` and, per server, the
    per-input map ``server_watermarks`` in ``{lane}:state``), so a restart changes nothing."""

    keys: KeySchema
    params: Params

    def commit(self, client: redis.Redis, batch: BatchTable, main: BatchSummary) -> bool:
        names = ["last_batch", "next_watermark_ms", "server_watermarks", "server_heard_ms"]
        state = StateRecord.from_hash(dict(zip(names, client.hmget(self.keys.state, names), strict=True)),
                                      self.keys.state)
        if state.last_batch is not None and state.last_batch >= main.batch_id:
            return False
        summary = batch.summary(main.batch_id, state.next_watermark_ms, main.batch_ts_ms, main.start_id,
                                main.end_id, self.params)
        if self.params.per_server:
            model = ServerWatermarks(self.params.servers, self.params.delay_ms, self.params.policy,
                                     dict(state.server_watermarks or {}), self.params.retire_after_ms,
                                     dict(state.server_heard_ms or {}))
            per_server(summary, model, self.params.idle_timeout_ms is not None)
        return commit_batch(client, self.keys, summary, self.params)
