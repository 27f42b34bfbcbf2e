"""What the dashboard shows, read from Redis in three pipelined round trips, never written.

Only ``watermark.schema.keys`` decides key names and only read commands are sent, so
the dashboard can run with a read-only Redis user. No Streamlit here: the pages
cache :func:`read_snapshot` per refresh tick (``dashboard.ui``), and tests call
it directly against a real Redis.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import msgspec
import redis

from watermark.schema.events import parse_entry_id
from watermark.schema.keys import KeySchema, WindowKey, parse_total_field
from watermark.schema.records import BatchRecord, StateParams, StateRecord
from watermark.store.commit import ServerStats
from watermark.store.presence_store import OnlineView, online_view, queue_online_reads
from watermark.store.report import WindowRow, queue_window_reads, window_rows

MAX_BATCHES = 7_200  # the 60-minute range at the default 500 ms trigger
"""At most this many batch records per read (an hour at a 1 s trigger)."""

ONLINE_HISTORY = 600
"""Online-query batch records per read, for its chart."""


@dataclass(frozen=True)
class BatchPoint:
    """A committed batch: the sink's record plus, once the listener wrote it, Spark's progress."""

    batch: int
    batch_ts_ms: int
    watermark_ms: int
    next_watermark_ms: int
    min_event_us: int | None
    max_event_us: int | None
    running_max_event_us: int | None
    input: int
    parsed: int
    quarantined: int
    events: int
    dropped: int
    late: int
    servers: dict[str, ServerStats]
    bad: dict[str, int]
    duration_ms: int | None = None
    input_per_s: float | None = None  # stream entries per second arriving (Spark's rate, in entries)
    processed_per_s: float | None = None  # and processed
    delay_ms: int | None = None  # the delay the batch ran with (records before lab versions have none)
    server_watermarks: dict[str, int] | None = None  # per-server mode: each input's watermark after the batch
    ticks: int = 0

    @classmethod
    def from_record(cls, rec: Mapping) -> BatchPoint:
        """A batch record (:class:`BatchRecord`, as a dict) with, once the listener reported, its ``progress``;
        raises :class:`RecordError` when it is not one."""
        progress = rec.get("progress") or {}
        r = BatchRecord.from_dict({k: v for k, v in rec.items() if k != "progress"}, f"batch {rec.get('batch')}")
        return cls.of(r, progress)

    @classmethod
    def of(cls, r: BatchRecord, progress: Mapping) -> BatchPoint:
        servers = {name: ServerStats.from_dict(msgspec.to_builtins(s)) for name, s in r.servers.items()}
        durations = progress.get("durations_ms") or {}
        return cls(
            batch=r.batch, batch_ts_ms=r.batch_ts_ms, watermark_ms=r.watermark_ms,
            next_watermark_ms=r.next_watermark_ms, min_event_us=r.min_event_us, max_event_us=r.max_event_us,
            running_max_event_us=r.running_max_event_us, input=r.input, parsed=r.parsed,
            quarantined=r.quarantined, events=r.events, dropped=r.dropped, late=r.late, servers=servers,
            bad=dict(r.bad), duration_ms=durations.get("triggerExecution"),
            input_per_s=_entries_per_s(progress.get("input_rows_per_s"), r.input, progress.get("input_rows")),
            processed_per_s=_entries_per_s(progress.get("processed_rows_per_s"), r.input, progress.get("input_rows")),
            delay_ms=r.delay_ms, server_watermarks=r.server_watermarks, ticks=r.ticks,
        )


def _entries_per_s(rows_per_s: float | None, entries: int, rows: int | None) -> float | None:
    """Spark's rates count its input rows, which are not the stream's entries: each source partition returns
    its accepted events as partial aggregate rows (watermark.spark.partial), and in per-server mode every input
    scans the stream again. Both rates divide the batch's rows by a duration, so the batch's entries per row
    turn them into entries per second."""
    if rows_per_s is None or rows is None:
        return None
    return rows_per_s * entries / rows if rows else 0.0


@dataclass(frozen=True)
class PipelineState:
    last_batch: int
    watermark_ms: int
    next_watermark_ms: int
    max_event_us: int | None
    committed_id: str
    window_ms: int
    slide_ms: int
    delay_ms: int
    trigger_ms: int
    updated_ms: int
    mode: str = "global"
    policy: str = "min"
    lost_at_batch: int | None = None
    """Redis came back empty before this batch: totals and windows open then cover only what came after."""
    stopped_ms: int | None = None
    """The job was stopped on request at this time, after ``last_batch`` (cleared by its next commit)."""

    @classmethod
    def from_hash(cls, h: Mapping, where: str = "the pipeline's state") -> PipelineState | None:
        """The ``{ns}:state`` hash read (bytes or text); None until the first batch has been committed. Raises
        :class:`RecordError` when a field is not what :class:`StateRecord` says."""
        r = StateRecord.from_hash(h, where)
        if r.last_batch is None:
            return None
        p = r.params or StateParams()
        return cls(
            last_batch=r.last_batch, watermark_ms=r.watermark_ms, next_watermark_ms=r.next_watermark_ms,
            max_event_us=r.max_event_us, committed_id=r.committed_id, window_ms=p.window_ms or 0,
            slide_ms=p.slide_ms or 0, delay_ms=p.delay_ms or 0, trigger_ms=r.trigger_ms, updated_ms=r.updated_ms,
            mode=p.mode, policy=p.policy, lost_at_batch=r.lost_at_batch, stopped_ms=r.stopped_ms,
        )

    @property
    def head_ms(self) -> int | None:
        """The running max event time, in ms: where "now" is in event time."""
        return None if self.max_event_us is None else self.max_event_us // 1000


@dataclass(frozen=True)
class ServerTotals:
    events: int = 0
    dropped: int = 0
    late: int = 0
    rows: int = 0


@dataclass(frozen=True)
class Totals:
    input: int = 0
    parsed: int = 0
    events: int = 0
    dropped: int = 0
    late: int = 0
    quarantined: int = 0
    kept: int = 0
    """Late events ever kept in ``{ns}:late`` (``kept`` minus its length: evicted by the bound)."""
    servers: dict[str, ServerTotals] = field(default_factory=dict)
    bad: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_hash(cls, h: Mapping[str, str]) -> Totals:
        overall: dict[str, int] = {}
        per_server: dict[str, dict[str, int]] = {}
        bad: dict[str, int] = {}
        for f, v in h.items():
            metric, qualifier = parse_total_field(f)
            if qualifier is None:
                overall[metric] = int(v)
            elif metric == "bad":
                bad[qualifier] = int(v)
            else:
                per_server.setdefault(qualifier, {})[metric] = int(v)
        known = ("input", "parsed", "events", "dropped", "late", "quarantined", "kept")
        return cls(**{k: overall.get(k, 0) for k in known},
                   servers={s: ServerTotals(**{k: d.get(k, 0) for k in ("events", "dropped", "late", "rows")})
                            for s, d in sorted(per_server.items())},
                   bad=dict(sorted(bad.items())))


@dataclass(frozen=True)
class StreamInfo:
    length: int
    last_id: str | None
    waiting: int
    """Entries the pipeline has not committed yet (exact: see :attr:`KeySchema.trimmed`)."""
    oldest_waiting_ms: int | None = None
    """Arrival (entry ID's millisecond part) of the oldest entry not committed yet; ``None`` when none waits."""
    first_ms: int | None = None
    """Arrival of the oldest entry still in the stream (what the trim has kept)."""

    @property
    def head_ms(self) -> int | None:
        """Ingest time of the newest entry (its ID's millisecond part)."""
        return None if self.last_id is None else parse_entry_id(self.last_id)[0]

    def behind_ms(self, now_ms: int) -> int:
        """How long the oldest waiting entry has waited: how far behind the pipeline is, in time."""
        return 0 if self.oldest_waiting_ms is None else max(0, now_ms - self.oldest_waiting_ms)


@dataclass(frozen=True)
class Snapshot:
    namespace: str
    read_ms: int
    range_ms: int
    state: PipelineState | None
    totals: Totals
    servers: tuple[str, ...]
    windows: tuple[WindowRow, ...]
    batches: tuple[BatchPoint, ...]
    stream: StreamInfo
    online: OnlineView | None = None
    """The online view; None until it has committed a batch."""

    @property
    def last_batch(self) -> BatchPoint | None:
        return self.batches[-1] if self.batches else None

    def current_window_bounds(self) -> tuple[int, int] | None:
        """The window (start, end) holding the head of event time, whether or not a server has events in it.

        With sliding windows several hold it; the one ending first covers the most
        recent full window length, which is what "active now" means.
        """
        if self.state is None or self.state.head_ms is None or not self.state.slide_ms:
            return None
        head, slide, size = self.state.head_ms, self.state.slide_ms, self.state.window_ms
        # The first slide multiple above head - size starts it.
        start = (head - size) // slide * slide + slide
        return start, start + size

    def current_windows(self) -> dict[str, WindowRow | None]:
        """Per server, its row for :meth:`current_window_bounds`; None if it has no events there.

        No other window can be meant: every event is at or before the head, so a server
        with events in a later-starting window holding the head has them in this one too.
        """
        bounds = self.current_window_bounds()
        rows = {w.key: w for w in self.windows} if bounds else {}
        return {s: rows.get(WindowKey(*bounds, s)) if bounds else None for s in self.servers}

    def last_final_windows(self) -> dict[str, WindowRow | None]:
        out: dict[str, WindowRow | None] = {s: None for s in self.servers}
        for w in self.windows:  # sorted by start, so the last final one wins
            if w.final and (out.get(w.server) is None or w.end_ms >= out[w.server].end_ms):  # type: ignore[union-attr]
                out[w.server] = w
        return out


def read_snapshot(client: redis.Redis, keys: KeySchema, *, range_ms: int, now_ms: int,
                  max_batches: int | None = None, input_keys: KeySchema | None = None) -> Snapshot:
    """Windows whose end is within ``range_ms`` of the head of event time, and the
    batches within ``range_ms`` of the last one; raises ``redis.RedisError``.

    ``input_keys``: the namespace whose input stream this pipeline reads (a lab lane reads its parent's)."""
    events = (input_keys or keys).events
    # Round trip 1: everything addressed by a fixed key.
    state_h, totals_h, servers_raw, trimmed, xinfo, *online_replies = _fixed_reads(client, keys, input_keys or keys,
                                                                                   now_ms)
    for reply in (state_h, totals_h, servers_raw, trimmed, *online_replies):
        if isinstance(reply, Exception):
            raise reply
    state = PipelineState.from_hash(state_h, keys.state)
    totals = Totals.from_hash(_decode_hash(totals_h))
    if isinstance(xinfo, redis.ResponseError):  # no such key: nothing was ever written
        xinfo = {}
    elif isinstance(xinfo, Exception):
        raise xinfo

    # Round trip 2: window index, batch records, waiting entries.
    trigger_ms = state.trigger_ms if state else 1_000
    n_batches = max_batches or min(MAX_BATCHES, math.ceil(range_ms / max(trigger_ms, 1)) + 5)
    head = state.head_ms if state else None
    window_ms = state.window_ms if state else 0
    pipe = client.pipeline(transaction=False)
    if head is not None:
        pipe.zrangebyscore(keys.windows, head - range_ms - window_ms, "+inf")
    else:
        pipe.zrange(keys.windows, 0, -1)
    pipe.zrange(keys.batches, -n_batches, -1)
    if state is not None:
        pipe.xrange(events, min="(" + state.committed_id, max="+", count=1)
    replies = pipe.execute()
    members = [WindowKey.parse(m) for m in replies[0]]
    if head is not None:
        members = [m for m in members if m.end_ms > head - range_ms]
    batch_ids = [int(b) for b in replies[1]]

    # Round trip 3: the hashes and sets behind the indexes.
    pipe = client.pipeline(transaction=False)
    queue_window_reads(pipe, keys, members)
    for b in batch_ids:
        pipe.hmget(keys.batch(b), ["sink", "progress"])
    details = pipe.execute() if (members or batch_ids) else []

    windows = window_rows(members, details, state.next_watermark_ms if state else 0)

    batches = batch_points(details[2 * len(members):], range_ms)
    oldest = replies[2][0][0] if state is not None and replies[2] else None
    servers = sorted({*(_decode(s) for s in servers_raw), *totals.servers})
    return Snapshot(
        namespace=keys.namespace, read_ms=now_ms, range_ms=range_ms, state=state, totals=totals,
        servers=tuple(servers), windows=tuple(windows), batches=tuple(batches),
        stream=stream_info(xinfo, int(trimmed or 0), totals.input if state else 0, oldest, state is None),
        online=online_view(*online_replies),
    )


def batch_points(details: list, range_ms: int) -> list[BatchPoint]:
    """The batch records read (``sink``, ``progress``), within ``range_ms`` of the newest."""
    batches = []
    for sink, progress in details:
        if sink is None:  # expired or trimmed between the two reads
            continue
        record = BatchRecord.decode(sink, "a batch record (sink)")
        batches.append(BatchPoint.of(record, json.loads(progress) if progress is not None else {}))
    if batches:
        cutoff = batches[-1].batch_ts_ms - range_ms
        batches = [b for b in batches if b.batch_ts_ms >= cutoff]
    return batches


def stream_info(xinfo: Mapping, trimmed: int, committed: int, oldest: object, no_batch: bool) -> StreamInfo:
    """The input's length, ends and what waits, exactly (``XLEN + trimmed - committed``); ``oldest``: the
    first entry after the committed one, if any."""
    length = int(xinfo.get("length", 0)) if xinfo else 0
    last_id = _decode(xinfo.get("last-generated-id")) if xinfo else None
    if last_id == "0-0":
        last_id = None
    waiting = waiting_entries(length, trimmed, committed)
    oldest_ms = parse_entry_id(_decode(oldest))[0] if oldest is not None and waiting else None
    first = xinfo.get("first-entry") if xinfo else None
    first_ms = parse_entry_id(_decode(first[0]))[0] if first else None
    if no_batch and waiting:
        oldest_ms = first_ms
    return StreamInfo(length=length, last_id=last_id, waiting=waiting, oldest_waiting_ms=oldest_ms,
                      first_ms=first_ms)


FIXED_READ_TRIES = 3


def _fixed_reads(client: redis.Redis, keys: KeySchema, input_keys: KeySchema, now_ms: int) -> list:
    """Round trip 1, consistent without MULTI (a read-only ACL user may not run it): the totals, the trimmed
    count and the stream's length must come from between the same two commits for the waiting count to be
    exact. Each commit bumps its ``last_batch``, so the same ``last_batch`` before and after the reads means no
    commit came in between; otherwise read again."""
    guards = list(dict.fromkeys([keys.state, input_keys.state]))
    for _ in range(FIXED_READ_TRIES):
        pipe = client.pipeline(transaction=False)
        for g in guards:
            pipe.hget(g, "last_batch")
        pipe.hgetall(keys.state)
        pipe.hgetall(keys.totals)
        pipe.smembers(keys.servers)
        pipe.get(input_keys.trimmed)
        pipe.xinfo_stream(input_keys.events)
        queue_online_reads(pipe, keys, ONLINE_HISTORY, now_ms)
        for g in guards:
            pipe.hget(g, "last_batch")
        replies = pipe.execute(raise_on_error=False)
        n = len(guards)
        if replies[:n] == replies[-n:]:
            break
    return replies[n:-n]


def waiting_entries(length: int, trimmed: int, committed: int) -> int:
    """Entries not committed yet: every entry ever appended is either still in the stream or was trimmed,
    and either committed or waiting (the job reads from the stream's start; only the job trims)."""
    return max(0, length + trimmed - committed)


def _decode(v: bytes | str | None) -> str | None:
    return v.decode() if isinstance(v, bytes) else v


def _decode_hash(h: Mapping[bytes, bytes]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in h.items()}


def open_at_loss(w: WindowRow, snap: Snapshot) -> bool:
    """Whether the window was open (not final) when Redis came back empty, so its count lacks what came before:
    it ends after the watermark of the first batch after the loss and starts before that batch ran."""
    lost = snap.state.lost_at_batch if snap.state else None
    at = next((b for b in snap.batches if b.batch == lost), None)
    return at is not None and w.end_ms > at.watermark_ms and w.start_ms < at.batch_ts_ms
