"""Query progress into Redis: a thin listener and a writer thread.

The listener only parses the event and enqueues it, so a slow or unreachable
Redis never blocks the query; the writer thread merges each progress report
into the batch's record (``{ns}:batch:{id}`` field ``progress``).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import redis

from streaming.schema.keys import KeySchema, bucket_field
from streaming.spark.pyspark_private import JvmSideListener
from watermark_client.connection import home, open_client

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Progress:
    batch: int
    timestamp: str
    input_rows: int
    input_rows_per_s: float | None
    processed_rows_per_s: float | None
    durations_ms: dict[str, int]

    @classmethod
    def from_json(cls, doc: dict) -> Progress:
        """From ``StreamingQueryProgress.json``: testable without a query."""
        return cls(
            batch=int(doc["batchId"]),
            timestamp=doc.get("timestamp", ""),
            input_rows=int(doc.get("numInputRows", 0)),
            input_rows_per_s=_num(doc.get("inputRowsPerSecond")),
            processed_rows_per_s=_num(doc.get("processedRowsPerSecond")),
            durations_ms={k: int(v) for k, v in (doc.get("durationMs") or {}).items()},
        )


def _num(v: object) -> float | None:
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if f != f else f  # NaN -> None


def write_progress(client: redis.Redis, keys: KeySchema, p: Progress, ttl_s: int) -> None:
    bkey = keys.batch(p.batch)
    with home(client, bkey).pipeline(transaction=True) as pipe:
        pipe.hset(bkey, "progress", json.dumps(asdict(p), separators=(",", ":")))
        pipe.expire(bkey, ttl_s)
        took_ms = p.durations_ms.get("triggerExecution")
        if took_ms is not None:  # the /metrics histogram (streaming.apps.monitor.metrics)
            pipe.hincrby(keys.batch_seconds, bucket_field(took_ms / 1000), 1)
            pipe.hincrby(keys.batch_seconds, "count", 1)
            pipe.hincrbyfloat(keys.batch_seconds, "sum", took_ms / 1000)
        pipe.execute()


class ProgressWriter(threading.Thread):
    """Writes each report into the batch's record of every namespace the query commits (a pipeline and its
    lab lanes share the query, so they share its durations)."""

    def __init__(self, redis_url: str, keys: KeySchema | Sequence[KeySchema], ttl_s: int,
                 maxsize: int = 10_000) -> None:
        super().__init__(name="progress-writer", daemon=True)
        self.queue: queue.Queue[Progress | None] = queue.Queue(maxsize=maxsize)
        self.client = open_client(redis_url)
        self.keys = (keys,) if isinstance(keys, KeySchema) else tuple(keys)
        self.ttl_s = ttl_s

    def offer(self, p: Progress) -> None:
        try:
            self.queue.put_nowait(p)
        except queue.Full:
            log.warning("progress queue full: dropped progress of batch %d", p.batch)

    def run(self) -> None:
        while (p := self.queue.get()) is not None:
            try:
                for keys in self.keys:
                    write_progress(self.client, keys, p, self.ttl_s)
            except redis.RedisError as exc:
                log.warning("could not write progress of batch %d: %s", p.batch, exc)

    def close(self) -> None:
        self.queue.put(None)
        self.join(timeout=5)


class ProgressListener(JvmSideListener):
    """Offers each progress report of the query named ``query_name`` (every query's when None) to ``writer``.

    PySpark hands a Python listener each event converted field by field over py4j (``QueryProgressEvent.fromJObject``:
    a round trip to the JVM for every key of every map in the report). Profiled on the driver at 68,750 events/s
    that conversion was a sixth of the driver's Python samples, under the interpreter lock the sink's threads need
    (docs/scaling.md). So the JVM is given :class:`JsonListener`, which asks only for the report as JSON (two
    round trips, as ``StreamingQuery.lastProgress`` does); should PySpark stop taking it
    (:class:`~streaming.spark.pyspark_private.JvmSideListener`), PySpark's own conversion runs and
    :meth:`onQueryProgress` reads what it built."""

    def __init__(self, writer: ProgressWriter, query_name: str | None = None) -> None:
        self.writer = writer
        self.query_name = query_name

    def jvm_side(self) -> JsonListener:
        """Called once, when the listener is first added to a query manager."""
        return JsonListener(self)

    def onQueryStarted(self, event: object) -> None:
        pass

    def onQueryProgress(self, event: object) -> None:
        self.on_progress_json(event.progress.json)  # type: ignore[attr-defined]

    def on_progress_json(self, text: str) -> None:
        doc = json.loads(text)
        if self.query_name and doc.get("name") != self.query_name:
            return
        self.writer.offer(Progress.from_json(doc))

    def onQueryIdle(self, event: object) -> None:
        pass

    def onQueryTerminated(self, event: object) -> None:
        pass


class JsonListener:
    """The JVM's side of :class:`ProgressListener` (py4j implements the Java interface with it): a progress report
    goes over as its JSON; the other events are not read."""

    def __init__(self, listener: ProgressListener) -> None:
        self.listener = listener

    def onQueryStarted(self, jevent: object) -> None:
        pass

    def onQueryProgress(self, jevent: object) -> None:
        self.listener.on_progress_json(jevent.progress().json())  # type: ignore[attr-defined]

    def onQueryIdle(self, jevent: object) -> None:
        pass

    def onQueryTerminated(self, jevent: object) -> None:
        pass

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


class Phases:
    """Wall milliseconds of the sink's steps in one batch: ``with phases("commit"): ...`` (a step timed twice adds
    up); written beside the batch's record (field ``phases``)."""

    def __init__(self) -> None:
        self.ms: dict[str, int] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.ms[name] = self.ms.get(name, 0) + round((time.perf_counter() - t0) * 1000)

    def to_json(self) -> str:
        return json.dumps(self.ms, separators=(",", ":"))
