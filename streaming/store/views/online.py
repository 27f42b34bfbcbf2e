"""The online view as the dashboard reads it: counts, history, the last hour's minutes and the peaks.

:func:`queue_online_reads` queues a fixed number of reads on a caller's pipeline, so a snapshot shares one round
trip. :func:`online_view` parses the replies into an :class:`OnlineView`. Nothing here writes:
:mod:`streaming.store.online.commit` and :mod:`streaming.store.online.merge` write what this reads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import redis

from streaming.rules.online.rollup import MINUTE_MS, Minute, day_of, parse_peaks
from streaming.schema.keys import KeySchema
from streaming.schema.records import ClockRecord, OnlineRecord, OnlineStateRecord

HOUR_MS = 3_600_000


@dataclass(frozen=True)
class OnlinePoint:
    """Online counts per server after one batch."""

    batch: int
    watermark_ms: int
    batch_ts_ms: int
    counts: dict[str, int]
    online: int  # transitions to online in the batch
    offline: int

    @classmethod
    def from_json(cls, raw: str | bytes) -> OnlinePoint:
        r = OnlineRecord.decode(raw, "a member of the online view's history")
        return cls(batch=r.batch, watermark_ms=r.watermark_ms, batch_ts_ms=r.batch_ts_ms, counts=dict(r.counts),
                   online=r.online, offline=r.offline)


@dataclass(frozen=True)
class OnlineView:
    last_batch: int
    watermark_ms: int
    timeout_ms: int
    updated_ms: int
    batch_ts_ms: int
    counts: dict[str, int]
    history: tuple[OnlinePoint, ...]
    minutes: tuple[Minute, ...] = ()  # the last hour's minutes of arrival time, the open one last
    peaks: dict[str, tuple[int, int]] = field(default_factory=dict)  # today's: server, region or TOTAL -> (count, at)
    peaks_ever: dict[str, tuple[int, int]] = field(default_factory=dict)  # the highest ever, the same keys
    lost_at_batch: int | None = None  # Redis came back empty before this batch: history before it is gone
    partial_until_ms: int | None = None  # rebuilt from new events after a loss: whole once the watermark is here
    clocks: dict[str, ClockRecord] = field(default_factory=dict)  # each server's own clock (rules.server_clock)

    @property
    def partial(self) -> bool:
        """Rebuilt after Redis and the job lost the state together; players who have not sent an event since
        are missing until the watermark passes :attr:`partial_until_ms` (then they would have timed out)."""
        return self.partial_until_ms is not None and self.watermark_ms < self.partial_until_ms

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def queue_online_reads(pipe: redis.client.Pipeline, keys: KeySchema, last: int, now_ms: int) -> None:
    """Six replies, parsed by :func:`online_view`; lets a caller share one round trip. A fixed number of
    commands, whatever the number of players. ``last``: the per-batch records to read (0: none, for a reader that
    keeps them in :class:`OnlinePoints`)."""
    pipe.hgetall(keys.online_state)
    pipe.hgetall(keys.online_counts)
    if last:
        pipe.zrange(keys.online_history, -last, -1)
    else:
        pipe.zrange(keys.online_history, 1, 0)  # an empty range: the replies stay six
    pipe.zrangebyscore(keys.online_minutes, now_ms - now_ms % MINUTE_MS - HOUR_MS, "+inf")
    pipe.hgetall(keys.online_peak(day_of(now_ms)))
    pipe.hgetall(keys.online_peak_ever)


def online_view(state: Mapping[bytes, bytes], counts: Mapping[bytes, bytes], history: Sequence[bytes],
                minutes: Sequence[bytes] = (), peaks: Mapping[bytes, bytes] | None = None,
                peaks_ever: Mapping[bytes, bytes] | None = None) -> OnlineView | None:
    """None until the online view has committed a batch."""
    rec = OnlineStateRecord.from_hash(state, "the online view's state")
    if rec.last_batch is None:
        return None
    closed = [Minute.from_json(m) for m in minutes]
    open_minute = [Minute.from_json(rec.minute)] if rec.minute else []
    return OnlineView(
        last_batch=rec.last_batch, watermark_ms=rec.watermark_ms, timeout_ms=rec.timeout_ms,
        updated_ms=rec.updated_ms, batch_ts_ms=rec.batch_ts_ms,
        counts={k.decode(): int(v) for k, v in sorted(counts.items())},
        history=tuple(OnlinePoint.from_json(m) for m in history),
        minutes=tuple([*closed, *(m for m in open_minute if not closed or m.minute_ms > closed[-1].minute_ms)]),
        peaks=parse_peaks(peaks or {}), peaks_ever=parse_peaks(peaks_ever or {}), lost_at_batch=rec.lost_at_batch,
        partial_until_ms=rec.partial_until_ms,
        clocks=dict(rec.clocks),
    )


class OnlinePoints:
    """The online view's per-batch records (``{ns}:online:history``) a reader has decoded, kept from one read to the
    next, as :class:`streaming.store.views.snapshot.BatchPoints` keeps the batch records: a batch's record does not
    change, so each read fetches and decodes only the records after the newest kept. At 300 servers a record is
    about 10 KB; reading and decoding the last 600 on every refresh was a fifth of Live ops' first run. Each read
    also counts the records in the kept span: when Redis no longer holds them all (it came back empty, a pipeline
    started afresh), everything is read again. Thread-safe: every session shares one per namespace."""

    def __init__(self) -> None:
        self._kept: tuple[OnlinePoint, ...] = ()
        self._lock = threading.Lock()

    def read(self, client: redis.Redis, keys: KeySchema, last: int) -> tuple[OnlinePoint, ...]:
        """The newest ``last`` records, oldest first."""
        with self._lock:
            kept = self._kept
        points: tuple[OnlinePoint, ...] | None = None
        if kept:
            pipe = client.pipeline(transaction=False)
            pipe.zcount(keys.online_history, kept[0].batch, kept[-1].batch)
            pipe.zrangebyscore(keys.online_history, f"({kept[-1].batch}", "+inf")
            count, new = pipe.execute()
            if count == len(kept):
                points = (*kept, *(OnlinePoint.from_json(m) for m in new))[-last:]
        if points is None:
            points = tuple(OnlinePoint.from_json(m) for m in client.zrange(keys.online_history, -last, -1))
        with self._lock:
            self._kept = points
        return points


def read_online(client: redis.Redis, keys: KeySchema, last: int = 1_000,
                now_ms: int | None = None) -> OnlineView | None:
    pipe = client.pipeline(transaction=False)
    queue_online_reads(pipe, keys, last, int(time.time() * 1000) if now_ms is None else now_ms)
    return online_view(*pipe.execute())
