"""A PySpark Python Data Source over a Redis Stream (``format("redis_stream")``).

Offsets are stream entry IDs (``{"id": "<ms>-<seq>"}``, exclusive start,
inclusive end), so after a restart Spark re-reads exactly the entries a batch
had. With ``shards`` > 1 the input is that many streams and an offset holds one
ID per shard (a :class:`~streaming.schema.shards.Position`, the IDs joined by
commas): a batch reads each shard's range, one partition or more per shard.

Each entry becomes one row; an entry that does not parse becomes a row with
``error`` set and ``event_time`` null instead of failing the query, and the sink
quarantines it.

With ``preAggregate=true`` (and ``windowMs``/``slideMs``) a partition does not
return its accepted events one row each: it folds them into its partial
aggregate (:mod:`streaming.spark.partial`) and ends with those rows (``partial``,
``server`` and ``event_time`` set, every other column null); quarantined entries and idle markers still come one row
each. The pipeline's sink only sums these across partitions; any other reader
leaves the option off and gets one row per entry.

Options: ``url``, ``stream`` (shard 0's key), ``shards`` (default 1), ``partitions`` (default 2; with shards,
at least one per shard that has entries),
``maxEventsPerBatch`` (0 = no cap), ``preAggregate`` (``true``/``false``,
default false) with ``windowMs`` and ``slideMs`` (every accepted event then also comes as a player row: the
online players' input), ``windowPlayers`` (with ``preAggregate``: the namespace whose windows' players a streaming
batch's partitions count, :mod:`streaming.spark.window_players`), ``playersTtlS`` and
``waitReplicas`` / ``waitTimeoutMs`` (a partition is done once that many replicas have its players), and for batch reads
``startId`` / ``endId`` (inclusive, default the whole stream).
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import redis
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from streaming.schema.keys import KeySchema
from streaming.schema.shards import START, Position, share
from streaming.spark.partial import (
    PACKED,
    PACKED_PLAYERS,
    PartitionPartials,
    in_windows,
    player_partial,
)
from streaming.spark.rows import (
    ROW_SCHEMA,
    SCHEMA,
    RawEntry,
    pack,
    partial_batch,
    to_record_batch,
)
from streaming.spark.window_players import Counting, PartitionPlayers
from streaming.spark.window_players import write as write_players
from streaming.store.redis_conn import TRANSIENT, refresh, with_retry
from watermark_client.connection import home, open_client
from watermark_client.events import IDLE_KIND, NO_RULES, Rules
from watermark_client.events import parse_entry_id as parse_id
from watermark_client.stream import input_shard_key

MAX_SEQ = 18446744073709551615
READ_CHUNK = 10_000

# Finds the ID of the n-th entry after an exclusive start without shipping the
# entries to the driver: the cheap way to cap a batch by count.
_NTH_ID_LUA = """
local cur, remaining, last = ARGV[1], tonumber(ARGV[2]), false
while remaining > 0 do
  local chunk = math.min(remaining, 1000)
  local r = redis.call('XRANGE', KEYS[1], '(' .. cur, '+', 'COUNT', chunk)
  if #r == 0 then break end
  cur = r[#r][1]
  last = cur
  remaining = remaining - #r
  if #r < chunk then break end
end
return last
"""


_CAPPED_END_LUA = """
local start, cap = ARGV[1], tonumber(ARGV[2])
local waiting = nil
if start == '0-0' then
  waiting = redis.call('XLEN', KEYS[1])
elseif #KEYS == 4 and redis.call('HGET', KEYS[2], 'committed_id') == start then
  local input = tonumber(redis.call('HGET', KEYS[3], 'input') or '0')
  local trimmed = tonumber(redis.call('GET', KEYS[4]) or '0')
  waiting = redis.call('XLEN', KEYS[1]) + trimmed - input
end
if waiting ~= nil and waiting <= cap then
  if waiting <= 0 then return false end
  return redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1][1]
end
""" + _NTH_ID_LUA
"""The end of a batch of at most ``cap`` entries after ``start``, atomically. When the sink's commit record
says how many entries wait (its ``committed_id`` is ``start``: ``XLEN + trimmed - input``, see
``KeySchema.trimmed``) and they fit, the newest entry is the end, found without walking; otherwise (over the
cap, or a start the record does not describe) the cap-th entry is found by walking."""


def format_id(ms: int, seq: int) -> str:
    return f"{ms}-{seq}"


# How many entries follow an exclusive start, counted up to a cap: a shard's backlog, as far as a capped batch
# needs it (walking at most ``cap`` entries, server-side).
COUNT_AFTER_LUA = """
local cur, cap, n = ARGV[1], tonumber(ARGV[2]), 0
while n < cap do
  local chunk = math.min(cap - n, 1000)
  local r = redis.call('XRANGE', KEYS[1], '(' .. cur, '+', 'COUNT', chunk)
  n = n + #r
  if #r < chunk then break end
  cur = r[#r][1]
end
return n
"""


class StreamRange(InputPartition):
    """Entries of shard ``shard`` with ``lo < id <= hi`` (``lo`` inclusive when ``lo_inclusive``); ``batch_end``: the
    position the streaming batch it belongs to ends at (its windows' players are counted under it), empty for a
    read outside a batch."""

    def __init__(self, lo: str, hi: str, lo_inclusive: bool = False, shard: int = 0, batch_end: str = "") -> None:
        super().__init__((lo, hi, lo_inclusive, shard, batch_end))
        self.lo, self.hi, self.lo_inclusive, self.shard, self.batch_end = lo, hi, lo_inclusive, shard, batch_end

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StreamRange) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


def split_range(lo: str, hi: str, parts: int, lo_inclusive: bool = False, shard: int = 0,
                batch_end: str = "") -> list[StreamRange]:
    """Split ``(lo, hi]`` into up to ``parts`` contiguous ranges by the IDs' millisecond part.

    Any split covers the same entries, so replays stay exact even if the split differs."""
    lo_ms, hi_ms = parse_id(lo)[0], parse_id(hi)[0]
    cuts: list[str] = []
    span = hi_ms - lo_ms
    for k in range(1, parts):
        cut_ms = lo_ms + (span * k) // parts
        cut = format_id(cut_ms, MAX_SEQ)
        if parse_id(cut) >= parse_id(hi):
            break
        if cuts and cuts[-1] == cut:
            continue
        if parse_id(cut) <= parse_id(lo):
            continue
        cuts.append(cut)
    bounds = [lo, *cuts, hi]
    return [
        StreamRange(bounds[i], bounds[i + 1], lo_inclusive and i == 0, shard, batch_end)
        for i in range(len(bounds) - 1)
    ]


def ranges(start: str, end: str, shards: int, batch_end: str = "") -> list[StreamRange]:
    """The entries after position ``start`` up to position ``end``: one range per shard that has any (what a
    batch read, read again in one piece per shard); ``batch_end``: as :class:`StreamRange`'s (the batch's windows'
    players counted again under it)."""
    lo, hi = Position.parse(start, shards), Position.parse(end, shards)
    return [StreamRange(a, b, shard=k, batch_end=batch_end) for k, (a, b) in enumerate(zip(lo.ids, hi.ids, strict=True))
            if parse_id(b) > parse_id(a)]


_BASES: dict[str, redis.Redis] = {}
"""One client per URL and Python worker process (workers are reused across batches): a cluster's knows its map."""
_CLIENTS: dict[tuple[str, str], redis.Redis] = {}


def _forget(url: str, stream: str) -> None:
    """The next :func:`stream_client` for ``stream`` is looked up again, on a map read again (a cluster's slot moved, or
    its node failed over; on one Redis the same client, which reconnects)."""
    _CLIENTS.pop((url, stream), None)
    if url in _BASES:
        refresh(_BASES[url])


def stream_client(url: str, stream: str) -> redis.Redis:
    """The client that reads ``stream``: the URL's own on one Redis, the plain client of the stream's node in a
    Redis Cluster (:func:`connection.home`).

    Its XRANGE replies stay as hiredis builds them (``[id, [k, v, ...]]``): redis-py's conversion to
    ``(id, {k: v})`` cost more than the read itself."""
    client = _CLIENTS.get((url, stream))
    if client is None:
        base = _BASES.get(url)
        if base is None:
            base = _BASES[url] = open_client(url, socket_keepalive=True)
        client = _CLIENTS[(url, stream)] = home(base, stream)
        client.set_response_callback("XRANGE", lambda response, **_: response)
    return client


def xrange_entries(client: redis.Redis, stream: str, lo: str, hi: str, count: int) -> list[RawEntry]:
    """XRANGE with the cyclic garbage collector paused: a reply is tens of thousands of fresh lists, each
    allocation counts towards a collection that then walks them all, and none of them can be in a cycle.
    Paused, a 10,000-entry reply costs a third of the time (bench/read_costs.py)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return client.xrange(stream, lo, hi, count=count)
    finally:
        if enabled:
            gc.enable()


def read_range(url: str, stream: str, part: StreamRange, chunk: int = READ_CHUNK, rules: Rules = NO_RULES,
               partials: PartitionPartials | None = None,
               count_players: Counting | None = None) -> Iterator[pa.RecordBatch]:
    """XRANGE the partition in chunks, one Arrow record batch per chunk; with ``partials``, the accepted
    events are folded into them instead, each chunk's accepted events come as player rows (the online players'
    input) and a last batch holds the partition's partial rows. A server's region
    (the latest its events in the partition carry) rides in its packed row's ``player_id``. With
    ``count_players`` and a range of a streaming batch, its windows' players
    are added to the pipeline's sets and counted under the batch's end (:mod:`streaming.spark.window_players`)
    before the partial rows are passed on."""
    lo = part.lo if part.lo_inclusive else "(" + part.lo
    regions: dict[str, str] = {}
    players = (PartitionPlayers(partials.window_ms, partials.slide_ms)
               if partials is not None and count_players is not None and part.batch_end else None)
    while True:
        # the client looked up each try: after a cluster's slot moved, the next one is made on the new node
        entries = with_retry(lambda lo=lo: xrange_entries(stream_client(url, stream), stream, lo, part.hi, chunk),
                             f"read of {stream}", refresh=lambda: _forget(url, stream))
        if entries:
            batch = (to_record_batch(entries, rules, regions, part.shard) if partials is None
                     else _fold(partials, entries, rules, regions, part.shard, players))
            if batch.num_rows:
                yield batch
        if len(entries) < chunk:
            break
        lo = "(" + entries[-1][0].decode()
    packed = None
    # The partials packed before the players are written, passed on after: in a partition the rows meet the
    # packing module once (docs/architecture.md, "A batch's way through the code").
    if partials is not None:
        server, partial = partials.rows()
        packed = pack(partial_batch(server, partial), PACKED, regions) if len(server) else None
    if players is not None and count_players is not None:
        c = count_players
        with_retry(lambda: write_players(stream_client(url, c.keys.state), c.keys, part.batch_end, players, c.ttl_s,
                                         (c.wait_replicas, c.wait_timeout_ms)),
                   f"players of {stream}", refresh=lambda: _forget(url, c.keys.state))
    if packed is not None:
        yield packed


def _fold(partials: PartitionPartials, entries: list[RawEntry], rules: Rules, regions: dict[str, str], shard: int,
          players: PartitionPlayers | None) -> pa.RecordBatch:
    """A chunk's entries parsed (:func:`to_record_batch`), and its accepted events (not quarantined, not idle
    markers) into the partition's partials (and their players, with ``players``); the rows left, one per entry,
    and the accepted events as player rows."""
    batch = to_record_batch(entries, rules, regions, shard)
    kind = batch.column("kind")
    accepted = pc.and_(pc.and_(batch.column("error").is_null(), batch.column("event_time").is_valid()),
                       pc.invert(pc.fill_null(pc.equal(kind, IDLE_KIND), False)))
    events = batch.filter(accepted) if accepted.false_count else batch
    event_us = pc.cast(events.column("event_time"), pa.int64())
    rest = batch.filter(pc.invert(accepted)) if accepted.false_count else batch.slice(0, 0)
    keep = {"entry_id", "server", "player_id", "kind", "event_time", "shard"}
    n = events.num_rows
    rows = pa.RecordBatch.from_arrays(
        [events.column(f.name) if f.name in keep else player_partial(event_us) if f.name == "partial"
         else pa.nulls(n, f.type) for f in ROW_SCHEMA], schema=ROW_SCHEMA) if n else None
    # Each event placed in its windows once, for the windows' counts and their players alike.
    server = events.column("server")
    with_player = {"player": events.column("player_id")} if players is not None else {}
    placed = in_windows(event_us, partials.window_ms, partials.slide_ms, server=server, **with_player) if n else None
    partials.add(server, pc.cast(events.column("ingest_time"), pa.int64()), event_us, placed)
    if players is not None:
        players.add(server, events.column("player_id"), event_us, placed)
    if rows is None:
        return rest
    packed = pack(rows, PACKED_PLAYERS)
    return pa.concat_batches([rest, packed]) if rest.num_rows else packed


class SourceOptions:
    """The source's options (see the module's docstring), checked: a wrong one is a ValueError naming it."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.url = options.get("url") or ""
        self.stream = options.get("stream") or ""
        if not self.url or not self.stream:
            raise ValueError("redis_stream source needs options 'url' and 'stream'")
        self.partitions = int(options.get("partitions", "2"))
        self.shards = int(options.get("shards", "1"))
        if self.shards < 1:
            raise ValueError(f"option shards must be >= 1, got {self.shards}")
        self.streams = tuple(input_shard_key(self.stream, k) for k in range(self.shards))
        self.max_events = int(options.get("maxEventsPerBatch", "0"))
        if self.partitions < 1:
            raise ValueError(f"option partitions must be >= 1, got {self.partitions}")
        if self.max_events < 0:
            raise ValueError(f"option maxEventsPerBatch must be >= 0, got {self.max_events}")
        committed_by = options.get("committedBy", "")
        # The namespace whose sink commits and trims this stream: its record says how many entries wait.
        self.commit_keys: tuple[str, ...] = ()
        if committed_by:
            keys = KeySchema(committed_by)
            if keys.events != self.stream:
                raise ValueError(f"option committedBy {committed_by!r} trims {keys.events!r}, not {self.stream!r}")
            self.commit_keys = (keys.state, keys.totals, keys.trimmed)
        self.start_id = options.get("startId", "0-0")
        self.end_id = options.get("endId", "+")
        self.rules = Rules.from_options(options)
        pre = options.get("preAggregate", "false").strip().lower()
        if pre not in ("true", "false"):
            raise ValueError(f"option preAggregate must be 'true' or 'false', got {options.get('preAggregate')!r}")
        self.window: tuple[int, int] | None = None
        if pre == "true":
            try:
                window_ms, slide_ms = int(options["windowMs"]), int(options["slideMs"])
            except (KeyError, ValueError):
                raise ValueError("option preAggregate=true needs windowMs and slideMs as whole milliseconds, got "
                                 f"{options.get('windowMs')!r} and {options.get('slideMs')!r}") from None
            PartitionPartials(window_ms, slide_ms)  # says what is wrong with them, here rather than in a worker
            self.window = (window_ms, slide_ms)
        # The pipeline whose windows' players a streaming batch's partitions count (decision 0019), and their TTL.
        owner = options.get("windowPlayers", "")
        self.count_players: Counting | None = None
        if owner:
            if self.window is None:
                raise ValueError("option windowPlayers needs preAggregate=true")
            self.count_players = Counting(KeySchema(owner), int(options.get("playersTtlS", "86400")),
                                          int(options.get("waitReplicas", "0")),
                                          int(options.get("waitTimeoutMs", "1000")))


def read_partition(opts: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    assert isinstance(partition, StreamRange)
    return read_range(opts.url, opts.streams[partition.shard], partition, rules=opts.rules,
                      partials=PartitionPartials(*opts.window) if opts.window else None,
                      count_players=opts.count_players)


class RedisStreamReader(DataSourceStreamReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.opts = SourceOptions(options)
        self._redis: redis.Redis | None = None
        self._appended: dict[int, tuple[str, int]] = {}
        """Per shard, an entry ID this reader ended a batch at and how many entries the shard had had appended up
        to it (``entries-added``): the next batch's backlog there without a walk (Redis 7; see
        :meth:`_latest_sharded`)."""

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_redis"] = None  # clients do not pickle; readers are shipped to Python workers
        return state

    @property
    def redis(self) -> redis.Redis:
        if self._redis is None:
            self._redis = open_client(self.opts.url, socket_keepalive=True)
        return self._redis

    def initialOffset(self) -> dict:
        return {"id": str(Position.start(self.opts.shards))}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.opts.max_events) if self.opts.max_events > 0 else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if self.opts.shards > 1:
            return with_retry(lambda: self._latest_sharded(start, limit), f"latest offsets of {self.opts.stream}")
        return with_retry(lambda: self._latest(start, limit), f"latest offset of {self.opts.stream}")

    def _latest(self, start: dict, limit: ReadLimit) -> dict:
        start_id = start["id"]
        if isinstance(limit, ReadMaxRows):
            keys = self.opts.commit_keys
            last = self.redis.eval(_CAPPED_END_LUA, 1 + len(keys), self.opts.stream, *keys, start_id, limit.max_rows)
            return {"id": last.decode()} if last else start
        newest = self.redis.xrevrange(self.opts.stream, count=1)
        if not newest:
            return start
        newest_id = newest[0][0].decode()
        return {"id": newest_id} if parse_id(newest_id) > parse_id(start_id) else start

    def _latest_sharded(self, start: dict, limit: ReadLimit) -> dict:
        """Every shard up to its newest entry; capped, the cap shared among the shards by backlog
        (:func:`~streaming.schema.shards.share`), each shard's end its share-th entry after its start."""
        pos = Position.parse(start["id"], self.opts.shards)
        heads = self._heads()
        ends = [h if h is not None and parse_id(h) > parse_id(s) else s
                for s, (h, _) in zip(pos.ids, heads, strict=True)]
        if not isinstance(limit, ReadMaxRows):
            return {"id": str(Position(tuple(ends)))}
        cap = limit.max_rows
        backlog = [0] * pos.shards
        for k in (k for k in range(pos.shards) if ends[k] != pos.ids[k]):
            known, added = self._appended.get(k), heads[k][1]
            if known is not None and known[0] == pos.ids[k] and added is not None:
                # appended since this reader's last end there: exact, no walk (decision 0005's idea, per shard)
                backlog[k] = min(added - known[1], cap + 1)
            else:
                # one past the cap: a count of cap + 1 says "more than the cap" (a count that stopped at the cap
                # would read as a backlog that fits, and the shard would be read to its newest entry)
                backlog[k] = int(self.redis.eval(COUNT_AFTER_LUA, 1, self.opts.streams[k], pos.ids[k], cap + 1))
        for k, (n, b) in enumerate(zip(share(backlog, cap), backlog, strict=True)):
            if n < b:
                ends[k] = self.redis.eval(_NTH_ID_LUA, 1, self.opts.streams[k], pos.ids[k], n).decode() \
                    if n else pos.ids[k]
            added = heads[k][1]
            if added is not None and ends[k] == heads[k][0]:  # read to its head: remember how many that was
                self._appended[k] = (ends[k], added)
        return {"id": str(Position(tuple(ends)))}

    def _heads(self) -> list[tuple[str | None, int | None]]:
        """Each shard's last entry ID (None: never written) and how many entries it has ever had appended
        (``entries-added``; None on Redis 6.2, which does not count them), consistent with each other: one
        ``XINFO STREAM`` a shard, one round trip (one command per shard key, so a Redis Cluster client can send
        each to its node)."""
        pipe = self.redis.pipeline(transaction=False)
        for stream in self.opts.streams:
            pipe.xinfo_stream(stream)
        out: list[tuple[str | None, int | None]] = []
        for info in pipe.execute(raise_on_error=False):
            if isinstance(info, redis.ResponseError):  # no such key
                out.append((None, None))
                continue
            if isinstance(info, Exception):
                raise info
            last = info.get("last-generated-id")
            last = last.decode() if isinstance(last, bytes) else last
            added = info.get("entries-added")
            out.append((None if last in (None, START) else last, None if added is None else int(added)))
        return out

    def reportLatestOffset(self) -> dict | None:
        try:
            if self.opts.shards > 1:
                return {"id": str(Position(tuple(h or START for h, _ in self._heads())))}
            newest = self.redis.xrevrange(self.opts.stream, count=1)
        except TRANSIENT:
            return None  # only for progress reports: never fail a batch over it
        return {"id": newest[0][0].decode()} if newest else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """Split from the range's first entry, not from its start offset: the first batch starts at
        ``0-0``, and halving the milliseconds since 1970 gave one partition every entry (a backlog was
        read by one worker while the other idled). With shards, every shard that moved gets its share of
        ``partitions``, at least one."""
        if self.opts.shards > 1:
            return with_retry(lambda: self._sharded_partitions(start, end), f"first entries of {self.opts.stream}")
        if parse_id(end["id"]) <= parse_id(start["id"]):
            return []
        first = with_retry(lambda: self.redis.xrange(self.opts.stream, "(" + start["id"], end["id"], count=1),
                           f"first entry of {self.opts.stream}")
        if not first:
            return []
        return split_range(first[0][0].decode(), end["id"], self.opts.partitions, lo_inclusive=True,
                           batch_end=end["id"])

    def _sharded_partitions(self, start: dict, end: dict) -> list[StreamRange]:
        moved = ranges(start["id"], end["id"], self.opts.shards)
        if not moved:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for r in moved:
            pipe.xrange(self.opts.streams[r.shard], "(" + r.lo, r.hi, count=1)
        each = max(1, self.opts.partitions // len(moved))
        return [p for r, first in zip(moved, pipe.execute(), strict=True) if first
                for p in split_range(first[0][0].decode(), r.hi, each, lo_inclusive=True, shard=r.shard,
                                     batch_end=end["id"])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: trimming by committed offset is the sink's job (it knows what is committed)."""

    def stop(self) -> None:
        """Spark stops a query's source runner by closing its socket: the runner's read ends in EOFError, after
        which it would try to report that error on the closed socket and print a traceback on the job's
        stderr (a stop is not an error). Called on the way out, with nothing left to do: leave quietly."""
        if isinstance(sys.exc_info()[1], EOFError):
            os._exit(0)


class RedisStreamBatchReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.opts = SourceOptions(options)

    def partitions(self) -> Sequence[InputPartition]:
        """Each shard from ``startId`` to ``endId`` (inclusive; ``-`` and ``+`` as in XRANGE; with shards, positions),
        split from its first to its last entry there."""
        opts = self.opts
        lows = ("-",) * opts.shards if opts.start_id == "-" else Position.parse(opts.start_id, opts.shards).ids
        highs = ("+",) * opts.shards if opts.end_id == "+" else Position.parse(opts.end_id, opts.shards).ids
        each = max(1, opts.partitions // opts.shards)
        out: list[InputPartition] = []
        client = open_client(opts.url)
        try:
            for k, stream in enumerate(opts.streams):
                first = client.xrange(stream, lows[k], highs[k], count=1)
                last = client.xrevrange(stream, highs[k], lows[k], count=1)
                if first and last:
                    out += split_range(first[0][0].decode(), last[0][0].decode(), each, lo_inclusive=True, shard=k)
        finally:
            client.close()
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts, partition)


class RedisStreamDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "redis_stream"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RedisStreamReader(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        return RedisStreamBatchReader(self.options)
