"""Merging one batch's summary into Redis: one MULTI/EXEC, guarded by the batch id.

This is the exactly-once step. The guard (``state.last_batch``) is read under
WATCH; a batch at or below it is already in Redis (Spark replays a batch whose
commit it did not record before a crash) and is skipped. Everything a batch
changes goes in one transaction, so a crash leaves Redis at a batch boundary.
No pyspark here: the Spark side only builds a :class:`streaming.rules.commit.batch.BatchSummary`, and the
batch's writes are decided by :func:`streaming.rules.commit.plan.plan_commit`, pure: this module reads what
the plan needs, applies the writes and runs the scripts (their Lua: :mod:`streaming.store.commit_scripts`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import redis

from streaming.rules.commit.batch import BatchSummary
from streaming.rules.commit.plan import SERVER_METRICS, BatchWrites, Prior, losses, plan_commit
from streaming.rules.tradeoff import GRID_FIELD, GRID_MS
from streaming.schema.keys import KeySchema, total_field
from streaming.schema.params import Params, ParamsMismatch
from streaming.schema.records import (
    BatchRecord,
    CommitEntry,
    DeadEntry,
    NameGuardRecord,
    StateRecord,
)
from streaming.schema.shards import START, Position, lowest, shard_key
from streaming.store import redis_conn
from streaming.store.commit_scripts import FORGET_BELOW_LUA, FORGET_SERVERS_LUA, TRIM_LUA
from watermark_client import connection
from watermark_client.events import parse_entry_id
from watermark_client.stream import input_shard_key

FORGET_CHUNK = 500


def forget_servers(client: redis.Redis, keys: KeySchema, now_ms: int, retire_after_ms: int,
                   follows_fleet: bool = False) -> int:
    """Drop the per-server fields of every server silent for ``retire_after_ms`` (``streaming.rules.fleet``: retired),
    and of every server with fields but no arrival, from the namespace's ``seen``, ``regions``, ``servers`` and
    per-server totals; the overall totals keep every event. A server that speaks again starts its own counts
    afresh. Returns how many went."""
    seen = {k.decode(): v.decode() for k, v in client.hgetall(keys.seen).items()}
    old = [(s, v) for s, v in sorted(seen.items()) if now_ms - int(v) >= retire_after_ms]
    # Servers with fields but no arrival: idle markers committed after the server was forgotten (the job had queued
    # them before) write its per-server fields again without an arrival; nothing would ever retire them.
    old += [(s, "") for s in sorted(m.decode() for m in client.smembers(keys.servers)) if s not in seen]
    return _forget(client, keys, old, follows_fleet)


def forget_named(client: redis.Redis, keys: KeySchema, servers: Sequence[str], follows_fleet: bool = False) -> int:
    """:func:`forget_servers` for ``servers``, however long they have been silent: an operator's request
    (``streaming.store.online.forget``). A server that speaks meanwhile keeps its fields. Returns how many went."""
    seen = client.hmget(keys.seen, list(servers)) if servers else []
    return _forget(client, keys, [(s, "" if v is None else v.decode()) for s, v in zip(servers, seen, strict=True)],
                   follows_fleet)


def _forget(client: redis.Redis, keys: KeySchema, old: Sequence[tuple[str, str]], follows_fleet: bool) -> int:
    """Run :data:`FORGET_SERVERS_LUA` on ``(server, newest arrival read)`` pairs, a chunk at a time."""
    gone = 0
    for i in range(0, len(old), FORGET_CHUNK):
        chunk = old[i:i + FORGET_CHUNK]
        gone += int(client.eval(FORGET_SERVERS_LUA, 6, keys.seen, keys.regions, keys.servers, keys.totals,
                                keys.tradeoff, keys.state, len(SERVER_METRICS), *SERVER_METRICS, len(GRID_MS) + 1,
                                "1" if follows_fleet else "0", *(x for pair in chunk for x in pair)))
    return gone


def trim_counted(client: redis.Redis, keys: KeySchema, min_id: str, approximate: bool = True, shard: int = 0) -> None:
    """Trim input shard ``shard`` below ``min_id`` and add what went to its trimmed count (``{ns}:trimmed`` for
    shard 0; queued when ``client`` is a pipeline). The stream and its count share a slot (decision 0018), so this
    is one script on one node in a Redis Cluster too. Approximate trims free whole stream nodes only: cheap, and
    the count is still exact."""
    script = TRIM_LUA if approximate else TRIM_LUA.replace("'~', ", "").replace(", 'LIMIT', 0", "")
    client.execute_command("EVAL", script, 2, keys.input_shard(shard), keys.trimmed_of(shard), min_id)


def trim_position(client: redis.Redis, keys: KeySchema, below: str,
                  shards: Callable[[int], bool] | None = None) -> None:
    """:func:`trim_counted` each shard the position ``below`` names (those ``shards`` accepts: default all), below
    its entry ID (a shard at ``0-0``: kept whole)."""
    for k, min_id in enumerate(Position.of(below).ids):
        if min_id != START and (shards is None or shards(k)):
            trim_counted(client, keys, min_id, shard=k)


def free_committed_input(client: redis.Redis, keys: KeySchema, params: Params) -> str:
    """When Redis is full: trim the input kept only to look back at (``STREAM_KEEP_*``), everything below what every
    reader has committed, and say what went. Safe under ``maxmemory``: XTRIM frees memory and is not refused,
    and nothing a reader still needs is below that point (the same rule as each commit's trim, without the
    look-back)."""
    if not params.trims:
        return ""
    try:
        done = [client.hget(keys.state, "committed_id"), *(client.hget(r, "committed_id") for r in params.readers)]
        if any(d is None for d in done):
            return "nothing trimmed: a reader has committed nothing yet"
        low = lowest([d.decode() if isinstance(d, bytes) else d for d in done])
        streams = [input_shard_key(keys.events, k) for k in range(Position.of(low).shards)]
        before = sum(client.xlen(st) for st in streams)
        trim_position(client, keys, low)
        gone = before - sum(client.xlen(st) for st in streams)
    except redis.RedisError as exc:
        return f"could not trim the committed input: {exc}"
    if gone <= 0:
        return f"nothing trimmed: every entry of {keys.events} is still to be read; {connection.memory_line(client)}"
    return f"trimmed {gone:,} committed entries kept for look-back; {connection.memory_line(client)}"


def check_params(client: redis.Redis, keys: KeySchema, params: Params) -> int | None:
    """Refuse to continue a namespace with a different window, slide or watermark mode (its numbers would mix),
    or with fewer input shards than it has read (``STREAM_SHARDS`` lowered: the others would never be read).

    Returns the delay it last ran with (None for a new namespace), so the caller can log a change of delay,
    which is allowed: batch records keep the delay each batch ran with."""
    raw, committed = client.hmget(keys.state, ["params", "committed_id"])
    if committed is not None:  # fewer shards than the position read: their entries would never be read
        try:
            Position.parse(committed.decode(), params.shards)
        except ValueError as exc:
            raise ParamsMismatch(f"namespace {keys.namespace!r}: {exc}") from None
    old = StateRecord.from_hash({"params": raw}, keys.state).params
    if old is None:
        return None
    new = params.semantic()
    changed = params.fixed_changes(old)
    if changed:
        what = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in changed.items())
        raise ParamsMismatch(
            f"namespace {keys.namespace!r} was built with {old.to_json()}, the job now has {new.to_json()} "
            f"({what}): use a fresh PIPELINE_NAMESPACE and CHECKPOINT_DIR to change window, slide or watermark mode"
        )
    return old.delay_ms


@contextmanager
def guarded(client: redis.Redis, guard_key: str, batch_id: int,
            *also_watch: str) -> Iterator[redis_conn.Transaction | None]:
    """The frame of an exactly-once commit: yields None when ``batch_id`` is at or below the
    ``last_batch`` field of ``guard_key`` (already in Redis), else the transaction, watching the
    guard (and ``also_watch``) and still in immediate mode for reads. The caller then calls
    ``multi()``, queues every write including the new ``last_batch``, and ``execute()``s. In a Redis Cluster the
    transaction runs on the node of ``guard_key``'s slot (:func:`connection.home`): every key it names must share
    that slot, as a braced namespace makes them (decision 0018)."""
    with redis_conn.Transaction(connection.home(client, guard_key)) as pipe:
        pipe.watch(guard_key, *also_watch)
        last = pipe.hget(guard_key, "last_batch")
        if last is not None and int(last) >= batch_id:
            pipe.unwatch()
            yield None
        else:
            yield pipe


def read_prior(pipe: redis.client.Pipeline, keys: KeySchema, s: BatchSummary, params: Params) -> Prior:
    names = ["last_batch", "lost_at_batch", "lost_from_batch", "lost_to_batch", "max_event_us", "sets_closed_below_ms",
             *(total_field("max_event_us", srv) for srv in params.servers if params.per_server)]
    if params.per_server and not params.servers:  # servers come and go: every server's field there is
        state = StateRecord.from_hash(pipe.hgetall(keys.state), keys.state)
    else:
        state = StateRecord.from_hash(dict(zip(names, pipe.hmget(keys.state, names), strict=True)), keys.state)
    lost_at, gap = losses(state.last_batch, state.lost_at_batch,
                          None if state.lost_from_batch is None else (state.lost_from_batch, state.lost_to_batch or 0),
                          s.batch_id, params.trims)
    late_shards = sorted({e.shard for e in s.late_events})
    tops = [pipe.xrevrange(shard_key(keys.late, k), count=1) for k in late_shards]
    # A reader's committed ID only grows: reading it before the transaction is safe.
    done = [pipe.hget(reader, "committed_id") for reader in params.readers]
    # A lane's watermark and last batch only grow: read before the transaction, they can only hold a removal back.
    lanes = [pipe.hmget(lane, ["next_watermark_ms", "last_batch"]) for lane in params.players_lanes or ()]
    return Prior(
        lost_at=lost_at, lost_commits=gap, max_event_us=state.max_event_us,
        sets_closed_below_ms=state.sets_closed_below_ms,
        server_max=dict(state.server_max_event_us),
        late_top={k: parse_entry_id(top[0][0]) if top else (0, 0) for k, top in zip(late_shards, tops, strict=True)},
        readers_done=tuple((d.decode() if isinstance(d, bytes) else d) if d else START for d in done),
        lanes_next_ms=tuple(None if v is None else int(v) for v, _ in lanes),
        lanes_last=tuple(None if v is None else int(v) for _, v in lanes))


def apply_writes(pipe: redis.client.Pipeline, keys: KeySchema, w: BatchWrites, params: Params,
                 in_slot: Callable[[int], bool] | None = None) -> None:
    """Queue the batch's writes in the transaction (after ``multi()``); the caller executes it. The trim takes
    the input shards ``in_slot`` accepts (default: all)."""
    ttl_s = params.ttl_s
    totals = redis_conn.Bulk()  # one call for every server's five counts, not a command each
    totals.hincrby(keys.totals, w.totals)
    totals.queue(pipe, None)
    if w.servers:
        pipe.sadd(keys.servers, *w.servers)
        pipe.expire(keys.servers, ttl_s)
    if w.seen:
        pipe.hset(keys.seen, mapping=w.seen)
        pipe.expire(keys.seen, ttl_s)
    if w.regions:
        pipe.hset(keys.regions, mapping=w.regions)
        pipe.expire(keys.regions, ttl_s)
    if w.tradeoff:
        pipe.hset(keys.tradeoff, GRID_FIELD, json.dumps(GRID_MS))
        tradeoff = redis_conn.Bulk()  # a histogram field per delay and server: hundreds at 300 servers
        tradeoff.hincrby(keys.tradeoff, w.tradeoff)
        tradeoff.queue(pipe, ttl_s)
    _queue_windows(pipe, keys, w, ttl_s)
    _queue_kept(pipe, keys, w, params)
    bkey = keys.batch(w.batch_id)
    record = w.record.encode()
    pipe.hset(bkey, "sink", record)
    pipe.expire(bkey, ttl_s)
    pipe.zadd(keys.batches, {str(w.batch_id): w.batch_id})
    pipe.eval(FORGET_BELOW_LUA, 1, keys.batches, w.batch_id - params.records_kept(len(record)), keys.batch(""))
    pipe.expire(keys.batches, ttl_s)
    pipe.hset(keys.state, mapping=w.state.to_hash())
    if w.trim_below is not None:
        trim_position(pipe, keys, w.trim_below, shards=in_slot)
    pipe.xadd(keys.commits, CommitEntry(w.batch_id, w.end_id).fields(), maxlen=1000, approximate=True)


DEAD_KEEP = 100_000
"""Quarantined entries kept to look at (``{ns}:dead``, the newest; about: whole stream nodes go). Their count by
reason is in the totals, exact whatever went; without a bound a producer sending bad input kept the stream
growing for as long as it did (its TTL is refreshed by every batch that adds to it)."""


def _queue_windows(pipe: redis.client.Pipeline, keys: KeySchema, w: BatchWrites, ttl_s: int) -> None:
    index: dict[str, int] = {}
    bulk = redis_conn.Bulk()  # a window per server: at 300 servers 1,000 HINCRBYs and EXPIREs as one script
    for win in w.windows:
        wk = win.key
        bulk.hincrby(keys.window(wk), {"events": win.events, "dropped": win.dropped, "late": win.late,
                                       "players": win.players})
        index[wk.member()] = wk.start_ms
    bulk.queue(pipe, ttl_s)
    if index:
        pipe.zadd(keys.windows, index)
    if w.players is not None:  # the pipeline's upkeep of the shared sets and the batches' counts
        if w.players.added is not None:
            pipe.zadd(keys.players_added_index, {w.players.added: w.batch_id})
        pipe.eval(FORGET_BELOW_LUA, 1, keys.players_added_index, w.players.added_done, keys.players_added(""))
        pipe.expire(keys.players_added_index, ttl_s)
        pipe.eval(FORGET_BELOW_LUA, 1, keys.players_index, w.players.closed_ms, keys.players_index + ":")
    pipe.zremrangebyscore(keys.windows, "-inf", f"({w.windows_end_below_ms}")
    pipe.expire(keys.windows, ttl_s)


def _queue_kept(pipe: redis.client.Pipeline, keys: KeySchema, w: BatchWrites, params: Params) -> None:
    """The late events (exact ``MAXLEN``: ``totals.kept`` less the streams' lengths is what the bound evicted) and
    the quarantined entries, each under its input entry ID in its shard's stream (IDs are unique only there)."""
    for e in w.late:
        pipe.xadd(shard_key(keys.late, e.shard), e.fields(), id=e.entry_id, maxlen=params.late_keep_per_shard,
                  approximate=False)
    if w.late:
        pipe.hincrby(keys.totals, "kept", len(w.late))
    for k in sorted({e.shard for e in w.late}):
        pipe.expire(shard_key(keys.late, k), params.ttl_s)
    for b in w.bad:
        pipe.xadd(shard_key(keys.dead, b.shard), DeadEntry(b.reason, b.detail, b.raw, w.batch_id).fields(),
                  id=b.entry_id, maxlen=DEAD_KEEP, approximate=True)
    for k in sorted({b.shard for b in w.bad}):
        pipe.expire(shard_key(keys.dead, k), params.ttl_s)


@dataclass(frozen=True)
class GuardPrior:
    """What the flood guard judges a batch against (``streaming.rules.fleet.admit``): the names the pipeline
    does not know, its guard's minute, and, for a batch the pipeline has already committed, the names it refused."""

    new: dict[str, int]
    record: NameGuardRecord
    committed_refusal: tuple[str, ...] | None = None


def read_guard(client: redis.Redis, keys: KeySchema, batch_id: int, events: Mapping[str, int]) -> GuardPrior:
    """``events``: each of the batch's servers' accepted events. A server is known while ``{ns}:seen`` holds it
    (the job forgets it once retired: ``forget_servers``)."""
    names = sorted(events)
    pipe = connection.home(client, keys.state).pipeline(transaction=False)
    pipe.hmget(keys.state, ["last_batch", "name_guard"])
    pipe.hmget(keys.seen, names)
    (last, guard), seen = pipe.execute()
    record = (NameGuardRecord() if guard is None
              else NameGuardRecord.decode(guard, f"{keys.state} field name_guard"))
    new = {n: events[n] for n, at in zip(names, seen, strict=True) if at is None}
    if last is None or int(last) < batch_id:
        return GuardPrior(new, record)
    raw = client.hget(keys.batch(batch_id), "sink")  # committed: what it refused, not what today would
    refused = () if raw is None else BatchRecord.decode(raw, keys.batch(batch_id)).refused
    return GuardPrior(new, record, tuple(refused))


WAITED_FIELD = "wait_batch"
"""The field of ``{ns}:state`` a commit writes before it waits for replicas (:func:`redis_conn.wait_replicas`): the
batch whose commit it waited for."""


def commit_batch(client: redis.Redis, keys: KeySchema, s: BatchSummary, params: Params,
                 now_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> bool:
    """Apply the batch once: read what it depends on, decide its writes, apply them in one transaction
    guarded by the batch id. Returns False when it was already committed.

    With ``params.wait_replicas``, done only once that many replicas have the commit, whether it was applied now or
    found already there (a batch run again after its wait failed waits again): else it raises
    :class:`redis_conn.ReplicasBehind` and the batch is not done (decision 0023)."""
    node = connection.home(client, keys.state)  # in a Redis Cluster: the node of the pipeline's slot (0018)
    applied = _commit_once(client, node, keys, s, params, now_ms)
    replicated(client, keys.state, s.batch_id, params, f"the commit of batch {s.batch_id} to {keys.namespace}")
    return applied


def replicated(client: redis.Redis, guard_key: str, batch_id: int, params: Params, what: str) -> None:
    """Return once ``params.wait_replicas`` replicas have the commit of ``batch_id`` guarded by ``guard_key`` (at
    once when 0), else raise :class:`redis_conn.ReplicasBehind`: applied now or found already applied, the same
    (:func:`redis_conn.wait_replicas`, on the guard's node)."""
    if params.wait_replicas:
        redis_conn.wait_replicas(connection.home(client, guard_key), guard_key, WAITED_FIELD, batch_id,
                                 params.wait_replicas, params.wait_timeout_ms, what)


def _commit_once(client: redis.Redis, node: redis.Redis, keys: KeySchema, s: BatchSummary, params: Params,
                 now_ms: Callable[[], int]) -> bool:
    with guarded(node, keys.state, s.batch_id) as pipe:
        if pipe is None:
            return False
        prior = read_prior(pipe, keys, s, params)
        writes = plan_commit(s, params, prior, now_ms())
        pipe.multi()
        in_slot = None if node is client else (lambda k: redis_conn.same_slot(keys.input_shard(k), keys.state))
        apply_writes(pipe, keys, writes, params, in_slot=in_slot)
        redis_conn.execute(pipe)
    if writes.trim_below is not None and in_slot is not None:
        # In a Redis Cluster an input shard on a slot of its own is trimmed after the commit, by its own script
        # (the trim and its count stay one step, so what waits stays exact); a crash before it leaves the next
        # commit a bigger trim (decision 0018).
        trim_position(client, keys, writes.trim_below, shards=lambda k: not in_slot(k))
    return True
