"""A producer for game servers: events into ``{ns}:events``, each exactly once, fast, in bounded memory.

::

    from watermark_client import Producer

    with Producer("redis://127.0.0.1:6379/0", namespace="wm") as producer:
        producer.send({"server": "A", "player_id": "p1", "kind": "login",
                       "event_time": "2026-11-22T10:00:01.250Z", "event_id": "A-1"})

:meth:`Producer.send` validates the event with the pipeline's own parser (:func:`encode_event`: a
``ValueError`` names the field) and buffers it; a background thread sends the buffer in batches, one
transaction each, through :class:`~watermark_client.batch_channel.BatchChannel` (the generator's path too):
after a lost connection or a Redis restart it reconnects with backoff and writes the batches in flight exactly
once. At most ``max_pending`` events wait (buffered or in flight); then ``send`` blocks, and raises
:class:`ProducerTimeout` if no room frees up within its timeout. Nothing is dropped silently: an event
``send`` returned for is written, or ``flush``/``close`` raise. What it does not cover (the process dying
with events still buffered, Redis losing writes it acknowledged) is in docs/ingest.md and decision 0010.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

import redis

from watermark_client.batch_channel import (
    LOST_REDIS,
    MARKER_TTL_S,
    BacklogGate,
    Batch,
    BatchChannel,
    RedisFull,
    WriteError,
    xadd_head,
)
from watermark_client.connection import FullWait, open_client
from watermark_client.encode import encode_event
from watermark_client.events import Event
from watermark_client.stream import DEFAULT_STREAM_MAX_ENTRIES, events_key, producer_marker_key

log = logging.getLogger(__name__)


class ProducerError(RuntimeError):
    """The producer stopped: Redis rejected a batch, or it was closed."""


class ProducerTimeout(ProducerError, TimeoutError):
    """Redis took nothing for too long: ``send`` found no room, or ``flush``/``close`` could not finish."""


@dataclass
class ProducerStats:
    accepted: int = 0
    """Events ``send`` returned for."""
    written: int = 0
    """Events Redis acknowledged (or, after a lost connection, that the producer's marker showed it has)."""
    batches: int = 0
    reconnects: int = 0
    resent_batches: int = 0
    """Batches sent again after a lost connection because Redis did not have them."""
    recovered_batches: int = 0
    """Batches in flight at a lost connection that Redis turned out to have (not sent again)."""
    refused_full: int = 0
    """Batches Redis refused while full (``maxmemory``), each sent again after a pause: none of them was lost."""
    short_waits: int = 0
    """With ``wait_replicas``: WAITs that counted fewer replicas than asked within their timeout (the batches stayed
    unconfirmed until a later WAIT counted enough)."""
    last_error: str = ""
    """The last connection error, if any."""


class Producer:
    """Thread-safe producer of game events; see the module's docstring.

    ``redis_url`` is a URL (the producer owns and closes its client) or a ``redis.Redis`` (give it a
    ``socket_timeout``, or a paused Redis blocks the sending thread forever). ``namespace`` is the pipeline's
    ``PIPELINE_NAMESPACE``: events go to ``{namespace}:events`` (``stream_key`` overrides it). ``producer_id``
    names this producer's marker ``{namespace}:producer:{producer_id}`` (default: a random UUID; two live
    producers must never share one). Up to ``batch_size`` events go in one transaction; the sending thread
    waits up to ``linger_s`` for a batch to fill. ``send`` blocks while ``max_pending`` events wait and raises
    :class:`ProducerTimeout` after ``send_timeout_s``. While the stream holds ``max_stream_entries`` or more (its
    readers are behind) no batch goes out (:class:`~watermark_client.batch_channel.BacklogGate`), nor while Redis
    refuses writes because it is full: the events wait, and ``send`` then blocks, rather than anything being
    dropped. ``max_stream_entries`` None: no bound.

    ``wait_replicas`` (0: off) makes an event *delivered* only once that many replicas have it: each batch is
    followed by ``WAIT wait_replicas wait_timeout_s``, a batch WAIT finds short of replicas stays unconfirmed
    (``flush`` waits for it, ``pending`` counts it) and is asked about again, and after a lost connection or a
    failover the producer's marker on the new primary settles it, written once. So a failover loses no event the
    producer counted as delivered; the price is a round trip to a replica per batch, and while no replica answers,
    a timeout per batch (docs/ingest.md).
    """

    def __init__(self, redis_url: str | redis.Redis = "redis://127.0.0.1:6379/0", *, namespace: str = "wm",
                 stream_key: str | None = None, producer_id: str | None = None, batch_size: int = 1_000,
                 max_pending: int = 100_000, linger_s: float = 0.002, send_timeout_s: float = 30.0,
                 socket_timeout_s: float = 10.0, max_backoff_s: float = 2.0, marker_ttl_s: int = MARKER_TTL_S,
                 idempotent: bool = True, max_stream_entries: int | None = DEFAULT_STREAM_MAX_ENTRIES,
                 wait_replicas: int = 0, wait_timeout_s: float = 1.0) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, got {max_pending}")
        if linger_s < 0 or send_timeout_s < 0 or max_backoff_s <= 0:
            raise ValueError("linger_s and send_timeout_s must not be negative, max_backoff_s must be positive")
        self._own_client = isinstance(redis_url, str)
        # a cluster client when the URL names a Redis Cluster node: each batch goes to its stream's node (0018)
        self.client: redis.Redis = open_client(
            redis_url, socket_timeout=socket_timeout_s, socket_connect_timeout=min(5.0, socket_timeout_s),
            socket_keepalive=True) if isinstance(redis_url, str) else redis_url
        self.stream_key = stream_key or events_key(namespace)
        self.producer_id = producer_id or uuid.uuid4().hex
        self.marker_key = producer_marker_key(self.stream_key, self.producer_id)
        self.batch_size = min(batch_size, max_pending)
        self.max_pending = max_pending
        self.linger_s = linger_s
        self.send_timeout_s = send_timeout_s
        self.max_backoff_s = max_backoff_s
        self.stats = ProducerStats()
        self._head = xadd_head(self.stream_key).encode("latin-1")
        self._channel = BatchChannel(self.stream_key, self.marker_key, idempotent=idempotent, ttl_s=marker_ttl_s,
                                     wait_replicas=wait_replicas, wait_timeout_ms=round(wait_timeout_s * 1000))
        self._unreplicated: list[Batch] = []  # written, confirmed, but WAIT counted too few replicas: not delivered
        self._gate = BacklogGate(self.client, self.stream_key, max_stream_entries, logger=log)
        lock = threading.Lock()
        self._work = threading.Condition(lock)  # the sending thread waits here for events
        self._room = threading.Condition(lock)  # send and flush wait here for acknowledgements
        self._queue: deque[bytes] = deque()
        self._refused: deque[Batch] = deque()  # refused while Redis was full: sent again first, after a pause
        self._unacked = 0  # buffered + refused + in flight
        self._flushing = 0
        self._closing = False
        self._closed = False
        self._error: BaseException | None = None
        self._abort = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"wm-producer-{self.producer_id[:8]}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the public API

    def send(self, event: Mapping[str, Any] | Event, timeout: float | None = None) -> None:
        """Validate ``event`` (``ValueError`` naming the field) and buffer it for sending. Blocks while
        ``max_pending`` events wait; :class:`ProducerTimeout` after ``timeout`` (default ``send_timeout_s``)
        seconds without room, and the event is then not accepted."""
        payload = encode_event(event)
        frame = b"%s$%d\r\n%s\r\n" % (self._head, len(payload), payload)
        with self._room:
            self._check()
            if self._unacked >= self.max_pending:
                wait_s = self.send_timeout_s if timeout is None else timeout
                deadline = time.monotonic() + wait_s
                while self._unacked >= self.max_pending:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise ProducerTimeout(
                            f"send timed out after {wait_s:g} s: {self._unacked} events are waiting for Redis "
                            f"(max_pending={self.max_pending}) and none was acknowledged meanwhile"
                            f"{self._last_error()}; this event was not accepted")
                    self._room.wait(remaining)
                    self._check()
            queue = self._queue
            queue.append(frame)
            self._unacked += 1
            self.stats.accepted += 1
            if len(queue) == 1 or len(queue) == self.batch_size:
                self._work.notify()

    def stop_server(self, server: str, players: Iterable[str], *, event_time: datetime | str | None = None,
                    region: str | None = None, timeout: float | None = None) -> int:
        """Say that ``server`` is going away (Agones' Shutdown, a pod's preStop): a ``logout`` for each of its
        ``players`` still connected, at ``event_time`` (default now), then :meth:`flush`. Its players are offline at
        once, as logged out (they log in wherever they reconnect), and the server is drained: out of the live views,
        no ``ServerSilent`` (``streaming.rules.fleet``). Returns how many logouts it sent."""
        at = event_time if event_time is not None else datetime.now(UTC)
        n = 0
        for player in dict.fromkeys(players):
            self.send({"event_id": f"{server}-stop-{player}", "server": server, "player_id": player, "kind": "logout",
                       "event_time": at, **({"region": region} if region is not None else {})}, timeout)
            n += 1
        self.flush(timeout)
        return n

    def flush(self, timeout: float | None = None) -> None:
        """Return once Redis has every event accepted so far; :class:`ProducerTimeout` after ``timeout``
        seconds (default: wait as long as it takes)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._room:
            self._flushing += 1
            self._work.notify()
            try:
                while self._unacked:
                    if self._error is not None:
                        self._check()
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise ProducerTimeout(f"flush timed out after {timeout:g} s: {self._unacked} events not "
                                              f"acknowledged by Redis yet{self._last_error()}")
                    self._room.wait(remaining)
            finally:
                self._flushing -= 1

    def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout`` seconds), then stop the sending thread and close the client if the producer
        made it. If Redis did not take everything in time, raises :class:`ProducerTimeout` saying how many
        events it did not acknowledge (the ones in flight may be in Redis)."""
        if self._closed:
            return
        try:
            if self._error is None:
                self.flush(timeout)
        except ProducerTimeout:
            self._abort.set()
            raise
        finally:
            with self._work:
                self._closing = True
                self._closed = True
                self._work.notify()
                self._room.notify_all()
            self._thread.join(timeout=0.5 if self._abort.is_set() else None)
            if self._own_client:
                self.client.close()
        if self._error is not None:
            raise ProducerError(f"the producer stopped: {self._error}") from self._error

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:  # do not hide the caller's error behind a flush that may wait for Redis
            try:
                self.close(timeout=self.send_timeout_s)
            except ProducerError as err:
                log.error("closing the producer after an error: %s", err)

    @property
    def pending(self) -> int:
        """Events accepted and not yet acknowledged by Redis."""
        return self._unacked

    # ------------------------------------------------------------------ internals

    def _check(self) -> None:
        if self._error is not None:
            raise ProducerError(f"the producer stopped: {self._error}") from self._error
        if self._closed:
            raise ProducerError("the producer is closed")

    def _last_error(self) -> str:
        return f"; last error: {self.stats.last_error}" if self.stats.last_error else ""

    def _acked(self, batches: list[Batch]) -> None:
        if not batches:
            return
        n = sum(b.n for b in batches)
        with self._room:
            self._unacked -= n
            self.stats.written += n
            self.stats.batches += len(batches)
            self._room.notify_all()

    def _settle(self, batches: list[Batch]) -> None:
        """Count confirmed batches as delivered; with ``wait_replicas``, only up to the newest one enough replicas
        have (a WAIT covers everything its connection wrote before it)."""
        need = self._channel.wait_replicas
        if not need:
            self._acked(batches)
            return
        for b in batches:
            self._unreplicated.append(b)
            if b.replicas is not None and b.replicas >= need:
                self._acked(self._unreplicated)
                self._unreplicated = []
            else:
                self.stats.short_waits += 1
                self.stats.last_error = f"WAIT counted {b.replicas} replica(s) of {need}: batches held unconfirmed"

    def _send_next(self) -> bool | None:
        """Send the next batch: one Redis refused while full first, else the queue's (waiting for events, and a
        moment for a batch to fill). False: nothing sent (batches in flight to confirm); None: closed, all done."""
        work, queue, inflight = self._work, self._queue, self._channel.inflight
        if self._refused:
            again = self._refused.popleft()
            self._channel.send(again.frames, again.n)
            return True
        if not self._gate.admit(self._abort.wait):  # the readers are behind: hold the events (backpressure)
            return None
        with work:
            while not queue and not inflight and not self._closing and not self._unreplicated:
                work.wait()
            if (queue and not inflight and len(queue) < self.batch_size and self.linger_s and not self._closing
                    and not self._flushing):
                work.wait(self.linger_s)  # let the batch fill; woken early once it is full
            frames = [queue.popleft() for _ in range(min(len(queue), self.batch_size))]
            if not frames and not inflight and self._closing and not self._unreplicated:
                return None
        if frames:
            self._channel.send(b"".join(frames), len(frames))
        return bool(frames)

    def _run(self) -> None:
        channel, inflight = self._channel, self._channel.inflight
        attached = False
        delay = 0.05
        full = FullWait(self.max_backoff_s, log)
        while not self._abort.is_set():
            try:
                if not attached:
                    settled = channel.attach(self.client)
                    attached, delay = True, 0.05
                    self.stats.resent_batches, self.stats.recovered_batches = channel.resent, channel.recovered
                    self._settle(settled)
                if self._unreplicated and not inflight and not self._queue:  # ask again: nothing else will
                    replicas = channel.wait_again()  # lost meanwhile: the batch is still unacknowledged (below)
                    b = self._unreplicated.pop()
                    b.replicas = replicas
                    self._settle([b])
                sent = self._send_next()
                if sent is None:
                    break
                while len(inflight) > (1 if sent else 0):  # one batch in flight while the next fills
                    self._settle([channel.confirm()])
                    full.taken("the producer")
            except RedisFull as exc:  # nothing of the batch was written: hold it, pause, send it again
                self._refused.append(exc.batch)
                self.stats.refused_full += 1
                self.stats.last_error = str(exc)
                self._abort.wait(full.refused(f"{exc}; {self._unacked} events held (send blocks at "
                                              f"{self.max_pending})"))
            except LOST_REDIS as exc:
                attached = False
                channel.detach(broken=True)
                for b in self._unreplicated:  # the marker on the (perhaps new) primary settles them
                    b.replicas = None
                inflight.extendleft(reversed(self._unreplicated))
                self._unreplicated = []
                self.stats.reconnects += 1
                self.stats.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("lost Redis (%s); reconnecting in %.2f s, %d events waiting", exc, delay, self._unacked)
                self._abort.wait(delay)
                delay = min(self.max_backoff_s, delay * 2)
            except (WriteError, redis.RedisError) as exc:  # Redis refused: sending on would not help
                log.error("producer stopped: %s", exc)
                with self._work:
                    self._error = exc
                    self._room.notify_all()
                break
        channel.detach(broken=bool(inflight))
