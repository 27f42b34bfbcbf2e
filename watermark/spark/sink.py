"""The foreachBatch sink: sum a micro-batch's partial aggregates in Spark, classify, commit to Redis once.

Stateless design: the query is ``source -> withWatermark -> foreachBatch``.
Spark still tracks the watermark and records the one in force for batch N in
``offsets/N``; the sink reads it there. The source has counted each
partition's (event, window) pairs per player and its events per event time
(:mod:`watermark.spark.partial`); the sink sums them across partitions, marks each
window's pairs dropped (``window.end <= watermark``) or accepted, counts the
late but accepted ones from the event-time histogram, and merges the small
result into Redis through :func:`watermark.store.commit.commit_batch`. Counting
raw pairs, not groups, is what makes the dropped counts exact.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from dataclasses import replace as replace_table

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import redis
from msgspec.structs import replace
from pyspark.sql import DataFrame

from watermark.rules.fleet import FLOOD_REASON, admit
from watermark.rules.late import LateEvent
from watermark.rules.online.fold import KIND_CODES
from watermark.rules.online.rollup import MINUTE_MS
from watermark.rules.online.table import OnlineBatch, OnlineEvents
from watermark.rules.watermarks import ServerWatermarks
from watermark.rules.windows import Histograms, event_ms, late_counts
from watermark.schema.events import parse_entry_id
from watermark.schema.keys import KeySchema, WindowKey
from watermark.schema.records import LagRecord, NameGuardRecord, ServerRecord, StateRecord
from watermark.schema.shards import START, Position
from watermark.schema.timeutil import clock
from watermark.spark import local_agg
from watermark.spark.checkpoint import OffsetEntry, read_offset_log
from watermark.spark.followers import FollowerThread
from watermark.spark.local_agg import (  # the items' tags, one set for both paths
    BAD,
    INGEST_LAG,
    PLAYER,
    PROCESSING_LAG,
    TICK,
    WINDOW,
)
from watermark.spark.rows import ARROW_SCHEMA, packed_regions, unpack
from watermark.spark.source import SourceOptions, ranges, read_partition
from watermark.spark.window_players import Added, drop_replayed, no_players, read_added
from watermark.store.commit import (
    BadRow,
    BatchSummary,
    Params,
    WindowAgg,
    commit_batch,
    free_committed_input,
    online_reader,
    read_guard,
    replicated,
)
from watermark.store.online.commit import OnlineMirror, commit_online
from watermark.store.online.handoff import hand_off
from watermark.store.redis_conn import DriverClient, with_retry

log = logging.getLogger(__name__)


def aggregate(df: DataFrame) -> pa.Table:
    """The batch's items summed, from one Spark job whose result is small.

    The source has already folded each partition's accepted events into partial aggregates
    (:mod:`watermark.spark.partial`: per window, and the two lag histograms, exact integers) and player rows
    (the online view's input), counted each window's players in Redis (:mod:`watermark.spark.window_players`), and
    packed them
    (:func:`watermark.spark.rows.pack`); quarantined entries and idle markers come one row each. The driver
    collects them as Arrow, unpacks them and sums the items with Arrow (:func:`watermark.spark.local_agg.aggregate`):
    the batch costs one Spark job and nothing is cached. The
    DataFrame must come from the source with ``preAggregate=true`` (:func:`watermark.spark.query.read_events`); a
    row of a single accepted event fails the batch with :data:`NOT_PRE_AGGREGATED`.

    Nothing in the query depends on the batch (watermark, batch time), so Spark's plan is the same for
    every batch: which windows are closed, which events are late and the processing lag follow from the
    result and the watermark afterwards (:class:`BatchTable`)."""
    return aggregate_arrow(df.select(*local_agg.COLUMNS, "blob").toArrow())


REGIONS_META = b"regions"
"""The aggregate's schema metadata key for each server's region (JSON), read off the packed rows."""


def aggregate_arrow(rows: pa.Table) -> pa.Table:
    """:func:`aggregate` of the source's rows as Arrow (the columns it selects), wherever they were read; the
    servers' regions ride along in the schema's metadata."""
    regions = packed_regions(rows)
    t = local_agg.aggregate(unpack(rows))
    return t.replace_schema_metadata({REGIONS_META: json.dumps(regions).encode()}) if regions else t


def reread(source_options: Mapping[str, str], start_id: str, end_id: str, players: bool = False) -> pa.Table:
    """The aggregate of the entries ``(start_id, end_id]`` (positions: with shards, each shard's range) read
    again on the driver with the source's own partition read (one partition a shard: a sum does not depend on the
    split), for a batch Spark has already committed. With ``players``, its windows' players are added to their sets
    and counted under the batch again, as its partitions did (:mod:`watermark.spark.window_players`: a player the
    set has already counts 0, so a count that survived is not counted twice)."""
    opts = SourceOptions(source_options)
    parts = ranges(start_id, end_id, opts.shards, batch_end=end_id if players else "")
    rows = pa.Table.from_batches([b for r in parts for b in read_partition(opts, r)], schema=ARROW_SCHEMA)
    return aggregate_arrow(rows.select([*local_agg.COLUMNS, "blob"]))


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
    (:mod:`watermark.rules.late`). Usually none: one vectorised filter finds them."""
    tags = t.column("tag")
    part = t.filter(pc.and_(pc.equal(tags, PLAYER), pc.less(t.column("a"), watermark_ms * 1000)))
    out = [LateEvent(entry_id, server, player, _KIND_NAMES.get(code), event_us, batch_id, watermark_ms, shard or 0)
           for server, event_us, player, entry_id, code, shard in zip(
               *(part.column(c).to_pylist() for c in ("server", "a", "b", "c", "min_ev", "shard")), strict=True)]
    out.sort(key=lambda e: (e.shard, parse_entry_id(e.entry_id)))
    return out


@dataclass(frozen=True)
class BatchTable:
    """A batch's aggregate read once: everything in it that no watermark changes, shared by the configured
    pipeline and its lanes. ``windows``: (start ms, server, (event, window) pairs, players the batch added) per
    window; ``servers``: each server's input figures (rows, event time range, lags, idle markers) before any
    window is judged; ``event_hist``: each server's events per event time, ascending (late counts come from it)."""

    windows: list[tuple[int, str, int, int]]
    servers: dict[str, ServerRecord]
    event_hist: dict[str, tuple[np.ndarray, np.ndarray]]
    bad: list[BadRow]
    regions: dict[str, str] = field(default_factory=dict)
    """Each server's region as its events carry it (none when they carry none)."""
    refused_max_us: int | None = None
    """The newest event time of the names the flood guard refused (their events are in ``bad``): Spark's watermark
    read it before the guard judged, so every watermark here does too."""
    hists: Histograms | None = None
    """``event_hist`` keyed together, so a judgement counts every server's late events in one pass (None: judged
    server by server)."""

    def __post_init__(self) -> None:
        if self.hists is None:  # frozen: set once, here
            object.__setattr__(self, "hists", Histograms.of(self.event_hist))

    def _late_counts(self, accepted: list[WindowAgg], watermark_ms: int) -> list[int]:
        """Each accepted window's late events: every server's at once, or server by server where their event
        times span too much to key together."""
        if not accepted:
            return []
        starts = np.array([w.start_ms for w in accepted], np.int64)
        ends = np.array([w.end_ms for w in accepted], np.int64)
        if self.hists is not None:
            return self.hists.late_counts([w.server for w in accepted], starts, ends, watermark_ms).tolist()
        return [int(late_counts(starts[i:i + 1], ends[i:i + 1], *self.event_hist[w.server], watermark_ms)[0])
                for i, w in enumerate(accepted)]

    @classmethod
    def read(cls, t: pa.Table, batch_ts_ms: int, window_ms: int, added: Added) -> BatchTable:
        """``added``: what the batch's partitions added to each window's players (:func:`read_added`)."""
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
        return cls(windows, servers, event_hist, bad, regions)

    def summary(self, batch_id: int, watermark_ms: int, batch_ts_ms: int, start_id: str, end_id: str,
                params: Params) -> BatchSummary:
        """The batch judged against ``watermark_ms``: each window's pairs dropped (``end <= watermark``) or
        accepted, and of the accepted ones those before the watermark counted as late."""
        windows: list[WindowAgg] = []
        accepted: list[WindowAgg] = []
        for start_ms, server, n, players in self.windows:
            w = WindowAgg(start_ms, start_ms + params.window_ms, server)
            windows.append(w)
            if w.end_ms <= watermark_ms:  # closed: Spark drops the pair
                w.dropped = n
            else:
                w.events, w.players = n, players
                accepted.append(w)
        for w, k in zip(accepted, self._late_counts(accepted, watermark_ms), strict=True):
            w.late = k
        # Summed here, then each server's record made once: records are frozen, and the lanes share self.servers.
        sums = {name: dict.fromkeys(("events", "dropped", "late"), 0) for name in self.servers}
        for w in windows:
            total = sums[w.server]
            total["events"] += w.events
            total["dropped"] += w.dropped
            total["late"] += w.late
        servers = {name: replace(st, **sums[name]) for name, st in self.servers.items()}
        return BatchSummary(
            batch_id=batch_id, watermark_ms=watermark_ms, batch_ts_ms=batch_ts_ms, start_id=start_id,
            end_id=end_id, windows=sorted(windows, key=lambda w: (w.start_ms, w.server, w.end_ms)),
            servers=servers, bad=list(self.bad), regions=dict(self.regions), refused_max_event_us=self.refused_max_us,
        )


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


@dataclass(frozen=True)
class Refusal:
    """What the flood guard refused in a batch: the names, their newest event time, and the guard's minute after
    the batch (None: unchanged, or already committed)."""

    names: tuple[str, ...] = ()
    max_event_us: int | None = None
    record: NameGuardRecord | None = None


NO_REFUSAL = Refusal()


class RedisSink(DriverClient):
    """The callable handed to ``foreachBatch``; holds the Redis client on the driver.

    Everything of a batch comes from one read of the input and one aggregation: the configured pipeline's
    windows (watermark from Spark's ``offsets/N``), each lab lane's (:class:`LaneSink`: the same table under the
    lane's own watermark) and, with ``online_timeout_ms``, the online players. Each is committed in its own
    transaction guarded by its own ``last_batch``, so a batch replayed after a crash between them commits
    only what is missing, with the same numbers: a lane's watermark and the players' state are read back from
    what the previous batch committed.

    The lanes and the online view are the pipeline's *followers*. With ``background`` they commit a batch on a
    thread of their own (:class:`watermark.spark.followers.FollowerThread`) once the pipeline's commit is in, while
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
            table, refusal = self.guard(table, batch_id, entry.batch_ts_ms)
            batch, summary = self.judge(table, batch_id, entry, start_id, end_id, self.watermarks,
                                        self.players_added(start_id, end_id), refusal)
        with phases("commit"):  # guarded by the batch id, so retrying after a lost reply cannot count twice
            applied = with_retry(lambda: commit_batch(self.client, self.keys, summary, self.params),
                                 f"commit of batch {batch_id}", when_full=self.free_memory, refresh=self.refresh)
        if not applied:
            log.info("batch %d already in Redis (replayed after a restart): skipped", batch_id)
            if start_id != end_id:  # the read wrote the batch's count of players again: not kept if nobody needs it
                with_retry(lambda: drop_replayed(self.client, self.keys, end_id), f"replayed count up to {end_id}",
                           refresh=self.refresh)

        def follow() -> None:
            self.follow(table, batch, summary, entry, phases)
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

    def guard(self, table: pa.Table, batch_id: int, batch_ts_ms: int) -> tuple[pa.Table, Refusal]:
        """The flood guard (:func:`watermark.rules.fleet.admit`): the batch's new server names over the minute's
        limit have their events quarantined. Judged against what the pipeline committed before the batch; a batch
        it has committed already (read again for a follower, or replayed) refuses what it refused then."""
        limit = self.params.new_servers_per_minute
        events = local_agg.events_per_server(table) if limit > 0 else {}
        if not events:
            return table, NO_REFUSAL
        prior = with_retry(lambda: read_guard(self.client, self.keys, batch_id, events),
                           f"the flood guard's names of batch {batch_id}", refresh=self.refresh)
        if prior.committed_refusal is not None:
            refused, record = frozenset(prior.committed_refusal), None
        else:
            refused, after = admit(prior.new, prior.record, batch_ts_ms, limit)
            record = None if after == prior.record else after
        if not refused:
            return table, Refusal(record=record)
        minute = batch_ts_ms - batch_ts_ms % MINUTE_MS
        detail = (f"a new server name over the flood guard: more than {limit:,} new names in the minute from "
                  f"{clock(minute)} (NEW_SERVERS_PER_MINUTE)")
        table, newest = local_agg.refuse(table, refused, FLOOD_REASON, detail)
        log.warning("batch %d: %d new server name(s) refused by the flood guard (%s)", batch_id, len(refused),
                    detail)
        return table, Refusal(tuple(sorted(refused)), newest, record)

    def judge(self, table: pa.Table, batch_id: int, entry: OffsetEntry, start_id: str, end_id: str,
              watermarks: ServerWatermarks | None, added: Added,
              refusal: Refusal | None = None) -> tuple[BatchTable, BatchSummary]:
        refusal = refusal or NO_REFUSAL
        batch = replace_table(BatchTable.read(table, entry.batch_ts_ms, self.params.window_ms, added),
                              refused_max_us=refusal.max_event_us)
        summary = batch.summary(batch_id, entry.watermark_ms, entry.batch_ts_ms, start_id, end_id, self.params)
        summary.refused, summary.name_guard = refusal.names, refusal.record
        summary.late_events = late_events(table, batch_id, entry.watermark_ms)
        if watermarks is not None:
            per_server(summary, watermarks, self.params.idle_timeout_ms is not None)
        return batch, summary

    def follow(self, table: pa.Table, batch: BatchTable, summary: BatchSummary, entry: OffsetEntry,
               phases: Phases) -> None:
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
                self.online(batch_id, entry, summary, online_events(table), self.online_timeout_ms)

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
            table, refusal = self.guard(table, k, entry.batch_ts_ms)
            batch, summary = self.judge(table, k, entry, start_id, end_id, None, added, refusal)
            if self.params.per_server:  # the watermark Spark went on with: this run's model starts afresh
                summary.next_watermark_ms = read_offset_log(self.checkpoint_dir, k + 1, spark).watermark_ms
            log.info("batch %d: committing it to the lanes and the online view, which the last run stopped "
                     "before", k)
            self.follow(table, batch, summary, entry, Phases())
        return None in lasts

    def mend(self, batch_id: int, spark: object) -> list[int]:
        """Commit again the batches before ``batch_id`` whose commits Redis lost while it kept an older one (a
        failover to a replica that did not have them yet, Redis restored from an older copy: decision 0023), in
        order, then their followers: each read again from the input with its players, judged against the watermark
        Spark's offset log kept for it, as :meth:`catch_up` does for the followers. Sound while their input is
        there: every trim Redis kept was made by a commit it kept, at or before the first lost batch's start, which
        is checked. Where it cannot be done (the offset log or the input gone, or no ``source_options``) the
        commit of ``batch_id`` records the run as lost and the status line says so
        (:func:`watermark.store.commit.read_prior`). Returns the batches committed again."""
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
        table, refusal = self.guard(table, k, entry.batch_ts_ms)
        batch, summary = self.judge(table, k, entry, start_id, end_id, None, self.players_added(start_id, end_id),
                                    refusal)
        if self.params.per_server:  # the watermark Spark went on with
            summary.next_watermark_ms = read_offset_log(self.checkpoint_dir, k + 1, spark).watermark_ms
        with_retry(lambda: commit_batch(self.client, self.keys, summary, self.params), f"commit of batch {k} again",
                   when_full=self.free_memory, refresh=self.refresh)
        self.follow(table, batch, summary, entry, Phases())

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
