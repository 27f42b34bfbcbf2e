"""The partition read, on a Python worker each time Spark reads one of the source's partitions: a range's entries
XRANGEd in chunks, over a client kept per worker process, and turned into Arrow rows (with ``preAggregate``, folded
into the partition's partial aggregate; see the package's docstring)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import redis
from pyspark.sql.datasource import InputPartition

from streaming.spark.partial import PartitionPartials, in_windows, player_partial
from streaming.spark.rows import RawEntry, to_record_batch
from streaming.spark.source.options import SourceOptions
from streaming.spark.source.ranges import StreamRange
from streaming.spark.window_players import Counting, PartitionPlayers
from streaming.store.batch.arrow_pack import PACKED, PACKED_PLAYERS, ROW_SCHEMA, pack_rows, partial_batch
from streaming.store.batch.window_players import write_partition_players
from streaming.store.redis_conn import refresh, with_retry
from watermark_client.connection import home, open_client
from watermark_client.events import IDLE_KIND, NO_RULES, Rules

READ_CHUNK = 10_000


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
        packed = pack_rows(partial_batch(server, partial), PACKED, regions) if len(server) else None
    if players is not None and count_players is not None:
        c = count_players
        with_retry(lambda: write_partition_players(stream_client(url, c.keys.state), c.keys, part.batch_end,
                                                   players.windows(), c.ttl_s, (c.wait_replicas, c.wait_timeout_ms)),
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
    packed = pack_rows(rows, PACKED_PLAYERS)
    return pa.concat_batches([rest, packed]) if rest.num_rows else packed


def read_partition(opts: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """A partition read as the options say: what both readers' ``read`` return, on a worker."""
    assert isinstance(partition, StreamRange)
    return read_range(opts.url, opts.streams[partition.shard], partition, rules=opts.rules,
                      partials=PartitionPartials(*opts.window) if opts.window else None,
                      count_players=opts.count_players)
