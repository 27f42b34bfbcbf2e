"""Each window's distinct players, counted where the window's events are read (decision 0019). No pyspark.

A window's events are a sum, which Spark adds up across partitions; its distinct players are not: a player heard
from in two batches, or by two partitions, counts once. Until decision 0019 every accepted event's player reached
the driver, which put it in its windows and sent one SADD per window to each namespace's own set (the pipeline and
its two lanes: three SADDs a player). Now the partition that reads the events does it, once for every namespace:

- it adds each (window, server)'s players to one set in the pipeline's namespace (:meth:`KeySchema.players`),
  shared by the configured pipeline and its lanes, and records in the same script how many members SADD added, in
  a hash of the batch (:meth:`KeySchema.players_added`, keyed by the batch's end position, which Spark's offset
  log keeps);
- a namespace's commit adds those counts to the windows it accepts (``players`` in the window's hash). Exact,
  because a watermark never goes back: a namespace that accepts a window in a batch accepted it in every batch
  before, so the players the set had before this batch are the ones it already counted, and SADD's reply is
  exactly the players it has not;
- a task run again (a retry, a batch replayed after a crash: the same ranges, so the same hash) adds members that are
  there already: SADD says 0 and nothing is counted twice;
- a set goes once every namespace has closed its window, and the partitions then add nothing to it (``{ns}:state``
  ``sets_closed_below_ms``, which the pipeline's commit raises: :func:`streaming.store.commit.commit_batch`); a
  batch's hash goes once the pipeline and every lane have committed the batch.

In a Redis Cluster every key here is in the pipeline's slot (decision 0018): one script call names the set, the hash,
the sets' index and the state together.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import redis

from streaming.schema.keys import KeySchema, WindowKey
from streaming.schema.records import NONE_CLOSED_MS
from streaming.spark.partial import in_windows
from streaming.store import redis_conn
from streaming.store.batch.arrow_pack import queue_packed
from watermark_client import connection

ADD_LUA = """
local closed = tonumber(redis.call('HGET', KEYS[2], 'sets_closed_below_ms') or 'NONE_CLOSED_MS')
local ttl, a, total = ARGV[1], 2, 0
for i = 4, #KEYS do
  local member, ending, k = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local first, last = a + 3, a + 2 + k
  a = last + 1
  if ending > closed then
    local n = 0
    for j = first, last, 7000 do
      n = n + redis.call('SADD', KEYS[i], unpack(ARGV, j, math.min(j + 6999, last)))
    end
    redis.call('EXPIRE', KEYS[i], ttl)
    redis.call('ZADD', KEYS[3], ending, member)
    redis.call('HINCRBY', KEYS[1], member, n)
    total = total + n
  end
end
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('EXPIRE', KEYS[3], ttl)
return total
""".replace("NONE_CLOSED_MS", str(NONE_CLOSED_MS))
"""KEYS: the batch's hash, the pipeline's state, the sets' index, then one set per window; ARGV: the TTL (s), then per
window its member, its end (ms), how many players follow, and those players (added in slices of 7,000: Lua's
``unpack`` takes about 8,000 values). A window every namespace has closed gets nothing. The count is written even
when SADD added none: the driver then knows the window was seen (a field missing for an open window fails the batch
rather than counting no player)."""

CALL_ARGS = 100_000
"""Arguments a script call takes at most (a window with more players has a call of its own): one call for the
hundreds of small windows of a partition at 300 servers, a bounded buffer for a large one."""


class PartitionPlayers:
    """One partition's accepted events as (window start, server, player), distinct, fed chunk by chunk and folded
    whenever ``fold_at`` rows wait, so memory stays bounded by the distinct triples."""

    def __init__(self, window_ms: int, slide_ms: int, fold_at: int = 1 << 18) -> None:
        self.window_ms, self.slide_ms, self.fold_at = window_ms, slide_ms, fold_at
        self._parts: list[pa.Table] = []
        self._waiting = 0

    def add(self, server: pa.Array, player: pa.Array, event_us: pa.Array, placed: pa.Table | None = None) -> None:
        """Accepted events: each one's server, player and event time. ``placed``: the same events already in their
        windows (:func:`streaming.spark.partial.in_windows` with ``server`` and ``player``)."""
        if not len(server):
            return
        # the partitions' own placement (partial.in_windows): a player lands in the windows its event is counted in
        w = placed if placed is not None else in_windows(event_us, self.window_ms, self.slide_ms, server=server,
                                                         player=player)
        self._parts.append(w.select(["start", "server", "player"]))
        self._waiting += w.num_rows
        if self._waiting >= self.fold_at:
            self._fold()

    def _fold(self) -> None:
        if len(self._parts) > 1 or self._waiting:
            table = pa.concat_tables(self._parts)
            self._parts = [table.group_by(["start", "server", "player"], use_threads=False).aggregate([])]
        self._waiting = 0

    def windows(self) -> list[tuple[WindowKey, pa.Array]]:
        """Each (window, server) of the partition's events with its distinct players."""
        if not self._parts:
            return []
        t = pa.concat_tables(self._parts).group_by(["start", "server"], use_threads=False).aggregate(
            [("player", "distinct")])
        lists = t.column("player_distinct").combine_chunks()
        return [(WindowKey(start // 1000, start // 1000 + self.window_ms, server), lists[i].values)
                for i, (start, server) in enumerate(zip(t.column("start").to_pylist(), t.column("server").to_pylist(),
                                                        strict=True))]


@dataclass(frozen=True)
class Counting:
    """Where a streaming batch's partitions count their windows' players (the source's ``windowPlayers`` options)."""

    keys: KeySchema
    """The pipeline's keys: its sets, its batches' hashes, its state."""
    ttl_s: int
    """The sets' and hashes' TTL."""
    wait_replicas: int = 0
    """``REDIS_WAIT_REPLICAS``: a partition is done once this many replicas have its players (0: off). Else a primary
    lost between the partition's write and the commit's WAIT would take players with it that the commit, retried
    on the new primary with the counts it had read, still counts."""
    wait_timeout_ms: int = 1_000


def write(client: redis.Redis, keys: KeySchema, end_position: str, players: PartitionPlayers, ttl_s: int,
          wait: tuple[int, int] = (0, 0)) -> int:
    """Add the partition's players to their windows' sets and count what each added into the batch's hash, in one
    transaction on the pipeline's node; how many script calls it took. Safe to run again (see the module). With
    ``wait`` (replicas, timeout in ms) it returns once that many replicas have the transaction (``WAIT`` on its
    connection), or raises :class:`streaming.store.redis_conn.ReplicasBehind`."""
    windows = players.windows()
    if not windows:
        return 0
    added, state, index = keys.players_added(end_position), keys.state, keys.players_index
    calls: list[list[tuple[WindowKey, pa.Array]]] = [[]]
    size = 0
    for wk, members in windows:
        if calls[-1] and size + len(members) > CALL_ARGS:
            calls.append([])
            size = 0
        calls[-1].append((wk, members))
        size += len(members) + 3
    with redis_conn.Transaction(connection.home(client, added)) as pipe:
        pipe.multi()
        for call in calls:
            sets = [keys.players(wk) for wk, _ in call]
            argv = pa.concat_arrays([a for wk, members in call for a in (
                pa.array([wk.member(), str(wk.end_ms), str(len(members))], pa.string()), members)])
            queue_packed(pipe, "EVAL", ADD_LUA, argv, head=(3 + len(sets), added, state, index, *sets, ttl_s))
        redis_conn.execute(pipe)
        replicas, timeout_ms = wait
        if replicas:  # on the transaction's own connection: WAIT covers what it wrote
            redis_conn.enough_replicas(int(pipe.execute_command("WAIT", replicas, timeout_ms)), replicas,
                                       timeout_ms, f"players up to {end_position}")
    return len(calls)


@dataclass(frozen=True)
class Added:
    """What one batch added to its windows' players (:func:`read_added`)."""

    counts: dict[str, int]
    """Window member (:meth:`WindowKey.member`) -> players the batch added to it."""
    closed_ms: int
    """Windows ending at or below this are closed for every namespace: the partitions counted none of their players."""

    def of(self, wk: WindowKey) -> int:
        """The players the batch added to ``wk``; a window the partitions did not count and that is not closed
        fails the batch (its players would silently be none)."""
        n = self.counts.get(wk.member())
        if n is not None:
            return n
        if wk.end_ms <= self.closed_ms:
            return 0
        raise ValueError(f"window {wk.member()} has events in the batch but no count of its players: the source "
                         "must be read with preAggregate=true and windowPlayers naming the pipeline "
                         "(streaming.spark.query.source_options), whose partitions count them")


def read_added(client: redis.Redis, keys: KeySchema, end_position: str) -> Added:
    """The players the batch ending at ``end_position`` added to each of its windows (complete once Spark has read
    the batch), and the pipeline's closed bound."""
    pipe = connection.home(client, keys.state).pipeline(transaction=False)
    pipe.hgetall(keys.players_added(end_position))
    pipe.hget(keys.state, "sets_closed_below_ms")
    counts, closed = pipe.execute()
    return Added({(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in counts.items()},
                 int(closed) if closed else NONE_CLOSED_MS)


_DROP_UNINDEXED_LUA = """
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 0 end
return redis.call('DEL', KEYS[1])
"""


def drop_replayed(client: redis.Redis, keys: KeySchema, end_position: str) -> bool:
    """After a batch the pipeline had already committed was read again (Spark replays its last batch after a crash):
    its partitions wrote its count of players added again, with zeros. Kept while a lane still needs it (it is in the
    index); otherwise every namespace had committed the batch and its count had gone: this one is dropped too.
    Whether it was."""
    return bool(connection.home(client, keys.state).eval(
        _DROP_UNINDEXED_LUA, 2, keys.players_added(end_position), keys.players_added_index, end_position))


def no_players() -> Added:
    """For a read whose windows' players nobody needs (the online view's catch-up): every window counts none."""
    return Added({}, 1 << 62)

