"""Redis connections with retry, shared by the generator, the job and tools."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import redis

from watermark.schema.config import redact_url

log = logging.getLogger(__name__)


T = TypeVar("T")
TRANSIENT = (redis.ConnectionError, redis.TimeoutError)
"""Errors a Redis restart or failover causes (``BusyLoadingError`` while it reloads the AOF is one)."""


class DriverClient:
    """A Redis client made on first use on the driver, for the foreachBatch sinks (``redis_url`` is set by the
    subclass): the sink object is built before Redis may be up, and a client cannot be pickled."""

    redis_url: str
    _client: redis.Redis | None = None

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = redis.Redis.from_url(self.redis_url, socket_keepalive=True, socket_timeout=60)
        return self._client


def connect(url: str, *, attempts: int = 30, base_delay_s: float = 0.1, max_delay_s: float = 2.0,
            sleep: Callable[[float], None] = time.sleep) -> redis.Redis:
    """A client that has answered PING; retries with exponential backoff so processes
    started together (Procfile) wait for the embedded Redis instead of failing."""

    def ping() -> redis.Redis:
        client = redis.Redis.from_url(url, health_check_interval=30, socket_keepalive=True)
        client.ping()
        return client

    try:
        return with_retry(ping, f"connecting to {redact_url(url)}", attempts=attempts, give_up_after_s=None,
                          base_delay_s=base_delay_s, max_delay_s=max_delay_s, sleep=sleep)
    except TRANSIENT as exc:
        raise ConnectionError(f"Redis at {redact_url(url)} unreachable after {attempts} attempts: {exc}") from None


def with_retry(fn: Callable[[], T], what: str, *, attempts: int | None = None, give_up_after_s: float | None = 600.0,
               base_delay_s: float = 0.1, max_delay_s: float = 5.0, sleep: Callable[[float], None] = time.sleep,
               clock: Callable[[], float] = time.monotonic) -> T:
    """``fn()``, retried with exponential backoff while Redis is unreachable, up to ``attempts``
    calls and/or ``give_up_after_s`` seconds (``None``: no such limit).

    Only for idempotent work: a read, or a commit guarded by the batch id, so a
    retry after an ambiguous failure (sent, reply lost) changes nothing.
    """
    deadline = None if give_up_after_s is None else clock() + give_up_after_s
    delay = base_delay_s
    attempt = 0
    while True:
        try:
            return fn()
        except TRANSIENT as exc:
            attempt += 1
            if (attempts is not None and attempt >= attempts) or (deadline is not None and clock() + delay > deadline):
                raise
            of = f"/{attempts}" if attempts is not None else ""
            log.warning("%s: Redis unavailable (%s); retry %d%s in %.1fs", what, exc, attempt, of, delay)
            sleep(delay)
            delay = min(max_delay_s, delay * 2)
