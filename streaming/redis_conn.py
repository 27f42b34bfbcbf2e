"""Redis connections with retry, shared by the generator, the job and tools."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import redis

from streaming.config import redact_url

log = logging.getLogger(__name__)


def connect(url: str, *, attempts: int = 30, base_delay_s: float = 0.1, max_delay_s: float = 2.0,
            sleep: Callable[[float], None] = time.sleep) -> redis.Redis:
    """A client that has answered PING; retries with exponential backoff so processes
    started together (Procfile) wait for the embedded Redis instead of failing."""
    delay = base_delay_s
    last: Exception | None = None
    for attempt in range(1, attempts + 1):
        client = redis.Redis.from_url(url, health_check_interval=30, socket_keepalive=True)
        try:
            client.ping()
            return client
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            last = exc
            if attempt < attempts:
                log.warning("Redis at %s not reachable (%s); retry %d/%d in %.1fs",
                            redact_url(url), exc, attempt, attempts, delay)
                sleep(delay)
                delay = min(max_delay_s, delay * 2)
    raise ConnectionError(f"Redis at {redact_url(url)} unreachable after {attempts} attempts: {last}")


T = TypeVar("T")
TRANSIENT = (redis.ConnectionError, redis.TimeoutError)
"""Errors a Redis restart or failover causes (``BusyLoadingError`` while it reloads the AOF is one)."""


def with_retry(fn: Callable[[], T], what: str, *, give_up_after_s: float = 600.0, base_delay_s: float = 0.1,
               max_delay_s: float = 5.0, sleep: Callable[[float], None] = time.sleep,
               clock: Callable[[], float] = time.monotonic) -> T:
    """``fn()``, retried with exponential backoff while Redis is unreachable.

    Only for idempotent work: a read, or a commit guarded by the batch id, so a
    retry after an ambiguous failure (sent, reply lost) changes nothing.
    """
    deadline = clock() + give_up_after_s
    delay = base_delay_s
    attempt = 0
    while True:
        try:
            return fn()
        except TRANSIENT as exc:
            attempt += 1
            if clock() + delay > deadline:
                raise
            log.warning("%s: Redis unavailable (%s); retry %d in %.1fs", what, exc, attempt, delay)
            sleep(delay)
            delay = min(max_delay_s, delay * 2)
