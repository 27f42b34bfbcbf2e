"""The raw events of an arrival-time range, judged one by one, read from Redis in two round trips.

Bounded: at most ``cap`` stream entries (the newest in the range) are read,
and the result says when the cap cut the range short. Read commands only; no
Streamlit (the page caches :func:`read_events` per refresh tick in
``dashboard/loaders.py``), so tests call it directly against a real Redis.

A sharded input (:mod:`streaming.schema.shards`) is read shard by shard and merged by arrival: an entry is
named by its shard and its ID there (the late and dead streams are per shard too), and the batch that read it is
found by its own shard's bounds. How many shards there are is what the committed position names.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

import redis

from streaming.rules.eventview import BatchSpan, EventPoint, Status, Step, count_statuses, judge, watermark_steps
from streaming.rules.late import LateEvent
from streaming.schema.keys import KeySchema
from streaming.schema.records import BatchRecord, CommitEntry, DeadEntry
from streaming.schema.shards import Position, shard_key
from streaming.store.pipeline_status import PipelineState
from watermark_client.events import IDLE_KIND, BadEntry, Event, parse_entry, parse_entry_id
from watermark_client.stream import input_shard_key

MAX_POINTS = 20_000
"""At most this many stream entries per read; the newest in the range are kept."""


@dataclass(frozen=True, slots=True)
class Quarantined:
    entry_id: str
    reason: str
    pending: bool
    """Not processed yet (it will be quarantined when it is); else it is in ``{ns}:dead`` (its shard's)."""
    shard: int = 0


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
    state, ends, commits = _head(client, keys, stream)
    if state is None:
        return None
    window_ms, slide_ms, delay_ms = state.window_ms, state.slide_ms, state.delay_ms
    committed_id = state.committed_id
    shards = len(ends)
    firsts = [parse_entry_id(f[0][0]) if f else None for f, _ in ends]
    first_ms = min((f[0] for f in firsts if f is not None), default=None)
    lasts = [parse_entry_id(last[0][0])[0] for _, last in ends if last]
    hi = end_ms if end_ms is not None else max(lasts, default=0)
    lo = hi - range_ms

    r = _read_range(client, keys, input_keys or keys, shards, lo, hi, cap)
    # The newest ``cap`` of all shards by arrival: every entry newer than the oldest kept is among each shard's
    # newest ``cap + 1``, so the merge cuts the range at one arrival for all shards.
    merged = sorted(((parse_entry_id(i), k, i, f) for k, reply in enumerate(r.raws) for i, f in reply),
                    reverse=True)
    capped = len(merged) > cap
    raw = [(k, i, f) for _, k, i, f in reversed(merged[:cap])]
    shown_from = lo
    if capped:
        shown_from = merged[cap - 1][0][0]
    elif first_ms is not None and first_ms > lo:
        shown_from = first_ms
    events, quarantined = _sort_entries(raw, r.deads, server, committed_id)
    rows = _commit_rows(commits)
    batch_ids = sorted({*_batches_covering(rows, lo, hi, committed_id),
                        *_batches_reading(rows, [(k, e) for e, _, k in events])})
    # Round trip 3: the records of the batches that read them (and of those whose watermark steps are shown).
    spans = _spans(client, keys, batch_ids)
    next_wm = state.next_watermark_ms
    # Round trip 4, where the stream no longer covers the whole range: the late events kept below it, shard by
    # shard (below the cap's cut, else below the shard's oldest entry, all of the range for an emptied shard).
    kept: list[EventPoint] = []
    below = below_shown(merged[cap - 1][:2] if capped else None, firsts, lo, hi)
    if any(b is not None for b in below):
        kept = [e.point(window_ms, slide_ms) for e in read_kept(client, keys, lo, below, cap)
                if server is None or e.server == server]
    return EventRange(
        server=server, lo_ms=lo, hi_ms=hi, shown_from_ms=shown_from, capped=capped, cap=cap,
        stream_first_ms=first_ms,
        trimmed=r.trimmed,
        entries_read=len(raw), points=(*kept, *judge(events, spans, committed_id, window_ms, slide_ms)),
        kept=len(kept), kept_total=r.kept_total, kept_now=r.kept_now,
        quarantined=tuple(quarantined),
        steps=tuple(watermark_steps(spans, shown_from, hi, committed_id, next_wm)),
        window_ms=window_ms, slide_ms=slide_ms, delay_ms=delay_ms, committed_id=committed_id,
    )


@dataclass(frozen=True)
class _Range:
    raws: list[list]
    """Each shard's entries in the range, newest first, ``cap + 1`` at most."""
    deads: list[list]
    """Each shard's quarantined entries in the range."""
    trimmed: int
    kept_total: int
    kept_now: int


def _read_range(client: redis.Redis, keys: KeySchema, source: KeySchema, shards: int, lo: int, hi: int,
                cap: int) -> _Range:
    """Round trip 2: each shard's entries (newest first, capped), its quarantined ones, its late events' count and
    its trimmed count (of ``source``, the namespace whose input is read: a lab lane reads its parent's)."""
    pipe = client.pipeline(transaction=False)
    for k in range(shards):
        pipe.xrevrange(source.input_shard(k), max=hi, min=lo, count=cap + 1)
    for k in range(shards):
        pipe.xrevrange(shard_key(keys.dead, k), max=hi, min=lo, count=cap + 1)  # dead IDs: a subset of the shard's
    for k in range(shards):
        pipe.xlen(shard_key(keys.late, k))
    for k in range(shards):
        pipe.get(source.trimmed_of(k))
    pipe.hget(keys.totals, "kept")
    replies = pipe.execute()
    trimmed, kept = sum(int(t or 0) for t in replies[3 * shards:-1]), replies[-1]
    return _Range(replies[:shards], replies[shards:2 * shards], trimmed, int(kept or 0),
                  sum(int(n) for n in replies[2 * shards:3 * shards]))


def _head(client: redis.Redis, keys: KeySchema, stream: str) -> tuple[PipelineState | None, list, list]:
    """Round trip 1: the pipeline's state, the commits index and shard 0's first and last entries; with more
    shards (as many as the committed position names), one more for theirs."""
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.state)
    pipe.xrange(keys.commits)
    pipe.xrange(stream, count=1)
    pipe.xrevrange(stream, count=1)
    state_h, commits, first, last = pipe.execute()
    state = PipelineState.from_hash(state_h, keys.state)
    ends = [(first, last)]
    shards = Position.of(state.committed_id).shards if state is not None else 1
    if shards > 1:
        pipe = client.pipeline(transaction=False)
        for k in range(1, shards):
            pipe.xrange(input_shard_key(stream, k), count=1)
            pipe.xrevrange(input_shard_key(stream, k), count=1)
        more = pipe.execute()
        ends += list(zip(more[::2], more[1::2], strict=True))
    return state, ends, commits


def _sort_entries(raw: list, deads: list[list], server: str | None,
                  committed_id: str) -> tuple[list[tuple[str, Event, int]], list[Quarantined]]:
    """The entries' (shard, ID, fields) events of ``server`` (idle markers are not events) and the quarantined
    ones of any server, with the sink's reason where it has judged them (``deads``: each shard's dead
    entries)."""
    dead_reasons = {(k, parse_entry_id(i)): DeadEntry.from_fields(f, f"{i!r} in the dead letters").reason
                    for k, dead in enumerate(deads) for i, f in dead}
    committed = Position.of(committed_id)
    events, quarantined = [], []
    for shard, raw_id, fields in raw:
        entry_id = raw_id.decode()
        pending = parse_entry_id(entry_id) > parse_entry_id(committed.at(shard))
        reason = dead_reasons.get((shard, parse_entry_id(entry_id)))
        parsed = parse_entry(fields, entry_id)
        if reason is None and isinstance(parsed, BadEntry):
            reason = parsed.reason
        if reason is not None:
            quarantined.append(Quarantined(entry_id, reason, pending, shard))
        elif isinstance(parsed, Event) and parsed.kind != IDLE_KIND and server in (None, parsed.server):
            events.append((entry_id, parsed, shard))
    return events, quarantined


def below_shown(cut: tuple[tuple[int, int], int] | None, firsts: list[tuple[int, int] | None],
                 lo_ms: int, hi_ms: int) -> list[str | None]:
    """Per shard, the end (Redis range syntax) of the arrivals in ``[lo_ms, hi_ms]`` not shown from its stream:
    below the oldest entry shown when the cap cut the range (``cut``: its ID and shard, as the merge orders
    them), else below the shard's oldest entry when that came after ``lo_ms`` (``hi_ms`` when it came after the
    range, or the trim emptied the shard); None: all shown."""
    out: list[str | None] = []
    for k, first in enumerate(firsts):
        if cut is not None:
            (ms, seq), shard = cut
            out.append(f"{ms}-{seq}" if k < shard else f"({ms}-{seq}")  # merged by (ID, shard)
        elif first is None or first[0] > hi_ms:
            out.append(str(hi_ms))
        else:
            out.append(f"({first[0]}-{first[1]}" if first[0] > lo_ms else None)
    return out


def read_kept(client: redis.Redis, keys: KeySchema, lo: int | str, below: list[str | None],
              cap: int) -> list[LateEvent]:
    """The late events kept with arrival IDs from ``lo`` to each shard's ``below`` (Redis range syntax; None: none
    of that shard), the newest ``cap`` of all shards, oldest first."""
    pipe = client.pipeline(transaction=False)
    shards = [k for k, b in enumerate(below) if b is not None]
    for k in shards:
        pipe.xrevrange(shard_key(keys.late, k), max=below[k], min=lo, count=cap)
    merged = sorted(((parse_entry_id(i), k, i, f) for k, reply in zip(shards, pipe.execute(), strict=True)
                     for i, f in reply), reverse=True)[:cap]
    return [LateEvent.from_fields(i, f, k) for _, k, i, f in reversed(merged)]


def _spans(client: redis.Redis, keys: KeySchema, batch_ids: list[int]) -> list[BatchSpan]:
    if not batch_ids:
        return []
    pipe = client.pipeline(transaction=False)
    for b in batch_ids:
        pipe.hget(keys.batch(b), "sink")
    return [_span(s) for s in pipe.execute() if s is not None]


def _span(sink: bytes) -> BatchSpan:
    rec = BatchRecord.decode(sink, "a batch record (sink)")
    return BatchSpan(rec.batch, rec.start_id, rec.end_id, rec.watermark_ms)


def _commit_rows(commits: list) -> list[tuple[int, Position]]:
    """Each entry of ``{ns}:commits`` (as ``XRANGE`` returns them) as its batch and how far it read, by batch."""
    entries = (CommitEntry.from_fields(f, f"{i!r} in the commits stream") for i, f in commits)
    return sorted((e.batch, Position.of(e.end_id)) for e in entries)


def _batches_covering(rows: list[tuple[int, Position]], lo_ms: int, hi_ms: int, committed_id: str) -> list[int]:
    """Batch ids whose reads end in ``[lo_ms, hi_ms]`` of arrival, and the first after: the watermark steps
    over the range (which batch read each entry shown: :func:`_batches_reading`).

    Batch N read ``(end of N-1, end of N]``: the first batch needed is the first ending at or after ``lo_ms``,
    the last the first ending after ``hi_ms`` (or the newest)."""
    out = []
    committed = Position.of(committed_id)
    for batch, end in rows:
        if end.newest_ms() < lo_ms or not committed.covers(end):
            continue
        out.append(batch)
        if end.newest_ms() > hi_ms:
            break
    return out


def _batches_reading(rows: list[tuple[int, Position]], entries: list[tuple[int, str]]) -> set[int]:
    """The batch that read each (shard, entry ID): the first whose end in that shard is at or past it."""
    out, ends = set(), {}
    for shard, entry_id in entries:
        if shard not in ends:
            ends[shard] = [parse_entry_id(end.at(shard)) for _, end in rows]  # ascending as the batches are
        i = bisect_left(ends[shard], parse_entry_id(entry_id))
        if i < len(rows):
            out.add(rows[i][0])
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
    result; all shards together); the late ones come from ``{ns}:late`` as well, however old."""
    state = PipelineState.from_hash(client.hgetall(keys.state), keys.state)
    if state is None:
        return None
    window_ms, slide_ms = state.window_ms, state.slide_ms
    committed_id = state.committed_id
    shards = Position.of(committed_id).shards
    found: list[tuple[str, Event, int]] = []
    scanned, firsts, capped = 0, [], []
    for k in range(shards):
        got, n, first_ms, capped_at = _scan_stream(client, input_shard_key((input_keys or keys).events, k), player_id,
                                                   lo_ms, hi_ms, scan_cap - scanned)
        found += [(entry_id, ev, k) for entry_id, ev in got]
        scanned += n
        firsts += [first_ms] if first_ms is not None else []
        capped += [capped_at] if capped_at is not None else []
    spans = _spans(client, keys, sorted(_batches_reading(_commit_rows(client.xrange(keys.commits)),
                                                         [(k, e) for e, _, k in found])))
    points = judge(found, spans, committed_id, window_ms, slide_ms)
    in_stream = {(p.shard, p.entry_id) for p in points}
    kept = [e.point(window_ms, slide_ms) for e in _scan_kept(client, keys, player_id, lo_ms, hi_ms, shards)
            if (e.shard, e.entry_id) not in in_stream]
    merged = sorted((*kept, *points), key=lambda p: (parse_entry_id(p.entry_id), p.shard))
    pipe = client.pipeline(transaction=False)
    for k in range(shards):
        pipe.get((input_keys or keys).trimmed_of(k))
    trimmed = sum(int(t or 0) for t in pipe.execute())
    return PlayerEvents(player_id, lo_ms, hi_ms, tuple(merged), scanned, min(firsts, default=None),
                        min(capped, default=None), trimmed)


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


def _scan_kept(client: redis.Redis, keys: KeySchema, player_id: str, lo_ms: int, hi_ms: int,
               shards: int) -> list[LateEvent]:
    """The player's late events kept in each shard's late stream (bounded by ``LATE_EVENTS_KEEP``)."""
    out, want = [], player_id.encode()
    for k in range(shards):
        cursor = str(lo_ms)
        while True:
            chunk = client.xrange(shard_key(keys.late, k), min=cursor, max=hi_ms, count=_CHUNK)
            out.extend(LateEvent.from_fields(i, f, k) for i, f in chunk if f.get(b"p") == want)
            if len(chunk) < _CHUNK:
                break
            cursor = "(" + chunk[-1][0].decode()
    return out
