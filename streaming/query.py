"""Building the SparkSession and starting the streaming query; shared by the job and replay."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from streaming.commit import Params
from streaming.config import Config
from streaming.events import Rules
from streaming.keys import KeySchema
from streaming.sink import RedisSink
from streaming.source import RedisStreamDataSource


def params_of(cfg: Config) -> Params:
    return Params(window_ms=cfg.window_ms, slide_ms=cfg.slide_ms, delay_ms=cfg.delay_ms,
                  retention_ms=cfg.retention_ms, progress_history=cfg.progress_history,
                  ttl_ms=cfg.key_ttl_ms, trigger_ms=cfg.trigger_ms)


def build_session(cfg: Config, app_name: str = "watermark-pipeline", ui: bool = True) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.appName(app_name)
        .master(cfg.spark_master)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(max(2, cfg.source_partitions)))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.ui.enabled", "true" if ui else "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.streaming.stopActiveRunOnRestart", "true")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(RedisStreamDataSource)
    return spark


def start_query(spark: SparkSession, cfg: Config, sink: RedisSink | None = None,
                trigger_ms: int | None = None, query_name: str | None = None) -> StreamingQuery:
    """``source -> withWatermark -> foreachBatch(RedisSink)``; ``trigger_ms=0`` runs batches back to back."""
    keys = KeySchema(cfg.namespace)
    sink = sink or RedisSink(cfg.redis_url, keys, params_of(cfg), cfg.checkpoint_dir)
    stream = (
        spark.readStream.format("redis_stream")
        .option("url", cfg.redis_url)
        .option("stream", keys.events)
        .option("partitions", str(cfg.source_partitions))
        .option("maxEventsPerBatch", str(cfg.max_events_per_batch))
        .options(**Rules(cfg.max_future_skew_ms, cfg.known_servers).to_options())
        .load()
        .withWatermark("event_time", f"{cfg.delay_ms} milliseconds")
    )
    writer = stream.writeStream.foreachBatch(sink).option("checkpointLocation", cfg.checkpoint_dir)
    interval = cfg.trigger_ms if trigger_ms is None else trigger_ms
    if interval > 0:
        writer = writer.trigger(processingTime=f"{interval} milliseconds")
    return writer.queryName(query_name or f"watermark-{cfg.namespace}").start()
