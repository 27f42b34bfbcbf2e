"""Why was this event dropped? Each raw event judged against the watermark its batch met, Spark-free.

The sink only stores counts; this module re-derives the verdict of every
single (event, window) pair from what Redis keeps anyway: the raw stream
entries (entry ID = arrival), the batch boundaries (batch N read the entries in
``(start_id, end_id]``) and the watermark in force for each batch. It applies
the same rules as the sink (:func:`streaming.rules.windows.classify`), so the
dropped pairs summed per window equal the ``dropped`` field of the window
hashes (tested against the real pipeline).

An event's overall status:

* ``on_time`` — at or after the watermark it met (``event_time >= watermark``);
* ``late_accepted`` — before the watermark, but every window of it still open;
* ``partly_dropped`` — sliding windows only: dropped from some of its windows
  (those that had closed) and counted in the others;
* ``dropped`` — every window of it had closed (``window.end <= watermark``);
* ``pending`` — after the job's committed offset: not processed yet;
* ``unknown`` — processed, but the record of its batch is gone (expired or
  trimmed from ``{ns}:commits``), so the watermark it met is unknown.

With a sharded input (:mod:`streaming.schema.shards`) a batch's bounds are positions, one entry ID per shard, and
an entry is compared with its own shard's IDs only: the IDs of two shards may be equal.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from streaming.rules.windows import Verdict, Window, classify, window_ranges
from streaming.schema.shards import Position
from watermark_client.events import Event, parse_entry_id


class Status(StrEnum):
    ON_TIME = "on_time"
    LATE_ACCEPTED = "late_accepted"
    PARTLY_DROPPED = "partly_dropped"
    DROPPED = "dropped"
    PENDING = "pending"
    UNKNOWN = "unknown"


STATUS_LABELS: dict[Status, str] = {
    Status.ON_TIME: "on time",
    Status.LATE_ACCEPTED: "late but accepted",
    Status.PARTLY_DROPPED: "partly dropped",
    Status.DROPPED: "dropped",
    Status.PENDING: "pending",
    Status.UNKNOWN: "batch unknown",
}


@dataclass(frozen=True, slots=True)
class BatchSpan:
    """Batch ``batch`` read the entries with ``start_id < id <= end_id`` under ``watermark_ms`` (positions: in
    each shard, its own IDs)."""

    batch: int
    start_id: str
    end_id: str
    watermark_ms: int

    @property
    def start_ms(self) -> int:
        """The newest arrival read before this batch (any shard): its arrivals start after it."""
        return Position.of(self.start_id).newest_ms()

    @property
    def end_ms(self) -> int:
        """The newest arrival it read (any shard)."""
        return Position.of(self.end_id).newest_ms()


@dataclass(frozen=True, slots=True)
class WindowStatus:
    window: Window
    verdict: Verdict | None
    """None while the event is pending or its batch is unknown."""


@dataclass(frozen=True, slots=True)
class EventPoint:
    entry_id: str
    """Its entry ID in its shard (``shard``; 0 with one stream)."""
    arrival_ms: int
    server: str
    player_id: str
    kind: str | None
    event_id: str | None
    event_time_us: int
    batch: int | None
    watermark_ms: int | None
    """The watermark in force for the batch that read it (None: pending or unknown)."""
    windows: tuple[WindowStatus, ...]
    status: Status
    shard: int = 0


@dataclass(frozen=True, slots=True)
class Step:
    """The watermark ``watermark_ms`` was in force for arrivals from ``from_ms`` to ``to_ms``.

    ``batch`` is None for the pending tail: the watermark the next batch will meet."""

    from_ms: int
    to_ms: int
    watermark_ms: int
    batch: int | None


def overall(verdicts: Sequence[Verdict]) -> Status:
    """One status for an event from its (event, window) verdicts."""
    dropped = sum(v is Verdict.DROPPED for v in verdicts)
    if verdicts and dropped == len(verdicts):
        return Status.DROPPED
    if dropped:
        return Status.PARTLY_DROPPED
    if Verdict.LATE_ACCEPTED in verdicts:
        return Status.LATE_ACCEPTED
    return Status.ON_TIME


def judge(entries: Iterable[tuple[str, Event, int]], spans: Sequence[BatchSpan], committed_id: str, window_ms: int,
          slide_ms: int) -> list[EventPoint]:
    """One :class:`EventPoint` per parsed entry (its ID, the event, its shard), in the order given."""
    spans = sorted(spans, key=lambda s: s.batch)
    ends = [Position.of(s.end_id) for s in spans]
    starts = [Position.of(s.start_id) for s in spans]
    committed = Position.of(committed_id)
    # each shard's batch bounds (ends, starts), ascending as the batches are
    by_shard: dict[int, tuple[list[tuple[int, int]], list[tuple[int, int]]]] = {}
    out = []
    for entry_id, ev, shard in entries:
        key = parse_entry_id(entry_id)
        windows = window_ranges(ev.event_time_us, window_ms, slide_ms)
        span = None
        done = key <= parse_entry_id(committed.at(shard))
        if done:
            if shard not in by_shard:
                by_shard[shard] = ([parse_entry_id(e.at(shard)) for e in ends],
                                   [parse_entry_id(b.at(shard)) for b in starts])
            shard_ends, shard_starts = by_shard[shard]
            i = bisect_left(shard_ends, key)
            span = spans[i] if i < len(spans) and shard_starts[i] < key else None
        if span is None:
            status = Status.UNKNOWN if done else Status.PENDING
            judged = tuple(WindowStatus(w, None) for w in windows)
        else:
            verdicts = [classify(ev.event_time_us, w, span.watermark_ms) for w in windows]
            status = overall(verdicts)
            judged = tuple(WindowStatus(w, v) for w, v in zip(windows, verdicts, strict=True))
        out.append(EventPoint(
            entry_id=entry_id, arrival_ms=key[0], server=ev.server, player_id=ev.player_id, kind=ev.kind,
            event_id=ev.event_id, event_time_us=ev.event_time_us, batch=span.batch if span else None,
            watermark_ms=span.watermark_ms if span else None, windows=judged, status=status, shard=shard,
        ))
    return out


def watermark_steps(spans: Sequence[BatchSpan], lo_ms: int, hi_ms: int, committed_id: str | None = None,
                    next_watermark_ms: int | None = None) -> list[Step]:
    """The watermark in force against arrival time, clipped to ``[lo_ms, hi_ms]``, oldest first.

    After the committed offset, the watermark the next batch will meet (``next_watermark_ms``)
    is the pending tail, up to ``hi_ms``."""
    out = []
    for s in sorted(spans, key=lambda s: s.batch):
        a, b = max(s.start_ms, lo_ms), min(s.end_ms, hi_ms)
        if a <= b and s.end_ms >= lo_ms and s.start_ms <= hi_ms:
            out.append(Step(a, b, s.watermark_ms, s.batch))
    if committed_id is not None and next_watermark_ms is not None:
        a = max(Position.of(committed_id).newest_ms(), lo_ms)
        if a <= hi_ms:
            out.append(Step(a, hi_ms, next_watermark_ms, None))
    return out


def window_boundaries(lo_ms: int, hi_ms: int, window_ms: int, slide_ms: int) -> list[int]:
    """Every window start and end in ``[lo_ms, hi_ms]``, ascending (epoch-aligned, as the windows are)."""
    if window_ms <= 0 or slide_ms <= 0:
        raise ValueError("window length and slide must be positive")
    out: set[int] = set()
    for offset in (0, window_ms % slide_ms):  # starts are multiples of slide; ends are starts + window
        first = lo_ms - ((lo_ms - offset) % slide_ms)
        if first < lo_ms:
            first += slide_ms
        out.update(range(first, hi_ms + 1, slide_ms))
    return sorted(out)


def count_statuses(points: Iterable[EventPoint]) -> dict[Status, int]:
    """Events per status, every status present (zeros included), in :class:`Status` order."""
    counts = Counter(p.status for p in points)
    return {s: counts.get(s, 0) for s in Status}


def dropped_pairs(points: Iterable[EventPoint]) -> dict[tuple[int, int, str], int]:
    """Dropped (event, window) pairs per ``(start_ms, end_ms, server)``: what the window hashes count as ``dropped``."""
    out: Counter[tuple[int, int, str]] = Counter()
    for p in points:
        for w in p.windows:
            if w.verdict is Verdict.DROPPED:
                out[(w.window.start_ms, w.window.end_ms, p.server)] += 1
    return dict(out)
