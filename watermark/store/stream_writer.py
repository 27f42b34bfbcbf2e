"""Writing simulated events into the input Redis Stream: :class:`StreamWriter` XADDs every event whose arrival
time has come on an injected clock, many per round trip, then sleeps until the next one. It packs RESP by hand
and reads the replies off its own connection (decision record 0008: measured several times cheaper than
redis-py's public pipeline)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import redis

try:
    import hiredis
except ImportError:  # pragma: no cover - redis-py works without it, only slower
    hiredis = None

from watermark.rules.simulate import Record, Simulator, payload_text
from watermark.schema.clock import Clock
from watermark.schema.config import ConfigError
from watermark.schema.events import Event, parse_entry_id

log = logging.getLogger("watermark.store.stream_writer")

LOST_REDIS = (redis.ConnectionError, redis.TimeoutError, OSError)
"""What losing Redis looks like to the writer: its raw reply path raises OSError."""


class WriteError(RuntimeError):
    """Redis rejected some XADDs (e.g. an explicit ID not above the stream's last ID)."""


@dataclass
class WriteStats:
    """Confirmed progress; passed to ``on_batch`` after every batch Redis acknowledged."""

    written: int = 0
    per_server: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    last_id: str | None = None
    lag_us: int = 0
    """How far behind its arrival time the newest batch was sent (paced mode)."""


def stream_last_id(client: redis.Redis, stream_key: str) -> tuple[int, int]:
    """The stream's last generated ID (counts deleted entries too); ``(0, 0)`` if there is none."""
    try:
        info = client.xinfo_stream(stream_key)
    except redis.ResponseError as exc:
        if "no such key" in str(exc).lower():
            return 0, 0
        raise
    last = info.get("last-generated-id", info.get(b"last-generated-id"))
    return parse_entry_id(last) if last else (0, 0)


class _Replies:
    """Reads pipelined replies straight off the connection's socket with a hiredis Reader.

    redis-py's ``read_response`` costs about 3 us per reply (more than Redis takes
    for the XADD); this is ~0.3 us. Only used on a connection this writer holds
    exclusively and between complete batches, so no other reader shares the socket.
    Without hiredis it falls back to ``read_response``.
    """

    def __init__(self, conn: redis.connection.Connection) -> None:
        self.conn = conn
        sock = getattr(conn, "_sock", None)
        self.reader = hiredis.Reader() if hiredis is not None and sock is not None else None
        self.sock = sock

    def read(self, n: int) -> tuple[object, int, str | None]:
        """``(last reply, number of error replies, first error message)``."""
        reader = self.reader
        last: object = None
        errors = 0
        first: str | None = None
        if reader is None:
            for _ in range(n):
                try:
                    last = self.conn.read_response(disable_decoding=True)
                except redis.ResponseError as exc:
                    errors += 1
                    first = first or str(exc)
            return last, errors, first
        gets, recv, feed = reader.gets, self.sock.recv, reader.feed
        error_type = hiredis.ReplyError
        got = 0
        while got < n:
            reply = gets()
            if reply is False:
                data = recv(1 << 18)
                if not data:
                    raise redis.ConnectionError("Redis closed the connection while replies were pending")
                feed(data)
                continue
            got += 1
            if type(reply) is error_type:
                errors += 1
                first = first or str(reply)
            else:
                last = reply
        return last, errors, first


class StreamWriter:
    """XADDs simulated events when their arrival time comes, up to ``batch_size`` per round trip.

    Without a clock it writes as fast as possible. With one, an event is due at
    ``arrival_us + offset_us`` clock time; the writer sleeps until the next due
    event, lingering up to ``linger_us`` so a busy stream is sent in batches
    rather than one round trip per event. One batch stays in flight while the
    next is built, so Redis and Python work in parallel.

    ``explicit_ids`` uses ``{arrival_ms}-{seq}`` instead of ``*``, kept strictly
    above the stream's last ID, so ingest times are the simulated arrival times.
    """

    def __init__(self, client: redis.Redis, stream_key: str, *, explicit_ids: bool = False,
                 batch_size: int = 2_000, clock: Clock | None = None, offset_us: int = 0, linger_us: int = 1_000,
                 stop: threading.Event | None = None,
                 on_batch: Callable[[WriteStats], None] | None = None) -> None:
        if batch_size < 1:
            raise ConfigError(f"batch_size must be at least 1, got {batch_size}")
        self.client = client
        self.stream_key = stream_key
        self.explicit_ids = explicit_ids
        self.batch_size = batch_size
        self.clock = clock
        self.offset_us = offset_us
        self.linger_us = max(0, linger_us)
        self.stop = stop
        self.on_batch = on_batch
        self.stats = WriteStats()
        key = stream_key.encode()
        self._key_frame = f"${len(key)}\r\n{key.decode('latin-1')}\r\n"
        self._last = (0, 0)
        self._replies: _Replies

    def run(self, events: Iterable[tuple[int, Event]] | Simulator) -> WriteStats:
        """Write until ``events`` is exhausted or ``stop`` is set; a :class:`Simulator`
        is consumed through its cheaper :meth:`~Simulator.records`."""
        raw = isinstance(events, Simulator)
        it: Iterator[tuple[int, Event]] | Iterator[Record] = events.records() if raw else iter(events)
        return self.resume(it, raw)

    def resume(self, it: Iterator[Any], raw: bool) -> WriteStats:
        """Go on writing from ``it`` (after a lost connection, with a new ``client``)."""
        if self.explicit_ids:
            self._last = max(self._last, stream_last_id(self.client, self.stream_key))
        pool = self.client.connection_pool
        conn = pool.get_connection()
        try:
            conn.connect()
            self._replies = _Replies(conn)
            self._loop(conn, it, raw)
        except BaseException:
            conn.disconnect()  # replies of a batch in flight would be read by the next user
            raise
        finally:
            pool.release(conn)
        return self.stats

    def _loop(self, conn: redis.connection.Connection, it: Iterator[Any], raw: bool) -> None:
        clock, offset, linger, stop = self.clock, self.offset_us, self.linger_us, self.stop
        inflight: tuple[int, dict[str, int]] | None = None
        nxt = next(it, None)
        while nxt is not None:
            if stop is not None and stop.is_set():
                break
            horizon: int | None = None
            if clock is not None:
                horizon = clock.now_us() - offset
                if nxt[0] > horizon:
                    if inflight is not None:  # confirm before idling
                        self._confirm(conn, *inflight)
                        inflight = None
                    clock.sleep_until(max(nxt[0], horizon + linger) + offset)
                    continue
                self.stats.lag_us = horizon - nxt[0]
            data, n, counts, nxt = self._build(nxt, it, horizon, raw)
            conn.send_packed_command([data], check_health=False)
            if inflight is not None:  # the previous batch: Redis worked on it while this one was built
                self._confirm(conn, *inflight)
            inflight = (n, counts)
        if inflight is not None:
            self._confirm(conn, *inflight)

    def _build(self, item: Any, it: Iterator[Any], horizon: int | None, raw: bool,
               ) -> tuple[bytes, int, dict[str, int], Any]:
        """RESP for one batch, packed by hand (redis-py's per-command packing costs more
        than generating the event). Text is latin-1 so the stream key can be any bytes."""
        frames: list[str] = []
        append = frames.append
        counts: dict[str, int] = {}
        head = f"*5\r\n$4\r\nXADD\r\n{self._key_frame}"
        star_head = f"{head}$1\r\n*\r\n$1\r\ne\r\n"
        explicit = self.explicit_ids
        last_ms, last_seq = self._last
        limit = self.batch_size
        advance = it.__next__
        n = 0
        while True:
            if raw:
                arrival, _seq, server, player, _et, kind, eid, iso = item
                text = (f'{{"event_id":"{eid}","server":"{server}","player_id":"{player}",'
                        f'"kind":"{kind}","event_time":"{iso}"}}')
            else:
                arrival, ev = item
                server = ev.server
                text = payload_text(ev)
            if explicit:
                ms = arrival // 1000
                if ms > last_ms:
                    last_ms, last_seq = ms, 0
                else:
                    last_seq += 1
                entry_id = f"{last_ms}-{last_seq}"
                append(f"{head}${len(entry_id)}\r\n{entry_id}\r\n$1\r\ne\r\n${len(text)}\r\n{text}\r\n")
            else:
                append(f"{star_head}${len(text)}\r\n{text}\r\n")
            counts[server] = counts.get(server, 0) + 1
            n += 1
            try:
                item = advance()
            except StopIteration:
                item = None
                break
            if n >= limit or (horizon is not None and item[0] > horizon):
                break
        self._last = (last_ms, last_seq)
        return "".join(frames).encode("latin-1"), n, counts, item

    def _confirm(self, conn: redis.connection.Connection, n: int, counts: dict[str, int]) -> None:
        """Read one batch's replies; all of them, even after an error, so the connection stays usable."""
        reply, errors, first_error = self._replies.read(n)
        stats = self.stats
        if errors:
            raise WriteError(f"{errors} of {n} XADDs to {self.stream_key!r} failed: {first_error}")
        stats.written += n
        stats.batches += 1
        per = stats.per_server
        for server, c in counts.items():
            per[server] = per.get(server, 0) + c
        if reply is not None:
            stats.last_id = reply.decode() if isinstance(reply, bytes) else str(reply)
        if self.on_batch is not None:
            self.on_batch(stats)


def write(client: redis.Redis, stream_key: str, events: Iterable[tuple[int, Event]] | Simulator, *,
          clock: Clock | None = None, explicit_ids: bool = False, batch_size: int = 2_000,
          offset_us: int = 0, linger_us: int = 1_000, stop: threading.Event | None = None,
          on_batch: Callable[[WriteStats], None] | None = None) -> WriteStats:
    """Write ``(arrival_us, event)`` pairs to ``stream_key``; see :class:`StreamWriter`."""
    return StreamWriter(client, stream_key, explicit_ids=explicit_ids, batch_size=batch_size, clock=clock,
                        offset_us=offset_us, linger_us=linger_us, stop=stop, on_batch=on_batch).run(events)
