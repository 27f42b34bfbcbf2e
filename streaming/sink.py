"""The foreachBatch sink: classify a micro-batch in Spark, then commit it to Redis once.

Stateless design: the query is ``source -> withWatermark -> foreachBatch``.
Spark still tracks the watermark and records the one in force for batch N in
``offsets/N``; the sink reads it there, explodes events into their windows,
marks each (event, window) pair dropped (``window.end <= watermark``), late
but accepted, or on time, aggregates in Spark and merges the small result into
Redis through :func:`streaming.commit.commit_batch`. Counting raw pairs, not
groups, is what makes the dropped counts exact.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from streaming import local_agg
from streaming.checkpoint import read_offset_log
from streaming.commit import BadRow, BatchSummary, Lag, Params, ServerStats, WindowAgg, commit_batch
from streaming.events import IDLE_KIND, parse_entry_id
from streaming.histograms import INGEST_LAG as INGEST_LAG_OF
from streaming.keys import KeySchema
from streaming.local_agg import BAD, INGEST_LAG, PROCESSING_LAG, TICK, WINDOW  # the items' tags, one set for both paths
from streaming.redis_conn import DriverClient, with_retry
from streaming.watermarks import ServerWatermarks
from streaming.windows import event_ms

log = logging.getLogger(__name__)


_WIDE = "decimal(20,0)"  # any long, exactly
_WM = "_watermark_us"


@dataclass(frozen=True)
class SummaryQuery:
    """:func:`summarize`'s query without the batch, built once per process and window shape
    (:meth:`shared`): building it takes about a thousand py4j calls (0.15-0.25 s here), which every query
    start paid again. The watermark comes in per batch as a column."""

    items: Column
    aggregates: tuple[Column, ...]

    @classmethod
    def build(cls, window_ms: int, slide_ms: int) -> SummaryQuery:
        ev = F.unix_micros("event_time")
        length_us, slide_us = window_ms * 1000, slide_ms * 1000
        last_start = ev - F.pmod(ev, F.lit(slide_us))  # floor, as windows.window_ranges
        # Written out per k, not with transform/filter: higher-order functions are interpreted, this is codegen.
        starts = [last_start - k * slide_us for k in range(-(-length_us // slide_us))]

        one = F.lit(1).cast("long")

        def item(tag: int | Column, a: Column, b: Column, late: Column, keep: Column, n: Column = one,
                 lo: Column = ev, hi: Column = ev) -> Column:
            return F.struct(F.lit(tag).alias("tag") if isinstance(tag, int) else tag.alias("tag"), a.alias("a"),
                            b.alias("b"), late.cast("int").alias("late"), n.alias("n"), lo.alias("lo"),
                            hi.alias("hi"), keep.alias("keep"))

        no_str, no, yes = F.lit(None).cast("string"), F.lit(False), F.lit(True)
        no_long = F.lit(None).cast("long")
        before_wm = (ev.cast(_WIDE) - F.col(_WM)) < 0  # late, if its window is still open
        good = F.array(*[item(WINDOW, s, F.col("player_id"), before_wm, s + length_us > ev) for s in starts])
        h = F.col("histogram")
        ingest = h["of"] == INGEST_LAG_OF
        histogram = F.array(item(
            F.when(ingest, F.lit(INGEST_LAG)).otherwise(F.lit(PROCESSING_LAG)),
            F.when(ingest, h["key_us"]).otherwise(-h["key_us"]),  # the processing lag is keyed by -event time
            no_str, no, yes, h["n"], h["min_event_us"], h["max_event_us"]))
        bad = F.array(item(BAD, F.lit(0).cast("long"), F.to_json(F.struct("entry_id", "error", "error_detail", "raw")),
                           no, yes, lo=no_long, hi=no_long))
        tick = F.array(item(TICK, F.lit(0).cast("long"), no_str, no, yes))
        items = F.explode(
            F.when(F.col("error").isNotNull(), bad).when(h.isNotNull(), histogram)
            .when(F.col("kind") == IDLE_KIND, tick).otherwise(good)).alias("i")
        aggregates = (F.sum("n").alias("n"), F.sum("late").alias("late"), F.min("lo").alias("min_ev"),
                      F.max("hi").alias("max_ev"))
        return cls(items, aggregates)

    @staticmethod
    @functools.lru_cache(maxsize=16)
    def shared(window_ms: int, slide_ms: int) -> SummaryQuery:
        """Columns are expressions, not bound to a session or a batch, so queries may share them."""
        return SummaryQuery.build(window_ms, slide_ms)

    def run(self, df: DataFrame, watermark_ms: int) -> pa.Table:
        return (
            df.withColumn(_WM, F.lit(Decimal(watermark_ms * 1000)).cast(_WIDE))
            .select("server", self.items)
            .where("i.keep").select("server", "i.tag", "i.a", "i.b", "i.late", "i.n", "i.lo", "i.hi")
            .groupBy("tag", "server", "a", "b")
            .agg(*self.aggregates)
            .toArrow()
        )


def summarize(df: DataFrame, batch_id: int, watermark_ms: int, batch_ts_ms: int,
              start_id: str, end_id: str, params: Params) -> BatchSummary:
    """Everything the batch contributes, from one Spark job whose result is small.

    Each input row becomes tagged items: an event one per window it falls in
    (keyed by window and player), a row of the source's lag histograms
    (:mod:`streaming.histograms`, keyed by microseconds, exact integers) one
    item carrying its count, a quarantined entry one describing it. One hash
    aggregation sums them all, so the batch costs one job, nothing is cached,
    and exact percentiles come from the lag histograms
    (:meth:`Lag.from_histogram`). The DataFrame must come from the source with
    ``lagHistograms=true`` (:func:`streaming.query.read_events`).
    The aggregation is Spark's (one shuffle) or, for a live batch, Arrow's on
    the driver (:func:`on_driver`); the same table either way.

    The generated code is the same for every batch: Spark writes long literals
    into it, so a watermark or batch time in an expression would compile the
    stage anew each batch (about 0.3 s here). Whether a window is closed
    follows from its start, after the aggregation; the processing lag is
    keyed by ``-event_time`` and shifted by the batch time afterwards; the one
    comparison with the watermark subtracts a decimal, which generated code
    reads by reference (compared directly, the optimizer would unwrap the
    cast and write a long literal again).
    """
    driver = on_driver(start_id, end_id, params)
    if driver:
        result = local_agg.aggregate(df.select(*local_agg.COLUMNS).toArrow(), watermark_ms, params.window_ms,
                                     params.slide_ms)
    else:
        result = SummaryQuery.shared(params.window_ms, params.slide_ms).run(df, watermark_ms)
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
    per_window = (t.filter(pc.equal(tags, WINDOW)).group_by(["a", "server"], use_threads=False)
                  .aggregate([("n", "sum"), ("late", "sum"), ("b", "list")]))
    for ws, server, n, late, players in zip(*(per_window.column(c).to_pylist()
                                               for c in ("a", "server", "n_sum", "late_sum", "b_list")), strict=True):
        key = (ws // 1000, (ws // 1000) + params.window_ms, server)
        w = windows[key] = WindowAgg(*key)
        if key[1] <= watermark_ms:  # closed: Spark drops the pair
            w.dropped = n
        else:
            w.events, w.late, w.players = n, late, set(players)

    servers: dict[str, ServerStats] = {}
    for server, part in _by_server(t, INGEST_LAG):
        lag_us, n = part.column("a").to_numpy(), part.column("n").to_numpy()
        servers[server] = ServerStats(
            rows=int(n.sum()), min_event_us=pc.min(part.column("min_ev")).as_py(),
            max_event_us=pc.max(part.column("max_ev")).as_py(),
            max_ingest_us=int((part.column("max_ev").to_numpy() + lag_us).max()),  # the newest arrival
            ingest_lag_ms=Lag.from_histogram(lag_us, n))
    for server, part in _by_server(t, PROCESSING_LAG):  # keyed by -event time: the batch time makes it a lag
        servers[server].processing_lag_ms = Lag.from_histogram(batch_ts_ms * 1000 + part.column("a").to_numpy(),
                                                               part.column("n").to_numpy())
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
