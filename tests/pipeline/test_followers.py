"""The followers (lab lanes and the online view) committing off the batch's path.

The job hands each batch's followers to a background thread once the pipeline's commit is in
(:class:`streaming.spark.sink.RedisSink` with ``background``). What must hold: the same Redis as a sink that
commits them in the batch, and after a crash between Spark's commit of a batch and its followers' commit,
the next run catches them up from the stream so that nothing is lost or counted twice.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest
import redis
from pyspark.sql import SparkSession

from streaming.schema.config import Config, lane_namespace
from streaming.schema.keys import KeySchema
from streaming.schema.params import params_for
from streaming.spark.followers import FollowerThread
from streaming.spark.query import pipeline_sink, start_query
from streaming.spark.sink import RedisSink
from tests.pipeline.test_exactly_once import seeded_entries, snapshot
from tests.pipeline.test_faults import chunks, xadd_all

LANES = ("per-server-min", "per-server-max")


def test_the_follower_thread_runs_work_in_order_one_at_a_time() -> None:
    h = FollowerThread("t")
    done: list[int] = []
    release = threading.Event()

    def first() -> None:
        release.wait(timeout=30)
        done.append(1)

    h.submit(first)
    assert h.busy
    release.set()
    h.submit(lambda: done.append(2))  # waits for the first
    h.close()
    assert done == [1, 2]
    assert not h.busy


def test_the_follower_thread_raises_a_failure_at_the_next_submit_and_skips_that_work() -> None:
    h = FollowerThread("t")
    ran: list[str] = []

    def fail() -> None:
        raise RuntimeError("follower failed")

    h.submit(fail)
    with pytest.raises(RuntimeError, match="follower failed"):
        h.submit(lambda: ran.append("next"))
    h.close()
    assert ran == []


def test_the_follower_thread_close_raises_the_pending_failure() -> None:
    h = FollowerThread("t")
    h.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        h.close()


def test_a_background_sink_needs_the_source_options() -> None:
    with pytest.raises(ValueError, match="needs source_options"):
        RedisSink("redis://127.0.0.1:1/0", KeySchema("x"), params_for(Config()), "ck", background=True)


class StopsBeforeFollowers(RedisSink):
    """A job killed after Spark committed batch ``lost`` and before its followers did: they never get it."""

    def __init__(self, *args: object, lost: int, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.lost = lost

    def follow(self, batch, summary, entry, phases) -> None:  # noqa: ANN001
        if summary.batch_id != self.lost:
            super().follow(batch, summary, entry, phases)


def follower_cfg(redis_url: str, tmp_path: Path, ns: str, mode: str) -> Config:
    return Config(redis_url=redis_url, embedded_redis=False, namespace=ns, window_ms=60_000, slide_ms=30_000,
                  delay_ms=10_000, checkpoint_dir=str(tmp_path / ns), spark_master="local[2]",
                  retention_ms=100 * 365 * 86_400_000, max_future_skew_ms=None,
                  known_servers=frozenset({"A", "B", "C"}), lanes=LANES, watermark_mode=mode)


def everything(client: redis.Redis, cfg: Config) -> dict:
    """The pipeline's, every lane's and the online view's keys, without wall-clock facts."""
    spaces = [cfg.namespace, *(lane_namespace(cfg.namespace, lane) for lane in LANES)]
    return {ns.split(".", 1)[-1] if "." in ns else "main": snapshot(client, KeySchema(ns)) for ns in spaces}


def clean_run(spark: SparkSession, client: redis.Redis, cfg: Config, parts: list) -> dict:
    """The same entries through a sink that commits its followers in the batch."""
    query = start_query(spark, cfg, trigger_ms=0)
    for part in parts:
        xadd_all(client, KeySchema(cfg.namespace), part)
        query.processAllAvailable()
    query.stop()
    return everything(client, cfg)


@pytest.mark.spark
def test_background_followers_commit_what_synchronous_ones_do(spark: SparkSession, redis_url: str,
                                                              tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_url)
    run = uuid.uuid4().hex[:6]
    parts = chunks(seeded_entries(seed=21, count=600), 4)
    expected = clean_run(spark, client, follower_cfg(redis_url, tmp_path, f"sync-{run}", "global"), parts)

    cfg = follower_cfg(redis_url, tmp_path, f"bg-{run}", "global")
    sink = pipeline_sink(cfg, background=True)
    query = start_query(spark, cfg, sink=sink, trigger_ms=0)
    for part in parts:
        xadd_all(client, KeySchema(cfg.namespace), part)
        query.processAllAvailable()
    query.stop()
    sink.close()

    assert everything(client, cfg) == renamed(expected, f"sync-{run}", f"bg-{run}")
    assert int(client.hget(KeySchema(cfg.namespace).online_state, "last_batch")) >= 3


@pytest.mark.spark
@pytest.mark.parametrize("mode", ["global", "per-server"])
def test_followers_a_crash_left_behind_are_caught_up_from_the_stream(spark: SparkSession, redis_url: str,
                                                                     tmp_path: Path, mode: str) -> None:
    client = redis.Redis.from_url(redis_url)
    run = uuid.uuid4().hex[:6]
    parts = chunks(seeded_entries(seed=22, count=600), 4)
    expected = clean_run(spark, client, follower_cfg(redis_url, tmp_path, f"clean-{run}", mode), parts)

    cfg = follower_cfg(redis_url, tmp_path, f"crash-{run}", mode)
    keys = KeySchema(cfg.namespace)
    base = pipeline_sink(cfg, background=True)
    sink = StopsBeforeFollowers(cfg.redis_url, keys, base.params, cfg.checkpoint_dir, lanes=base.lanes,
                                online_timeout_ms=cfg.online_timeout_ms, background=True,
                                source_options=base.source_options, lost=2)
    query = start_query(spark, cfg, sink=sink, trigger_ms=0)
    for part in parts[:3]:
        xadd_all(client, keys, part)
        query.processAllAvailable()
    query.stop()  # the "kill": batch 2 is in the pipeline and in Spark's commit log, not in its followers
    sink.close()
    assert int(client.hget(keys.state, "last_batch")) == 2
    assert int(client.hget(keys.online_state, "last_batch")) == 1
    for lane in LANES:
        assert int(client.hget(KeySchema(lane_namespace(cfg.namespace, lane)).state, "last_batch")) == 1

    sink = pipeline_sink(cfg, background=True)  # the next run
    query = start_query(spark, cfg, sink=sink, trigger_ms=0)
    xadd_all(client, keys, parts[3])
    query.processAllAvailable()
    query.stop()
    sink.close()

    assert everything(client, cfg) == renamed(expected, f"clean-{run}", f"crash-{run}")


def renamed(doc: object, old: str, new: str) -> object:
    """A snapshot of one namespace with its name changed (keys and values that carry it)."""
    if isinstance(doc, dict):
        return {renamed(k, old, new): renamed(v, old, new) for k, v in doc.items()}
    if isinstance(doc, list):
        return [renamed(v, old, new) for v in doc]
    if isinstance(doc, str):
        return doc.replace(old, new)
    return doc
