"""The streaming reader Spark calls on the driver each micro-batch: where a batch ends (its latest offset, capped by
``maxEventsPerBatch`` with the Lua scripts below, the cap shared among shards by backlog), the batch's partitions,
and their read (on a worker, :mod:`streaming.spark.source.read`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import redis
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from streaming.schema.shards import START, Position, share
from streaming.spark.source.options import SourceOptions
from streaming.spark.source.ranges import StreamRange, ranges, split_range
from streaming.spark.source.read import read_partition
from streaming.store.redis_conn import TRANSIENT, with_retry
from watermark_client.connection import open_client
from watermark_client.events import parse_entry_id as parse_id

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
