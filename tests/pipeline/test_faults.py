"""Faults a production user meets: a batch failing in foreachBatch, Redis restarting mid-run, Redis full."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import redis
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from streaming.apps.redis_server import RedisServer, free_port
from streaming.schema.config import Config
from streaming.schema.keys import KeySchema
from streaming.schema.params import params_for
from streaming.spark.query import start_query
from streaming.spark.sink import RedisSink
from streaming.store.report import wait_for_commit
from streaming.store.views.snapshot import read_snapshot
from tests.pipeline.test_exactly_once import counted_per_window, raw_per_window, seeded_entries, snapshot
from tests.procs import Proc
from watermark_client.events import PAYLOAD_FIELD, parse_entry_id

pytestmark = [pytest.mark.spark, pytest.mark.long]


class FailingSink(RedisSink):
    """Raises once on one batch, before or after its Redis commit (the two moments a failure can hit)."""

    def __init__(self, *args: object, fail_batch: int, after_commit: bool, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.fail_batch = fail_batch
        self.after_commit = after_commit

    def __call__(self, df, batch_id: int) -> None:  # noqa: ANN001
        if batch_id == self.fail_batch and not self.after_commit:
            raise RuntimeError("injected failure before the commit")
        super().__call__(df, batch_id)
        if batch_id == self.fail_batch and self.after_commit:
            raise RuntimeError("injected failure after the commit")


def chunks(entries: list[tuple[str, bytes]], n: int) -> list[list[tuple[str, bytes]]]:
    size = -(-len(entries) // n)
    return [entries[i:i + size] for i in range(0, len(entries), size)]


def xadd_all(client: redis.Redis, keys: KeySchema, entries: list[tuple[str, bytes]]) -> None:
    pipe = client.pipeline()
    for entry_id, payload in entries:
        pipe.xadd(keys.events, {PAYLOAD_FIELD: payload}, id=entry_id)
    pipe.execute()


@pytest.mark.parametrize("after_commit", [False, True], ids=["before-commit", "after-commit"])
def test_a_failed_batch_is_retried_without_double_counting(spark: SparkSession, redis_url: str, tmp_path: Path,
                                                           after_commit: bool) -> None:
    entries = seeded_entries(seed=9, count=600)
    parts = chunks(entries, 4)
    client = redis.Redis.from_url(redis_url)
    run = uuid.uuid4().hex[:6]

    def cfg(ns: str) -> Config:
        return Config(redis_url=redis_url, embedded_redis=False, namespace=ns, window_ms=60_000, slide_ms=30_000,
                      delay_ms=10_000, checkpoint_dir=str(tmp_path / ns), spark_master="local[2]",
                      retention_ms=100 * 365 * 86_400_000, max_future_skew_ms=None)

    clean = cfg(f"clean-{run}")
    query = start_query(spark, clean, trigger_ms=0)
    for part in parts:
        xadd_all(client, KeySchema(clean.namespace), part)
        query.processAllAvailable()
    query.stop()

    flaky = cfg(f"flaky-{run}")
    keys = KeySchema(flaky.namespace)
    sink = FailingSink(redis_url, keys, params_for(flaky), flaky.checkpoint_dir, fail_batch=2,
                       after_commit=after_commit, online_timeout_ms=flaky.online_timeout_ms)
    query = start_query(spark, flaky, sink=sink, trigger_ms=0)
    for part in parts[:2]:
        xadd_all(client, keys, part)
        query.processAllAvailable()
    xadd_all(client, keys, parts[2])
    with pytest.raises(StreamingQueryException, match="injected failure"):
        query.processAllAvailable()
    assert int(client.hget(keys.state, "last_batch")) == (2 if after_commit else 1)
    # What the job does on a failure: start again from the checkpoint. Spark re-runs batch 2.
    query = start_query(spark, flaky, trigger_ms=0)
    query.processAllAvailable()
    xadd_all(client, keys, parts[3])
    query.processAllAvailable()
    query.stop()

    assert snapshot(client, keys) == snapshot(client, KeySchema(clean.namespace))
    assert counted_per_window(client, keys) == raw_per_window([p for _, p in entries])


def job_on_own_redis(tmp_path: Path, prefix: str,
                     shards: int = 1) -> tuple[RedisServer, KeySchema, dict[str, str], Proc, redis.Redis]:
    """A redis-server of the test's own (to restart or fill) and the real job on it, 10 s windows, the input in
    ``shards`` streams."""
    server = RedisServer(data_dir=str(tmp_path / "redis"), port=free_port())
    server.start()
    keys = KeySchema(f"{prefix}-{uuid.uuid4().hex[:6]}")
    env = {"REDIS_URL": server.url, "PIPELINE_NAMESPACE": keys.namespace, "WINDOW": "10s", "WATERMARK_DELAY": "2s",
           "TRIGGER_INTERVAL": "1s", "CHECKPOINT_DIR": str(tmp_path / "ck"), "SPARK_MASTER": "local[2]",
           "STREAM_SHARDS": str(shards)}
    job = Proc.python("job", ["streaming.apps.job"], env, tmp_path)
    return server, keys, env, job, redis.Redis.from_url(server.url, socket_timeout=60)


def fill_until_refused(client: redis.Redis) -> None:
    """A ballast until Redis refuses a write (``maxmemory``, noeviction)."""
    while True:
        pipe = client.pipeline(transaction=False)
        for _ in range(200):
            pipe.xadd("ballast", {"x": b"x" * 1_000})
        if any(isinstance(x, redis.exceptions.OutOfMemoryError) for x in pipe.execute(raise_on_error=False)):
            return


def generator_after_first_batch(job: Proc, env: dict[str, str], tmp_path: Path, scenario: str, seed: int) -> Proc:
    """9,000 events at 600 a second, once the job's query runs."""
    job.wait_for(r"query \S+ running", timeout=180)
    return Proc.python("generator", ["streaming.apps.generator", "--scenario", scenario, "--rate", "600",
                                     "--count", "9000", "--seed", str(seed), "--log-every", "1"], env, tmp_path)


def test_redis_restart_mid_run_loses_nothing_committed(tmp_path: Path) -> None:
    """The job and the generator ride out a Redis restart (AOF on); the dashboard's reads fail, then recover;
    every event generated is in the stream once and counted once (the writer resends what it had in flight,
    and only that: watermark_client.batch_channel). Four shards are not run again here: their writer across
    restarts is tests/client/test_sharded_producer.py's, their job from its checkpoint the SIGKILL test's."""
    server, keys, env, job, client = job_on_own_redis(tmp_path, "restart")
    streams = [keys.events]
    gen: Proc | None = None
    try:
        gen = generator_after_first_batch(job, env, tmp_path, "overseas-lag", seed=4)
        assert client.xread({keys.commits: "0-0"}, block=120_000), "no batch committed before the restart"
        committed_before = client.hgetall(keys.state)
        batches_before = int(committed_before[b"last_batch"])

        server.stop()  # SIGTERM: Redis writes its AOF and exits, like a restart by an operator
        with pytest.raises(redis.RedisError):
            read_snapshot(redis.Redis.from_url(server.url, socket_connect_timeout=1), keys, range_ms=60_000,
                          now_ms=0)
        gen.wait_for(r"lost Redis", timeout=60)
        job.wait_for(r"Redis unavailable", timeout=60)
        server.start()

        assert gen.popen.wait(timeout=240) == 0, gen.tail()
        last_id = ",".join(client.xinfo_stream(st)["last-generated-id"].decode() if client.exists(st) else "0-0"
                           for st in streams)
        assert wait_for_commit(client, keys, last_id, timeout_s=240), \
            f"the job stopped committing after the restart:\n{job.tail()}"
        assert job.running(), job.tail()
    finally:
        if gen is not None:
            gen.stop()
        job.stop()

    # Every committed batch survived: ids are contiguous from 0, the guard moved on past the restart.
    ids = [int(b) for b in client.zrange(keys.batches, 0, -1)]
    assert ids == list(range(len(ids))) and ids[-1] > batches_before
    totals = {k.decode(): int(v) for k, v in client.hgetall(keys.totals).items()}
    assert totals["input"] == sum(client.xlen(st) for st in streams) == 9_000
    # IDs are recent: untrimmed
    stream = [fields[PAYLOAD_FIELD.encode()] for st in streams for _, fields in client.xrange(st)]
    assert len({json.loads(p)["event_id"] for p in stream}) == 9_000  # none lost, none twice
    assert counted_per_window(client, keys) == raw_per_window(stream, window_ms=10_000, slide_ms=10_000)
    snap = read_snapshot(client, keys, range_ms=3_600_000, now_ms=0)  # the dashboard reads again
    assert snap.totals.input == totals["input"] and json.dumps(snap.totals.dropped) == str(totals.get("dropped", 0))
    client.close()
    server.stop()


def test_a_full_redis_holds_the_job_and_the_generator_until_memory_is_freed(tmp_path: Path) -> None:
    """Redis at its ``maxmemory`` (noeviction) mid-run: the job's commit and the generator's batches are refused;
    both say so and wait, the pages say Redis is full, nothing partial is committed; once memory is freed both go
    on, and every event generated is in the stream once and counted once."""
    from dashboard.status import Level, assess

    server, keys, env, job, client = job_on_own_redis(tmp_path, "full")
    gen: Proc | None = None
    try:
        gen = generator_after_first_batch(job, env, tmp_path, "steady", seed=5)
        assert client.xread({keys.commits: "0-0"}, block=120_000), "no batch committed before Redis filled"
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", int(client.info("memory")["used_memory"]) + 2**20)
        fill_until_refused(client)
        job.wait_for(r"Redis is full", timeout=120)
        for _ in range(120):  # the job's trim of its look-back input frees memory: fill it again until the
            fill_until_refused(client)  # generator meets a full Redis too (it fails here if it ends first)
            try:
                gen.wait_for(r"Redis is full", timeout=1.0)
                break
            except AssertionError:
                if not gen.running():
                    raise
        else:
            raise AssertionError(f"the generator never met a full Redis:\n{gen.tail()}")
        for _ in range(5):  # the job may trim the look-back input meanwhile (MULTI is refused while full)
            trimmed = client.get(keys.trimmed)
            committed, counted = client.hmget(keys.state, "committed_id")[0], client.hget(keys.totals, "input")
            entries = client.xrange(keys.events)
            if client.get(keys.trimmed) == trimmed:
                break
        upto = parse_entry_id(committed.decode())
        within = sum(1 for eid, _ in entries if parse_entry_id(eid.decode()) <= upto) + int(trimmed or 0)
        assert int(counted) == within, "a commit landed in part: the totals and the committed ID disagree"
        now = int(client.time()[0]) * 1000
        first = assess(read_snapshot(client, keys, range_ms=600_000, now_ms=now), now)[0]
        assert first.level is Level.ERROR and first.text.startswith("Redis is full"), first
        assert gen.running() and job.running()

        client.delete("ballast")  # memory freed
        client.config_set("maxmemory", 0)
        assert gen.popen.wait(timeout=240) == 0, gen.tail()
        last_id = client.xinfo_stream(keys.events)["last-generated-id"].decode()
        assert wait_for_commit(client, keys, last_id, timeout_s=240), f"no commit after memory was freed:\n{job.tail()}"
        job.wait_for(r"Redis takes writes again", timeout=10)
    finally:
        if gen is not None:
            gen.stop()
        job.stop()
    # The look-back input the job trimmed to free memory is counted as trimmed: every event once, in all.
    totals = {k.decode(): int(v) for k, v in client.hgetall(keys.totals).items()}
    assert totals["input"] == client.xlen(keys.events) + int(client.get(keys.trimmed) or 0) == 9_000
    stream = [fields[PAYLOAD_FIELD.encode()] for _, fields in client.xrange(keys.events)]
    assert len({json.loads(p)["event_id"] for p in stream}) == len(stream)  # none twice among those kept
    client.close()
    server.stop()
