"""The live Spark job: ``python -m streaming.job``.

Reads configuration from the environment, refuses to continue a namespace
built with a different window/slide/delay, then runs the query until stopped.
Restarting after any crash (even SIGKILL) resumes from the checkpoint and
Redis ends up exactly as if it had never stopped.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING

from streaming.commit import ParamsMismatch, check_params
from streaming.config import Config, ConfigError, redact_url
from streaming.keys import KeySchema
from streaming.redis_conn import connect
from streaming.timeutil import format_duration_ms

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("streaming.job")
HEALTHY_RUN_S = 120.0
"""A query that ran this long before failing starts the failure count afresh."""
MAX_QUICK_FAILURES = 5


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s job %(levelname)s %(message)s", stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        cfg = Config.from_env()
    except ConfigError as exc:
        log.error("config error: %s", exc)
        return 2
    keys = KeySchema(cfg.namespace)
    try:
        client = connect(cfg.redis_url)
    except ConnectionError as exc:
        log.error("%s", exc)
        return 1

    from streaming.listener import ProgressListener, ProgressWriter
    from streaming.query import build_session, params_of, start_query

    params = params_of(cfg)
    try:
        check_params(client, keys, params)
    except ParamsMismatch as exc:
        log.error("%s", exc)
        return 2

    spark = build_session(cfg)
    writer = ProgressWriter(cfg.redis_url, keys, ttl_s=max(1, (cfg.key_ttl_ms or cfg.retention_ms) // 1000))
    writer.start()
    name = f"watermark-{cfg.namespace}"
    spark.streams.addListener(ProgressListener(writer, name))
    stopping = threading.Event()

    def stop(signum: int, _frame: object) -> None:
        # Only flag it: calling into the JVM from a signal handler races the blocked py4j call.
        log.info("signal %d: stopping the query", signum)
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    failures = 0
    try:
        while True:
            query = start_query(spark, cfg, query_name=name)
            started = time.monotonic()
            log.info(
                "query %s running: Redis %s, namespace %s, window %s slide %s delay %s, trigger %s, checkpoint %s",
                name, redact_url(cfg.redis_url), cfg.namespace, format_duration_ms(cfg.window_ms),
                format_duration_ms(cfg.slide_ms), format_duration_ms(cfg.delay_ms),
                format_duration_ms(cfg.trigger_ms), cfg.checkpoint_dir,
            )
            failure = run_until_stopped(query, stopping)
            if failure is None:
                return 0
            # A failed batch (foreachBatch raised, Redis gone too long) is retried by restarting from the
            # checkpoint: Spark re-runs it with the same offsets and watermark, and the commit guard makes
            # a re-run of an already committed batch a no-op.
            failures = 1 if time.monotonic() - started > HEALTHY_RUN_S else failures + 1
            if failures > MAX_QUICK_FAILURES:
                log.error("query failed %d times in a row, giving up: %s", failures, failure)
                return 1
            delay = min(30.0, 2.0 ** failures)
            log.error("query failed: %s; restarting from the checkpoint in %.0fs (%d/%d)", failure, delay,
                      failures, MAX_QUICK_FAILURES)
            if stopping.wait(delay):
                return 0
    finally:
        writer.close()


def run_until_stopped(query: StreamingQuery, stopping: threading.Event) -> str | None:
    """Wait for a signal or the query's end; the failure's text, or None when stopped cleanly."""
    try:
        while not stopping.is_set() and query.isActive:
            query.awaitTermination(0.5)
        if stopping.is_set():
            query.stop()
            return None
        failure = query.exception()
        return None if failure is None else str(failure).splitlines()[0]
    except Exception as exc:  # awaitTermination re-raises the query's failure
        return str(exc).splitlines()[0]


if __name__ == "__main__":
    sys.exit(main())
