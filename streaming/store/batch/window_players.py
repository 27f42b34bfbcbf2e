"""The one port through which Spark code writes Redis outside the sink's commit: each window's players, counted
by the source partitions that read the window's events (decision 0019).

Spark code writes Redis only through the sink's commit (:func:`streaming.store.commit.commit_batch` and the
followers'), with this one exception, and it writes through here only: a window's distinct players are not a sum
Spark can add up across partitions, and sending every accepted event's player to the driver, which put it in its
windows and sent one SADD per window to each namespace, was most of a batch's driver time (decision 0019 measures
it). So the partition that reads the events adds each (window, server)'s players to one set in the pipeline's
namespace and records in the same script how many SADD added, in a hash of the batch; the commit adds those counts
to the windows it accepts (:func:`read_added`). Why that is exact, run again or replayed, is in
:mod:`streaming.spark.window_players`, which gathers a partition's players.

- :func:`write_partition_players`: called by a source partition, once it has read its range.
- :func:`read_added`: called by the sink before it judges a batch (and by the recovery reading one again).
- :func:`drop_replayed`: called by the sink after a batch it had already committed was read again.

In a Redis Cluster every key here is in the pipeline's slot (decision 0018): one script call names the set, the hash,
the sets' index and the state together.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import redis

from streaming.rules.commit.batch import Added
from streaming.schema.keys import KeySchema, WindowKey
from streaming.schema.records import NONE_CLOSED_MS
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


def write_partition_players(client: redis.Redis, keys: KeySchema, end_position: str,
                            windows: Sequence[tuple[WindowKey, pa.Array]], ttl_s: int,
                            wait: tuple[int, int] = (0, 0)) -> int:
    """Called by a source partition once it has read its range (``windows``: each (window, server) of its accepted
    events with its distinct players, :meth:`streaming.spark.window_players.PartitionPlayers.windows`). Add the
    partition's players to their windows' sets and count what each added into the batch's hash, in one
    transaction on the pipeline's node; how many script calls it took. Safe to run again (see the module). With
    ``wait`` (replicas, timeout in ms) it returns once that many replicas have the transaction (``WAIT`` on its
    connection), or raises :class:`streaming.store.redis_conn.ReplicasBehind`."""
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
