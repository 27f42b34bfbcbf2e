"""The progress listener under a real Spark streaming query: each batch's report (as the JVM's JSON, not PySpark's
field-by-field conversion) in the batch's record, only the named query's (``streaming.spark.listener``)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import redis
from py4j.java_gateway import JavaObject
from pyspark.sql import DataFrame, SparkSession

from streaming.schema.keys import KeySchema
from streaming.spark.listener import JsonListener, ProgressListener, ProgressWriter
from tests.spark.test_source_shards import write

pytestmark = pytest.mark.spark


def test_each_batch_of_the_named_query_gets_its_progress(spark: SparkSession, redis_url: str, tmp_path: Path) -> None:
    keys = KeySchema(f"progress-{uuid.uuid4().hex[:8]}")
    r = redis.Redis.from_url(redis_url)
    write(r, keys, 900, 1)
    writer = ProgressWriter(redis_url, keys, ttl_s=600)
    writer.start()
    name = f"q{uuid.uuid4().hex[:8]}"
    class JsonOnly(ProgressListener):
        def onQueryProgress(self, event: object) -> None:  # PySpark's converted event: must not be the path taken
            raise AssertionError("PySpark converted the report field by field")

    listener = JsonOnly(writer, name)
    spark.streams.addListener(listener)
    sizes: dict[int, int] = {}

    def collect(df: DataFrame, batch_id: int) -> None:
        sizes[batch_id] = df.count()

    try:
        for query_name in (name, name + "-other"):  # the other query's reports are not this one's
            df = (spark.readStream.format("redis_stream").option("url", redis_url).option("stream", keys.events)
                  .option("maxEventsPerBatch", "300").load())
            q = (df.writeStream.queryName(query_name).foreachBatch(collect if query_name == name else lambda d, b: None)
                 .option("checkpointLocation", str(tmp_path / query_name)).start())
            q.processAllAvailable()  # batches of the cap until nothing is left (availableNow would ignore the cap)
            q.stop()
    finally:
        spark.streams.removeListener(listener)
        writer.close()  # the queue drained: every report offered is written
    assert isinstance(getattr(listener, "_jlistenerobj", None), JavaObject)  # the JVM was given the JSON listener
    # (and the reports below were written without onQueryProgress, which raises)
    assert sizes == {0: 300, 1: 300, 2: 300}
    for batch_id, n in sizes.items():
        progress = json.loads(r.hget(keys.batch(batch_id), "progress"))
        assert progress["batch"] == batch_id and progress["input_rows"] == n
        assert progress["durations_ms"]["triggerExecution"] >= 0
    assert int(r.hget(keys.batch_seconds, "count")) == len(sizes)  # the other query's three never counted


def test_the_jvm_side_forwards_the_reports_json() -> None:
    got: list[str] = []

    class Progress:
        def json(self) -> str:
            return '{"name": "q", "batchId": 4}'

    class Event:
        def progress(self) -> Progress:
            return Progress()

    class Listener(ProgressListener):
        def on_progress_json(self, text: str) -> None:
            got.append(text)

    JsonListener(Listener(writer=None, query_name="q")).onQueryProgress(Event())  # type: ignore[arg-type]
    assert got == ['{"name": "q", "batchId": 4}']
