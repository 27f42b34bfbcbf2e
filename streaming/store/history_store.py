"""A week of players online in Redis: each series' day record written as its minutes close, read back for a range.

The online view's merge (:mod:`streaming.store.online.merge`) queues :func:`queue_minute` in its own guarded
transaction when a minute closes, so a batch run again writes nothing twice (and a slot written twice would hold
the same bytes). A reader asks for some series over a range with :class:`HistoryRead`: one GETRANGE per series
and day, so a week of the total and six regions is 8 x 7 commands whatever the number of servers or players, and
each reply is only the slots in range (``streaming.rules.online.rollup`` has the layout).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

import redis

from streaming.rules.online.rollup import (
    DAY_BYTES,
    DAY_MS,
    MINUTE_MS,
    SLOT_BYTES,
    WEEK_MS,
    Minute,
    Point,
    day_span,
    days,
    decode,
    minute_points,
    minute_slots,
    resample,
    shifted,
    slot_offset,
    step_for,
)
from streaming.schema.keys import KeySchema

_MINUTE_LUA = """
for i, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 0 then redis.call('SET', key, string.rep('\\0', tonumber(ARGV[3]))) end
  redis.call('SETRANGE', key, ARGV[1], ARGV[3 + i])
  redis.call('EXPIRE', key, ARGV[2])
end
return #KEYS
"""
"""Each series' slot into its day's record, the record made whole (zeros: minutes without data) at its first
write: a record grown by SETRANGE minute by minute keeps the slack of its last growth on Redis 7 (20,568 bytes for
a day's 11,520, where 6.2 took 12,344), one made at its size does not."""


def queue_minute(pipe: redis.client.Pipeline, keys: KeySchema, closed: Minute, regions: Mapping[str, str],
                 expire_s: int) -> None:
    """A closed minute into every series' day record: one script call a minute for every series (O(servers +
    regions) slots, none a batch); ``expire_s`` from :func:`streaming.rules.online.rollup.expire_in_s`."""
    day = closed.minute_ms - closed.minute_ms % DAY_MS
    slots = minute_slots(closed, regions)
    if slots:
        pipe.eval(_MINUTE_LUA, len(slots), *(keys.history(day, s) for s in slots), slot_offset(closed.minute_ms),
                  expire_s, DAY_BYTES, *slots.values())


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


@dataclass(frozen=True)
class Timeline:
    """What a time chart of players online draws for ``[start_ms, end_ms)``, at ``step_ms``: each series, and the
    same series a week earlier shifted onto this range (``week_ago``; empty when not asked for)."""

    start_ms: int
    end_ms: int
    step_ms: int
    series: dict[str, list[Point]]
    week_ago: dict[str, list[Point]]

    def with_open_minute(self, m: Minute | None, regions: Mapping[str, str]) -> Timeline:
        """The minute still open (the online view's state holds it, no record has it yet) added at the end."""
        if m is None or not self.start_ms <= m.minute_ms < self.end_ms:
            return self
        now = minute_points(m, regions)
        series = {s: [*(p for p in pts if p.at_ms < m.minute_ms), now[s]] if s in now else pts
                  for s, pts in self.series.items()}
        return replace(self, series={s: resample(p, self.step_ms) for s, p in series.items()})


def read_timeline(client: redis.Redis, keys: KeySchema, series: Sequence[str], start_ms: int, end_ms: int,
                  week_ago: Sequence[str] = ()) -> Timeline:
    """One round trip: a GETRANGE per series and day (and per series asked ``week_ago`` and day a week earlier);
    O((servers or regions) x days) commands, never per player."""
    now = HistoryRead(tuple(series), start_ms, end_ms)
    before = HistoryRead(tuple(week_ago), start_ms - WEEK_MS, end_ms - WEEK_MS)
    pipe = client.pipeline(transaction=False)
    now.queue(pipe, keys)
    before.queue(pipe, keys)
    replies = iter(pipe.execute())
    step = step_for(end_ms - start_ms)
    got, old = now.parse(replies), before.parse(replies)
    return Timeline(start_ms, end_ms, step, {s: resample(p, step) for s, p in got.items()},
                    {s: resample(shifted(p, WEEK_MS), step) for s, p in old.items()})
