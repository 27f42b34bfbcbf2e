"""A PySpark Python Data Source over a Redis Stream (``format("redis_stream")``).

Offsets are stream entry IDs (``{"id": "<ms>-<seq>"}``, exclusive start,
inclusive end), so after a restart Spark re-reads exactly the entries a batch
had. Each entry becomes one row; an entry that does not parse becomes a row
with ``error`` set and ``event_time`` null instead of failing the query, and the
sink quarantines it.

Options: ``url``, ``stream``, ``partitions`` (default 2),
``maxEventsPerBatch`` (0 = no cap), and for batch reads ``startId`` /
``endId`` (inclusive, default the whole stream).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import orjson
import pyarrow as pa
import redis
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from streaming.events import KINDS, NO_RULES, PAYLOAD_FIELD, BadEntry, Rules, parse_entry
from streaming.events import parse_entry_id as parse_id
from streaming.redis_conn import TRANSIENT, with_retry
from streaming.timeutil import parse_iso_us

SCHEMA = (
    "entry_id string, ingest_time timestamp, event_id string, server string, player_id string, "
    "kind string, event_time timestamp, error string, error_detail string, raw string"
)
_TS = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema([
    ("entry_id", pa.string()), ("ingest_time", _TS), ("event_id", pa.string()), ("server", pa.string()),
    ("player_id", pa.string()), ("kind", pa.string()), ("event_time", _TS), ("error", pa.string()),
    ("error_detail", pa.string()), ("raw", pa.string()),
])
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


def format_id(ms: int, seq: int) -> str:
    return f"{ms}-{seq}"


class StreamRange(InputPartition):
    """Entries with ``lo < id <= hi`` (``lo`` inclusive when ``lo_inclusive``)."""

    def __init__(self, lo: str, hi: str, lo_inclusive: bool = False) -> None:
        super().__init__((lo, hi, lo_inclusive))
        self.lo, self.hi, self.lo_inclusive = lo, hi, lo_inclusive

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StreamRange) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


def split_range(lo: str, hi: str, parts: int, lo_inclusive: bool = False) -> list[StreamRange]:
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
        StreamRange(bounds[i], bounds[i + 1], lo_inclusive and i == 0) for i in range(len(bounds) - 1)
    ]


_CLIENTS: dict[str, redis.Redis] = {}


def _client(url: str) -> redis.Redis:
    """One client per Python worker process: workers are reused across batches."""
    client = _CLIENTS.get(url)
    if client is None:
        client = _CLIENTS[url] = redis.Redis.from_url(url, socket_keepalive=True)
    return client


def read_range(url: str, stream: str, part: StreamRange, chunk: int = READ_CHUNK,
               rules: Rules = NO_RULES) -> Iterator[pa.RecordBatch]:
    """XRANGE the partition in chunks, one Arrow record batch per chunk."""
    client = _client(url)
    lo = part.lo if part.lo_inclusive else "(" + part.lo
    while True:
        entries = with_retry(lambda lo=lo: client.xrange(stream, lo, part.hi, count=chunk), f"read of {stream}")
        if not entries:
            return
        yield to_record_batch(entries, rules)
        if len(entries) < chunk:
            return
        lo = "(" + entries[-1][0].decode()


_PAYLOAD = PAYLOAD_FIELD.encode()
_KINDS = frozenset(KINDS)


def to_record_batch(entries: Sequence[tuple[bytes, dict[bytes, bytes]]], rules: Rules = NO_RULES) -> pa.RecordBatch:
    n = len(entries)
    entry_ids: list[str] = [""] * n
    ingest: list[int] = [0] * n
    event_id: list[str | None] = [None] * n
    server: list[str | None] = [None] * n
    player: list[str | None] = [None] * n
    kind: list[str | None] = [None] * n
    event_time: list[int | None] = [None] * n
    error: list[str | None] = [None] * n
    detail: list[str | None] = [None] * n
    raw: list[str | None] = [None] * n
    loads, kinds, servers = orjson.loads, _KINDS, rules.servers
    skew_us = None if rules.max_future_skew_ms is None else rules.max_future_skew_ms * 1000
    for i, (rid, fields) in enumerate(entries):
        eid = rid.decode()
        entry_ids[i] = eid
        ingest_ms = int(eid.split("-", 1)[0])
        ingest[i] = ingest_ms * 1000
        # Fast path for a well-formed event: the same checks as parse_payload, inline. Anything unusual
        # (or any doubt) goes through parse_entry, which says why; tests hold the two to the same answers.
        try:
            doc = loads(fields[_PAYLOAD])
            srv, ply, ts, knd, evid = (doc["server"], doc["player_id"], doc["event_time"], doc.get("kind"),
                                       doc.get("event_id"))
            if (type(srv) is str and srv and type(ply) is str and ply and type(ts) is str
                    and (knd is None or knd in kinds) and (evid is None or type(evid) is str)
                    and (servers is None or srv in servers)):
                et = parse_iso_us(ts)
                if skew_us is None or et - ingest_ms * 1000 <= skew_us:
                    server[i], player[i], event_time[i], kind[i] = srv, ply, et, knd
                    event_id[i] = eid if evid is None else evid
                    continue
        except Exception:  # noqa: BLE001, S110 - the full parser below reports it
            pass
        parsed = parse_entry(fields, eid, rules)
        if isinstance(parsed, BadEntry):
            error[i], detail[i], raw[i] = parsed.reason, parsed.detail, parsed.raw
        else:
            event_id[i], server[i], player[i] = parsed.event_id, parsed.server, parsed.player_id
            kind[i], event_time[i] = parsed.kind, parsed.event_time_us
    return pa.RecordBatch.from_arrays(
        [
            pa.array(entry_ids, pa.string()), pa.array(ingest, _TS), pa.array(event_id, pa.string()),
            pa.array(server, pa.string()), pa.array(player, pa.string()), pa.array(kind, pa.string()),
            pa.array(event_time, _TS), pa.array(error, pa.string()), pa.array(detail, pa.string()),
            pa.array(raw, pa.string()),
        ],
        schema=ARROW_SCHEMA,
    )


class _Options:
    def __init__(self, options: Mapping[str, str]) -> None:
        self.url = options.get("url") or ""
        self.stream = options.get("stream") or ""
        if not self.url or not self.stream:
            raise ValueError("redis_stream source needs options 'url' and 'stream'")
        self.partitions = int(options.get("partitions", "2"))
        self.max_events = int(options.get("maxEventsPerBatch", "0"))
        if self.partitions < 1:
            raise ValueError(f"option partitions must be >= 1, got {self.partitions}")
        if self.max_events < 0:
            raise ValueError(f"option maxEventsPerBatch must be >= 0, got {self.max_events}")
        self.start_id = options.get("startId", "0-0")
        self.end_id = options.get("endId", "+")
        self.rules = Rules.from_options(options)


class RedisStreamReader(DataSourceStreamReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.opts = _Options(options)
        self._redis: redis.Redis | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_redis"] = None  # clients do not pickle; readers are shipped to Python workers
        return state

    @property
    def redis(self) -> redis.Redis:
        if self._redis is None:
            self._redis = redis.Redis.from_url(self.opts.url, socket_keepalive=True)
        return self._redis

    def initialOffset(self) -> dict:
        return {"id": "0-0"}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.opts.max_events) if self.opts.max_events > 0 else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        return with_retry(lambda: self._latest(start, limit), f"latest offset of {self.opts.stream}")

    def _latest(self, start: dict, limit: ReadLimit) -> dict:
        start_id = start["id"]
        if isinstance(limit, ReadMaxRows):
            last = self.redis.eval(_NTH_ID_LUA, 1, self.opts.stream, start_id, limit.max_rows)
            return {"id": last.decode()} if last else start
        newest = self.redis.xrevrange(self.opts.stream, count=1)
        if not newest:
            return start
        newest_id = newest[0][0].decode()
        return {"id": newest_id} if parse_id(newest_id) > parse_id(start_id) else start

    def reportLatestOffset(self) -> dict | None:
        try:
            newest = self.redis.xrevrange(self.opts.stream, count=1)
        except TRANSIENT:
            return None  # only for progress reports: never fail a batch over it
        return {"id": newest[0][0].decode()} if newest else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if parse_id(end["id"]) <= parse_id(start["id"]):
            return []
        return split_range(start["id"], end["id"], self.opts.partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, StreamRange)
        yield from read_range(self.opts.url, self.opts.stream, partition, rules=self.opts.rules)

    def commit(self, end: dict) -> None:
        """Nothing to do: trimming by committed offset is the sink's job (it knows what is committed)."""


class RedisStreamBatchReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.opts = _Options(options)

    def partitions(self) -> Sequence[InputPartition]:
        client = redis.Redis.from_url(self.opts.url)
        try:
            first = client.xrange(self.opts.stream, self.opts.start_id, self.opts.end_id, count=1)
            last = client.xrevrange(self.opts.stream, self.opts.end_id, self.opts.start_id, count=1)
        finally:
            client.close()
        if not first or not last:
            return []
        return split_range(first[0][0].decode(), last[0][0].decode(), self.opts.partitions, lo_inclusive=True)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, StreamRange)
        yield from read_range(self.opts.url, self.opts.stream, partition, rules=self.opts.rules)


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
