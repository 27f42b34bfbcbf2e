"""A batch's rows in Arrow: Spark's schema of the source's rows, and stream entries parsed into rows.

The source (:mod:`streaming.spark.source`) makes the rows, and packs its partial and player rows into one blob a
partition; the packing, its unpacking and the rows' Arrow schema are one module with the pipeline's other Arrow
packings, at the store's floor (:mod:`streaming.store.batch.arrow_pack`), so that they cannot drift apart.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from streaming.spark.partial import PARTIAL_DDL
from streaming.store.batch.arrow_pack import ARROW_SCHEMA, PARTIAL_TYPE, TS
from watermark_client.events import KINDS, NAME_LIMITS, NO_RULES, PAYLOAD_FIELD, BadEntry, Rules, parse_entry
from watermark_client.timeutil import parse_iso_us

RawEntry = Sequence[Any]  # [id, [field, value, field, value, ...]] as XRANGE replies, undecoded
PAYLOAD = PAYLOAD_FIELD.encode()
SCHEMA = (
    "entry_id string, ingest_time timestamp, event_id string, server string, player_id string, "
    "kind string, event_time timestamp, error string, error_detail string, raw string, shard int, " + PARTIAL_DDL
    + ", blob binary"
)
"""The source's rows as Spark declares them (their Arrow schema: ``arrow_pack.ARROW_SCHEMA``)."""


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
