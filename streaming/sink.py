"""The foreachBatch sink: sum a micro-batch's partial aggregates in Spark, classify, commit to Redis once.

Stateless design: the query is ``source -> withWatermark -> foreachBatch``.
Spark still tracks the watermark and records the one in force for batch N in
``offsets/N``; the sink reads it there. The source has counted each
partition's (event, window) pairs per player and its events per event time
(:mod:`streaming.partial`); the sink sums them across partitions, marks each
window's pairs dropped (``window.end <= watermark``) or accepted, counts the
late but accepted ones from the event-time histogram, and merges the small
result into Redis through :func:`streaming.commit.commit_batch`. Counting
raw pairs, not groups, is what makes the dropped counts exact.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from streaming import local_agg, partial
from streaming.checkpoint import read_offset_log
from streaming.commit import BadRow, BatchSummary, Lag, Params, ServerStats, WindowAgg, commit_batch
from streaming.events import IDLE_KIND, parse_entry_id
from streaming.keys import KeySchema
from streaming.local_agg import (  # the items' tags, one set for both paths
    BAD,
    INGEST_LAG,
    NOT_PRE_AGGREGATED,
    PROCESSING_LAG,
    TICK,
    WINDOW,
)
from streaming.redis_conn import DriverClient, with_retry
from streaming.watermarks import ServerWatermarks
from streaming.windows import event_ms, late_counts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SummaryQuery:
    """:func:`summarize`'s Spark query without the batch, built once per process (:meth:`shared`): its
    columns are py4j calls, which every query start would otherwise pay again."""

    columns: tuple[Column, ...]
    aggregates: tuple[Column, ...]

    @classmethod
    def build(cls) -> SummaryQuery:
        p, error = F.col("partial"), F.col("error")
        of, bad = p["of"], error.isNotNull()
        tag = (F.when(bad, F.lit(BAD)).when(of == partial.WINDOW, F.lit(WINDOW))
               .when(of == partial.INGEST_LAG, F.lit(INGEST_LAG)).when(of == partial.EVENT_TIME, F.lit(PROCESSING_LAG))
               .when(F.col("kind") == IDLE_KIND, F.lit(TICK))
               .otherwise(F.raise_error(F.lit(NOT_PRE_AGGREGATED))))
        a = (F.when(bad, F.lit(0).cast("long")).when(of == partial.EVENT_TIME, -p["key_us"])  # keyed by -event time
             .otherwise(F.coalesce(p["key_us"], F.lit(0).cast("long"))))
        b = F.when(bad, F.to_json(F.struct(*local_agg.BAD_FIELDS))).when(of == partial.WINDOW, F.col("player_id"))
        ev = F.unix_micros("event_time")  # an idle marker's; null for quarantined rows
        columns = (tag.alias("tag"), F.col("server"), a.alias("a"), b.alias("b"),
                   F.coalesce(p["n"], F.lit(1).cast("long")).alias("n"),
                   F.coalesce(p["min_event_us"], ev).alias("lo"), F.coalesce(p["max_event_us"], ev).alias("hi"))
        aggregates = (F.sum("n").alias("n"), F.min("lo").alias("min_ev"), F.max("hi").alias("max_ev"))
        return cls(columns, aggregates)

    @staticmethod
    @functools.cache
    def shared() -> SummaryQuery:
        """Columns are expressions, not bound to a session or a batch, so queries may share them."""
        return SummaryQuery.build()

    def run(self, df: DataFrame) -> pa.Table:
        return df.select(*self.columns).groupBy("tag", "server", "a", "b").agg(*self.aggregates).toArrow()


def summarize(df: DataFrame, batch_id: int, watermark_ms: int, batch_ts_ms: int,
              start_id: str, end_id: str, params: Params) -> BatchSummary:
    """Everything the batch contributes, from one Spark job whose result is small.

    The source has already folded each partition's accepted events into
    partial aggregates (:mod:`streaming.partial`: per window and player, and
    the two lag histograms, exact integers); each row becomes one tagged item
    (a quarantined entry one describing it, an idle marker one tick) and one
    hash aggregation sums them across partitions, so the batch costs one job
    and nothing is cached. The DataFrame must come from the source with
    ``preAggregate=true`` (:func:`streaming.query.read_events`); a row of a
    single accepted event fails the batch with :data:`NOT_PRE_AGGREGATED`.
    The aggregation is Spark's (one shuffle) or, for a live batch, Arrow's on
    the driver (:func:`on_driver`); the same table either way.

    Nothing in the query depends on the batch (watermark, batch time), so
    Spark's generated code is the same for every batch: which windows are
    closed, which events are late and the processing lag follow from the
    result and the watermark afterwards (:func:`_from_aggregate`).
    """
    driver = on_driver(start_id, end_id, params)
    if driver:
        result = local_agg.aggregate(df.select(*local_agg.COLUMNS).toArrow())
    else:
        result = SummaryQuery.shared().run(df)
    summary = _from_aggregate(result, batch_id, watermark_ms, batch_ts_ms, start_id, end_id, params)
    summary.aggregation = "driver" if driver else "spark"
    return summary


def on_driver(start_id: str, end_id: str, params: Params) -> bool:
    """Whether the batch is counted on the driver (:mod:`streaming.local_agg`) rather than by a Spark shuffle.

    A live batch is: at 50,000 events the shuffle, its second stage and the planning of the aggregation
    cost about 250 of 620 ms here (bench/agg_paths.py: 1.71x on the driver, 1.04x at 1,000,000 events).
    The arrival span of the batch's entry IDs bounds its size, since one Redis stream takes at most a few
    hundred thousand entries a second; the first batch (from ``0-0``), a catch-up after an outage or a
    replay spans more and goes to Spark, which scales out. Both give the same table (tests/test_local_agg.py)."""
    span = parse_entry_id(end_id)[0] - parse_entry_id(start_id)[0]
    return 0 < params.driver_agg_max_span_ms and span <= params.driver_agg_max_span_ms


def _from_aggregate(t: pa.Table, batch_id: int, watermark_ms: int, batch_ts_ms: int, start_id: str,
                    end_id: str, params: Params) -> BatchSummary:
    tags = t.column("tag")

    def rows(tag: int, *names: str) -> list[list]:
        part = t.filter(pc.equal(tags, tag)).sort_by([(name, "ascending") for name in names[:2]])
        return [part.column(name).to_pylist() for name in names]

    windows: dict[tuple[int, int, str], WindowAgg] = {}
    open_windows: dict[str, list[WindowAgg]] = {}
    per_window = (t.filter(pc.equal(tags, WINDOW)).group_by(["a", "server"], use_threads=False)
                  .aggregate([("n", "sum"), ("b", "list")]))
    for ws, server, n, players in zip(*(per_window.column(c).to_pylist()
                                        for c in ("a", "server", "n_sum", "b_list")), strict=True):
        key = (ws // 1000, (ws // 1000) + params.window_ms, server)
        w = windows[key] = WindowAgg(*key)
        if key[1] <= watermark_ms:  # closed: Spark drops the pair
            w.dropped = n
        else:
            w.events, w.players = n, set(players)
            open_windows.setdefault(server, []).append(w)

    servers: dict[str, ServerStats] = {}
    for server, part in _by_server(t, INGEST_LAG):
        lag_us, n = part.column("a").to_numpy(), part.column("n").to_numpy()
        servers[server] = ServerStats(
            rows=int(n.sum()), min_event_us=pc.min(part.column("min_ev")).as_py(),
            max_event_us=pc.max(part.column("max_ev")).as_py(),
            max_ingest_us=int((part.column("max_ev").to_numpy() + lag_us).max()),  # the newest arrival
            ingest_lag_ms=Lag.from_histogram(lag_us, n))
    for server, part in _by_server(t, PROCESSING_LAG):  # keyed by -event time: the batch time makes it a lag
        neg_event_us, n = part.column("a").to_numpy(), part.column("n").to_numpy()
        servers[server].processing_lag_ms = Lag.from_histogram(batch_ts_ms * 1000 + neg_event_us, n)
        accepted = open_windows.get(server, [])
        if accepted:
            late = late_counts(np.array([w.start_ms for w in accepted], np.int64),
                               np.array([w.end_ms for w in accepted], np.int64), -neg_event_us[::-1], n[::-1],
                               watermark_ms)
            for w, k in zip(accepted, late.tolist(), strict=True):
                w.late = k
    for server, n, hi in zip(*rows(TICK, "server", "n", "max_ev"), strict=True):
        st = servers.setdefault(server, ServerStats())
        st.ticks, st.max_tick_us = n, hi
    for w in windows.values():
        st = servers[w.server]
        st.events += w.events
        st.dropped += w.dropped
        st.late += w.late

    bad = [BadRow(d["entry_id"], d["error"], d.get("error_detail") or "", d.get("raw") or "")
           for d in map(json.loads, rows(BAD, "b")[0])]
    bad.sort(key=lambda b: parse_entry_id(b.entry_id))

    return BatchSummary(
        batch_id=batch_id, watermark_ms=watermark_ms, batch_ts_ms=batch_ts_ms, start_id=start_id,
        end_id=end_id, windows=sorted(windows.values(), key=lambda w: (w.start_ms, w.server, w.end_ms)),
        servers=servers, bad=bad,
    )


def _by_server(t: pa.Table, tag: int) -> Iterator[tuple[str, pa.Table]]:
    """A lag tag's rows per server, ascending by lag key, as numpy-ready columns (a histogram per server:
    tens of thousands of rows a live batch, too many for a Python loop)."""
    part = t.filter(pc.and_(pc.equal(t.column("tag"), tag), pc.is_valid(t.column("a"))))
    for server in sorted(pc.unique(part.column("server")).drop_null().to_pylist()):
        yield server, part.filter(pc.equal(part.column("server"), server)).sort_by("a").combine_chunks()


class RedisSink(DriverClient):
    """The callable handed to ``foreachBatch``; holds the Redis client on the driver."""

    def __init__(self, redis_url: str, keys: KeySchema, params: Params, checkpoint_dir: str,
                 on_commit: Callable[[BatchSummary, bool], None] | None = None) -> None:
        self.redis_url = redis_url
        self.keys = keys
        self.params = params
        self.checkpoint_dir = checkpoint_dir
        self.on_commit = on_commit
        # One sink per query run, like Spark's per-input watermark map, which is not checkpointed.
        self.watermarks = (ServerWatermarks(params.servers, params.delay_ms, params.policy)
                           if params.per_server else None)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        spark = df.sparkSession
        entry = read_offset_log(self.checkpoint_dir, batch_id, spark)
        end_id = (entry.source_offsets[0] or {}).get("id", "0-0")
        start_id = "0-0"
        if batch_id > 0:
            prev = read_offset_log(self.checkpoint_dir, batch_id - 1, spark)
            start_id = (prev.source_offsets[0] or {}).get("id", "0-0")
        summary = summarize(df, batch_id, entry.watermark_ms, entry.batch_ts_ms, start_id, end_id, self.params)
        if self.watermarks is not None:
            self._per_server(summary)
        # Guarded by the batch id, so retrying after a lost reply cannot count twice.
        applied = with_retry(lambda: commit_batch(self.client, self.keys, summary, self.params),
                             f"commit of batch {batch_id}")
        if not applied:
            log.info("batch %d already in Redis (replayed after a restart): skipped", batch_id)
        if self.on_commit is not None:
            self.on_commit(summary, applied)

    def _per_server(self, summary: BatchSummary) -> None:
        """Advance the per-input watermarks with what each server's input saw (idle markers too, where
        idleness is on: they are in that input), as Spark does after running the batch."""
        assert self.watermarks is not None
        idle = self.params.idle_timeout_ms is not None
        seen: dict[str, int] = {}
        for server, st in summary.servers.items():
            top = st.input_max_us(idle)
            if top is not None:
                seen[server] = event_ms(top)
        summary.server_watermarks = self.watermarks.update(seen)
        summary.next_watermark_ms = self.watermarks.combined(summary.watermark_ms)
