"""Redis connections with retry, shared by the generator, the job and tools; batched replies read straight off the
socket for the generator's writer; and a commit's transaction on a connection of its own (:class:`Transaction`).

redis-py packs each command and parses each reply in Python, about 20 us a command. That is more than Redis
takes for a write, and a batch's commits queue many: at 300 servers about 1,800 commands for the pipeline's
windows and 1,000 for the online view, each batch (``bench/driver_costs.py``). The generator's writer (decision
0008) packs with hiredis and reads with a hiredis ``Reader``; a commit packs its big columns with Arrow and sends
MULTI, its commands and EXEC in one write, replies read raw (no response callbacks), through redis-py's public
API: the same commands and the same transaction, only the client's cost changes."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.cluster import RedisCluster
from redis.commands import CoreCommands
from redis.crc import key_slot

from streaming.schema.config import redact_url
from watermark_client.connection import EXEC, MULTI, FullWait, is_full, open_client

log = logging.getLogger(__name__)


T = TypeVar("T")
TRANSIENT = (redis.ConnectionError, redis.TimeoutError, redis.exceptions.ReadOnlyError)
"""Errors a Redis restart or failover causes: ``BusyLoadingError`` while it reloads the AOF; through Sentinel
``MasterNotFoundError`` while no primary is elected, and a write refused by a primary demoted to a replica
(``ReadOnlyError``; redis-py's Sentinel connections say it as a ``ConnectionError``, :func:`execute` as this), after
which the connection is closed so that the next one asks the Sentinels for the new primary."""


class DriverClient:
    """A Redis client made on first use on the driver, for the foreachBatch sinks (``redis_url`` is set by the
    subclass): the sink object is built before Redis may be up, and a client cannot be pickled."""

    redis_url: str
    _client: redis.Redis | None = None

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = open_client(self.redis_url, socket_keepalive=True, socket_timeout=60)
        return self._client

    def refresh(self) -> None:
        """After a cluster's slot moved: its map read again (:func:`refresh`)."""
        if self._client is not None:
            refresh(self._client)



def nodes(client: redis.Redis) -> list[redis.Redis]:
    """A plain client for each primary of a cluster (``[client]`` on one Redis): for what is per node, such as
    memory."""
    if isinstance(client, RedisCluster):
        return [client.get_redis_connection(node) for node in client.get_primaries()]
    return [client]


MOVED = (redis.exceptions.AskError, redis.exceptions.TryAgainError, redis.exceptions.ClusterDownError)
"""A Redis Cluster's refusals while a slot moves or its node is replaced (``MovedError`` is an ``AskError``)."""


def refresh(client: redis.Redis) -> None:
    """Read a cluster's slots and nodes again (nothing on one Redis): after a failover or a resharding, the next
    :func:`home` names the slot's new node. Best effort: no node answering now leaves the old map for the next try."""
    if isinstance(client, RedisCluster):
        try:
            client.nodes_manager.initialize()
        except redis.RedisError as exc:
            log.warning("cannot read the cluster's slots again yet: %s", exc)


def same_slot(a: str, b: str) -> bool:
    """Whether keys ``a`` and ``b`` hash to one slot (what a Redis Cluster requires of a transaction's keys)."""
    return key_slot(a.encode()) == key_slot(b.encode())


def connect(url: str, *, attempts: int = 30, base_delay_s: float = 0.1, max_delay_s: float = 2.0,
            sleep: Callable[[float], None] = time.sleep) -> redis.Redis:
    """A client that has answered PING (a cluster client when ``url`` names a cluster node: :func:`open_client`);
    retries with exponential backoff so processes started together (Procfile) wait for the embedded Redis instead
    of failing."""

    def ping() -> redis.Redis:
        client = open_client(url, health_check_interval=30, socket_keepalive=True)
        client.ping()
        return client

    try:
        return with_retry(ping, f"connecting to {redact_url(url)}", attempts=attempts, give_up_after_s=None,
                          base_delay_s=base_delay_s, max_delay_s=max_delay_s, sleep=sleep)
    except TRANSIENT as exc:
        raise ConnectionError(f"Redis at {redact_url(url)} unreachable after {attempts} attempts: {exc}") from None


class ReplicasBehind(redis.TimeoutError):
    """Fewer replicas than asked acknowledged a write within the wait (:func:`wait_replicas`). A Redis
    ``TimeoutError``: :func:`with_retry` runs the guarded commit again, which finds itself applied and waits again;
    once it gives up, the batch fails and Spark runs it again. Never done with its writes on the primary alone."""


def wait_replicas(client: redis.Redis, key: str, field: str, value: object, replicas: int, timeout_ms: int,
                  what: str) -> int:
    """Return once ``replicas`` replicas have everything ``client``'s primary wrote up to now (``WAIT``), or
    raise :class:`ReplicasBehind` after ``timeout_ms``. Returns how many acknowledged.

    ``WAIT`` waits for the last write of the connection it is sent on; a connection of the pool may have written
    nothing, and a commit found already applied wrote nothing. So ``field`` of hash ``key`` is set to ``value``
    first, on the same connection, in the same round trip: replicas apply the primary's writes in order, so one that
    has this write has every write before it, the commit included. On one Redis a plain client's pool; in a cluster
    ``client`` is the node's (:func:`home`)."""
    pool = client.connection_pool
    conn = pool.get_connection()
    try:
        conn.send_packed_command(conn.pack_commands([("HSET", key, field, str(value)),
                                                     ("WAIT", replicas, timeout_ms)]))
        conn.read_response()
        got = int(conn.read_response())
    except BaseException:
        conn.disconnect()  # its replies are unknown
        raise
    finally:
        pool.release(conn)
    return enough_replicas(got, replicas, timeout_ms, what)


def enough_replicas(got: int, replicas: int, timeout_ms: int, what: str) -> int:
    """``got``, WAIT's reply, or :class:`ReplicasBehind` when it is fewer than ``replicas``."""
    if got < replicas:
        raise ReplicasBehind(f"{what}: {got} of {replicas} replica(s) acknowledged it within {timeout_ms} ms "
                             "(REDIS_WAIT_REPLICAS, REDIS_WAIT_TIMEOUT); not done until they have it")
    return got



def with_retry(fn: Callable[[], T], what: str, *, attempts: int | None = None, give_up_after_s: float | None = 600.0,
               base_delay_s: float = 0.1, max_delay_s: float = 5.0, sleep: Callable[[float], None] = time.sleep,
               clock: Callable[[], float] = time.monotonic, when_full: Callable[[], str] | None = None,
               refresh: Callable[[], None] | None = None) -> T:
    """``fn()``, retried with exponential backoff while Redis is unreachable, up to ``attempts``
    calls and/or ``give_up_after_s`` seconds (``None``: no such limit).

    While Redis refuses writes because it is full (:func:`is_full`), ``fn()`` is retried for as long as that
    lasts (:class:`FullWait`): nothing was written, nothing is lost, and the work goes on once memory is freed.
    ``when_full`` (if given) is called first each time and may free some (what it did is said in the log).

    With ``refresh`` (a Redis Cluster's: :func:`refresh`), a slot that moved (``MOVED``, ``ASK``, ``TRYAGAIN``,
    ``CLUSTERDOWN``: a failover, a resharding) is retried as Redis being away is, ``refresh()`` called before each
    retry so that ``fn`` finds the slot's new node.

    A guarded commit whose watched record changed (``WatchError``) wrote nothing and is decided again at once.

    Only for idempotent work: a read, or a commit guarded by the batch id, so a
    retry after an ambiguous failure (sent, reply lost) changes nothing.

    Not redis-py's ``Retry``: that counts every failure against one budget and sleeps by itself, where a full Redis
    and a changed record are waited out without limit, a cluster's map is read again between tries, and the tests
    pass their own clock. ``Retry`` is used where it fits: a Sentinel that does not answer is not asked again.
    """
    deadline = None if give_up_after_s is None else clock() + give_up_after_s
    delay = base_delay_s
    attempt = 0
    full = FullWait(max_delay_s, clock=clock, first_s=base_delay_s)
    while True:
        try:
            out = fn()
        except (*TRANSIENT, *MOVED) as exc:
            if isinstance(exc, MOVED) and refresh is None:
                raise
            attempt += 1
            if (attempts is not None and attempt >= attempts) or (deadline is not None and clock() + delay > deadline):
                raise
            of = f"/{attempts}" if attempts is not None else ""
            log.warning("%s: Redis unavailable (%s); retry %d%s in %.1fs", what, exc, attempt, of, delay)
            sleep(delay)
            if refresh is not None:
                refresh()
            delay = min(max_delay_s, delay * 2)
            continue
        except redis.WatchError:
            # a watched key changed under a guarded commit (the job forgetting a retired server's fields): nothing
            # was written; read again and decide again
            log.info("%s: its record changed meanwhile; deciding again", what)
            continue
        except redis.ResponseError as exc:
            if not is_full(exc):
                raise
            freed = when_full() if when_full is not None else ""
            sleep(full.refused(f"{what}: Redis is full ({exc}){f'; {freed}' if freed else ''}"))
            continue
        full.taken(what)
        return out


READONLY = "READONLY"

class Transaction(CoreCommands):
    """One commit's transaction on a connection of its own, through redis-py's public API only.

    Reads run at once (after :meth:`watch`, as a redis-py pipeline's do before ``multi()``); after :meth:`multi`
    every command is packed and queued, and :meth:`execute` sends MULTI, the commands and EXEC in one write and
    reads the replies raw (no response callbacks: the commits read none). Big columns are queued packed with Arrow
    (:func:`streaming.store.batch.arrow_pack.queue_packed`: the same bytes as the connection packs). Every command
    method of redis-py's clients works here (``CoreCommands``), each going through :meth:`execute_command`.

    No retry inside: a connection lost while watching ends the transaction with a ``ConnectionError`` (a redis-py
    client would reconnect and read on without the WATCH), and the caller's :func:`with_retry` starts again on a
    new one. The connection goes back to the client's pool on :meth:`close` (``with``), unwatched."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.pool = client.connection_pool
        self.conn: Any = self.pool.get_connection()
        self.queued: list[bytes] | None = None  # None: immediate mode
        self.names: list[str] = []
        self.watching = False

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is None:
            return
        try:
            if self.watching:
                conn.send_command("UNWATCH")
                conn.read_response()
        except Exception:  # noqa: BLE001 - a connection that cannot unwatch is not handed to anyone else
            conn.disconnect()
        finally:
            self.watching = False
            self.pool.release(conn)

    def execute_command(self, *args: Any, **options: Any) -> Any:  # noqa: ANN401 - a reply, or self when queued
        if self.queued is not None:
            self.queue(str(args[0]), b"".join(self.conn.pack_command(*args)))
            return self
        try:
            self.conn.send_command(*args)
            return self.client.parse_response(self.conn, args[0], **options)
        except (redis.ConnectionError, redis.TimeoutError):
            self.conn.disconnect()
            raise

    def watch(self, *keys: str) -> None:
        self.execute_command("WATCH", *keys)
        self.watching = True

    def unwatch(self) -> None:
        self.execute_command("UNWATCH")
        self.watching = False

    def multi(self) -> None:
        """From here every command is queued, until :meth:`execute`."""
        self.queued, self.names = [], []

    def queue(self, name: str, packed: bytes) -> None:
        """Queue a command packed already (RESP): ``name`` says it in an error."""
        assert self.queued is not None, "multi() first"
        self.queued.append(packed)
        self.names.append(name)

    def execute(self) -> list[Any]:
        """Send the transaction and return its replies raw. Raises :class:`redis.WatchError` when a watched key
        changed, :class:`redis.ResponseError` for the first command Redis refused (naming it), and
        :class:`redis.exceptions.ReadOnlyError` when the node is a replica now (nothing ran); on any other failure
        the connection is closed (its replies are unknown). RESP2 or RESP3 alike: a commit's replies (integers,
        simple strings, a null EXEC) are the same in both."""
        assert self.queued is not None, "multi() first"
        conn, queued = self.conn, self.queued
        self.queued = None
        try:
            conn.send_packed_command([MULTI, *queued, EXEC], check_health=False)
            replies: list[Any] = []
            for _ in range(len(queued) + 2):
                try:
                    replies.append(conn.read_response(disable_decoding=True))
                except redis.ResponseError as exc:  # a reply, not a failure of the connection
                    replies.append(exc)
        except BaseException:
            conn.disconnect()
            raise
        finally:
            self.watching = False  # EXEC (or its refusal, or a closed connection) ends the WATCH
        return self._outcome(replies)

    def _outcome(self, replies: list[Any]) -> list[Any]:
        result = replies[-1]
        if result is None:
            raise redis.WatchError("Watched variable changed.")
        ran = result if isinstance(result, list) else [result]
        demoted = next((r for r in [*replies[:-1], *ran] if isinstance(r, Exception)
                        and (isinstance(r, redis.exceptions.ReadOnlyError) or str(r).startswith(READONLY))), None)
        if demoted is not None:  # a replica now (a failover): nothing ran; the next connection asks for the primary
            self.conn.disconnect()
            raise redis.exceptions.ReadOnlyError(str(demoted).removeprefix(READONLY).strip())
        queued = [(i, r) for i, r in enumerate(replies[1:-1]) if isinstance(r, Exception)]
        if isinstance(result, Exception):  # EXECABORT: a command was refused when queued
            i, first = queued[0] if queued else (-1, result)
            raise redis.ResponseError(self._where(first, i))
        for i, r in enumerate(result):
            if isinstance(r, Exception):
                raise redis.ResponseError(self._where(r, i))
        return list(result)

    def _where(self, error: Exception, i: int) -> str:
        if i < 0:
            return str(error)
        return f"Command # {i + 1} ({self.names[i]}) of pipeline caused error: {error}"


def execute(pipe: Transaction) -> list[Any]:
    """``pipe.execute()``: the transaction sent, its replies raw (:meth:`Transaction.execute`)."""
    return pipe.execute()


_BULK_LUA = """
local a, ttl = 2, ARGV[1]
for i = 1, #KEYS do
  local n = tonumber(ARGV[a])
  for j = a + 1, a + n, 2 do redis.call('HINCRBY', KEYS[i], ARGV[j], ARGV[j + 1]) end
  a = a + 1 + n
  if ttl ~= '' then redis.call('EXPIRE', KEYS[i], ttl) end
end
return #KEYS
"""
"""The script of :class:`Bulk`: ``ARGV[1]`` the TTL (empty: none), then per key the count of its HINCRBY arguments and
those (field, increment) pairs."""

_BULK_ARGS = 100_000
"""Arguments per script call: a bounded buffer whatever the fleet."""


class Bulk:
    """Many small counter increments and EXPIREs, a few script calls instead of a command each.

    A commit at 300 servers queues about 1,000 HINCRBYs and 500 EXPIREs a query, the online view 600 EXPIREs, every
    batch (``bench/driver_costs.py``); each costs the client a pack and two replies inside MULTI, and Redis a
    queue and a reply. Queued after the commands that write the same keys (an EXPIRE on a key not yet written
    does nothing), they land in the same transaction: Redis runs a script whole, and in MULTI after the commands
    before it. Big writes (SADD of a window's players, HSET of a server's players) stay commands: copied into
    Lua strings they cost Redis more than they save the client. Keys are passed as KEYS (one slot in a cluster,
    as the transaction's are)."""

    def __init__(self) -> None:
        self._incr: dict[str, list[Any]] = {}

    def hincrby(self, key: str, increments: dict[str, int]) -> None:
        """Add ``increments`` (zeros skipped) to ``key``'s fields; the key expires with the others."""
        self._incr.setdefault(key, []).extend(x for f, n in increments.items() if n for x in (f, n))

    def expire(self, key: str) -> None:
        """Only set ``key``'s TTL (it is written before this is queued)."""
        self._incr.setdefault(key, [])

    def queue(self, pipe: redis.client.Pipeline | redis.Redis, ttl_s: int | None) -> None:
        """Queue the increments on ``pipe`` (in its transaction), every key then expiring in ``ttl_s`` (None: kept)."""
        keys: list[str] = []
        argv: list[Any] = ["" if ttl_s is None else ttl_s]
        for key, pairs in self._incr.items():
            keys.append(key)
            argv.append(len(pairs))
            argv.extend(pairs)
            if len(argv) >= _BULK_ARGS:
                pipe.execute_command("EVAL", _BULK_LUA, len(keys), *keys, *argv)
                keys, argv = [], [argv[0]]
        if keys:
            pipe.execute_command("EVAL", _BULK_LUA, len(keys), *keys, *argv)
        self._incr = {}
