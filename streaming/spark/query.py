"""Building the SparkSession and starting the streaming query; shared by the job and replay."""

from __future__ import annotations

import os
import sys
from functools import reduce
from pathlib import Path

from pyspark import SparkConf
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from streaming.schema.config import Config
from streaming.schema.keys import KeySchema
from streaming.schema.params import params_for
from streaming.spark.checkpoint import job_secret
from streaming.spark.cluster import is_local_master, ship_package
from streaming.spark.pyspark_private import context_in_own_session
from streaming.spark.sink import LaneSink, RedisSink
from streaming.spark.source import RedisStreamDataSource
from streaming.store.batch.arrow_pack import PACKED
from watermark_client.events import IDLE_KIND, Rules


def watermarked(events: DataFrame, cfg: Config) -> DataFrame:
    """``withWatermark`` as the configuration asks: one watermark, or one input per server.

    Per server, each known server's accepted events are an input of their own with their own
    ``withWatermark`` and Spark combines them by ``multipleWatermarkPolicy`` (set when the query starts;
    Spark then keeps it in the checkpoint). Accepted events are the source's window rows when it
    pre-aggregates (their ``event_time`` is their latest event's). Quarantined rows, lag histogram rows, and
    idle markers where idleness is off, go through an input without a watermark: they must reach the sink but
    never move a watermark.
    Each input scans the source again, so per-server mode costs a read per server.
    """
    delay = f"{cfg.delay_ms} milliseconds"
    marker = F.coalesce(F.col("kind") == IDLE_KIND, F.lit(False))
    if cfg.watermark_mode == "global":
        # Its own column, so that an idle marker's time still reaches the sink (the lab lanes with idleness
        # judge by it) while it never moves this watermark.
        timed = F.when(marker, F.lit(None)).otherwise(F.col("event_time"))
        return events.withColumn("watermark_time", timed).withWatermark("watermark_time", delay)
    servers = sorted(cfg.known_servers or ())
    partial = F.col("partial")
    counted = F.col("error").isNull() & (partial.isNull() | (partial["of"] == PACKED))
    if cfg.idle_timeout_ms is None:
        counted = counted & ~marker
    inputs = [events.where(counted & (F.col("server") == s)).withWatermark("event_time", delay) for s in servers]
    rest = events.where(~F.coalesce(counted & F.col("server").isin(servers), F.lit(False)))
    return reduce(DataFrame.unionByName, [*inputs, rest])


WORKER_PYTHON = Path(__file__).with_name("spark-worker-python")
LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")


def worker_python() -> str:
    """The interpreter for Spark's Python workers on a local master: this one, started through
    ``spark-worker-python`` when Spark's home is this interpreter's own pyspark package (a pip install),
    so workers import pyspark with its compiled bytecode rather than from Spark's zip (0.5 s less per
    query start and per worker daemon here; bench/run.py's throughput includes a query start)."""
    import pyspark

    package = Path(pyspark.__file__).resolve().parent  # Spark's home when installed by pip, as pyspark finds it
    home = Path(os.environ["SPARK_HOME"]).resolve() if os.environ.get("SPARK_HOME") else package
    if package != home or not os.access(WORKER_PYTHON, os.X_OK):
        return sys.executable
    os.environ["PIPELINE_WORKER_PYTHON"] = sys.executable
    return str(WORKER_PYTHON)


def build_session(cfg: Config, app_name: str = "watermark-pipeline", ui: bool = True,
                  own_session: bool = False) -> SparkSession:
    """On a local master everything binds to 127.0.0.1; on a cluster the driver takes Spark's usual
    address (``SPARK_LOCAL_IP`` / ``spark.driver.host``) so executors can reach it, and the
    ``streaming`` and ``watermark_client`` packages are shipped to the executors.

    With ``own_session`` the JVM starts in a session of its own, so a signal to the job's process group (a
    process manager's SIGTERM, a terminal's Ctrl-C) reaches the job alone, which stops its queries between
    batches before Spark goes down; a JVM that got the signal too shut down under a running batch and filled
    the terminal with its stack traces. It still ends with the job: PySpark's gateway exits when its stdin,
    a pipe from the job, closes."""
    local = is_local_master(cfg.spark_master)
    if "PYSPARK_PYTHON" not in os.environ:  # the user's choice stands
        os.environ["PYSPARK_PYTHON"] = worker_python() if local else sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = {"spark.app.name": app_name, "spark.master": cfg.spark_master}
    if local:
        settings.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    settings.update({
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(max(2, cfg.source_partitions)),
        # Adaptive execution re-plans the sink's job at its shuffle, every batch: ~0.15 s on a 50,000-event
        # batch (bench/batch_costs.py), for a plan whose shape never changes.
        "spark.sql.adaptive.enabled": "false",
        # Checkpoint files on a local disk without Hadoop's .crc side files: the offset and commit log
        # writes take ~15 ms less each (bench/batch_costs.py). Files are still written to a temporary name
        # and renamed into place; other file systems are untouched.
        "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.ui.enabled": "true" if ui else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.stopActiveRunOnRestart": "true",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}",
    })
    conf = SparkConf().setAll(list(settings.items()))
    if own_session:
        context_in_own_session(conf)
    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if not local:
        ship_package(spark.sparkContext)
    spark.dataSource.register(RedisStreamDataSource)
    return spark


def pipeline_sink(cfg: Config, background: bool = False) -> RedisSink:
    """The sink of the job's one query: the configured pipeline, its lab lanes and the online players (with
    ``background``, the lanes and the online players commit on a thread of their own: see
    :class:`RedisSink`)."""
    lanes = [LaneSink(KeySchema(c.namespace), params_for(c)) for c in cfg.lane_configs()]
    spark = SparkSession.getActiveSession()
    return RedisSink(cfg.redis_url, KeySchema(cfg.namespace), params_for(cfg), cfg.checkpoint_dir, lanes=lanes,
                     online_timeout_ms=cfg.online_timeout_ms, background=background, online_groups=cfg.online_groups,
                     source_options=source_options(cfg, pre_aggregate=True, spark=spark), spark=spark)


def start_query(spark: SparkSession, cfg: Config, sink: RedisSink | None = None,
                trigger_ms: int | None = None, query_name: str | None = None) -> StreamingQuery:
    """``source -> withWatermark -> foreachBatch(RedisSink)``; ``trigger_ms=0`` runs batches back to back.

    The one read of the input serves every lane and the online players (:func:`pipeline_sink`)."""
    sink = sink or pipeline_sink(cfg)
    events = read_events(spark, cfg, pre_aggregate=True)
    writer = events.writeStream.foreachBatch(sink).option("checkpointLocation", cfg.checkpoint_dir)
    return with_trigger(writer, cfg, trigger_ms).queryName(query_name or f"watermark-{cfg.namespace}").start()


def read_events(spark: SparkSession, cfg: Config, pre_aggregate: bool = False) -> DataFrame:
    """The event stream with its watermark(s) (quarantined rows and idle markers included). With
    ``pre_aggregate`` the accepted events come as the source partitions' partial aggregates for the configured
    windows (:mod:`streaming.spark.partial`) and as player rows, which :class:`streaming.spark.sink.RedisSink` sums;
    without it, one row per entry."""
    events = spark.readStream.format("redis_stream").options(**source_options(cfg, pre_aggregate, spark)).load()
    # Read when the query starts and kept in its checkpoint from then on.
    spark.conf.set("spark.sql.streaming.multipleWatermarkPolicy", cfg.watermark_policy)
    return watermarked(events, cfg)


def source_options(cfg: Config, pre_aggregate: bool, spark: SparkSession | None = None) -> dict[str, str]:
    """The ``redis_stream`` source's options for the configuration (:mod:`streaming.spark.source`); idle markers
    must carry the signature of the job whose checkpoint this is (``spark`` reads it where that is not a
    local path)."""
    return {
        "url": cfg.redis_url, "stream": cfg.input_stream, "partitions": str(cfg.source_partitions),
        "shards": str(cfg.stream_shards),
        "maxEventsPerBatch": str(cfg.max_events_per_batch),
        "committedBy": "" if cfg.input_namespace else cfg.namespace,
        "preAggregate": str(pre_aggregate).lower(),
        "windowMs": str(cfg.window_ms), "slideMs": str(cfg.slide_ms),
        # the partitions count the windows' players into this pipeline's sets (decision 0019)
        **({"windowPlayers": cfg.namespace, "playersTtlS": str(params_for(cfg).ttl_s),
            "waitReplicas": str(cfg.wait_replicas), "waitTimeoutMs": str(cfg.wait_timeout_ms)}
           if pre_aggregate else {}),
        **Rules(cfg.max_future_skew_ms, cfg.known_servers, job_secret(cfg.checkpoint_dir, spark)).to_options(),
    }


def with_trigger(writer: DataStreamWriter, cfg: Config, trigger_ms: int | None) -> DataStreamWriter:
    interval = cfg.trigger_ms if trigger_ms is None else trigger_ms
    return writer.trigger(processingTime=f"{interval} milliseconds") if interval > 0 else writer
