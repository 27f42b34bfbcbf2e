"""The raw events of an arrival-time range, judged one by one, read from Redis in two round trips.

Bounded: at most ``cap`` stream entries (the newest in the range) are read,
and the result says when the cap cut the range short. Read commands only; no
Streamlit (the page caches :func:`read_events` per refresh tick in
``dashboard/loaders.py``), so tests call it directly against a real Redis.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

import redis

from watermark.rules.eventview import BatchSpan, EventPoint, Status, Step, count_statuses, judge, watermark_steps
from watermark.rules.late import LateEvent
from watermark.schema.events import IDLE_KIND, BadEntry, Event, parse_entry, parse_entry_id
from watermark.schema.keys import KeySchema
from watermark.schema.records import BatchRecord, CommitEntry, DeadEntry
from watermark.store.pipeline_status import PipelineState

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
    """The parsed events of ``server`` (all servers when None), by arrival: first the late events kept from
    before ``shown_from_ms`` (``kept`` of them), then every event the stream still holds from there."""
    quarantined: tuple[Quarantined, ...]
    """Entries in the range that are not events (any server: a bad entry may name none)."""
    steps: tuple[Step, ...]
    window_ms: int
    slide_ms: int
    delay_ms: int
    committed_id: str
    kept: int = 0
    """Points before ``shown_from_ms`` (the stream no longer holds them): late events from ``{ns}:late``."""
    kept_total: int = 0
    """Late events the pipeline ever kept; ``kept_total - kept_now`` were evicted by ``LATE_EVENTS_KEEP``."""
    kept_now: int = 0

    @property
    def kept_evicted(self) -> int:
        return self.kept_total - self.kept_now

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
    state, first, last, commits = _head(client, keys, stream)
    if state is None:
        return None
    window_ms, slide_ms, delay_ms = state.window_ms, state.slide_ms, state.delay_ms
    committed_id = state.committed_id
    first_ms = parse_entry_id(first[0][0])[0] if first else None
    hi = end_ms if end_ms is not None else (parse_entry_id(last[0][0])[0] if last else 0)
    lo = hi - range_ms

    # Round trip 2: the entries (newest first, capped), the quarantined ones, the batches that read them.
    pipe = client.pipeline(transaction=False)
    pipe.xrevrange(stream, max=hi, min=lo, count=cap + 1)
    pipe.xrevrange(keys.dead, max=hi, min=lo, count=cap + 1)  # dead IDs are a subset of the events'
    pipe.get(keys.trimmed)
    pipe.hget(keys.totals, "kept")
    pipe.xlen(keys.late)
    batch_ids = _batches_covering(commits, lo, hi, committed_id)
    for b in batch_ids:
        pipe.hget(keys.batch(b), "sink")
    raw, dead, trimmed_count, kept_count, kept_len, *sinks = pipe.execute()
    kept_total, kept_now = int(kept_count or 0), int(kept_len)
    trimmed = int(trimmed_count or 0)

    capped = len(raw) > cap
    raw = list(reversed(raw[:cap]))
    shown_from = lo
    if capped:
        shown_from = parse_entry_id(raw[0][0])[0]
    elif first_ms is not None and first_ms > lo:
        shown_from = first_ms
    events, quarantined = _sort_entries(raw, dead, server, committed_id)
    spans = [_span(s) for s in sinks if s is not None]
    next_wm = state.next_watermark_ms
    # Round trip 3, when the stream no longer covers the whole range: the late events kept below it.
    below = raw[0][0].decode() if capped else (first[0][0].decode() if first else None)
    kept: list[EventPoint] = []
    if below is not None and shown_from > lo:
        kept = [e.point(window_ms, slide_ms) for e in read_kept(client, keys, lo, f"({below}", cap)
                if server is None or e.server == server]
    return EventRange(
        server=server, lo_ms=lo, hi_ms=hi, shown_from_ms=shown_from, capped=capped, cap=cap,
        stream_first_ms=first_ms,
        trimmed=trimmed,
        entries_read=len(raw), points=(*kept, *judge(events, spans, committed_id, window_ms, slide_ms)),
        kept=len(kept), kept_total=kept_total, kept_now=kept_now,
        quarantined=tuple(quarantined),
        steps=tuple(watermark_steps(spans, shown_from, hi, committed_id, next_wm)),
        window_ms=window_ms, slide_ms=slide_ms, delay_ms=delay_ms, committed_id=committed_id,
    )


def _head(client: redis.Redis, keys: KeySchema, stream: str) -> tuple[PipelineState | None, list, list, list]:
    """Round trip 1: the pipeline's state, the stream's first and last entries, the commits index."""
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.state)
    pipe.xrange(stream, count=1)
    pipe.xrevrange(stream, count=1)
    pipe.xrange(keys.commits)
    state_h, first, last, commits = pipe.execute()
    return PipelineState.from_hash(state_h, keys.state), first, last, commits


def _sort_entries(raw: list, dead: list, server: str | None,
                  committed_id: str) -> tuple[list[tuple[str, Event]], list[Quarantined]]:
    """The entries' events of ``server`` (idle markers are not events) and the quarantined ones of any server,
    with the sink's reason where it has judged them."""
    dead_reasons = {parse_entry_id(i): DeadEntry.from_fields(f, f"{i!r} in the dead letters").reason for i, f in dead}
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
        elif isinstance(parsed, Event) and parsed.kind != IDLE_KIND and server in (None, parsed.server):
            events.append((entry_id, parsed))
    return events, quarantined


def read_kept(client: redis.Redis, keys: KeySchema, lo: int | str, hi: int | str, cap: int) -> list[LateEvent]:
    """The late events kept with arrival IDs in ``[lo, hi]`` (Redis range syntax), the newest ``cap``,
    oldest first."""
    return [LateEvent.from_fields(i, f) for i, f in reversed(client.xrevrange(keys.late, max=hi, min=lo,
                                                                               count=cap))]


def _span(sink: bytes) -> BatchSpan:
    rec = BatchRecord.decode(sink, "a batch record (sink)")
    return BatchSpan(rec.batch, rec.start_id, rec.end_id, rec.watermark_ms)


def _commit_rows(commits: list) -> list[tuple[int, tuple[int, int]]]:
    """Each entry of ``{ns}:commits`` (as ``XRANGE`` returns them) as its batch and the last entry it read."""
    entries = (CommitEntry.from_fields(f, f"{i!r} in the commits stream") for i, f in commits)
    return [(e.batch, parse_entry_id(e.end_id)) for e in entries]


def _batches_covering(commits: list, lo_ms: int, hi_ms: int, committed_id: str) -> list[int]:
    """Batch ids from ``{ns}:commits`` whose entries may have arrived in ``[lo_ms, hi_ms]``.

    Batch N read ``(end_id of N-1, end_id of N]``: the first batch needed is the first ending at or
    after ``lo_ms``, the last the first ending at or after ``hi_ms`` (or the newest)."""
    out = []
    for batch, end in sorted(_commit_rows(commits)):
        if end[0] < lo_ms or end > parse_entry_id(committed_id):
            continue
        out.append(batch)
        if end[0] > hi_ms:
            break
    return out


SCAN_CAP = 200_000
"""At most this many input entries are scanned by one player lookup."""
_CHUNK = 10_000


@dataclass(frozen=True)
class PlayerEvents:
    """One player's events that arrived in ``[lo_ms, hi_ms]``: from the input stream where it still holds
    them, and the late ones from ``{ns}:late`` whatever the stream has lost."""

    player_id: str
    lo_ms: int
    hi_ms: int
    points: tuple[EventPoint, ...]
    """By arrival."""
    scanned: int
    """Input entries read."""
    stream_from_ms: int | None
    """Where the stream's part of the search started (the oldest entry still there); None: nothing there."""
    capped_at_ms: int | None
    """The scan stopped at ``SCAN_CAP`` entries here: later arrivals were not searched in the stream."""
    trimmed: int = 0
    """Entries trimmed from the input stream so far."""


def find_player(client: redis.Redis, keys: KeySchema, player_id: str, lo_ms: int, hi_ms: int, *,
                scan_cap: int = SCAN_CAP, input_keys: KeySchema | None = None) -> PlayerEvents | None:
    """Every event of ``player_id`` that arrived in ``[lo_ms, hi_ms]``, judged as :func:`read_events` judges
    them; None when no batch has been committed. Scans at most ``scan_cap`` stream entries (said in the
    result); the late ones come from ``{ns}:late`` as well, however old."""
    state = PipelineState.from_hash(client.hgetall(keys.state), keys.state)
    if state is None:
        return None
    window_ms, slide_ms = state.window_ms, state.slide_ms
    committed_id = state.committed_id
    found, scanned, first_ms, capped_at = _scan_stream(client, (input_keys or keys).events, player_id, lo_ms,
                                                       hi_ms, scan_cap)
    spans = _spans_of(client, keys, [entry_id for entry_id, _ in found], committed_id)
    points = judge(found, spans, committed_id, window_ms, slide_ms)
    in_stream = {p.entry_id for p in points}
    kept = [e.point(window_ms, slide_ms) for e in _scan_kept(client, keys, player_id, lo_ms, hi_ms)
            if e.entry_id not in in_stream]
    merged = sorted((*kept, *points), key=lambda p: parse_entry_id(p.entry_id))
    trimmed = int(client.get((input_keys or keys).trimmed) or 0)
    return PlayerEvents(player_id, lo_ms, hi_ms, tuple(merged), scanned, first_ms, capped_at, trimmed)


def _scan_stream(client: redis.Redis, stream: str, player_id: str, lo_ms: int, hi_ms: int,
                 scan_cap: int) -> tuple[list[tuple[str, Event]], int, int | None, int | None]:
    """The player's entries in the range (a substring test before the parser: cheap for the others)."""
    needle, found, scanned, cursor, first_ms = player_id.encode(), [], 0, str(lo_ms), None
    while scanned < scan_cap:
        chunk = client.xrange(stream, min=cursor, max=hi_ms, count=min(_CHUNK, scan_cap - scanned))
        if not chunk:
            return found, scanned, first_ms, None
        first_ms = first_ms if first_ms is not None else parse_entry_id(chunk[0][0])[0]
        scanned += len(chunk)
        for raw_id, fields in chunk:
            payload = fields.get(b"e", b"")
            if needle in payload or b"\\" in payload:  # an escaped id is for the parser to read
                parsed = parse_entry(fields, raw_id.decode())
                if isinstance(parsed, Event) and parsed.player_id == player_id and parsed.kind != IDLE_KIND:
                    found.append((raw_id.decode(), parsed))
        cursor = "(" + chunk[-1][0].decode()
    more = client.xrange(stream, min=cursor, max=hi_ms, count=1)
    return found, scanned, first_ms, parse_entry_id(more[0][0])[0] if more else None


def _spans_of(client: redis.Redis, keys: KeySchema, entry_ids: list[str], committed_id: str) -> list[BatchSpan]:
    """The records of the batches that read ``entry_ids`` (one each, from the ``{ns}:commits`` index)."""
    if not entry_ids:
        return []
    rows = sorted((end, batch) for batch, end in _commit_rows(client.xrange(keys.commits)))
    ends = [end for end, _ in rows]
    batches = {rows[i][1] for i in (bisect_left(ends, parse_entry_id(e)) for e in entry_ids) if i < len(rows)}
    pipe = client.pipeline(transaction=False)
    for b in sorted(batches):
        pipe.hget(keys.batch(b), "sink")
    return [_span(s) for s in pipe.execute() if s is not None]


def _scan_kept(client: redis.Redis, keys: KeySchema, player_id: str, lo_ms: int, hi_ms: int) -> list[LateEvent]:
    """The player's late events kept in ``{ns}:late`` (bounded by ``LATE_EVENTS_KEEP``), oldest first."""
    out, cursor, want = [], str(lo_ms), player_id.encode()
    while True:
        chunk = client.xrange(keys.late, min=cursor, max=hi_ms, count=_CHUNK)
        out.extend(LateEvent.from_fields(i, f) for i, f in chunk if f.get(b"p") == want)
        if len(chunk) < _CHUNK:
            return out
        cursor = "(" + chunk[-1][0].decode()
