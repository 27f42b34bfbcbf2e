"""The online view's commit: one group's fold of a batch, written to Redis once.

Each player's state lives in two hashes per server (:meth:`streaming.schema.keys.KeySchema.online` and
``logged_out``): player -> event time (us) of their latest event. The job keeps the same state in a
:class:`OnlineMirror`. It folds each batch into it (:func:`streaming.rules.online.decide.decide_servers`) and
writes only what changed. One MULTI/EXEC a batch, guarded by the group's own ``last_batch``, makes a replayed batch a
no-op, as :func:`streaming.store.commit.commit_batch` does for the windows. The merge into the view follows
(:mod:`streaming.store.online.merge`). No pyspark: ``wm-online`` imports this, as the job does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import redis

from streaming.rules.online.decide import ServerWrites, decide_servers
from streaming.rules.online.groups import ALL, Group
from streaming.rules.online.table import OnlineBatch, PlayerTable
from streaming.rules.online.view import group_part, requests_done, resume
from streaming.schema.keys import KeySchema
from streaming.schema.params import Params
from streaming.schema.records import ClockRecord, OnlineStateRecord
from streaming.store import redis_conn
from streaming.store.batch.arrow_pack import queue_packed
from streaming.store.commit import guarded, replicated
from streaming.store.online.forget import read_asked
from streaming.store.online.handoff import hand_off
from streaming.store.online.merge import merge_ready


class OnlineMirror:
    """The job's copy of every player's state, one :class:`PlayerTable` for all servers, as of ``batch``.

    Redis holds the durable copy (two hashes per server); the mirror spares each batch reading its players'
    state back, and when Redis comes back empty it still has what Redis lost, so the next batch writes the
    whole view again. It is trusted only while it reflects the batch Redis last committed; otherwise (a
    restart, a failed commit) it is loaded from Redis first."""

    def __init__(self) -> None:
        self.players = PlayerTable()
        self.batch: int | None = None  # the last committed batch it reflects; None: nothing yet
        self.valid = True
        self.clocks: dict[str, ClockRecord] = {}  # each server's clock as of ``batch``

    def load(self, client: redis.Redis, keys: KeySchema, servers: Sequence[str], batch: int | None) -> None:
        self.players = PlayerTable()
        pipe = client.pipeline(transaction=False)
        for server in servers:
            pipe.hgetall(keys.online(server))
            pipe.hgetall(keys.logged_out(server))
        replies = iter(pipe.execute())
        for server in servers:
            self.players.load(server, next(replies), next(replies))
        self.batch, self.valid = batch, True


def new_mirror() -> OnlineMirror:
    """A mirror for the job's own fold: the sink makes one per query run, when it is built, and hands it to every
    :func:`commit_online` (Spark code holds it without naming the store's type)."""
    return OnlineMirror()


def commit_online(client: redis.Redis, keys: KeySchema, b: OnlineBatch, params: Params, timeout_ms: int,
                    mirror: OnlineMirror | None = None,
                    now_ms: Callable[[], int] = lambda: int(time.time() * 1000), group: Group = ALL) -> bool:
    """Apply one batch to ``group``'s servers once (guarded by the group's own ``last_batch``), then merge into the
    online view every batch all groups have committed (:func:`merge_ready`). Returns False when the group had
    committed it already. ``b.events``: the group's share of the batch (with ``b.newest_arrival_ms`` the whole
    batch's newest arrival when there are other groups).

    The batch's events are folded into the players' state (:func:`streaming.rules.online.fold.fold`); every
    other online player whose time + timeout the next watermark reaches times out, and logouts it passes are
    forgotten. The next watermark is the pipeline's: ``max(in force, running max event - delay)`` from the
    running maximum kept here, or the per-server one handed off. When Redis came back empty while ``mirror``
    still holds the state, the whole view is written again and the loss is recorded (``lost_at_batch``). With
    ``params.wait_replicas`` it is done only once that many replicas have it (:func:`streaming.store.commit.replicated`:
    :class:`redis_conn.ReplicasBehind` otherwise, and run again it finds itself applied and waits again)."""
    mirror = mirror if mirror is not None else OnlineMirror()
    try:
        applied = _commit_group(client, keys, b, params, timeout_ms, mirror, group)
    except BaseException:
        mirror.valid = False  # it may be ahead of Redis now: load it again before the next batch
        raise
    merge_ready(client, keys, group.of, params, now_ms)
    # As the pipeline's commit (decision 0023): done once ``params.wait_replicas`` replicas have the group's commit
    # and the merge after it, applied now or found applied; else ReplicasBehind and the batch is not done.
    replicated(client, keys.online_group(group.index, group.of), b.batch_id, params,
               f"the online view's commit of batch {b.batch_id} (group {group.index + 1} of {group.of})")
    return applied


_GROUP_FIELDS = ("last_batch", "clocks")


def _commit_group(client: redis.Redis, keys: KeySchema, b: OnlineBatch, params: Params, timeout_ms: int,
                  mirror: OnlineMirror, group: Group) -> bool:
    """The group's fold of the batch: its players written, its own guard and clocks, and its part of the batch
    (:class:`streaming.schema.records.OnlinePart`) for the merge, in one transaction."""
    ev = b.events
    key, counts_key = keys.online_group(group.index, group.of), keys.online_group_counts(group.index, group.of)
    with guarded(client, key, b.batch_id, counts_key) as pipe:
        prior = _group_prior(pipe, keys, group) if pipe is not None else None  # None: committed, by the guard
        start = resume(prior.last_batch, b.batch_id, mirror.batch, mirror.valid) if prior is not None else None
        if prior is None or start is None or start.applied:
            mirror.valid = False
            return False
        if start.load:
            names = pipe.hkeys(counts_key) or pipe.hkeys(keys.online_counts)  # the view's: before groups
            mirror.load(client, keys, [s for s in (n.decode() for n in names) if group.owns(s)], prior.last_batch)
        mirror.valid = False  # until the transaction is in
        asked = {s: at for s, at in read_asked(pipe, keys).items() if group.owns(s)}
        writes, clocks = decide_servers(mirror.players, ev, mirror.clocks if start.lost else prior.clocks,
                                        b.delay_ms, timeout_ms, b.newest_arrival_ms, params.retire_after_ms, asked)
        for w in writes.values():
            w.rewrite = start.lost
        part = group_part(group, b.record(group.of, timeout_ms), writes, clocks, asked, ev.server.tolist(),
                          int(ev.event_us.max()) if len(ev.event_us) else None, start.lost,
                          start.rebuilt or b.missed)
        pipe.multi()
        _apply(pipe, keys, writes, mirror, params.ttl_s, counts_key)
        if done := requests_done(asked, writes, clocks):
            pipe.hdel(keys.forget, *done)
        pipe.hset(key, mapping=OnlineStateRecord(last_batch=b.batch_id, clocks=clocks).to_hash(*_GROUP_FIELDS))
        pipe.expire(key, params.ttl_s)
        parts = keys.online_parts(b.batch_id)
        pipe.hset(parts, str(group.index), part.encode())
        pipe.expire(parts, params.ttl_s)
        pipe.zadd(keys.online_parts_index, {str(b.batch_id): b.batch_id})
        pipe.expire(keys.online_parts_index, params.ttl_s)
        if b.consumed:
            pipe.delete(*b.consumed)
        redis_conn.execute(pipe)
    # valid unless it outgrew what the view keeps: then loaded again from Redis before the next batch
    mirror.batch, mirror.valid, mirror.clocks = b.batch_id, not mirror.players.outgrown(len(clocks)), clocks
    return True


def last_committed(client: redis.Redis, keys: KeySchema, group: Group) -> int | None:
    """The last batch ``group`` committed (the online view's, for a group without a record of its own)."""
    return _group_record(client, keys, group, ("last_batch",)).last_batch


def _group_prior(pipe: redis.client.Pipeline, keys: KeySchema, group: Group) -> OnlineStateRecord:
    """The group's guard and its servers' clocks (read under the commit's WATCH)."""
    rec = _group_record(pipe, keys, group, _GROUP_FIELDS)
    return OnlineStateRecord(last_batch=rec.last_batch,
                               clocks={s: c for s, c in rec.clocks.items() if group.owns(s)})


def _group_record(reader: redis.Redis | redis.client.Pipeline, keys: KeySchema, group: Group,
                  fields: Sequence[str]) -> OnlineStateRecord:
    """``fields`` (``last_batch`` first) of the group's record; a group without a record of its own starts where the
    online view is (a view committed before groups, or by another number of them: its servers' clocks are in it)."""
    key = keys.online_group(group.index, group.of)
    raw = reader.hmget(key, fields)
    if raw[0] is None:
        key = keys.online_state
        raw = reader.hmget(key, fields)
    return OnlineStateRecord.from_hash(dict(zip(fields, raw, strict=True)), key)


def _apply(pipe: redis.client.Pipeline, keys: KeySchema, writes: dict[str, ServerWrites], mirror: OnlineMirror,
           ttl_s: int, counts_key: str) -> None:
    expire = redis_conn.Bulk()  # a server's two EXPIREs as one script for all: 600 commands at 300 servers
    gone = [server for server, w in writes.items() if w.forget]
    if gone:  # no player kept: its hashes are empty already; its count goes
        pipe.hdel(counts_key, *gone)
    for server, w in writes.items():
        if w.forget:
            continue
        on_key, out_key = keys.online(server), keys.logged_out(server)
        if w.rewrite:
            pipe.delete(on_key, out_key)
            online, logged_out = mirror.players.entries(server, True), mirror.players.entries(server, False)
        else:
            online, logged_out = w.online, w.logged_out
            if w.drop_online:
                pipe.hdel(on_key, *w.drop_online)
            if w.drop_logged_out:
                pipe.hdel(out_key, *w.drop_logged_out)
        if len(online):
            queue_packed(pipe, "HSET", on_key, online.names, online.us)
        if len(logged_out):
            queue_packed(pipe, "HSET", out_key, logged_out.names, logged_out.us)
        expire.expire(on_key)
        expire.expire(out_key)
    expire.queue(pipe, ttl_s)
    if len(writes) > len(gone):
        pipe.hset(counts_key, mapping={s: w.count for s, w in writes.items() if not w.forget})
        pipe.expire(counts_key, ttl_s)


def follow_online(client: redis.Redis, keys: KeySchema, online: OnlineBatch, params: Params, timeout_ms: int,
                  groups: int, mirror: OnlineMirror) -> None:
    """Called by the job's sink once a batch, on its followers' path (retried whole: each step is guarded by the
    batch): the batch's accepted events (``online.events``) to the online view, folded here (the job's own group,
    decision 0025: :func:`commit_online`) or handed off to its ``groups`` (decision 0020:
    :func:`streaming.store.online.handoff.hand_off`); done once ``params.wait_replicas`` replicas have it."""
    if groups:
        what = f"the online view's share of batch {online.batch_id}"
        hand_off(client, keys, online.record(groups, timeout_ms), online.events, params.ttl_s)
        replicated(client, keys.handoff_guard, online.batch_id, params, what)
        return
    commit_online(client, keys, online, params, timeout_ms, mirror)
    replicated(client, keys.online_state, online.batch_id, params, f"online players of batch {online.batch_id}")
