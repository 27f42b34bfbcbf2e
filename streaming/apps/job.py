"""The live Spark job: ``wm-job``.

Reads configuration from the environment, refuses to continue a namespace
built with a different window/slide/delay, then runs the query until stopped.
Restarting after any crash (even SIGKILL) resumes from the checkpoint and
Redis ends up exactly as if it had never stopped.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec
import redis

from streaming.apps.fleet_upkeep import FORGET_EVERY_S, IDLE_LUA, forget_retired, idle_ticker, redis_now_ms, tick_idle
from streaming.runtime.signals import on_stop_signals
from streaming.schema.config import LANES, Config, ConfigError, redact_url
from streaming.schema.keys import KeySchema
from streaming.schema.params import ParamsMismatch, params_for
from streaming.schema.records import StateRecord
from streaming.spark.checkpoint import job_secret
from streaming.store.commit import check_params
from streaming.store.control_store import operators_delay
from streaming.store.online.moved import move_old_keys
from streaming.store.redis_conn import connect
from watermark_client.connection import home, is_cluster
from watermark_client.timeutil import format_duration_ms

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from streaming.spark.sink import RedisSink

log = logging.getLogger("streaming.apps.job")
HEALTHY_RUN_S = 120.0
"""A query that ran this long before failing starts the failure count afresh."""
MAX_QUICK_FAILURES = 5


@dataclass
class RunningQuery:
    """The query the job keeps running (a list of them, so that restarts and stops have one shape)."""

    cfg: Config
    query: StreamingQuery | None = None
    sink: RedisSink | None = None
    started: float = 0.0
    failures: int = 0
    retry_at: float | None = None

    @property
    def name(self) -> str:
        return f"watermark-{self.cfg.namespace}"


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s job %(levelname)s %(message)s", stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        cfg = Config.from_env(os.environ)
        lanes = cfg.lane_configs()
    except ConfigError as exc:
        log.error("config error: %s", exc)
        return 2
    try:
        client = connect(cfg.redis_url)
    except ConnectionError as exc:
        log.error("%s", exc)
        return 1
    # IDLE_TIMEOUT is for per-server watermarks (the lanes' with a global parent).
    own = cfg if cfg.watermark_mode == "per-server" else cfg.with_(idle_timeout_ms=None)
    runs = prepare(client, cfg, own, lanes)
    if runs is None:
        return 2
    return supervise(client, cfg, own, lanes, runs)


def prepare(client: redis.Redis, cfg: Config, own: Config, lanes: list[Config]) -> list[RunningQuery] | None:
    """The one pipeline to run (its query reads the input once; its sink also serves every lab lane and the
    online players), with the delay the presenter asked for; None when a namespace was built otherwise."""
    keys = KeySchema(cfg.namespace)
    if is_cluster(client) and not cfg.namespace.startswith("{"):
        log.error("REDIS_URL names a Redis Cluster: PIPELINE_NAMESPACE must be braced, for example {%s}, so that "
                  "each commit's keys share one slot (docs/decisions/0018-redis-cluster-key-layout.md)", cfg.namespace)
        return None
    wanted = requested_delay(client, keys, cfg)
    delay_ms = cfg.delay_ms if wanted is None else wanted
    if not cfg.lab_control:
        log.info("lab control is off (LAB_CONTROL, default: as DEMO): the job keeps WATERMARK_DELAY %s and follows "
                 "no change of %s", format_duration_ms(cfg.delay_ms), keys.control)
    for c in (own, *lanes):
        try:
            before = check_params(client, KeySchema(c.namespace), params_for(c.with_(delay_ms=delay_ms)))
        except ParamsMismatch as exc:
            log.error("%s", exc)
            return None
        if before is not None and before != delay_ms:
            log.info("namespace %s: watermark delay %s -> %s (batch records keep each batch's delay)",
                     c.namespace, format_duration_ms(before), format_duration_ms(delay_ms))
    register_lanes(client, keys, cfg)
    moved = move_old_keys(client, keys)
    if moved:
        log.info("namespace %s: %d keys of the online view renamed to the new layout (online:*, handoff:*)",
                 cfg.namespace, moved)
    return [RunningQuery(own.with_(delay_ms=delay_ms))]


def supervise(client: redis.Redis, cfg: Config, own: Config, lanes: list[Config], runs: list[RunningQuery]) -> int:
    """Run the queries until a signal asks to stop (0) or they fail too often in a row (1): restart a failed
    one from its checkpoint, follow the presenter's delay, write idle markers."""
    from streaming.spark.listener import ProgressListener, ProgressWriter
    from streaming.spark.query import build_session
    keys = KeySchema(cfg.namespace)
    spark = build_session(cfg, own_session=True)
    writer = ProgressWriter(cfg.redis_url, [keys, *(KeySchema(c.namespace) for c in lanes)],
                            ttl_s=params_for(cfg).ttl_s)
    writer.start()
    spark.streams.addListener(ProgressListener(writer, runs[0].name))
    # One pipeline with idleness decides when a server is idle; its markers go into the shared input.
    watcher = next((c for c in (own, *lanes) if c.idle_timeout_ms), None)
    ticker = None if watcher is None else idle_ticker(client, watcher)
    # Once a run, not per marker: the script object keeps its hash and loads the script again when Redis has
    # lost it (a restart).
    idle_script = client.register_script(IDLE_LUA)
    secret = job_secret(own.checkpoint_dir, spark)  # the one query's checkpoint: its source checks markers
    stopping = on_signals()
    next_control = next_forget = 0.0
    try:
        while True:
            now = time.monotonic()
            for p in runs:
                if p.query is None and (p.retry_at is None or now >= p.retry_at):
                    start(spark, p)
            if stopping.wait(0.5):
                stop_all(runs, between_batches=True)
                record_stop(client, keys)
                stop_spark(spark)
                return 0
            if not all(restart_if_failed(p) for p in runs):
                stop_all(runs)
                return 1
            if time.monotonic() >= next_control:
                next_control = time.monotonic() + 1.0
                follow_delay(client, keys, runs)
            if ticker is not None and watcher is not None:
                tick_idle(client, ticker, watcher, secret, keys, idle_script)
            if time.monotonic() >= next_forget:
                next_forget = time.monotonic() + FORGET_EVERY_S
                fleets = [(KeySchema(c.namespace), c.watermark_mode == "per-server" and not c.known_servers)
                          for c in (own, *lanes)]
                forget_retired(client, fleets, cfg.retire_after_ms)
    finally:
        writer.close()


def on_signals() -> threading.Event:
    """SIGTERM and SIGINT set the returned event (only flag it: calling into the JVM from a signal handler
    races the blocked py4j call)."""
    return on_stop_signals(note=lambda signum: log.info("signal %d: stopping the queries", signum)).event


def restart_if_failed(p: RunningQuery) -> bool:
    """Schedule a failed query's restart with backoff; False when it failed too often in a row. A failed batch
    (foreachBatch raised, Redis gone too long) is retried by restarting from the checkpoint: Spark re-runs it
    with the same offsets and watermark, and the commit guard makes a re-run of a committed batch a no-op."""
    failure = failed(p)
    if failure is None:
        return True
    p.failures = 1 if time.monotonic() - p.started > HEALTHY_RUN_S else p.failures + 1
    p.query = None
    close_sink(p)
    if p.failures > MAX_QUICK_FAILURES:
        log.error("query %s failed %d times in a row, giving up: %s", p.name, p.failures, failure)
        return False
    backoff = min(30.0, 2.0 ** p.failures)
    p.retry_at = time.monotonic() + backoff
    log.error("query %s failed: %s; restarting from the checkpoint in %.0fs (%d/%d)", p.name, failure,
              backoff, p.failures, MAX_QUICK_FAILURES)
    return True


def follow_delay(client: redis.Redis, keys: KeySchema, runs: list[RunningQuery]) -> None:
    """A delay the presenter asked for restarts every query with it (the history stays)."""
    wanted = requested_delay(client, keys, runs[0].cfg)
    if wanted is None or wanted == runs[0].cfg.delay_ms:
        return
    log.info("the presenter asked for watermark delay %s (was %s): restarting the queries",
             format_duration_ms(wanted), format_duration_ms(runs[0].cfg.delay_ms))
    stop_all(runs)
    for p in runs:
        p.cfg = p.cfg.with_(delay_ms=wanted)
        p.retry_at = None


def start(spark: SparkSession, p: RunningQuery) -> None:
    from streaming.spark.query import pipeline_sink, start_query

    # The lanes and the online view commit while Spark reads the next batch (see RedisSink).
    p.sink = pipeline_sink(p.cfg, background=True)
    p.query = start_query(spark, p.cfg, sink=p.sink, query_name=p.name)
    p.started = time.monotonic()
    c = p.cfg
    log.info(
        "query %s running: master %s, Redis %s, namespace %s (input %s), window %s slide %s delay %s, watermark %s%s, "
        "trigger %s, checkpoint %s, lanes %s, online timeout %s", p.name, spark.sparkContext.master,
        redact_url(c.redis_url), c.namespace, c.input_stream, format_duration_ms(c.window_ms),
        format_duration_ms(c.slide_ms), format_duration_ms(c.delay_ms), c.watermark_mode,
        f" ({c.watermark_policy}, idle after {format_duration_ms(c.idle_timeout_ms)})" if c.idle_timeout_ms
        else f" ({c.watermark_policy})" if c.watermark_mode == "per-server" else "",
        format_duration_ms(c.trigger_ms), c.checkpoint_dir, ",".join(c.lanes) or "none",
        format_duration_ms(c.online_timeout_ms),
    )


def stop_all(runs: list[RunningQuery], between_batches: bool = False) -> None:
    for p in runs:
        if p.query is not None:
            try:
                if between_batches:
                    await_idle(p.query)
                p.query.stop()
            except Exception as exc:  # a query that died meanwhile: nothing left to stop
                log.warning("stopping %s: %s", p.name, first_line(exc))
            p.query = None
        close_sink(p)


STOP_WAIT_S = 5.0
"""How long a stop waits for the running batch to end (a capped batch far behind takes a few seconds)."""


def await_idle(query: StreamingQuery, wait_s: float = STOP_WAIT_S) -> None:
    """Return when no batch is running, or after ``wait_s``. Stopping a query interrupts its batch: the batch
    is read again on the next start (nothing is lost), but the interrupted read ends in Java stack traces."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and query.status["isTriggerActive"]:
        time.sleep(0.02)


def record_stop(client: redis.Redis, keys: KeySchema) -> None:
    """Say on the commit record that the job was stopped on request (the pages say "stopped", not "down");
    the next commit clears it."""
    try:
        if client.hexists(keys.state, "last_batch"):
            client.hset(keys.state, mapping=StateRecord(stopped_ms=redis_now_ms(client)).to_hash("stopped_ms"))
    except redis.RedisError as exc:
        log.warning("could not record the stop: %s", exc)


def stop_spark(spark: SparkSession) -> None:
    try:
        spark.stop()
    except Exception as exc:  # noqa: BLE001 - stopping anyway
        log.warning("stopping Spark: %s", first_line(exc))


def close_sink(p: RunningQuery) -> None:
    """Let the followers finish the batch they are committing (a stop between batches loses nothing)."""
    if p.sink is not None:
        p.sink.close()
        p.sink = None


def failed(p: RunningQuery) -> str | None:
    """The failure's text if the query has ended, else None."""
    if p.query is None:
        return None
    try:
        if p.query.isActive:
            return None
        failure = p.query.exception()
    except Exception as exc:
        return first_line(exc)
    return "stopped" if failure is None else first_line(failure)


def first_line(exc: object) -> str:
    """An error's first line for the log. A py4j error fetches its text from the JVM, which on SIGTERM to the
    process group may already be gone: then str() raises (ConnectionRefusedError), and the job, stopping
    cleanly, exited 1 (seen in CI)."""
    try:
        return (str(exc).splitlines() or [""])[0]
    except Exception:
        return f"{type(exc).__name__} (its text is gone with the JVM)"


def requested_delay(client: redis.Redis, keys: KeySchema, cfg: Config) -> int | None:
    """The delay the presenter asked for on the dashboard, if any; a bad request is logged, not fatal. None, and
    nothing read, unless lab control is on (``LAB_CONTROL``; production leaves it off): whoever can write the
    control hash must not steer a production job."""
    if not cfg.lab_control:
        return None
    try:
        delay_ms, unrecorded = operators_delay(client, keys)
    except (ConfigError, redis.RedisError) as exc:
        log.warning("cannot read the control settings: %s", exc)
        return None
    if unrecorded is not None and unrecorded not in _SAID_UNRECORDED:
        _SAID_UNRECORDED.add(unrecorded)
        log.warning("%s asks for a delay of %s that no operator's change recorded (written straight into Redis, "
                    "not through the dashboard or wm-control): not followed", keys.control,
                    format_duration_ms(unrecorded))
    return delay_ms


_SAID_UNRECORDED: set[int] = set()
"""Unrecorded delays already said in the log (once each)."""


def register_lanes(client: redis.Redis, keys: KeySchema, cfg: Config) -> None:
    """Tell the dashboard which lanes run beside this pipeline."""
    docs = {lane: msgspec.json.encode(LANES[lane].under(cfg)) for lane in cfg.lanes}
    pipe = home(client, keys.lanes).pipeline(transaction=True)
    pipe.delete(keys.lanes)
    if docs:
        pipe.hset(keys.lanes, mapping=docs)
    pipe.execute()



def exit_now(code: int) -> None:
    """Leave without the interpreter's finalisation once the queries are stopped.

    py4j's callback threads are daemons and may still be writing to stderr while the JVM goes down with
    us (a SIGTERM to the process group reaches both); finalising the interpreter under such threads can
    abort it (a Fatal Python error, exit -6, seen once in CI after a clean stop). Nothing is left to
    clean up: the checkpoint and Redis were written before ``main`` returned."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def run() -> None:
    """The ``wm-job`` command."""
    exit_now(main())


if __name__ == "__main__":
    run()
