"""A batch's rows in Arrow: the source's schema, stream entries parsed into rows, and rows packed and unpacked.

The source (:mod:`streaming.spark.source`) makes the rows, and packs its partial and player rows into one blob a
partition (:func:`pack`: Spark moves bytes, not a JVM row each); the sink reads them back with :func:`unpack`. One
module, so that the schema, the packing and the unpacking cannot drift apart. (The online view's hand-off packs
something else, the view's events, at the store's floor: :mod:`streaming.store.online.handoff`.)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from streaming.spark.partial import (
    PACKED,
    PACKED_PLAYERS,
    PARTIAL_DDL,
    PARTIAL_TYPE,
    WINDOW,
)
from watermark_client.events import KINDS, NAME_LIMITS, NO_RULES, PAYLOAD_FIELD, BadEntry, Rules, parse_entry
from watermark_client.timeutil import parse_iso_us

RawEntry = Sequence[Any]  # [id, [field, value, field, value, ...]] as XRANGE replies, undecoded
PAYLOAD = PAYLOAD_FIELD.encode()
SCHEMA = (
    "entry_id string, ingest_time timestamp, event_id string, server string, player_id string, "
    "kind string, event_time timestamp, error string, error_detail string, raw string, shard int, " + PARTIAL_DDL
    + ", blob binary"
)
TS = pa.timestamp("us", tz="UTC")
"""The type of the rows' times: microseconds, UTC."""
ARROW_SCHEMA = pa.schema([
    ("entry_id", pa.string()), ("ingest_time", TS), ("event_id", pa.string()), ("server", pa.string()),
    ("player_id", pa.string()), ("kind", pa.string()), ("event_time", TS), ("error", pa.string()),
    ("error_detail", pa.string()), ("raw", pa.string()), ("shard", pa.int32()), ("partial", PARTIAL_TYPE),
    ("blob", pa.binary()),
])
ROW_SCHEMA = pa.schema([f for f in ARROW_SCHEMA if f.name != "blob"])
"""The rows a packed row carries (:func:`pack`, :func:`unpack`)."""


def pack(rows: pa.RecordBatch, of: str, regions: Mapping[str, str] | None = None) -> pa.RecordBatch:
    """``rows`` (in :data:`ROW_SCHEMA`) as rows carrying them as one Arrow IPC stream in ``blob``.

    Spark turns every row it is handed into a JVM row and back into Arrow for the driver, a few
    microseconds a row: with hundreds of thousands of players a batch's partial rows are about as many as
    its events, and that conversion cost more than the rest of the batch. Packed, Spark moves a byte string;
    the sink unpacks it (:func:`unpack`). ``PACKED`` rows come as one row per server, so ``withWatermark`` (one per
    server in per-server mode) sees each server's latest event time in the batch as before and the server's
    region rides along (``player_id``); the first of them carries the blob of every server's rows, the others
    none (a blob per server cost hundreds of small IPC streams per partition to write and to read with hundreds
    of servers: ``bench/driver_costs.py``). Player rows never move a watermark: one row carries them."""
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
    columns = {"server": pa.array(servers, pa.string()), "event_time": pa.array(latest, TS),
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
    packed = pc.fill_null(pc.is_in(of, pa.array([PACKED, PACKED_PLAYERS])), False)
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
    event_time = pc.cast(pc.if_else(window, partial.field("max_event_us"), pa.scalar(None, pa.int64())), TS)
    columns = {"server": server, "partial": partial, "event_time": event_time}
    return pa.RecordBatch.from_arrays([columns.get(f.name, pa.nulls(n, f.type)) for f in ROW_SCHEMA],
                                      schema=ROW_SCHEMA)


# The shape of a well-formed event as writers produce it: keys in the documented order, event_id and kind
# optional, printable-ASCII strings without quote or backslash (so no escapes), a UTC timestamp with at
# most microseconds. Entries of this shape are parsed by Arrow's compute kernels (RE2 and its ISO-8601
# parser) a whole chunk at a time; anything else, and any doubt, goes through parse_entry, which says why.
_WS = r"[ \t\n\r]*"
_STR = r"[\x20\x21\x23-\x5b\x5d-\x7e]"
_EDGE = r"[\x21\x23-\x5b\x5d-\x7e]"  # a name's first and last character: no space (``bad_name``)
_NAME = f"{_EDGE}(?:{_STR}*{_EDGE})?"
"""A name with no space first or last: any other takes the full parser, which says why (``bad_name``). Its length
is checked apart (:func:`_within_limits`): a counted repetition (``{1,64}``) made RE2's pass over a chunk twice as
slow."""


def _key(name: str, value: str) -> str:
    return f'"{name}"{_WS}:{_WS}"(?P<{name}>{value})"'


_TIMESTAMP = (r"[1-9]\d{3}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])T(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d"
              r"(?:\.\d{1,6})?Z")
FAST_SHAPE = (
    f"^{_WS}\\{{{_WS}"
    f"(?:{_key('event_id', _NAME)}{_WS},{_WS})?"
    f"{_key('server', _NAME)}{_WS},{_WS}"
    f"{_key('player_id', _NAME)}{_WS},{_WS}"
    f"(?:{_key('kind', '|'.join(KINDS))}{_WS},{_WS})?"  # idle markers: the full parser checks their signature
    f"{_key('event_time', _TIMESTAMP)}"
    # the region last, where the producer library and the generator put it
    f"(?:{_WS},{_WS}{_key('region', '(?:' + _NAME + ')?')})?"
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
    payloads = [f[1] if len(f) == 2 and f[0] == PAYLOAD else b"" for _, f in entries]
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
        event_time = pc.cast(shape.field("event_time"), TS)
    except pa.ArrowInvalid:  # a date like Feb 30 has the shape but is no date: Python decides for the chunk
        event_time = pa.array([_iso_us_or_none(t) if ok else None
                               for t, ok in zip(shape.field("event_time").to_pylist(), fast.to_pylist(),
                                                strict=True)], TS)
        fast = pc.and_(fast, event_time.is_valid())
    if rules.max_future_skew_ms is not None:
        ahead = pc.subtract(pc.cast(event_time, pa.int64()), ingest_us)
        fast = pc.and_(fast, pc.fill_null(pc.less_equal(ahead, rules.max_future_skew_ms * 1000), False))
    fast = pc.and_(fast, _within_limits(shape))
    server = shape.field("server")
    reserved = pc.or_(pc.equal(server, "*"), pc.starts_with(server, "region|"))  # bad_name: the full parser says why
    fast = pc.and_(fast, pc.invert(pc.fill_null(reserved, False)))
    if rules.servers is not None:
        fast = pc.and_(fast, pc.is_in(server, value_set=pa.array(sorted(rules.servers), pa.string())))
    # Absent optional groups come back as "", which the shape never allows for a present value.
    event_id = pc.if_else(pc.equal(shape.field("event_id"), ""), entry_id, shape.field("event_id"))
    kind = pc.if_else(pc.equal(shape.field("kind"), ""), pa.scalar(None, pa.string()), shape.field("kind"))
    columns = {"entry_id": entry_id, "ingest_time": pc.cast(ingest_us, TS), "event_id": event_id,
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


def _within_limits(shape: pa.StructArray) -> pa.Array:
    """Whether each row's names are within :data:`NAME_LIMITS` (the fast path's names are ASCII: a byte a
    character); a longer one takes the full parser, which says why (``bad_name``)."""
    return functools.reduce(pc.and_, (pc.fill_null(pc.less_equal(pc.binary_length(shape.field(name)), limit), True)
                                      for name, limit in NAME_LIMITS.items()))


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
        typ = TS if name == "event_time" else pa.string()
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
