"""A PySpark Python Data Source over a Redis Stream (``format("redis_stream")``).

Offsets are stream entry IDs (``{"id": "<ms>-<seq>"}``, exclusive start,
inclusive end), so after a restart Spark re-reads exactly the entries a batch
had. With ``shards`` > 1 the input is that many streams and an offset holds one
ID per shard (a :class:`~watermark.schema.shards.Position`, the IDs joined by
commas): a batch reads each shard's range, one partition or more per shard.

Each entry becomes one row; an entry that does not parse becomes a row with
``error`` set and ``event_time`` null instead of failing the query, and the sink
quarantines it.

With ``preAggregate=true`` (and ``windowMs``/``slideMs``) a partition does not
return its accepted events one row each: it folds them into its partial
aggregate (:mod:`watermark.spark.partial`) and ends with those rows (``partial``,
``server`` and ``event_time`` set, every other column null); quarantined entries and idle markers still come one row
each. The pipeline's sink only sums these across partitions; any other reader
leaves the option off and gets one row per entry.

Options: ``url``, ``stream`` (shard 0's key), ``shards`` (default 1), ``partitions`` (default 2; with shards,
at least one per shard that has entries),
``maxEventsPerBatch`` (0 = no cap), ``preAggregate`` (``true``/``false``,
default false) with ``windowMs`` and ``slideMs`` (every accepted event then also comes as a presence row: the
online players' input), ``windowPlayers`` (with ``preAggregate``: the namespace whose windows' players a streaming
batch's partitions count, :mod:`watermark.spark.window_players`) and ``playersTtlS``, and for batch reads
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

from watermark.schema.events import (
    IDLE_KIND,
    KINDS,
    NAME_LIMITS,
    NO_RULES,
    PAYLOAD_FIELD,
    BadEntry,
    Rules,
    parse_entry,
)
from watermark.schema.events import parse_entry_id as parse_id
from watermark.schema.keys import KeySchema
from watermark.schema.shards import START, Position, input_shard_key, share
from watermark.schema.timeutil import parse_iso_us
from watermark.spark.partial import (
    PACKED,
    PACKED_PRESENCE,
    PARTIAL_DDL,
    PARTIAL_TYPE,
    WINDOW,
    PartitionPartials,
    presence_partial,
)
from watermark.spark.window_players import PartitionPlayers
from watermark.spark.window_players import write as write_players
from watermark.store.redis_conn import TRANSIENT, home, open_client, refresh, with_retry

SCHEMA = (
    "entry_id string, ingest_time timestamp, event_id string, server string, player_id string, "
    "kind string, event_time timestamp, error string, error_detail string, raw string, shard int, " + PARTIAL_DDL
    + ", blob binary"
)
_TS = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema([
    ("entry_id", pa.string()), ("ingest_time", _TS), ("event_id", pa.string()), ("server", pa.string()),
    ("player_id", pa.string()), ("kind", pa.string()), ("event_time", _TS), ("error", pa.string()),
    ("error_detail", pa.string()), ("raw", pa.string()), ("shard", pa.int32()), ("partial", PARTIAL_TYPE),
    ("blob", pa.binary()),
])
ROW_SCHEMA = pa.schema([f for f in ARROW_SCHEMA if f.name != "blob"])
"""The rows a packed row carries (:func:`pack`, :func:`unpack`)."""
MAX_SEQ = 18446744073709551615
READ_CHUNK = 10_000
RawEntry = Sequence[Any]  # [id, [field, value, field, value, ...]] as XRANGE replies, undecoded

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
_COUNT_AFTER_LUA = """
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


_PAYLOAD = PAYLOAD_FIELD.encode()
_BASES: dict[str, redis.Redis] = {}
"""One client per URL and Python worker process (workers are reused across batches): a cluster's knows its map."""
_CLIENTS: dict[tuple[str, str], redis.Redis] = {}


def _forget(url: str, stream: str) -> None:
    """The next :func:`_client` for ``stream`` is looked up again, on a map read again (a cluster's slot moved, or
    its node failed over; on one Redis the same client, which reconnects)."""
    _CLIENTS.pop((url, stream), None)
    if url in _BASES:
        refresh(_BASES[url])


def _client(url: str, stream: str) -> redis.Redis:
    """The client that reads ``stream``: the URL's own on one Redis, the plain client of the stream's node in a
    Redis Cluster (:func:`redis_conn.home`).

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


def _xrange(client: redis.Redis, stream: str, lo: str, hi: str, count: int) -> list[RawEntry]:
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
               count_players: tuple[KeySchema, int] | None = None) -> Iterator[pa.RecordBatch]:
    """XRANGE the partition in chunks, one Arrow record batch per chunk; with ``partials``, the accepted
    events are folded into them instead, each chunk's accepted events come as presence rows (the online players'
    input) and a last batch holds the partition's partial rows. A server's region
    (the latest its events in the partition carry) rides in its packed row's ``player_id``. With
    ``count_players`` (the pipeline's keys and the sets' TTL) and a range of a streaming batch, its windows' players
    are added to the pipeline's sets and counted under the batch's end (:mod:`watermark.spark.window_players`)
    before the partial rows are handed over."""
    lo = part.lo if part.lo_inclusive else "(" + part.lo
    regions: dict[str, str] = {}
    players = (PartitionPlayers(partials.window_ms, partials.slide_ms)
               if partials is not None and count_players is not None and part.batch_end else None)
    while True:
        # the client looked up each try: after a cluster's slot moved, the next one is made on the new node
        entries = with_retry(lambda lo=lo: _xrange(_client(url, stream), stream, lo, part.hi, chunk),
                             f"read of {stream}", refresh=lambda: _forget(url, stream))
        if entries:
            batch = to_record_batch(entries, rules, regions, part.shard)
            if partials is not None:
                batch = _fold(partials, batch, players)
            if batch.num_rows:
                yield batch
        if len(entries) < chunk:
            break
        lo = "(" + entries[-1][0].decode()
    if players is not None and count_players is not None:
        keys, ttl_s = count_players
        with_retry(lambda: write_players(_client(url, keys.state), keys, part.batch_end, players, ttl_s),
                   f"players of {stream}", refresh=lambda: _forget(url, keys.state))
    if partials is not None:
        server, partial = partials.rows()
        if len(server):
            yield pack(partial_batch(server, partial), PACKED, regions)


def _fold(partials: PartitionPartials, batch: pa.RecordBatch, players: PartitionPlayers | None) -> pa.RecordBatch:
    """The chunk's accepted events (not quarantined, not idle markers) into the partition's partials (and their
    players, with ``players``); the rows left, one per entry, and the accepted events as presence rows."""
    kind = batch.column("kind")
    accepted = pc.and_(pc.and_(batch.column("error").is_null(), batch.column("event_time").is_valid()),
                       pc.invert(pc.fill_null(pc.equal(kind, IDLE_KIND), False)))
    events = batch.filter(accepted) if accepted.false_count else batch
    event_us = pc.cast(events.column("event_time"), pa.int64())
    partials.add(events.column("server"), pc.cast(events.column("ingest_time"), pa.int64()), event_us)
    if players is not None:
        players.add(events.column("server"), events.column("player_id"), event_us)
    rest = batch.filter(pc.invert(accepted)) if accepted.false_count else batch.slice(0, 0)
    if not events.num_rows:
        return rest
    keep = {"entry_id", "server", "player_id", "kind", "event_time", "shard"}
    n = events.num_rows
    rows = pa.RecordBatch.from_arrays(
        [events.column(f.name) if f.name in keep else presence_partial(event_us) if f.name == "partial"
         else pa.nulls(n, f.type) for f in ROW_SCHEMA], schema=ROW_SCHEMA)
    packed = pack(rows, PACKED_PRESENCE)
    return pa.concat_batches([rest, packed]) if rest.num_rows else packed


def pack(rows: pa.RecordBatch, of: str, regions: Mapping[str, str] | None = None) -> pa.RecordBatch:
    """``rows`` (in :data:`ROW_SCHEMA`) as rows carrying them as one Arrow IPC stream in ``blob``.

    Spark turns every row it is handed into a JVM row and back into Arrow for the driver, a few
    microseconds a row: with hundreds of thousands of players a batch's partial rows are about as many as
    its events, and that conversion cost more than the rest of the batch. Packed, Spark moves a byte string;
    the sink unpacks it (:func:`unpack`). ``PACKED`` rows come as one row per server, so ``withWatermark`` (one per
    server in per-server mode) sees each server's latest event time in the batch as before and the server's
    region rides along (``player_id``); the first of them carries the blob of every server's rows, the others
    none (a blob per server cost hundreds of small IPC streams per partition to write and to read with hundreds
    of servers: ``bench/driver_costs.py``). Presence rows never move a watermark: one row carries them."""
    blob = _ipc(rows)
    if of != PACKED:
        return _packed_rows([None], [None], [rows.num_rows], [blob], of, {})
    encoded = pc.dictionary_encode(rows.column("server"))
    servers = encoded.dictionary.to_pylist()  # in order of first appearance
    codes = encoded.indices
    latest = (pa.table({"code": codes, "t": rows.column("event_time")}).group_by("code", use_threads=False)
              .aggregate([("t", "max"), ([], "count_all")]).sort_by("code"))
    return _packed_rows(servers, latest.column("t_max").to_pylist(), latest.column("count_all").to_pylist(),
                        [blob] + [None] * (len(servers) - 1), of, regions or {})


def _ipc(rows: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, ROW_SCHEMA) as writer:
        writer.write_batch(rows)
    return sink.getvalue().to_pybytes()


def _packed_rows(servers: list[str | None], latest: list, counts: list[int], blobs: list[bytes | None], of: str,
                 regions: Mapping[str, str]) -> pa.RecordBatch:
    n = len(servers)
    columns = {"server": pa.array(servers, pa.string()), "event_time": pa.array(latest, _TS),
               "player_id": pa.array([regions.get(s) if s is not None else None for s in servers], pa.string()),
               "partial": pa.array([{"of": of, "key_us": None, "n": k, "min_event_us": None, "max_event_us": None}
                                    for k in counts], PARTIAL_TYPE),
               "blob": pa.array(blobs, pa.binary())}
    return pa.RecordBatch.from_arrays([columns.get(f.name, pa.nulls(n, f.type)) for f in ARROW_SCHEMA],
                                      schema=ARROW_SCHEMA)


def packed_regions(table: pa.Table) -> dict[str, str]:
    """Each server's region from the packed window rows that carry one (``player_id``; :func:`read_range`)."""
    partial = table.column("partial").combine_chunks()
    carried = pc.and_(pc.fill_null(pc.equal(partial.field("of"), PACKED), False), table.column("player_id").is_valid())
    if not pc.any(carried).as_py():
        return {}
    rows = table.filter(carried)
    return dict(zip(rows.column("server").to_pylist(), rows.column("player_id").to_pylist(), strict=True))


def unpack(table: pa.Table) -> pa.Table:
    """The rows of a batch with the packed rows (:func:`pack`) replaced by the rows their blobs carry (blob column
    dropped)."""
    blob = table.column("blob")
    if not blob.null_count < len(blob):
        return table.drop_columns(["blob"])
    of = pc.struct_field(table.column("partial"), "of")
    packed = pc.fill_null(pc.is_in(of, pa.array([PACKED, PACKED_PRESENCE])), False)
    plain = table.filter(pc.invert(packed)).drop_columns(["blob"])
    schema = plain.schema
    parts = [plain]
    for chunk in blob.chunks:
        for value in chunk:
            if value.is_valid:
                parts.append(pa.ipc.open_stream(value.as_buffer()).read_all().select(schema.names).cast(schema))
    return pa.concat_tables(parts)


def partial_batch(server: pa.Array, partial: pa.StructArray) -> pa.RecordBatch:
    """Partial rows in the source's schema: ``server`` and ``partial`` set, and a window
    row's ``event_time`` (its latest event, for ``withWatermark``); every other column null."""
    n = len(server)
    window = pc.equal(partial.field("of"), WINDOW)
    event_time = pc.cast(pc.if_else(window, partial.field("max_event_us"), pa.scalar(None, pa.int64())), _TS)
    columns = {"server": server, "partial": partial, "event_time": event_time}
    return pa.RecordBatch.from_arrays([columns.get(f.name, pa.nulls(n, f.type)) for f in ROW_SCHEMA],
                                      schema=ROW_SCHEMA)


# The shape of a well-formed event as writers produce it: keys in the documented order, event_id and kind
# optional, printable-ASCII strings without quote or backslash (so no escapes), a UTC timestamp with at
# most microseconds. Entries of this shape are parsed by Arrow's compute kernels (RE2 and its ISO-8601
# parser) a whole chunk at a time; anything else, and any doubt, goes through parse_entry, which says why.
_WS = r"[ \t\n\r]*"
_STR = r"[\x20\x21\x23-\x5b\x5d-\x7e]"


def _upto(name: str) -> str:
    """One to the name's limit of characters: a longer name takes the full parser, which says why (``bad_name``)."""
    return "{1," + str(NAME_LIMITS[name]) + "}"


def _key(name: str, value: str) -> str:
    return f'"{name}"{_WS}:{_WS}"(?P<{name}>{value})"'


_TIMESTAMP = (r"[1-9]\d{3}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])T(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d"
              r"(?:\.\d{1,6})?Z")
FAST_SHAPE = (
    f"^{_WS}\\{{{_WS}"
    f"(?:{_key('event_id', _STR + _upto('event_id'))}{_WS},{_WS})?"
    f"{_key('server', _STR + _upto('server'))}{_WS},{_WS}"
    f"{_key('player_id', _STR + _upto('player_id'))}{_WS},{_WS}"
    f"(?:{_key('kind', '|'.join(KINDS))}{_WS},{_WS})?"  # idle markers: the full parser checks their signature
    f"{_key('event_time', _TIMESTAMP)}"
    # the region last, where the producer library and the generator put it
    f"(?:{_WS},{_WS}{_key('region', _STR + '{0,' + str(NAME_LIMITS['region']) + '}')})?"
    f"{_WS}\\}}{_WS}$"
)


def to_record_batch(entries: Sequence[RawEntry] | Sequence[tuple[bytes, Mapping[bytes, bytes]]],
                    rules: Rules = NO_RULES, regions: dict[str, str] | None = None, shard: int = 0) -> pa.RecordBatch:
    """Rows for a chunk of entries of shard ``shard``, raw (``[id, [k, v, ...]]``) or as redis-py's
    ``(id, {k: v})``; each server's region its well-formed events carry goes into ``regions`` (the chunk's last one
    wins). Every row carries its shard: its entry ID is unique only there, and a quarantined entry has no server
    to find the shard by."""
    n = len(entries)
    ids = [e[0] for e in entries]
    if entries and not isinstance(entries[0][1], list):  # redis-py's (id, {k: v}): flatten to the raw shape
        entries = [(i, [x for kv in f.items() for x in kv]) for i, f in entries]
    payloads = [f[1] if len(f) == 2 and f[0] == _PAYLOAD else b"" for _, f in entries]
    entry_id = pa.array(ids, pa.string())
    ingest_us = pc.multiply(pc.cast(pc.list_element(pc.split_pattern(entry_id, "-", max_splits=1), 0), pa.int64()),
                            1000)
    try:
        text = pa.array(payloads, pa.string())
    except pa.ArrowInvalid:  # some payload is not UTF-8: the full parser will say so
        text = pa.array([p if _is_utf8(p) else b"" for p in payloads], pa.string())
    shape = pc.extract_regex(text, FAST_SHAPE)
    fast = pc.fill_null(shape.is_valid(), False)
    try:
        event_time = pc.cast(shape.field("event_time"), _TS)
    except pa.ArrowInvalid:  # a date like Feb 30 has the shape but is no date: Python decides for the chunk
        event_time = pa.array([_iso_us_or_none(t) if ok else None
                               for t, ok in zip(shape.field("event_time").to_pylist(), fast.to_pylist(),
                                                strict=True)], _TS)
        fast = pc.and_(fast, event_time.is_valid())
    if rules.max_future_skew_ms is not None:
        ahead = pc.subtract(pc.cast(event_time, pa.int64()), ingest_us)
        fast = pc.and_(fast, pc.fill_null(pc.less_equal(ahead, rules.max_future_skew_ms * 1000), False))
    server = shape.field("server")
    reserved = pc.or_(pc.equal(server, "*"), pc.starts_with(server, "region|"))  # bad_name: the full parser says why
    fast = pc.and_(fast, pc.invert(pc.fill_null(reserved, False)))
    if rules.servers is not None:
        fast = pc.and_(fast, pc.is_in(server, value_set=pa.array(sorted(rules.servers), pa.string())))
    # Absent optional groups come back as "", which the shape never allows for a present value.
    event_id = pc.if_else(pc.equal(shape.field("event_id"), ""), entry_id, shape.field("event_id"))
    kind = pc.if_else(pc.equal(shape.field("kind"), ""), pa.scalar(None, pa.string()), shape.field("kind"))
    columns = {"entry_id": entry_id, "ingest_time": pc.cast(ingest_us, _TS), "event_id": event_id,
               "server": server, "player_id": shape.field("player_id"), "kind": kind, "event_time": event_time,
               "error": pa.nulls(n, pa.string()), "error_detail": pa.nulls(n, pa.string()),
               "raw": pa.nulls(n, pa.string()), "shard": pa.repeat(pa.scalar(shard, pa.int32()), n),
               "partial": pa.nulls(n, PARTIAL_TYPE), "blob": pa.nulls(n, pa.binary())}
    if regions is not None:
        _regions_of(regions, server, shape.field("region"), fast)
    if fast.false_count:
        columns = _parse_slow(columns, pc.invert(fast), [i for i, ok in enumerate(fast.to_pylist()) if not ok],
                              ids, [f for _, f in entries], rules, regions)
    return pa.RecordBatch.from_arrays([columns[name] for name in ARROW_SCHEMA.names], schema=ARROW_SCHEMA)


def _regions_of(regions: dict[str, str], server: pa.Array, region: pa.Array, fast: pa.Array) -> None:
    """Each server's region among the fast path's rows that carry one (an absent region comes back as "")."""
    carried = pc.and_(fast, pc.fill_null(pc.not_equal(region, ""), False))
    if not carried.true_count:
        return
    pairs = pc.binary_join_element_wise(server.filter(carried), region.filter(carried), "\x1f")
    latest_first = pc.unique(pairs[::-1]).to_pylist()  # each pair once, by its last row, the latest first
    for pair in reversed(latest_first):  # the latest assigned last: a later event's region wins
        name, _, rg = pair.partition("\x1f")
        regions[name] = rg


def _parse_slow(columns: dict[str, pa.Array], slow: pa.Array, rows: list[int], ids: list[bytes],
                fields: list[list[bytes]], rules: Rules, regions: dict[str, str] | None = None,
                ) -> dict[str, pa.Array]:
    """Overwrite the rows the fast path did not take with parse_entry's verdict."""
    out: dict[str, list] = {name: [] for name in ("event_id", "server", "player_id", "kind", "event_time", "error",
                                                   "error_detail", "raw")}
    for i in rows:
        f = fields[i]
        parsed = parse_entry(dict(zip(f[::2], f[1::2], strict=False)), ids[i].decode(), rules)
        if isinstance(parsed, BadEntry):
            values = (None, None, None, None, None, parsed.reason, parsed.detail, parsed.raw)
        else:
            values = (parsed.event_id, parsed.server, parsed.player_id, parsed.kind, parsed.event_time_us, None,
                      None, None)
            if regions is not None and parsed.region:
                regions[parsed.server] = parsed.region
        for name, v in zip(out, values, strict=True):
            out[name].append(v)
    merged = dict(columns)
    for name, values in out.items():
        typ = _TS if name == "event_time" else pa.string()
        merged[name] = pc.replace_with_mask(columns[name], slow, pa.array(values, typ))
    return merged


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode()
    except UnicodeDecodeError:
        return False
    return True


def _iso_us_or_none(ts: str) -> int | None:
    try:
        return parse_iso_us(ts)
    except (ValueError, OverflowError):
        return None


class _Options:
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
        self.count_players: tuple[KeySchema, int] | None = None
        if owner:
            if self.window is None:
                raise ValueError("option windowPlayers needs preAggregate=true")
            self.count_players = (KeySchema(owner), int(options.get("playersTtlS", "86400")))


def _read(opts: _Options, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    assert isinstance(partition, StreamRange)
    return read_range(opts.url, opts.streams[partition.shard], partition, rules=opts.rules,
                      partials=PartitionPartials(*opts.window) if opts.window else None,
                      count_players=opts.count_players)


class RedisStreamReader(DataSourceStreamReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.opts = _Options(options)
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
        (:func:`~watermark.schema.shards.share`), each shard's end its share-th entry after its start."""
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
                backlog[k] = int(self.redis.eval(_COUNT_AFTER_LUA, 1, self.opts.streams[k], pos.ids[k], cap + 1))
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
        return _read(self.opts, partition)

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
        self.opts = _Options(options)

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
        return _read(self.opts, partition)


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
