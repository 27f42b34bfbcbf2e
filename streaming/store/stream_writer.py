"""Writing simulated events into the input Redis Stream: :class:`StreamWriter` XADDs every event whose arrival
time has come on an injected clock, many per round trip, then sleeps until the next one. It packs RESP by hand
and reads the replies off its own connection (decision record 0008: measured several times cheaper than
redis-py's public pipeline), one transaction per batch through the same idempotent path as the public producer
(:mod:`watermark_client.batch_channel`, decision 0010): after a lost connection or a Redis restart the batches in
flight are written exactly once."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from streaming.rules.simulate import Record, Simulator, payload_text
from streaming.schema.clock import Clock
from streaming.schema.config import ConfigError
from watermark_client.batch_channel import (
    LOST_REDIS,
    BacklogGate,
    Batch,
    BatchChannel,
    RedisFull,
    WriteError,
    xadd_head,
)
from watermark_client.connection import FullWait, is_cluster
from watermark_client.events import Event, parse_entry_id
from watermark_client.stream import input_shard_key, producer_marker_key, shard_of

__all__ = ["LOST_REDIS", "StreamWriter", "WriteError", "WriteStats", "stream_last_id", "write"]

log = logging.getLogger("streaming.store.stream_writer")


@dataclass
class WriteStats:
    """Confirmed progress; passed to ``on_batch`` after every batch Redis acknowledged."""

    written: int = 0
    per_server: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    last_id: str | None = None
    lag_us: int = 0
    """How far behind its arrival time the newest batch was sent (paced mode)."""
    refused_full: int = 0
    """Batches Redis refused while full (``maxmemory``), each sent again after a pause."""


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


LINGER_US = 5_000
"""How long a paced writer lets due events gather before it sends them: a batch at most every ``LINGER_US`` (a
full one, ``batch_size``, is followed at once). Each batch is a transaction (MULTI, the XADDs, the marker's SET,
EXEC). At 100,000 events/s an event is always due by the time a batch is sent, so until 2026-11-27 the linger
applied only to an idle writer and a busy one sent a batch a round trip (19,000-31,000 in 8 s, 25-40 events each);
bounded, 5 ms sends about 200 a second of 500 events: the writer 3.5 against 4.2 us an event and Redis 1.6 against
2.2 (``bench/generator_rate.py --lingers 5``, four runs each, alternating). An entry's arrival time is when Redis
appends it, so no figure the pipeline shows moves; the events reach Redis up to 5 ms after the scenario's time."""


class StreamWriter:
    """XADDs simulated events when their arrival time comes, up to ``batch_size`` per round trip.

    Without a clock it writes as fast as possible. With one, an event is due at
    ``arrival_us + offset_us`` clock time; the writer sleeps until the next due
    event, lingering up to ``linger_us`` so a busy stream is sent in batches
    rather than one round trip per event. One batch stays in flight while the
    next is built, so Redis and Python work in parallel.

    Each batch is one transaction that also sets this writer's marker
    (``{ns}:producer:{producer_id}``; see :mod:`watermark_client.batch_channel`): when Redis is lost,
    :meth:`resume` on a new ``client`` writes the batches that were in flight exactly once, and goes on
    with the event it had read ahead. ``idempotent=False`` writes plain XADDs (at least once; for measuring).

    ``explicit_ids`` uses ``{arrival_ms}-{seq}`` instead of ``*``, kept strictly
    above the stream's last ID, so ingest times are the simulated arrival times.

    With ``shards`` > 1 each event goes to its server's shard (``shard_of``; :mod:`streaming.schema.shards`), and a
    batch's transaction spans the shards it touches and the one marker: on one Redis that keeps exactly once
    for all of them. In a Redis Cluster (shards on slots of their own) a batch is a transaction per shard it
    touches, each on its shard's node with a marker beside it (decision 0018), exactly once per shard.
    """

    def __init__(self, client: redis.Redis, stream_key: str, *, explicit_ids: bool = False,
                 batch_size: int = 2_000, clock: Clock | None = None, offset_us: int = 0, linger_us: int = LINGER_US,
                 stop: threading.Event | None = None,
                 on_batch: Callable[[WriteStats], None] | None = None, producer_id: str | None = None,
                 idempotent: bool = True, max_stream_entries: int | None = None, shards: int = 1) -> None:
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
        self.regions: Mapping[str, str] = {}
        """Each server's region for the raw records' payloads (:attr:`Simulator.regions`)."""
        self.producer_id = producer_id or uuid.uuid4().hex
        self.shards = shards
        # In a Redis Cluster each shard has a slot of its own: a transaction per shard, on its node, each with its
        # marker beside it (decision 0018); on one Redis one transaction for all, as a batch is built.
        self.split = shards > 1 and is_cluster(client)
        targets = [input_shard_key(stream_key, k) for k in range(shards)] if self.split else [stream_key]
        self.channels = [BatchChannel(t, producer_marker_key(t, self.producer_id), idempotent=idempotent)
                         for t in targets]
        self._order: deque[int] = deque()  # the channel of each batch in flight, oldest first
        self.gate = BacklogGate(client, stream_key, max_stream_entries, logger=log,  # STREAM_MAX_ENTRIES
                                shards=shards)
        keys = [input_shard_key(stream_key, k).encode().decode("latin-1") for k in range(shards)]
        self._heads = [f"*5\r\n$4\r\nXADD\r\n${len(key)}\r\n{key}\r\n" for key in keys]
        self._star_heads = [xadd_head(input_shard_key(stream_key, k)) for k in range(shards)]
        self._shard_of: dict[str, int] = {}  # server -> its shard, computed once
        self._last = (0, 0)
        self._carry: Any = None  # the event read ahead of the last batch, not sent yet
        self._sent_at = -(1 << 62)  # the clock time (less the offset) the last batch was built up to
        self._full_batch = False  # the last batch stopped at batch_size: the next goes without lingering
        self._full = FullWait(2.0, log)  # Redis full: the pauses before each batch is sent again

    def run(self, events: Iterable[tuple[int, Event]] | Simulator) -> WriteStats:
        """Write until ``events`` is exhausted or ``stop`` is set; a :class:`Simulator`
        is consumed through its cheaper :meth:`~Simulator.records`."""
        raw = isinstance(events, Simulator)
        if isinstance(events, Simulator):
            self.regions = events.regions
        it: Iterator[tuple[int, Event]] | Iterator[Record] = events.records() if raw else iter(events)
        return self.resume(it, raw)

    def resume(self, it: Iterator[Any], raw: bool) -> WriteStats:
        """Go on writing from ``it`` (after a lost connection, with a new ``client``: first the batches that
        were in flight, each exactly once, then the event read ahead)."""
        ok = False
        try:
            for channel in self.channels:  # each settles what it had in flight: none is left in flight after
                for batch in channel.attach(self.client):
                    self._confirmed(batch)
            self._order.clear()
            if self.explicit_ids:
                self._last = max(self._last, *(stream_last_id(self.client, input_shard_key(self.stream_key, k))
                                               for k in range(self.shards)))
            self._loop(it, raw)
            ok = True
        finally:
            for channel in self.channels:
                channel.detach(broken=not ok)  # replies of a batch in flight would be read by the next user
        return self.stats

    def _loop(self, it: Iterator[Any], raw: bool) -> None:
        clock, offset, linger, stop, channels = self.clock, self.offset_us, self.linger_us, self.stop, self.channels
        inflight = self._order
        if self._carry is None:
            self._carry = next(it, None)
        while self._carry is not None:
            if stop is not None and stop.is_set():
                break
            horizon: int | None = None
            if clock is not None:
                horizon = clock.now_us() - offset
                due = self._carry[0]
                # A batch at most every linger, unless the last one was full: at 100,000 events/s an event is
                # always due by the time a batch is built, and without this the batches went back to back, one a
                # round trip (about 2,100 a second, 48 events each, where 5 ms gathers 500).
                ready = due if self._full_batch else max(due, self._sent_at + linger)
                if ready > horizon:
                    while inflight:  # confirm before idling
                        self._confirm()
                    # idle: until the next event, lingering at least linger; busy: a linger after the last batch
                    clock.sleep_until((max(due, horizon + linger) if due > horizon else ready) + offset)
                    continue
                self.stats.lag_us = horizon - due
                self._sent_at = horizon
            if not self.gate.admit(self._pause):  # the readers are behind: hold the events (backpressure)
                break
            parts, self._carry = self._build(self._carry, it, horizon, raw)
            self._full_batch = sum(n for _, _, n, _ in parts) >= self.batch_size
            failed: BaseException | None = None
            for c, data, n, counts in parts:
                inflight.append(c)
                if failed is not None:  # a shard's connection was lost: the rest wait for the next attach too
                    channels[c].hold(data, n, counts)
                    continue
                try:
                    channels[c].send(data, n, counts)
                except BaseException as exc:  # noqa: BLE001 - raised below, once every part is in flight
                    failed = exc
            if failed is not None:
                raise failed
            while len(inflight) > len(parts):  # the previous batch: Redis worked on it while this one was built
                self._confirm()
        while inflight:
            self._confirm()

    def _build(self, item: Any, it: Iterator[Any], horizon: int | None, raw: bool,
               ) -> tuple[list[tuple[int, bytes, int, dict[str, int]]], Any]:
        """RESP for one batch, packed by hand (redis-py's per-command packing costs more
        than generating the event), as (channel, RESP, events, per server) parts: one, or one per shard it
        touches on a cluster. Text is latin-1 so the stream key can be any bytes."""
        frames: list[list[str]] = [[] for _ in self.channels]
        tallies: list[dict[str, int]] = [{} for _ in self.channels]
        append, counts = frames[0].append, tallies[0]
        heads, star_heads = self._heads, self._star_heads
        sharded, route, shards, split = self.shards > 1, self._shard_of, self.shards, self.split
        explicit = self.explicit_ids
        last_ms, last_seq = self._last
        limit = self.batch_size
        regions = self.regions
        advance = it.__next__
        n = 0
        while True:
            if raw:
                arrival, _seq, server, player, _et, kind, eid, iso = item
                text = (f'{{"event_id":"{eid}","server":"{server}","player_id":"{player}",'
                        f'"kind":"{kind}","event_time":"{iso}"}}')
                if regions and (rg := regions.get(server)) is not None:
                    text = f'{text[:-1]},"region":"{rg}"}}'
            else:
                arrival, ev = item
                server = ev.server
                text = payload_text(ev) if ev.region is None else ev.payload().decode("latin-1")
            k = 0
            if sharded:
                k = route.get(server, -1)
                if k < 0:
                    k = route[server] = shard_of(server, shards)
                if split:
                    append, counts = frames[k].append, tallies[k]
            if explicit:
                ms = arrival // 1000
                if ms > last_ms:
                    last_ms, last_seq = ms, 0
                else:
                    last_seq += 1
                entry_id = f"{last_ms}-{last_seq}"
                append(f"{heads[k]}${len(entry_id)}\r\n{entry_id}\r\n$1\r\ne\r\n${len(text)}\r\n{text}\r\n")
            else:
                append(f"{star_heads[k]}${len(text)}\r\n{text}\r\n")
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
        return [(c, "".join(f).encode("latin-1"), len(f), tallies[c]) for c, f in enumerate(frames) if f], item

    def _pause(self, seconds: float) -> bool:
        """Wait ``seconds``; True when asked to stop meanwhile."""
        if self.stop is not None:
            return self.stop.wait(seconds)
        time.sleep(seconds)
        return False

    def _confirm(self) -> None:
        """Confirm the oldest batch in flight. One Redis refused because it is full (nothing of it written) is sent
        again after a pause, behind the others: the writer backs off instead of dropping it. (With explicit IDs
        the batches behind it may have moved the stream past its IDs: Redis then refuses it for good.)"""
        c = self._order.popleft()
        channel = self.channels[c]
        try:
            self._confirmed(channel.confirm())
        except RedisFull as exc:
            if self._pause(self._full.refused(str(exc))):
                raise
            self.stats.refused_full += 1
            channel.send(exc.batch.frames, exc.batch.n, exc.batch.info)
            self._order.append(c)
            return
        self._full.taken("the writer")

    def _confirmed(self, batch: Batch) -> None:
        """Count one batch Redis has (its replies read, or the marker says so after a lost connection)."""
        stats = self.stats
        stats.written += batch.n
        stats.batches += 1
        per = stats.per_server
        for server, c in batch.info.items():
            per[server] = per.get(server, 0) + c
        if batch.last_id is not None:
            stats.last_id = batch.last_id
        if self.on_batch is not None:
            self.on_batch(stats)


def write(client: redis.Redis, stream_key: str, events: Iterable[tuple[int, Event]] | Simulator, *,
          clock: Clock | None = None, explicit_ids: bool = False, batch_size: int = 2_000,
          offset_us: int = 0, linger_us: int = LINGER_US, stop: threading.Event | None = None,
          on_batch: Callable[[WriteStats], None] | None = None, idempotent: bool = True,
          shards: int = 1) -> WriteStats:
    """Write ``(arrival_us, event)`` pairs to ``stream_key`` (its ``shards``); see :class:`StreamWriter`."""
    return StreamWriter(client, stream_key, explicit_ids=explicit_ids, batch_size=batch_size, clock=clock,
                        offset_us=offset_us, linger_us=linger_us, stop=stop, on_batch=on_batch,
                        idempotent=idempotent, shards=shards).run(events)
