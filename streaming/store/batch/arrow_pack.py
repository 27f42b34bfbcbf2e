"""Every Arrow packing of the pipeline, in one module, so that a packing and its unpacking cannot drift apart.

- A source partition's rows (:func:`pack_rows`): its partial and player rows as one Arrow IPC stream in ``blob``
  (Spark moves bytes, not a JVM row each), in the source's row schema (:data:`ARROW_SCHEMA`); the sink reads them
  back with :func:`unpack_rows` (and each server's region with :func:`packed_regions`).
- The online view's hand-off (decision 0020): a group's share of a batch's events (:func:`pack_events`), read back
  by the group (:func:`unpack_events`). The bytes are the stored format of ``{ns}:handoff:rows:*``: a group of the
  previous version reads what this one wrote during a rolling restart, so they must not change.
- A Redis command whose arguments are columns (:func:`queue_packed`): packed for the wire in a few Arrow
  operations, the same bytes as the connection packs.

No Spark here: at the store's floor, so that the source, the sink and the store import one module. (Not in the pure
core: it is Arrow.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import redis

from streaming.rules.online.table import OnlineEvents
from streaming.store import redis_conn

PACKED, PACKED_PLAYERS = "packed", "packed_players"
"""``of`` of a row that carries many partial rows of one server as Arrow IPC bytes (``blob``): window and lag
rows (its ``event_time`` is their latest, for ``withWatermark``), or player rows (no event time)."""
PARTIAL_TYPE = pa.struct([("of", pa.string()), ("key_us", pa.int64()), ("n", pa.int64()),
                          ("min_event_us", pa.int64()), ("max_event_us", pa.int64())])
"""A partial row (:mod:`streaming.spark.partial`); Spark declares the same column (``PARTIAL_DDL`` there)."""
TS = pa.timestamp("us", tz="UTC")
"""The type of the rows' times: microseconds, UTC."""
ARROW_SCHEMA = pa.schema([
    ("entry_id", pa.string()), ("ingest_time", TS), ("event_id", pa.string()), ("server", pa.string()),
    ("player_id", pa.string()), ("kind", pa.string()), ("event_time", TS), ("error", pa.string()),
    ("error_detail", pa.string()), ("raw", pa.string()), ("shard", pa.int32()), ("partial", PARTIAL_TYPE),
    ("blob", pa.binary()),
])
"""The source's rows (Spark declares the same: ``streaming.spark.rows.SCHEMA``)."""
ROW_SCHEMA = pa.schema([f for f in ARROW_SCHEMA if f.name != "blob"])
"""The rows a packed row carries (:func:`pack_rows`, :func:`unpack_rows`)."""


def pack_rows(rows: pa.RecordBatch, of: str, regions: Mapping[str, str] | None = None) -> pa.RecordBatch:
    """``rows`` (in :data:`ROW_SCHEMA`) as rows carrying them as one Arrow IPC stream in ``blob``.

    Spark turns every row it is handed into a JVM row and back into Arrow for the driver, a few
    microseconds a row: with hundreds of thousands of players a batch's partial rows are about as many as
    its events, and that conversion cost more than the rest of the batch. Packed, Spark moves a byte string;
    the sink unpacks it (:func:`unpack_rows`). ``PACKED`` rows come as one row per server, so ``withWatermark`` (one per
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


def partial_batch(server: pa.Array, partial: pa.StructArray) -> pa.RecordBatch:
    """Partial rows in the source's schema: ``server`` and ``partial`` set, and a window
    row's ``event_time`` (its latest event, for ``withWatermark``); every other column null."""
    n = len(server)
    window = pc.equal(partial.field("of"), "window")  # streaming.spark.partial.WINDOW
    event_time = pc.cast(pc.if_else(window, partial.field("max_event_us"), pa.scalar(None, pa.int64())), TS)
    columns = {"server": server, "partial": partial, "event_time": event_time}
    return pa.RecordBatch.from_arrays([columns.get(f.name, pa.nulls(n, f.type)) for f in ROW_SCHEMA],
                                      schema=ROW_SCHEMA)


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
    """Each server's region from the packed window rows that carry one (``player_id``)."""
    partial = table.column("partial").combine_chunks()
    carried = pc.and_(pc.fill_null(pc.equal(partial.field("of"), PACKED), False), table.column("player_id").is_valid())
    if not pc.any(carried).as_py():
        return {}
    rows = table.filter(carried)
    return dict(zip(rows.column("server").to_pylist(), rows.column("player_id").to_pylist(), strict=True))


def unpack_rows(table: pa.Table) -> pa.Table:
    """The rows of a batch with the packed rows (:func:`pack_rows`) replaced by the rows their blobs carry (blob column
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


EVENTS_SCHEMA = pa.schema([("server", pa.dictionary(pa.int32(), pa.string())), ("player", pa.string()),
                     ("event_us", pa.int64()), ("entry", pa.int64()), ("kind", pa.int8()), ("ingest_ms", pa.int64())])


def pack_events(ev: OnlineEvents) -> bytes:
    """The events as Arrow IPC: a few copies of their columns, no Python per event."""
    table = pa.table([pc.dictionary_encode(pa.array(ev.server, pa.string())), pa.array(ev.player, pa.string()),
                      pa.array(ev.event_us, pa.int64()), pa.array(ev.entry, pa.int64()), pa.array(ev.kind, pa.int8()),
                      pa.array(ev.arrivals(), pa.int64())], schema=EVENTS_SCHEMA)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, EVENTS_SCHEMA) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def unpack_events(raw: bytes) -> OnlineEvents:
    """The events :func:`pack_events` packed."""
    t = pa.ipc.open_stream(raw).read_all()
    if not t.num_rows:
        return OnlineEvents.empty()
    return OnlineEvents(pc.cast(t.column("server"), pa.string()).to_numpy(zero_copy_only=False),
                          t.column("player").to_numpy(zero_copy_only=False), t.column("event_us").to_numpy(),
                          t.column("entry").to_numpy(), t.column("kind").to_numpy(), t.column("ingest_ms").to_numpy())


PACK_BULK = 512
"""Arguments a column needs before :func:`queue_packed` packs it with Arrow: a dozen Arrow calls cost more than
hiredis packing a few hundred arguments (at 300 servers most commands are small: packing them all with Arrow made
the commits 1.6 times as long, ``bench/driver_costs.py --servers 300``)."""


def queue_packed(pipe: redis_conn.Transaction | redis.client.Pipeline, command: str, key: str, *columns: Any,
                 head: Sequence[Any] = ()) -> None:
    """``pipe.execute_command(command, key, *arguments)``, the arguments the columns' elements taken in turn (one
    column: SADD's members; two: HSET's fields and values), in a transaction begun with ``multi()``, packed for
    Redis in a few Arrow operations rather than a Python call per argument. A column is an Arrow array, a numpy
    array or a list, of str or integers. The big commands of a commit are a value per event: the online view's
    HSET of every player a batch heard from and each window's SADD of its players, in three namespaces (the
    configured pipeline and two lanes); at 100,000 events/s, 50,000 players a batch, packing them one by one was
    most of the lanes' commits (``bench/driver_costs.py``). The same bytes as the connection packs. A short column
    (:data:`PACK_BULK`), or a pipe not in a transaction of ours, gets a plain command. ``head``: arguments between
    the key and the columns' (a script's keys and first arguments, with ``EVAL`` and the script as the key)."""
    if not isinstance(pipe, redis_conn.Transaction) or pipe.queued is None or len(columns[0]) < PACK_BULK:
        pipe.execute_command(command, key, *head, *_interleaved(columns))
        return
    cols = [_strings(c) for c in columns]
    parts: list[Any] = []
    for c in cols:
        parts += ["$", pc.cast(pc.binary_length(c), pa.string()), "\r\n", c, "\r\n"]
    body = pc.binary_join_element_wise(*parts, "")
    offsets = np.frombuffer(body.buffers()[1], np.int32)
    start, end = int(offsets[body.offset]), int(offsets[body.offset + len(body)])
    words = [str(a).encode() if not isinstance(a, bytes) else a for a in (command, key, *head)]
    packed_head = b"*%d\r\n" % (len(words) + len(cols) * len(body)) + b"".join(
        b"$%d\r\n%s\r\n" % (len(w), w) for w in words)
    pipe.queue(command, packed_head + memoryview(body.buffers()[2])[start:end].tobytes())


def _strings(column: Any) -> pa.Array:
    a = column if isinstance(column, pa.Array) else pa.array(column)
    return a if pa.types.is_string(a.type) else pc.cast(a, pa.string())


def _interleaved(columns: tuple[Any, ...]) -> list[Any]:
    lists = [c.to_pylist() if isinstance(c, pa.Array) else c.tolist() if isinstance(c, np.ndarray) else c
             for c in columns]
    return lists[0] if len(lists) == 1 else [x for row in zip(*lists, strict=True) for x in row]
