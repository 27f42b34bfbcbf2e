"""The raw events of an arrival-time range, judged one by one, read from Redis in two round trips.

Bounded: at most ``cap`` stream entries (the newest in the range) are read,
and the result says when the cap cut the range short. Read commands only; no
Streamlit (the page caches :func:`read_events` per refresh tick in
``dashboard.ui``), so tests call it directly against a real Redis.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import redis

from streaming.events import IDLE_KIND, BadEntry, parse_entry, parse_entry_id
from streaming.eventview import BatchSpan, EventPoint, Status, Step, count_statuses, judge, watermark_steps
from streaming.keys import KeySchema

MAX_POINTS = 20_000
"""At most this many stream entries per read; the newest in the range are kept."""


@dataclass(frozen=True, slots=True)
class Quarantined:
    entry_id: str
    reason: str
    pending: bool
    """Not processed yet (it will be quarantined when it is); else it is in ``{ns}:dead``."""


@dataclass(frozen=True)
class EventRange:
    """What the events page shows for one server (or all: ``server`` None) and arrival range."""

    server: str | None
    lo_ms: int
    """Requested range of arrival (ingest) times, inclusive."""
    hi_ms: int
    shown_from_ms: int
    """Where the entries shown start: ``lo_ms`` unless the cap or the stream's start cut it."""
    capped: bool
    cap: int
    stream_first_ms: int | None
    """Arrival of the stream's oldest entry; None when the stream is empty."""
    trimmed: int
    """Entries trimmed from the stream's front so far (the job counts them as it trims)."""
    entries_read: int
    points: tuple[EventPoint, ...]
    """The parsed events of ``server`` (all servers when None)."""
    quarantined: tuple[Quarantined, ...]
    """Entries in the range that are not events (any server: a bad entry may name none)."""
    steps: tuple[Step, ...]
    window_ms: int
    slide_ms: int
    delay_ms: int
    committed_id: str

    def counts(self) -> dict[Status, int]:
        return count_statuses(self.points)

    @property
    def reaches_below_stream(self) -> bool:
        """The range starts before the stream's oldest entry: whatever arrived there is not in the stream."""
        return self.stream_first_ms is not None and self.stream_first_ms > self.lo_ms


def read_events(client: redis.Redis, keys: KeySchema, *, server: str | None, range_ms: int,
                end_ms: int | None = None, cap: int = MAX_POINTS,
                input_keys: KeySchema | None = None) -> EventRange | None:
    """Entries that arrived in ``[end_ms - range_ms, end_ms]`` (``end_ms`` defaults to the newest entry);
    None when no batch has been committed. Raises ``redis.RedisError``. ``input_keys``: the namespace whose
    input stream the pipeline reads (a lab lane reads its parent's). Idle markers are not events: left out."""
    stream = (input_keys or keys).events
    if cap < 1:
        raise ValueError(f"cap must be positive, got {cap}")
    # Round trip 1: pipeline state, the stream's ends, the commits index.
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.state)
    pipe.xrange(stream, count=1)
    pipe.xrevrange(stream, count=1)
    pipe.xrange(keys.commits)
    state_h, first, last, commits = pipe.execute()
    state = {k.decode(): v.decode() for k, v in state_h.items()}
    if not state.get("last_batch"):
        return None
    params = json.loads(state.get("params") or "{}")
    window_ms, slide_ms, delay_ms = (int(params.get(k, 0)) for k in ("window_ms", "slide_ms", "delay_ms"))
    committed_id = state.get("committed_id") or "0-0"
    first_ms = parse_entry_id(first[0][0])[0] if first else None
    hi = end_ms if end_ms is not None else (parse_entry_id(last[0][0])[0] if last else 0)
    lo = hi - range_ms

    # Round trip 2: the entries (newest first, capped), the quarantined ones, the batches that read them.
    pipe = client.pipeline(transaction=False)
    pipe.xrevrange(stream, max=hi, min=lo, count=cap + 1)
    pipe.xrevrange(keys.dead, max=hi, min=lo, count=cap + 1)  # dead IDs are a subset of the events'
    pipe.get(keys.trimmed)
    batch_ids = _batches_covering(commits, lo, hi, committed_id)
    for b in batch_ids:
        pipe.hget(keys.batch(b), "sink")
    raw, dead, trimmed_count, *sinks = pipe.execute()
    trimmed = int(trimmed_count or 0)

    capped = len(raw) > cap
    raw = list(reversed(raw[:cap]))
    shown_from = lo
    if capped:
        shown_from = parse_entry_id(raw[0][0])[0]
    elif first_ms is not None and first_ms > lo:
        shown_from = first_ms
    dead_reasons = {parse_entry_id(i): f.get(b"reason", b"").decode() for i, f in dead}

    events, quarantined = [], []
    for raw_id, fields in raw:
        entry_id = raw_id.decode()
        pending = parse_entry_id(entry_id) > parse_entry_id(committed_id)
        reason = dead_reasons.get(parse_entry_id(entry_id))
        parsed = parse_entry(fields, entry_id)
        if reason is None and isinstance(parsed, BadEntry):
            reason = parsed.reason
        if reason is not None:
            quarantined.append(Quarantined(entry_id, reason, pending))
        elif parsed.kind == IDLE_KIND:  # type: ignore[union-attr]
            continue
        elif server is None or parsed.server == server:  # type: ignore[union-attr]
            events.append((entry_id, parsed))
    spans = [_span(json.loads(s)) for s in sinks if s is not None]
    next_wm = int(state.get("next_watermark_ms") or 0)
    return EventRange(
        server=server, lo_ms=lo, hi_ms=hi, shown_from_ms=shown_from, capped=capped, cap=cap,
        stream_first_ms=first_ms,
        trimmed=trimmed,
        entries_read=len(raw), points=tuple(judge(events, spans, committed_id, window_ms, slide_ms)),
        quarantined=tuple(quarantined),
        steps=tuple(watermark_steps(spans, shown_from, hi, committed_id, next_wm)),
        window_ms=window_ms, slide_ms=slide_ms, delay_ms=delay_ms, committed_id=committed_id,
    )


def _span(rec: Mapping) -> BatchSpan:
    return BatchSpan(int(rec["batch"]), rec["start_id"], rec["end_id"], int(rec["watermark_ms"]))


def _batches_covering(commits: list, lo_ms: int, hi_ms: int, committed_id: str) -> list[int]:
    """Batch ids from ``{ns}:commits`` whose entries may have arrived in ``[lo_ms, hi_ms]``.

    Batch N read ``(end_id of N-1, end_id of N]``: the first batch needed is the first ending at or
    after ``lo_ms``, the last the first ending at or after ``hi_ms`` (or the newest)."""
    rows = sorted((int(f[b"batch"]), parse_entry_id(f[b"end_id"])) for _, f in commits)
    out = []
    for batch, end in rows:
        if end[0] < lo_ms or end > parse_entry_id(committed_id):
            continue
        out.append(batch)
        if end[0] > hi_ms:
            break
    return out
