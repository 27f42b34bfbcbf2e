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

import logging
from collections.abc import Callable

import redis
from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streaming.checkpoint import read_offset_log
from streaming.commit import BadRow, BatchSummary, Lag, Params, ServerStats, WindowAgg, commit_batch
from streaming.keys import KeySchema
from streaming.redis_conn import with_retry

log = logging.getLogger(__name__)


def summarize(df: DataFrame, batch_id: int, watermark_ms: int, batch_ts_ms: int,
              start_id: str, end_id: str, params: Params) -> BatchSummary:
    """Everything the batch contributes, computed in Spark, collected small."""
    wm_us = watermark_ms * 1000
    ev_us = F.unix_micros("event_time")
    parsed = df.where(F.col("error").isNull())
    win = F.window("event_time", f"{params.window_ms} milliseconds", f"{params.slide_ms} milliseconds")
    pairs = parsed.select(
        "server", "player_id", ev_us.alias("ev_us"),
        F.unix_micros(win.start).alias("ws"), F.unix_micros(win.end).alias("we"),
    ).select(
        "server", "player_id", "ws", "we",
        (F.col("we") <= F.lit(wm_us)).alias("closed"),
        ((F.col("we") > F.lit(wm_us)) & (F.col("ev_us") < F.lit(wm_us))).alias("late"),
    )
    # One row per (window, server, player, closed): enough for exact counts and exact distinct players.
    # Collected as Arrow, not Rows: with many players this is the largest thing the driver receives.
    grouped = pairs.groupBy("ws", "we", "server", "player_id", "closed").agg(
        F.count(F.lit(1)).alias("n"), F.sum(F.col("late").cast("long")).alias("late")
    ).toArrow()

    windows: dict[tuple[int, int, str], WindowAgg] = {}
    columns = [grouped.column(name).to_pylist() for name in ("ws", "we", "server", "player_id", "closed", "n", "late")]
    for ws, we, server, player, closed, n, late in zip(*columns, strict=True):
        key = (ws // 1000, we // 1000, server)
        w = windows.get(key)
        if w is None:
            w = windows[key] = WindowAgg(*key)
        if closed:
            w.dropped += n
        else:
            w.events += n
            w.late += late
            w.players.add(player)

    ingest_lag = (F.unix_micros("ingest_time") - ev_us) / 1000.0
    proc_lag = F.lit(batch_ts_ms) - ev_us / 1000.0
    per_server = df.groupBy("server").agg(
        F.count(F.lit(1)).alias("rows"),
        F.min(ev_us).alias("min_us"),
        F.max(ev_us).alias("max_us"),
        F.percentile(ingest_lag, [0.5, 0.95]).alias("ingest_p"),
        F.max(ingest_lag).alias("ingest_max"),
        F.percentile(proc_lag, [0.5, 0.95]).alias("proc_p"),
        F.max(proc_lag).alias("proc_max"),
    ).collect()

    servers: dict[str, ServerStats] = {}
    bad_rows = 0
    for row in per_server:
        if row.server is None:  # entries that did not parse have no server
            bad_rows = row.rows
            continue
        servers[row.server] = ServerStats(
            rows=row.rows, min_event_us=row.min_us, max_event_us=row.max_us,
            ingest_lag_ms=Lag(row.ingest_p[0], row.ingest_p[1], row.ingest_max),
            processing_lag_ms=Lag(row.proc_p[0], row.proc_p[1], row.proc_max),
        )
    for w in windows.values():
        st = servers[w.server]
        st.events += w.events
        st.dropped += w.dropped
        st.late += w.late

    bad: list[BadRow] = []
    if bad_rows:
        bad = [
            BadRow(r.entry_id, r.error, r.error_detail or "", r.raw or "")
            for r in df.where(F.col("error").isNotNull())
            .select("entry_id", "error", "error_detail", "raw").collect()
        ]
        bad.sort(key=lambda b: tuple(int(x) for x in b.entry_id.split("-")))

    return BatchSummary(
        batch_id=batch_id, watermark_ms=watermark_ms, batch_ts_ms=batch_ts_ms, start_id=start_id,
        end_id=end_id, windows=sorted(windows.values(), key=lambda w: (w.start_ms, w.server, w.end_ms)),
        servers=servers, bad=bad,
    )


class RedisSink:
    """The callable handed to ``foreachBatch``; holds the Redis client on the driver."""

    def __init__(self, redis_url: str, keys: KeySchema, params: Params, checkpoint_dir: str,
                 on_commit: Callable[[BatchSummary, bool], None] | None = None) -> None:
        self.redis_url = redis_url
        self.keys = keys
        self.params = params
        self.checkpoint_dir = checkpoint_dir
        self.on_commit = on_commit
        self._client: redis.Redis | None = None

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = redis.Redis.from_url(self.redis_url, socket_keepalive=True, socket_timeout=60)
        return self._client

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        spark = df.sparkSession
        entry = read_offset_log(self.checkpoint_dir, batch_id, spark)
        end_id = (entry.source_offsets[0] or {}).get("id", "0-0")
        start_id = "0-0"
        if batch_id > 0:
            prev = read_offset_log(self.checkpoint_dir, batch_id - 1, spark)
            start_id = (prev.source_offsets[0] or {}).get("id", "0-0")
        cached = df.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            summary = summarize(cached, batch_id, entry.watermark_ms, entry.batch_ts_ms, start_id, end_id,
                                self.params)
        finally:
            cached.unpersist()
        # Guarded by the batch id, so retrying after a lost reply cannot count twice.
        applied = with_retry(lambda: commit_batch(self.client, self.keys, summary, self.params),
                             f"commit of batch {batch_id}")
        if not applied:
            log.info("batch %d already in Redis (replayed after a restart): skipped", batch_id)
        if self.on_commit is not None:
            self.on_commit(summary, applied)
