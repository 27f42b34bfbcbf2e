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

import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import pyarrow as pa
import redis
from pyspark.sql import DataFrame

from streaming.rules.commit.batch import Added, BatchSummary, no_players
from streaming.rules.fleet import admit
from streaming.rules.online.rollup import MINUTE_MS
from streaming.rules.online.table import OnlineBatch, OnlineEvents
from streaming.rules.watermarks import ServerWatermarks
from streaming.rules.windows import event_ms
from streaming.schema.keys import KeySchema
from streaming.schema.params import Params, online_reader
from streaming.schema.records import StateRecord
from streaming.schema.shards import START, Position
from streaming.spark import local_agg
from streaming.spark.checkpoint import OffsetEntry, read_offset_log
from streaming.spark.followers import FollowerThread
from streaming.spark.local_agg import REGIONS_META, BatchTable, Guard, Refusal
from streaming.spark.source import SourceOptions, ranges, read_partition
from streaming.store.batch.arrow_pack import ARROW_SCHEMA, packed_regions, unpack_rows
from streaming.store.batch.window_players import drop_replayed, read_added
from streaming.store.commit import commit_batch, free_committed_input, read_guard, replicated
from streaming.store.online.commit import OnlineMirror, commit_online
from streaming.store.online.handoff import hand_off
from streaming.store.redis_conn import DriverClient, with_retry
from watermark_client.timeutil import clock

log = logging.getLogger(__name__)


def aggregate(df: DataFrame) -> pa.Table:
    """The batch's items summed, from one Spark job whose result is small.

    The source has already folded each partition's accepted events into partial aggregates
    (:mod:`streaming.spark.partial`: per window, and the two lag histograms, exact integers) and player rows
    (the online view's input), counted each window's players in Redis (:mod:`streaming.spark.window_players`), and
    packed them (:func:`streaming.store.batch.arrow_pack.pack_rows`); quarantined entries and idle markers come one
    row each. The driver collects them as Arrow, unpacks them and sums the items with Arrow
    (:func:`streaming.spark.local_agg.aggregate`): the batch costs one Spark job and nothing is cached. The
    DataFrame must come from the source with ``preAggregate=true`` (:func:`streaming.spark.query.read_events`); a
    row of a single accepted event fails the batch with :data:`NOT_PRE_AGGREGATED`.

    Nothing in the query depends on the batch (watermark, batch time), so Spark's plan is the same for
    every batch: which windows are closed, which events are late and the processing lag follow from the
    result and the watermark afterwards (:func:`streaming.spark.local_agg.read`)."""
    return aggregate_arrow(df.select(*local_agg.COLUMNS, "blob").toArrow())


def aggregate_arrow(rows: pa.Table) -> pa.Table:
    """:func:`aggregate` of the source's rows as Arrow (the columns it selects), wherever they were read; the
    servers' regions ride along in the schema's metadata."""
    regions = packed_regions(rows)
    t = local_agg.aggregate(unpack_rows(rows))
    return t.replace_schema_metadata({REGIONS_META: json.dumps(regions).encode()}) if regions else t


def reread(source_options: Mapping[str, str], start_id: str, end_id: str, players: bool = False) -> pa.Table:
    """The aggregate of the entries ``(start_id, end_id]`` (positions: with shards, each shard's range) read
    again on the driver with the source's own partition read (one partition a shard: a sum does not depend on the
    split), for a batch Spark has already committed. With ``players``, its windows' players are added to their sets
    and counted under the batch again, as its partitions did (:mod:`streaming.spark.window_players`: a player the
    set has already counts 0, so a count that survived is not counted twice)."""
    opts = SourceOptions(source_options)
    parts = ranges(start_id, end_id, opts.shards, batch_end=end_id if players else "")
    rows = pa.Table.from_batches([b for r in parts for b in read_partition(opts, r)], schema=ARROW_SCHEMA)
    return aggregate_arrow(rows.select([*local_agg.COLUMNS, "blob"]))


class Phases:
    """Wall milliseconds of the sink's steps in one batch: ``with phases("commit"): ...``."""

    def __init__(self) -> None:
        self.ms: dict[str, int] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.ms[name] = round((time.perf_counter() - t0) * 1000)

    def to_json(self) -> str:
        return json.dumps(self.ms, separators=(",", ":"))


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
    (:meth:`catch_up`, reading the missing batches again from ``source_options``)."""

    def __init__(self, redis_url: str, keys: KeySchema, params: Params, checkpoint_dir: str,
                 on_commit: Callable[[BatchSummary, bool], None] | None = None, lanes: Sequence[LaneSink] = (),
                 online_timeout_ms: int | None = None, background: bool = False,
                 source_options: Mapping[str, str] | None = None, online_groups: int = 0) -> None:
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
        self.mirror = OnlineMirror()
        self.followers = FollowerThread(f"followers-{keys.namespace}") if background else None
        self._caught_up = False
        # One sink per query run, like Spark's per-input watermark map, which is not checkpointed.
        self.watermarks = (ServerWatermarks(params.servers, params.delay_ms, params.policy)
                           if params.per_server else None)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        spark = df.sparkSession
        self.mend(batch_id, spark)  # before the batch's partitions run: its players are counted after theirs
        fresh = False
        if not self._caught_up:
            fresh = self.catch_up(batch_id, spark)
            self._caught_up = True
        entry, start_id, end_id = self.bounds(batch_id, spark)
        phases = Phases()
        with phases("read"):  # Spark's job: the source partitions read, parse and pre-aggregate
            table = aggregate(df)
        with phases("sum"):
            batch = local_agg.read(table, batch_id, entry, self.params, self.players_added(start_id, end_id),
                                   self.guard_of(batch_id, entry), self.online_timeout_ms is not None)
            summary = self.judge(batch, batch_id, entry, start_id, end_id, self.watermarks)
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

    def bounds(self, batch_id: int, spark: object) -> tuple[OffsetEntry, str, str]:
        """The batch's offset log entry and its entry ID range ``(start, end]``."""
        entry = read_offset_log(self.checkpoint_dir, batch_id, spark)
        end_id = (entry.source_offsets[0] or {}).get("id", "0-0")
        start_id = "0-0"
        if batch_id > 0:
            prev = read_offset_log(self.checkpoint_dir, batch_id - 1, spark)
            start_id = (prev.source_offsets[0] or {}).get("id", "0-0")
        return entry, start_id, end_id

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

    def judge(self, batch: BatchTable, batch_id: int, entry: OffsetEntry, start_id: str, end_id: str,
              watermarks: ServerWatermarks | None) -> BatchSummary:
        """The batch judged against the pipeline's watermark in force, with what the flood guard refused and the
        late events it keeps; per server, the watermarks advanced (``watermarks``: this run's model)."""
        summary = batch.summary(batch_id, entry.watermark_ms, entry.batch_ts_ms, start_id, end_id, self.params)
        summary.refused, summary.name_guard = batch.refusal.names, batch.refusal.record
        summary.late_events = batch.late
        if watermarks is not None:
            per_server(summary, watermarks, self.params.idle_timeout_ms is not None)
        return summary

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
            with phases("online"):
                aggregate = batch.aggregate
                events = local_agg.online_events(aggregate) if aggregate is not None else OnlineEvents.empty()
                self.online(batch_id, entry, summary, events, self.online_timeout_ms)

    def online(self, batch_id: int, entry: OffsetEntry, summary: BatchSummary, events: OnlineEvents,
               timeout_ms: int) -> None:
        """The batch's accepted events to the online view: folded here, or handed off to its groups (decision
        0020), once either way."""
        online = OnlineBatch(batch_id, entry.watermark_ms, entry.batch_ts_ms, summary.end_id, events,
                               self.params.delay_ms, summary.next_watermark_ms)
        if self.online_groups:
            handed = online.record(self.online_groups, timeout_ms)
            what = f"the online view's share of batch {batch_id}"
            with_retry(lambda: (hand_off(self.client, self.keys, handed, events, self.params.ttl_s),
                                replicated(self.client, self.keys.handoff_guard, batch_id, self.params, what)),
                       what, when_full=self.free_memory, refresh=self.refresh)
            return
        what = f"online players of batch {batch_id}"
        with_retry(lambda: (commit_online(self.client, self.keys, online, self.params, timeout_ms, self.mirror),
                            replicated(self.client, self.keys.online_state, batch_id, self.params, what)),
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

    def catch_up(self, batch_id: int, spark: object) -> bool:
        """Commit to the followers the batches before ``batch_id`` that Spark has committed and they have not
        (the job stopped between the two), in order, each read again from the stream: the trim keeps every
        entry a follower has not committed, and the offset log keeps each batch's range and watermark.
        Returns True when a follower has no commit yet (it starts with this batch)."""
        lasts = self.followers_last()
        lanes_last = lasts[:len(self.lanes)]
        behind = [last for last in lasts if last is not None and last < batch_id - 1]
        for k in range(min(behind, default=batch_id - 1) + 1, batch_id):
            entry, start_id, end_id = self.bounds(k, spark)
            table = with_retry(lambda s=start_id, e=end_id: reread(self.source_options, s, e),
                               f"read of batch {k} again")
            # The batch's counts of players added are kept while a lane still needs them (the online view does not).
            lane_behind = any(last is not None and last < k for last in lanes_last)
            added = self.players_added(start_id, end_id) if lane_behind else no_players()
            batch = local_agg.read(table, k, entry, self.params, added, self.guard_of(k, entry),
                                   self.online_timeout_ms is not None)
            summary = self.judge(batch, k, entry, start_id, end_id, None)
            if self.params.per_server:  # the watermark Spark went on with: this run's model starts afresh
                summary.next_watermark_ms = read_offset_log(self.checkpoint_dir, k + 1, spark).watermark_ms
            log.info("batch %d: committing it to the lanes and the online view, which the last run stopped "
                     "before", k)
            self.follow(batch, summary, entry, Phases())
        return None in lasts

    def mend(self, batch_id: int, spark: object) -> list[int]:
        """Commit again the batches before ``batch_id`` whose commits Redis lost while it kept an older one (a
        failover to a replica that did not have them yet, Redis restored from an older copy: decision 0023), in
        order, then their followers: each read again from the input with its players, judged against the watermark
        Spark's offset log kept for it, as :meth:`catch_up` does for the followers. Sound while their input is
        there: every trim Redis kept was made by a commit it kept, at or before the first lost batch's start, which
        is checked. Where it cannot be done (the offset log or the input gone, or no ``source_options``) the
        commit of ``batch_id`` records the run as lost and the status line says so
        (:func:`streaming.store.commit.read_prior`). Returns the batches committed again."""
        if not self.params.trims or not self.source_options or batch_id < 2:
            return []
        raw = with_retry(lambda: self.client.hget(self.keys.state, "last_batch"), "the pipeline's last batch",
                         refresh=self.refresh)
        if raw is None or int(raw) >= batch_id - 1:
            return []  # none committed (Redis came back empty: the commit says so), or nothing missing
        lost = range(int(raw) + 1, batch_id)
        try:
            bounds = [self.bounds(k, spark) for k in lost]
        except (OSError, ValueError) as exc:
            log.error("batches %d to %d: Redis lost their commits, and they cannot be read again (%s): they stay "
                      "lost, and the status line says so", lost[0], lost[-1], exc)
            return []
        if not with_retry(lambda: self.input_kept(bounds[0][1]), "the input of the lost batches"):
            log.error("batches %d to %d: Redis lost their commits, and their input has been trimmed: they stay "
                      "lost, and the status line says so", lost[0], lost[-1])
            return []
        if self.followers is not None:
            self.followers.wait()  # the followers of the batch before: theirs are committed first
        log.warning("batches %d to %d: Redis lost their commits and kept batch %d's (a failover?); committing them "
                    "again from the input", lost[0], lost[-1], lost[0] - 1)
        for k, (entry, start_id, end_id) in zip(lost, bounds, strict=True):
            self.commit_again(k, entry, start_id, end_id, spark)
        return list(lost)

    def commit_again(self, k: int, entry: OffsetEntry, start_id: str, end_id: str, spark: object) -> None:
        """Batch ``k`` read again from the input, committed to the pipeline and then to its followers (:meth:`mend`)."""
        table = with_retry(lambda: reread(self.source_options, start_id, end_id, players=True),
                           f"read of batch {k} again")
        batch = local_agg.read(table, k, entry, self.params, self.players_added(start_id, end_id),
                               self.guard_of(k, entry), self.online_timeout_ms is not None)
        summary = self.judge(batch, k, entry, start_id, end_id, None)
        if self.params.per_server:  # the watermark Spark went on with
            summary.next_watermark_ms = read_offset_log(self.checkpoint_dir, k + 1, spark).watermark_ms
        with_retry(lambda: commit_batch(self.client, self.keys, summary, self.params), f"commit of batch {k} again",
                   when_full=self.free_memory, refresh=self.refresh)
        self.follow(batch, summary, entry, Phases())

    def input_kept(self, start_id: str) -> bool:
        """Whether the input still holds every entry after position ``start_id``: trims go from the front and keep
        the entry a kept commit's batch started at, so that entry still being there says none after it went."""
        for shard, entry_id in enumerate(Position.of(start_id).ids):
            if entry_id != START and not self.client.xrange(self.keys.input_shard(shard), entry_id, entry_id,
                                                             count=1):
                return False
        return True

    def close(self) -> None:
        """Wait for the followers' pending commit; a failure is logged (the next run catches them up)."""
        if self.followers is None:
            return
        try:
            self.followers.close()
        except Exception as exc:  # noqa: BLE001 - stopping: said, and mended by the next run's catch_up
            log.warning("the followers' last commit failed: %s", exc)


def per_server(summary: BatchSummary, model: ServerWatermarks, idle: bool) -> None:
    """Advance the per-input watermarks with what each server's input saw (idle markers too, where idleness
    is on: they are in that input), as Spark does after running the batch; a lane following the fleet retires the
    servers silent for RETIRE_AFTER (:class:`ServerWatermarks`)."""
    seen: dict[str, int] = {}
    for server, st in summary.servers.items():
        top = st.input_max_us(idle)
        if top is not None:
            seen[server] = event_ms(top)
    spoke = {s: st.max_ingest_us // 1000 for s, st in summary.servers.items() if st.max_ingest_us is not None}
    newest = max(spoke.values(), default=None)  # arrival time, from the entry IDs: a replayed batch decides the same
    summary.server_watermarks = model.update(seen, spoke, newest)
    summary.next_watermark_ms = model.combined(summary.watermark_ms)
    if model.retire_after_ms is not None and not model.servers:
        summary.server_heard_ms = dict(model.heard)


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
