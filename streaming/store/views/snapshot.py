"""What the dashboard shows, read from Redis in a few round trips (the windows in two more, for a
page that draws them: :func:`read_windows`), never written.

Only ``streaming.schema.keys`` decides key names and only read commands are sent, so
the dashboard can run with a read-only Redis user. No Streamlit here: the pages
cache :func:`read_snapshot` per refresh tick (``dashboard/loaders.py``), and tests call
it directly against a real Redis. How the pipeline stands (its state, totals, servers
and input) is read by ``streaming.store.pipeline_status``, which other processes share.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import msgspec
import redis

from streaming.alerting.config import AlertConfig
from streaming.rules.fleet import drained, heard, in_view, retired
from streaming.schema.config import Config
from streaming.schema.keys import KeySchema, WindowKey
from streaming.schema.records import BatchRecord
from streaming.store.alert_store import THRESHOLDS_FIELD, thresholds_from
from streaming.store.pipeline_status import (
    PipelineState,
    ServerTotals,
    StreamInfo,
    Totals,
    oldest_of,
    queue_first_after,
    read_fixed,
    read_memory,
    waiting_entries,
)
from streaming.store.report import WindowRow, queue_window_reads, window_rows
from streaming.store.views.online import OnlinePoints, OnlineView, online_view, queue_online_reads

__all__ = [  # the pages read everything through this module, the store's types too
    "MAX_BATCHES", "ONLINE_HISTORY", "BatchPoint", "BatchPoints", "PipelineState", "ServerTotals", "Snapshot",
    "StreamInfo", "Totals", "WindowRow", "open_at_loss", "read_snapshot", "waiting_entries",
]

MAX_BATCHES = 7_200  # the 60-minute range at the default 500 ms trigger
"""At most this many batch records per read (an hour at a 1 s trigger)."""

ONLINE_HISTORY = 600
"""Online-query batch records per read, for its chart."""


class BatchPoint(BatchRecord, frozen=True, kw_only=True):
    """A committed batch: the sink's record (every field of :class:`BatchRecord`) and, once the listener wrote it,
    Spark's progress."""

    duration_ms: int | None = None
    input_per_s: float | None = None  # stream entries per second arriving (Spark's rate, in entries)
    processed_per_s: float | None = None  # and processed

    @classmethod
    def from_record(cls, rec: Mapping) -> BatchPoint:
        """A batch record (:class:`BatchRecord`, as a dict) with, once the listener reported, its ``progress``;
        raises :class:`RecordError` when it is not one."""
        progress = rec.get("progress") or {}
        r = BatchRecord.from_dict({k: v for k, v in rec.items() if k != "progress"}, f"batch {rec.get('batch')}")
        return cls.of(r, progress)

    @classmethod
    def of(cls, r: BatchRecord, progress: Mapping) -> BatchPoint:
        durations = progress.get("durations_ms") or {}
        rows = progress.get("input_rows")
        return cls(**msgspec.structs.asdict(r), duration_ms=durations.get("triggerExecution"),
                   input_per_s=_entries_per_s(progress.get("input_rows_per_s"), r.input, rows),
                   processed_per_s=_entries_per_s(progress.get("processed_rows_per_s"), r.input, rows))


def _entries_per_s(rows_per_s: float | None, entries: int, rows: int | None) -> float | None:
    """Spark's rates count its input rows, which are not the stream's entries: each source partition returns
    its accepted events as partial aggregate rows (streaming.spark.partial), and in per-server mode every input
    scans the stream again. Both rates divide the batch's rows by a duration, so the batch's entries per row
    turn them into entries per second."""
    if rows_per_s is None or rows is None:
        return None
    return rows_per_s * entries / rows if rows else 0.0


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
    retired: Mapping[str, int] = field(default_factory=dict)
    """Servers out of the live views (no event for RETIRE_AFTER), with their last arrival (ms); ``servers``
    leaves them out, the totals keep them (``streaming.rules.fleet.retired``)."""
    retire_after_ms: int = Config.retire_after_ms
    drained: Mapping[str, int] = field(default_factory=dict)
    """Servers out of the live views because every player logged out before they fell silent (a match over, a pod
    drained), with when (ms); ``servers`` leaves them out too (``streaming.rules.fleet``)."""
    regions: Mapping[str, str] = field(default_factory=dict)
    """Each server's region, as its events carry it (``{ns}:regions``)."""
    seen: Mapping[str, int] = field(default_factory=dict)
    """Each server's newest arrival (ms, ``streaming.rules.fleet.heard``): what "silent" is judged by."""
    redis_memory: tuple[int | None, int] = (None, 0)
    """Redis' used memory (None: INFO refused) and its ``maxmemory`` (0: none)."""
    thresholds: AlertConfig = field(default_factory=AlertConfig)
    """The monitor's, as it published them: the status line judges "behind" and "stalled" as the alerts do."""

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


class BatchPoints:
    """The batch records a reader has decoded, kept from one read to the next: a committed batch's record does not
    change (a batch run again writes the same one), so each read fetches and decodes only the batches it has not
    seen. At 300 servers a record is about 90 KB; a 15-minute range at a 500 ms trigger holds 1,800 of them, so
    reading them all every refresh tick took seconds a tick, and more the longer the pipeline ran. Each read still
    asks every record's length and its ``progress`` (a few hundred bytes): a record gone or written again (a
    pipeline started afresh on the same Redis numbers its batches from 0 again) is told apart and read again.
    Bounded by the range: batches out of it go. Thread-safe (every session of the dashboard shares one per
    namespace and range)."""

    def __init__(self) -> None:
        self._known: dict[int, tuple[tuple[int, bytes | None], BatchPoint]] = {}
        self._lock = threading.Lock()

    def read(self, client: redis.Redis, keys: KeySchema, batch_ids: Sequence[int]) -> list[BatchPoint]:
        """The points of ``batch_ids`` (those whose record is gone left out), in order. With nothing kept yet (the
        first read, a reader that does not read again) the records are read at once, without the marks."""
        with self._lock:
            kept = dict(self._known)
        known: dict[int, tuple[tuple[int, bytes | None], BatchPoint]] = {}
        if kept and batch_ids:
            pipe = client.pipeline(transaction=False)
            for b in batch_ids:
                pipe.hstrlen(keys.batch(b), "sink")
                pipe.hget(keys.batch(b), "progress")
            replies = pipe.execute()
            marks = dict(zip(batch_ids, zip(replies[::2], replies[1::2], strict=True), strict=True))
            known = {b: k for b in batch_ids if (k := kept.get(b)) is not None and k[0] == marks[b]}
            todo = [b for b in batch_ids if b not in known and marks[b][0]]
        else:
            todo = list(batch_ids)
        pipe = client.pipeline(transaction=False)
        for b in todo:
            pipe.hmget(keys.batch(b), ["sink", "progress"])
        for b, (sink, prog) in zip(todo, pipe.execute() if todo else [], strict=True):
            if (point := batch_point(sink, prog)) is not None:
                known[b] = ((len(sink), prog), point)
        with self._lock:
            self._known = known
        return [known[b][1] for b in batch_ids if b in known]


def read_snapshot(client: redis.Redis, keys: KeySchema, *, range_ms: int, now_ms: int,
                  max_batches: int | None = None, input_keys: KeySchema | None = None,
                  retire_after_ms: int = Config.retire_after_ms, points: BatchPoints | None = None,
                  online_points: OnlinePoints | None = None, windows: bool = True) -> Snapshot:
    """Windows whose end is within ``range_ms`` of the head of event time, and the
    batches within ``range_ms`` of the last one; raises ``redis.RedisError``.

    ``input_keys``: the namespace whose input stream this pipeline reads (a lab lane reads its parent's).
    ``points``: the batch records read before (:class:`BatchPoints`), for a reader that reads again and again;
    ``online_points``: the online view's per-batch records read before (:class:`OnlinePoints`), likewise.
    ``windows`` False: no window is read (``Snapshot.windows`` empty; :func:`read_windows` reads them for it), for
    a page that draws none: at 300 servers the windows were a third of a snapshot's read."""
    events = (input_keys or keys).events
    # Round trip 1: everything addressed by a fixed key, the online view's too.
    fixed = read_fixed(client, keys, input_keys or keys,
                       lambda pipe: queue_online_reads(pipe, keys, 0, now_ms))
    state = fixed.state

    # Round trip 2: batch records, waiting entries.
    trigger_ms = state.trigger_ms if state else 1_000
    n_batches = max_batches or min(MAX_BATCHES, math.ceil(range_ms / max(trigger_ms, 1)) + 5)
    pipe = client.pipeline(transaction=False)
    pipe.zrange(keys.batches, -n_batches, -1)
    pipe.hget((input_keys or keys).alerts_monitor, THRESHOLDS_FIELD)  # one monitor watches them all
    if state is not None:
        queue_first_after(pipe, events, state.committed_id)
    replies = pipe.execute()
    online = online_view(*fixed.more)
    if online is not None:
        online = replace(online, history=(online_points or OnlinePoints()).read(client, keys, ONLINE_HISTORY))
    clocks = online.clocks if online is not None else {}
    seen = heard(fixed.seen, {s: c.heard_ms for s, c in clocks.items()})
    gone = retired(seen, now_ms, retire_after_ms)
    emptied = {s: c.drained_ms for s, c in clocks.items() if s not in gone and drained(seen.get(s), c.drained_ms)}
    batches = in_range((points or BatchPoints()).read(client, keys, [int(b) for b in replies[0]]), range_ms)
    status = fixed.status(oldest_of(replies[2:]) if state is not None else None)
    snap = Snapshot(
        namespace=keys.namespace, read_ms=now_ms, range_ms=range_ms, state=state, totals=status.totals,
        servers=tuple(s for s in status.servers if s not in gone and s not in emptied), windows=(),
        batches=tuple(batches), stream=status.stream, online=online, retired=gone, drained=emptied,
        retire_after_ms=retire_after_ms,
        regions=status.regions, seen=seen, redis_memory=read_memory(client), thresholds=thresholds_from(replies[1]),
    )
    return replace(snap, windows=read_windows(client, keys, snap)) if windows else snap


def read_windows(client: redis.Redis, keys: KeySchema, snap: Snapshot) -> tuple[WindowRow, ...]:
    """The windows of ``snap``: those whose end is within its range of the head of event time, of the servers in
    its live views (what a page reads is bounded by the live fleet, not by every name seen). Two round trips."""
    state = snap.state
    head = state.head_ms if state else None
    if head is not None:
        index = client.zrangebyscore(keys.windows, head - snap.range_ms - state.window_ms, "+inf")
    else:
        index = client.zrange(keys.windows, 0, -1)
    counts = snap.online.counts if snap.online is not None else {}
    members = [m for m in map(WindowKey.parse, index) if (head is None or m.end_ms > head - snap.range_ms)
               and in_view(retired=m.server in snap.retired, drained=m.server in snap.drained,
                           players=counts.get(m.server, 0))]
    pipe = client.pipeline(transaction=False)
    queue_window_reads(pipe, keys, members)
    details = pipe.execute() if members else []
    return tuple(window_rows(members, details, state.next_watermark_ms if state else 0))


def batch_point(sink: bytes | None, progress: bytes | None) -> BatchPoint | None:
    """One batch record read (``sink``, ``progress``); None when it is gone (expired or trimmed meanwhile)."""
    if sink is None:
        return None
    record = BatchRecord.decode(sink, "a batch record (sink)")
    return BatchPoint.of(record, json.loads(progress) if progress is not None else {})


def in_range(batches: list[BatchPoint], range_ms: int) -> list[BatchPoint]:
    """The batches within ``range_ms`` of the newest."""
    if batches:
        cutoff = batches[-1].batch_ts_ms - range_ms
        batches = [b for b in batches if b.batch_ts_ms >= cutoff]
    return batches


def open_at_loss(w: WindowRow, snap: Snapshot) -> bool:
    """Whether the window was open (not final) when Redis came back empty, so its count lacks what came before:
    it ends after the watermark of the first batch after the loss and starts before that batch ran."""
    lost = snap.state.lost_at_batch if snap.state else None
    at = next((b for b in snap.batches if b.batch == lost), None)
    return at is not None and w.end_ms > at.watermark_ms and w.start_ms < at.batch_ts_ms
