"""The job's side of the online view's groups (decision 0020): each batch's accepted events, split by group of
servers and packed, and a record of the batch, handed off once; and a group's side: the batches in order, its
share of each.

- ``{ns}:handoff:rows:{batch}:{g}``: group ``g``'s share of the batch, Arrow IPC (server, player, event time,
  arrival order, kind, arrival ms); the group's commit deletes it, and it expires after :data:`ROWS_KEPT_S`.
- ``{ns}:handoff:batches``: one entry per batch handed off (:class:`streaming.schema.records.HandoffBatch`),
  :data:`BATCHES_KEPT` at most: a group down for longer misses the oldest, and its view says it (``missed``).
- ``{ns}:handoff:guard``: the hand-off's guard ``last_batch``, so a batch replayed after a crash is handed off
  once, as the commits are guarded.

All in the namespace's slot, one transaction a batch. No fold here: :mod:`streaming.store.online.commit` folds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import redis

from streaming.rules.online.groups import group_of
from streaming.rules.online.table import OnlineEvents
from streaming.schema.keys import KeySchema
from streaming.schema.records import HandoffBatch
from streaming.store import redis_conn
from streaming.store.batch.arrow_pack import pack_events, unpack_events
from streaming.store.commit import guarded

BATCHES_KEPT = 10_000
"""Batches the stream of handed-over batches keeps: 83 minutes of 500 ms batches."""
ROWS_KEPT_S = 60
"""How long a group's share waits for it: a group away longer (a restart takes seconds) goes on without it and the
view says it is partial from there. It bounds Redis' memory for the shares at a minute of input, about 45 bytes an
event (270 MB at 100,000 events/s), where the key TTL (a day by default) would let a group away fill Redis."""
BATCH_FIELD = "b"


def split(ev: OnlineEvents, groups: int) -> list[OnlineEvents]:
    """Each group's share of the events, in their order: one look-up per server, not per event."""
    if groups == 1:
        return [ev]
    by_server = ev.by_server()
    shares: list[list[np.ndarray]] = [[] for _ in range(groups)]
    for server, rows in by_server.items():
        shares[group_of(server, groups)].append(rows)
    return [_take(ev, np.sort(np.concatenate(rows)) if rows else np.zeros(0, np.int64)) for rows in shares]


def _take(ev: OnlineEvents, rows: np.ndarray) -> OnlineEvents:
    return OnlineEvents(ev.server[rows], ev.player[rows], ev.event_us[rows], ev.entry[rows], ev.kind[rows],
                          ev.arrivals()[rows])


def hand_off(client: redis.Redis, keys: KeySchema, batch: HandoffBatch, events: OnlineEvents, ttl_s: int) -> bool:
    """Hand one batch over to the groups once: its events split by group and the batch's record, in one transaction
    guarded by the hand-off's ``last_batch``. False when it was handed off already."""
    shares = split(events, batch.groups)
    with guarded(client, keys.handoff_guard, batch.batch) as pipe:
        if pipe is None:
            return False
        pipe.multi()
        for g, share in enumerate(shares):
            pipe.set(keys.handoff_rows(batch.batch, g), pack_events(share), ex=min(ttl_s, ROWS_KEPT_S))
        pipe.xadd(keys.handoff_batches, {BATCH_FIELD: batch.encode()}, maxlen=BATCHES_KEPT, approximate=True)
        pipe.expire(keys.handoff_batches, ttl_s)
        # committed_id: where the hand-off is in the input, which the trim keeps until then (a reader's mark)
        pipe.hset(keys.handoff_guard, mapping={"last_batch": batch.batch, "committed_id": batch.end_id})
        pipe.expire(keys.handoff_guard, ttl_s)
        redis_conn.execute(pipe)
    return True


def handed_off(client: redis.Redis, keys: KeySchema) -> int | None:
    """The last batch handed off (None: none yet)."""
    last = client.hget(keys.handoff_guard, "last_batch")
    return None if last is None else int(last)


def batches_after(client: redis.Redis, keys: KeySchema, after_id: str, count: int = 100,
                  block_ms: int | None = None) -> Sequence[tuple[str, HandoffBatch]]:
    """The batches handed off after the stream entry ``after_id`` (``0-0``: from the oldest kept), in order, with
    their entry IDs; waits up to ``block_ms`` for one when there is none."""
    reply = client.xread({keys.handoff_batches: after_id}, count=count, block=block_ms)
    if isinstance(reply, dict):  # RESP3: {stream: [entries]}
        entries = next(iter(reply.values()))[0] if reply else []
    else:  # RESP2: [[stream, entries]]
        entries = reply[0][1] if reply else []
    return [(entry_id.decode(), HandoffBatch.decode(fields[BATCH_FIELD.encode()], f"{keys.handoff_batches} {entry_id}"))
            for entry_id, fields in entries]


def rows_of(client: redis.Redis, keys: KeySchema, batch_id: int, group: int) -> OnlineEvents | None:
    """Group ``group``'s share of a batch; None when it is gone (its TTL passed, or Redis lost it)."""
    raw = client.get(keys.handoff_rows(batch_id, group))
    return None if raw is None else unpack_events(raw)
