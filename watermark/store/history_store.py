"""A week of players online in Redis: each series' day record written as its minutes close, read back for a range.

The online view's commit (:mod:`watermark.store.presence_store`) queues :func:`queue_minute` in its own guarded
transaction when a minute closes, so a batch run again writes nothing twice (and a slot written twice would hold
the same bytes). A reader asks for some series over a range with :class:`HistoryRead`: one GETRANGE per series
and day, so a week of the total and six regions is 8 x 7 commands whatever the number of servers or players, and
each reply is only the slots in range (``watermark.rules.presence_rollup`` has the layout).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import redis

from watermark.rules.presence_rollup import (
    DAY_MS,
    MINUTE_MS,
    SLOT_BYTES,
    Minute,
    Point,
    day_span,
    days,
    decode,
    minute_slots,
    slot_offset,
)
from watermark.schema.keys import KeySchema


def queue_minute(pipe: redis.client.Pipeline, keys: KeySchema, closed: Minute, regions: Mapping[str, str],
                 expire_s: int) -> None:
    """A closed minute into every series' day record: a SETRANGE and an EXPIRE per series (O(servers + regions)
    commands a minute, none a batch); ``expire_s`` from :func:`watermark.rules.presence_rollup.expire_in_s`."""
    day = closed.minute_ms - closed.minute_ms % DAY_MS
    at = slot_offset(closed.minute_ms)
    for series, slot in minute_slots(closed, regions).items():
        key = keys.history(day, series)
        pipe.setrange(key, at, slot)
        pipe.expire(key, expire_s)


@dataclass(frozen=True)
class HistoryRead:
    """Some series over ``[start_ms, end_ms)``, queued on a caller's pipeline (to share its round trip) and parsed
    from the same replies, in order."""

    series: tuple[str, ...]
    start_ms: int
    end_ms: int

    def _spans(self) -> list[tuple[str, int, int, int]]:
        return [(s, d, *day_span(d, self.start_ms, self.end_ms)) for s in self.series
                for d in days(self.start_ms, self.end_ms)]

    def queue(self, pipe: redis.client.Pipeline, keys: KeySchema) -> int:
        """Queue the reads; how many replies they take."""
        spans = self._spans()
        for series, day, lo, hi in spans:
            pipe.getrange(keys.history(day, series), lo, hi)
        return len(spans)

    def parse(self, replies: Iterator[bytes]) -> dict[str, list[Point]]:
        out: dict[str, list[Point]] = {s: [] for s in self.series}
        for series, day, lo, _ in self._spans():
            out[series].extend(decode(day + lo // SLOT_BYTES * MINUTE_MS, next(replies) or b""))
        return out


def read_history(client: redis.Redis, keys: KeySchema, series: Sequence[str], start_ms: int,
                 end_ms: int) -> dict[str, list[Point]]:
    """Each series' minutes with data in ``[start_ms, end_ms)``, oldest first."""
    q = HistoryRead(tuple(series), start_ms, end_ms)
    pipe = client.pipeline(transaction=False)
    q.queue(pipe, keys)
    return q.parse(iter(pipe.execute()))
