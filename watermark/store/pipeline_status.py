"""How a pipeline stands, read from Redis: its commit record, its totals, the servers it has seen and its input
stream (what waits, how long the oldest has waited), consistent with each other.

The dashboard reads this with every refresh (``views.snapshot.read_snapshot`` shares its first round trip), and so
can any other process that only wants the pipeline's figures (:func:`read_pipeline`), such as one exporting metrics.
Read commands only, so a read-only Redis user can run it; no pyspark.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import redis

from watermark.schema.events import parse_entry_id
from watermark.schema.keys import KeySchema, parse_total_field
from watermark.schema.records import StateParams, StateRecord


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
class PipelineStatus:
    """How a pipeline stands: its commit record (None until its first batch), its totals, every server it has
    seen (by name), and its input stream."""

    state: PipelineState | None
    totals: Totals
    servers: tuple[str, ...]
    stream: StreamInfo
    seen: Mapping[str, int] = field(default_factory=dict)
    """Each server's newest committed arrival (``{ns}:seen``, ms)."""
    regions: Mapping[str, str] = field(default_factory=dict)
    """Each server's region, as its events carry it (``{ns}:regions``)."""


@dataclass(frozen=True)
class FixedReads:
    """What :func:`read_fixed` read, parsed: everything but the oldest waiting entry, which needs the state's
    ``committed_id`` first (:meth:`status`)."""

    state: PipelineState | None
    totals: Totals
    servers: tuple[str, ...]
    trimmed: int
    xinfo: Mapping
    seen: Mapping[str, int]
    regions: Mapping[str, str]
    more: list
    """The replies to what the caller queued (``queue_more``)."""

    def status(self, oldest: object) -> PipelineStatus:
        """``oldest``: the first input entry after ``committed_id`` (its ID), None when there is none."""
        committed = self.totals.input if self.state else 0
        return PipelineStatus(self.state, self.totals, self.servers,
                              stream_info(self.xinfo, self.trimmed, committed, oldest, self.state is None), self.seen,
                              self.regions)


def read_pipeline(client: redis.Redis, keys: KeySchema, input_keys: KeySchema | None = None) -> PipelineStatus:
    """How the pipeline of ``keys`` stands, consistent as :func:`read_fixed` says; raises ``redis.RedisError``,
    and :class:`RecordError` when its commit record is malformed. Two round trips of a fixed number of commands
    (a third try of the first at most, when commits keep coming in between), whatever the number of events,
    windows or batches; only the hashes' per-server fields grow with the servers.

    ``input_keys``: the namespace whose input stream this pipeline reads (a lab lane reads its parent's)."""
    source = input_keys or keys
    fixed = read_fixed(client, keys, source)
    oldest = first_after(client, source.events, fixed.state.committed_id) if fixed.state is not None else None
    return fixed.status(oldest)


def read_memory(client: redis.Redis) -> tuple[int | None, int]:
    """Redis' ``used_memory`` and ``maxmemory`` (0: none). ``used_memory`` None when INFO is refused (an ACL user
    without it): the pages and the alerts then cannot tell how full Redis is, and say so."""
    try:
        mem = client.info("memory")
    except redis.ResponseError:
        return None, 0
    return int(mem.get("used_memory", 0)), int(mem.get("maxmemory", 0))


def first_after(client: redis.Redis, stream: str, entry_id: str) -> bytes | None:
    """The ID of the first entry of ``stream`` after ``entry_id`` (a reader's last committed one): the oldest
    entry it has not committed yet; None when none waits."""
    after = client.xrange(stream, min="(" + entry_id, max="+", count=1)
    return after[0][0] if after else None


FIXED_READ_TRIES = 3

QueueMore = Callable[[redis.client.Pipeline], object]


def read_fixed(client: redis.Redis, keys: KeySchema, input_keys: KeySchema,
               queue_more: QueueMore | None = None) -> FixedReads:
    """The state, the totals, the servers, the trimmed count and the input stream's info in one round trip,
    with whatever ``queue_more`` queues (its replies in :attr:`FixedReads.more`); raises ``redis.RedisError``.

    Consistent without MULTI (a read-only ACL user may not run it): the totals, the trimmed count and the
    stream's length must come from between the same two commits for the waiting count to be exact. Each
    commit bumps its ``last_batch``, so the same ``last_batch`` before and after the reads means no commit came
    in between; otherwise read again."""
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
        pipe.hgetall(keys.seen)
        pipe.hgetall(keys.regions)
        if queue_more is not None:
            queue_more(pipe)
        for g in guards:
            pipe.hget(g, "last_batch")
        replies = pipe.execute(raise_on_error=False)
        n = len(guards)
        if replies[:n] == replies[-n:]:
            break
    return _parse_fixed(replies[n:-n], keys)


def _parse_fixed(replies: list, keys: KeySchema) -> FixedReads:
    state_h, totals_h, servers_raw, trimmed, xinfo, seen_h, regions_h, *more = replies
    for reply in (state_h, totals_h, servers_raw, trimmed, seen_h, regions_h, *more):
        if isinstance(reply, Exception):
            raise reply
    state = PipelineState.from_hash(state_h, keys.state)
    totals = Totals.from_hash(_decode_hash(totals_h))
    if isinstance(xinfo, redis.ResponseError):  # no such key: nothing was ever written
        xinfo = {}
    elif isinstance(xinfo, Exception):
        raise xinfo
    servers = tuple(sorted({*(_decode(s) for s in servers_raw), *totals.servers}))
    seen = {_decode(k): int(v) for k, v in seen_h.items()}
    regions = {_decode(k): _decode(v) for k, v in regions_h.items()}
    return FixedReads(state, totals, servers, int(trimmed or 0), xinfo, seen, regions, more)


def stream_info(xinfo: Mapping, trimmed: int, committed: int, oldest: object, no_batch: bool) -> StreamInfo:
    """The input's length, ends and what waits: ``entries-added - committed`` on Redis 7 (every entry ever appended:
    exact whoever trims what the readers committed), else ``XLEN + trimmed - committed`` (Redis 6.2 has no such
    count: the job counts its own trims, exact while only it trims). Neither sees an entry someone deleted before
    the job read it, except that none waits when no entry follows the committed one; ``oldest``: that entry."""
    length = int(xinfo.get("length", 0)) if xinfo else 0
    last_id = _decode(xinfo.get("last-generated-id")) if xinfo else None
    if last_id == "0-0":
        last_id = None
    added = xinfo.get("entries-added") if xinfo else None
    if added is None or no_batch:
        waiting = waiting_entries(length, trimmed, committed)
    else:  # an entry deleted unread (XDEL) is counted in entries-added: none waits when no entry follows the commit
        waiting = min(length, max(0, int(added) - committed)) if oldest is not None else 0
    oldest_ms = parse_entry_id(_decode(oldest))[0] if oldest is not None and waiting else None
    first = xinfo.get("first-entry") if xinfo else None
    first_ms = parse_entry_id(_decode(first[0]))[0] if first else None
    if no_batch and waiting:
        oldest_ms = first_ms
    return StreamInfo(length=length, last_id=last_id, waiting=waiting, oldest_waiting_ms=oldest_ms,
                      first_ms=first_ms)


def waiting_entries(length: int, trimmed: int, committed: int) -> int:
    """Entries not committed yet: every entry ever appended is either still in the stream or was trimmed,
    and either committed or waiting (the job reads from the stream's start; only the job trims)."""
    return max(0, length + trimmed - committed)


def _decode(v: bytes | str | None) -> str | None:
    return v.decode() if isinstance(v, bytes) else v


def _decode_hash(h: Mapping[bytes, bytes]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in h.items()}
