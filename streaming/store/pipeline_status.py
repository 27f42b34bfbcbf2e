"""How a pipeline stands, read from Redis: its commit record, its totals, the servers it has seen and its input
stream (what waits, how long the oldest has waited), consistent with each other.

The dashboard reads this with every refresh (``views.snapshot.read_snapshot`` shares its first round trip), and so
can any other process that only wants the pipeline's figures (:func:`read_pipeline`), such as one exporting metrics.
Read commands only, so a read-only Redis user can run it; no pyspark.

A sharded input (:mod:`streaming.schema.shards`) is read shard by shard: the figures are the shards' sums, the
oldest waiting entry the oldest of each shard's first uncommitted one. How many shards there are is what the
pipeline's committed position names, so a reader needs no setting of its own.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import redis

from streaming.schema.keys import KeySchema, parse_total_field
from streaming.schema.records import NameGuardRecord, StateParams, StateRecord
from streaming.schema.shards import Position
from streaming.store import redis_conn
from watermark_client.events import parse_entry_id
from watermark_client.stream import input_shard_key


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
    lost_batches: tuple[int, int] | None = None
    """The first and last batch whose commits Redis lost while keeping older ones (decision 0023)."""
    stopped_ms: int | None = None
    """The job was stopped on request at this time, after ``last_batch`` (cleared by its next commit)."""
    name_guard: NameGuardRecord | None = None

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
            name_guard=r.name_guard, lost_batches=lost_run(r),
        )

    @property
    def head_ms(self) -> int | None:
        """The running max event time, in ms: where "now" is in event time."""
        return None if self.max_event_us is None else self.max_event_us // 1000


def lost_run(r: StateRecord) -> tuple[int, int] | None:
    """The batches whose commits Redis lost (:attr:`StateRecord.lost_from_batch`), first and last; None: none."""
    if r.lost_from_batch is None:
        return None
    return r.lost_from_batch, r.lost_to_batch if r.lost_to_batch is not None else r.lost_from_batch


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
    xinfo: Sequence[Mapping]
    """``XINFO STREAM`` of each input shard ({} for one never written)."""
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


_SHARDS: weakref.WeakKeyDictionary[redis.Redis, dict[str, int]] = weakref.WeakKeyDictionary()
"""Per client and input stream, how many shards the last committed position it read named: what its next read
asks about (read again when that changed). Per client: another client (another Redis, another user) starts from
one shard, never from a count it may not read."""


def read_state(client: redis.Redis, keys: KeySchema) -> PipelineState | None:
    """The job's own settings and progress as its last commit wrote them (``{ns}:state``); None before it."""
    return PipelineState.from_hash(client.hgetall(keys.state), keys.state)


def shards_named(state: PipelineState | None, default: int = 1) -> int:
    """How many input shards the pipeline reads: as many as its committed position names."""
    return Position.of(state.committed_id).shards if state is not None else default


def read_memory(client: redis.Redis) -> tuple[int | None, int]:
    """Redis' ``used_memory`` and ``maxmemory`` (0: none); in a Redis Cluster the fullest primary's (a node that
    refuses writes stops what writes there). ``used_memory`` None when INFO is refused (an ACL user without it):
    the pages and the alerts then cannot tell how full Redis is, and say so."""
    try:
        mems = [node.info("memory") for node in redis_conn.nodes(client)]
    except redis.ResponseError:
        return None, 0
    pairs = [(int(m.get("used_memory", 0)), int(m.get("maxmemory", 0))) for m in mems]
    return max(pairs, key=lambda p: (p[0] / p[1] if p[1] else 0.0, p[0]))


def first_after(client: redis.Redis, stream: str, position: str) -> bytes | None:
    """The ID of the oldest entry of the input (``stream``, shard 0's key) after ``position`` (a reader's last
    committed one): the oldest entry it has not committed yet, in whichever shard; None when none waits."""
    pipe = client.pipeline(transaction=False)
    queue_first_after(pipe, stream, position)
    return oldest_of(pipe.execute())


def queue_first_after(pipe: redis.client.Pipeline, stream: str, position: str) -> None:
    """Each shard's first entry after ``position``: one reply per shard (:func:`oldest_of` reads them)."""
    for k, entry_id in enumerate(Position.of(position).ids):
        pipe.xrange(input_shard_key(stream, k), min="(" + entry_id, max="+", count=1)


def oldest_of(replies: Sequence[list]) -> bytes | None:
    """The oldest by arrival of the shards' first uncommitted entries (:func:`queue_first_after`'s replies)."""
    ids = [r[0][0] for r in replies if r]
    return min(ids, key=lambda i: parse_entry_id(_decode(i) or "")) if ids else None


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
    n = len(guards)
    tries = 0
    while True:
        shards = _SHARDS.get(client, {}).get(input_keys.events, 1)
        pipe = client.pipeline(transaction=False)
        for g in guards:
            pipe.hget(g, "last_batch")
        pipe.hgetall(keys.state)
        pipe.hgetall(keys.totals)
        pipe.smembers(keys.servers)
        pipe.hgetall(keys.seen)
        pipe.hgetall(keys.regions)
        for k in range(shards):
            pipe.get(input_keys.trimmed_of(k))  # each shard counts its own trims (decision 0018): summed
        for k in range(shards):
            pipe.xinfo_stream(input_shard_key(input_keys.events, k))
        if queue_more is not None:
            queue_more(pipe)
        for g in guards:
            pipe.hget(g, "last_batch")
        replies = pipe.execute(raise_on_error=False)
        tries += 1
        state_h = replies[n]  # the shards the state names, before the shards' own replies are judged: a shard
        named = shards if isinstance(state_h, Exception) else shards_named(  # no longer named may be refused
            PipelineState.from_hash(state_h, keys.state), shards)  # (an ACL user of fewer shards), not an error
        if named != shards and tries <= FIXED_READ_TRIES:  # the shards changed (or a first read): read them all
            _SHARDS.setdefault(client, {})[input_keys.events] = named
            continue
        fixed = _parse_fixed(replies[n:-n], keys, shards)
        if replies[:n] == replies[-n:] or tries >= FIXED_READ_TRIES:
            return fixed


def _parse_fixed(replies: list, keys: KeySchema, shards: int) -> FixedReads:
    state_h, totals_h, servers_raw, seen_h, regions_h, *rest = replies
    trims, xinfos, more = rest[:shards], rest[shards:2 * shards], rest[2 * shards:]
    for reply in (state_h, totals_h, servers_raw, seen_h, regions_h, *trims, *more):
        if isinstance(reply, Exception):
            raise reply
    state = PipelineState.from_hash(state_h, keys.state)
    totals = Totals.from_hash(_decode_hash(totals_h))
    for x in xinfos:
        if isinstance(x, Exception) and not isinstance(x, redis.ResponseError):  # ResponseError: no such key
            raise x
    servers = tuple(sorted({*(_decode(s) for s in servers_raw), *totals.servers}))
    seen = {_decode(k): int(v) for k, v in seen_h.items()}
    regions = {_decode(k): _decode(v) for k, v in regions_h.items()}
    return FixedReads(state, totals, servers, sum(int(t or 0) for t in trims),
                      [{} if isinstance(x, Exception) else x for x in xinfos], seen, regions, more)


def stream_info(xinfos: Sequence[Mapping], trimmed: int, committed: int, oldest: object, no_batch: bool) -> StreamInfo:
    """The input's length, ends and what waits, summed over its shards (``xinfos``: each one's ``XINFO STREAM``):
    ``entries-added - committed`` on Redis 7 (every entry ever appended: exact whoever trims what the readers
    committed), else ``XLEN + trimmed - committed`` (Redis 6.2 has no such count: the job counts its own trims,
    exact while only it trims). Neither sees an entry someone deleted before the job read it, except that none
    waits when no entry follows the committed one; ``oldest``: that entry."""
    written = [x for x in xinfos if x]
    length = sum(int(x.get("length", 0)) for x in written)
    lasts = [i for i in (_decode(x.get("last-generated-id")) for x in written) if i and i != "0-0"]
    last_id = max(lasts, key=parse_entry_id) if lasts else None  # the newest arrival in any shard
    counts = [x.get("entries-added") for x in written]
    added = None if not written or None in counts else sum(int(c) for c in counts)
    if added is None or no_batch:
        waiting = waiting_entries(length, trimmed, committed)
    else:  # an entry deleted unread (XDEL) is counted in entries-added: none waits when no entry follows the commit
        waiting = min(length, max(0, int(added) - committed)) if oldest is not None else 0
    oldest_ms = parse_entry_id(_decode(oldest))[0] if oldest is not None and waiting else None
    firsts = [parse_entry_id(_decode(x["first-entry"][0]))[0] for x in written if x.get("first-entry")]
    first_ms = min(firsts) if firsts else None
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
