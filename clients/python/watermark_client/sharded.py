"""A producer over a sharded input (``STREAM_SHARDS`` streams, decision 0017): each event goes to its server's shard.

::

    from watermark_client import ShardedProducer

    with ShardedProducer("redis://127.0.0.1:6379/0", namespace="wm", shards=4) as producer:
        producer.send({"server": "eu-1", "player_id": "p1", "kind": "login",
                       "event_time": "2026-11-22T10:00:01.250Z"})

It is one :class:`~watermark_client.producer.Producer` per shard, each with its own marker and sending thread, so
every guarantee of the one-stream producer holds shard by shard: each event exactly once across lost connections
and Redis restarts, nothing dropped silently, ``send`` blocking while its shard's ``max_pending`` events wait. A
server's events all go to one shard (``shard_of``: CRC-32 of its name), in the order ``send`` was called for them;
events of servers in different shards have no order between them, as in the pipeline, which reads each shard on
its own.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import fields
from types import TracebackType
from typing import Any

import redis

from watermark_client.events import Event
from watermark_client.producer import Producer, ProducerError, ProducerStats
from watermark_client.stream import events_key, input_shard_key, shard_of


class ShardedProducer:
    """Events to ``shards`` streams by server; see the module's docstring. ``namespace``, ``stream_key`` (shard 0's
    key) and ``producer_id`` as for :class:`Producer` (the same id names this producer's marker in every shard);
    every other keyword goes to each shard's producer (``max_pending`` and ``max_stream_entries`` are per shard)."""

    def __init__(self, redis_url: str | redis.Redis = "redis://127.0.0.1:6379/0", *, shards: int,
                 namespace: str = "wm", stream_key: str | None = None, producer_id: str | None = None,
                 **producer_options: Any) -> None:  # noqa: ANN401 - Producer's keywords, passed through
        if shards < 1:
            raise ValueError(f"shards must be at least 1, got {shards}")
        base = stream_key or events_key(namespace)
        self.producer_id = producer_id or uuid.uuid4().hex
        self.shards: tuple[Producer, ...] = ()
        made: list[Producer] = []
        try:
            for k in range(shards):
                made.append(Producer(redis_url, stream_key=input_shard_key(base, k), producer_id=self.producer_id,
                                     **producer_options))
        except BaseException:
            for p in made:  # a bad option fails the first; never leave the threads of the others running
                p.close(timeout=0)
            raise
        self.shards = tuple(made)

    def send(self, event: Mapping[str, Any] | Event, timeout: float | None = None) -> None:
        """Validate and buffer ``event`` on its server's shard (:meth:`Producer.send`: ``ValueError`` naming the
        field, blocking while that shard's ``max_pending`` events wait, :class:`ProducerTimeout`)."""
        server = event.server if isinstance(event, Event) else event.get("server")
        # Without a usable server the event is invalid: shard 0's producer says why.
        k = shard_of(server, len(self.shards)) if isinstance(server, str) else 0
        self.shards[k].send(event, timeout)

    def flush(self, timeout: float | None = None) -> None:
        """Return once Redis has every event accepted so far, in every shard; :class:`ProducerTimeout` after
        ``timeout`` seconds in all."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for p in self.shards:
            p.flush(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def close(self, timeout: float | None = None) -> None:
        """Close every shard's producer (flushing each, ``timeout`` seconds in all), all of them even when one
        fails; then raise the first failure."""
        deadline = None if timeout is None else time.monotonic() + timeout
        first: ProducerError | None = None
        for p in self.shards:
            try:
                p.close(None if deadline is None else max(0.0, deadline - time.monotonic()))
            except ProducerError as exc:
                first = first or exc
        if first is not None:
            raise first

    def __enter__(self) -> ShardedProducer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:  # each shard's producer logs what it could not finish and does not hide the caller's error
            for p in self.shards:
                p.__exit__(exc_type, exc, tb)

    @property
    def pending(self) -> int:
        """Events accepted and not yet acknowledged by Redis, in all shards."""
        return sum(p.pending for p in self.shards)

    @property
    def stats(self) -> ProducerStats:
        """The shards' counts summed; the last error of any shard."""
        out = ProducerStats()
        for p in self.shards:
            for f in fields(ProducerStats):
                v = getattr(p.stats, f.name)
                setattr(out, f.name, (v or getattr(out, f.name)) if isinstance(v, str) else getattr(out, f.name) + v)
        return out
