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
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.commands import CoreCommands
from redis.connection import parse_url
from redis.crc import key_slot
from redis.retry import Retry
from redis.sentinel import Sentinel

from watermark.schema.config import redact_url
from watermark.schema.sentinel import is_sentinel, parse_sentinel_url

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


def open_client(url: str, **kwargs: Any) -> redis.Redis:
    """A client for ``url``: a :class:`redis.cluster.RedisCluster` when the server there is a node of a Redis
    Cluster (``INFO cluster``), else a plain :class:`redis.Redis` (``kwargs`` go to either). Asks the server once
    per URL and process. When it cannot ask (Redis away), the plain client, which connects on first use as
    before: processes that start before their Redis (the monitor, the dashboard) still start; on a cluster such a
    client is refused ``MOVED`` for keys of other nodes (said, never silent) until the process starts again. A
    cluster client routes each command by its key's slot; what must stay on one node (a guarded commit, a raw-RESP
    writer) takes :func:`home` (decision 0018).

    A ``redis+sentinel://`` URL (:mod:`watermark.schema.sentinel`) gives the primary the Sentinels name, through
    redis-py's Sentinel pool: each connection asks them for the primary when it connects, so after a failover the
    next connection (a retry of :func:`with_retry`) is made to the new one, with the same client (decision 0023).
    Never a cluster."""
    if is_sentinel(url):
        return sentinel_client(url, **kwargs)
    cluster = _CLUSTER.get(url)
    if cluster is None:
        probe = redis.Redis.from_url(url, **kwargs)
        try:
            cluster = _CLUSTER[url] = bool(int(probe.info("cluster").get("cluster_enabled", 0)))
        except (redis.ConnectionError, redis.TimeoutError):
            return probe  # not cached: the next client asks again
        except redis.ResponseError:  # INFO refused (a producer's user): a cluster answers CLUSTER SLOTS
            cluster = _CLUSTER[url] = _answers_slots(probe)
            probe.close()
    if cluster:
        return RedisCluster.from_url(url, **{k: v for k, v in kwargs.items() if k != "retry"})
    return redis.Redis.from_url(url, **kwargs)


def _answers_slots(probe: redis.Redis) -> bool:
    """Whether the server is a Redis Cluster node, asked with ``CLUSTER SLOTS`` (a user without ``INFO``)."""
    try:
        probe.execute_command("CLUSTER", "SLOTS")
    except redis.ResponseError:  # "cluster support disabled", or refused too: used as a plain server
        return False
    return True


_CLUSTER: dict[str, bool] = {}
"""Per URL: whether the server there is a Redis Cluster node (:func:`open_client`)."""

SENTINEL_TIMEOUT_S = 2.0
"""How long a question to one Sentinel may take (connecting, and its answer) before the next is asked."""


def sentinel_client(url: str, **kwargs: Any) -> redis.Redis:
    """The primary named by a ``redis+sentinel://`` URL (:func:`open_client`): its credentials, database, TLS and
    options as a ``redis://`` URL gives them (redis-py parses them), ``kwargs`` over them; the Sentinels asked with
    their own credentials, the same TLS and a short timeout."""
    addr = parse_sentinel_url(url)
    options = parse_url(addr.node_url())
    for name in ("host", "port", "connection_class"):
        options.pop(name, None)
    options.update(kwargs)
    # a Sentinel that does not answer is not asked again: the next one is (redis-py's own retries would try it ten
    # times over some seconds, on every connection to the primary)
    asking: dict[str, Any] = {"socket_timeout": SENTINEL_TIMEOUT_S, "socket_connect_timeout": SENTINEL_TIMEOUT_S,
                              "retry": Retry(NoBackoff(), 0)}
    if addr.sentinel_password is not None:
        asking.update(username=addr.sentinel_username, password=addr.sentinel_password)
    if addr.tls:
        asking.update({k: v for k, v in options.items() if k.startswith("ssl_")}, ssl=True)
    sentinel = Sentinel(list(addr.sentinels), sentinel_kwargs=asking)
    return sentinel.master_for(addr.master, ssl=addr.tls, **options)


def is_cluster(client: object) -> bool:
    return isinstance(client, RedisCluster)


def home(client: redis.Redis, key: str) -> redis.Redis:
    """The plain client of the node that holds ``key``'s slot (``client`` itself on one Redis): a transaction
    whose keys all share ``key``'s hash tag runs there as on one Redis, WATCH, scripts and the raw-RESP fast paths
    (:func:`execute`) included. Should the slot move (a failover, a resharding) its commands are refused with
    ``MOVED``: a retry after :func:`refresh` finds the new node (``with_retry(refresh=...)``; a guarded commit is
    safe to run again)."""
    if isinstance(client, RedisCluster):
        node = client.get_node_from_key(key)
        return node.redis_connection or client.get_redis_connection(node)
    return client


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


FULL = "command not allowed when used memory"
"""Redis' refusal of a write once ``used_memory`` has reached ``maxmemory`` (policy ``noeviction``): ``-OOM command
not allowed when used memory > 'maxmemory'``; redis-py drops the ``OOM`` code (``OutOfMemoryError``), a raw
reply keeps it."""

FULL_SAY_EVERY_S = 60.0
"""While Redis stays full, how often a waiting writer says so again."""


def is_full(exc: BaseException) -> bool:
    """Redis refused a write because it is full (``maxmemory``). A transaction with such a refusal ran none of its
    commands (EXECABORT): nothing of it is in Redis, so writing it again later is safe."""
    return isinstance(exc, redis.exceptions.OutOfMemoryError) or (isinstance(exc, redis.ResponseError)
                                                                    and FULL in str(exc))


def memory_line(client: redis.Redis) -> str:
    """``used 95.1 of 96.0 MB (maxmemory, policy noeviction)``: what to say when Redis is full (best effort)."""
    try:
        mem = client.info("memory")
    except redis.RedisError:
        return "memory unknown"
    used, limit = int(mem.get("used_memory", 0)), int(mem.get("maxmemory", 0))
    return (f"used {used / 2**20:.1f} of {limit / 2**20:.1f} MB (maxmemory, policy "
            f"{mem.get('maxmemory_policy', '?')})")


class FullWait:
    """How a writer waits while Redis refuses writes because it is full (:func:`is_full`): each pause doubles up to
    ``max_s``; the refusal is said at once and then every :data:`FULL_SAY_EVERY_S`, the end of it once."""

    def __init__(self, max_s: float, logger: logging.Logger = log, clock: Callable[[], float] = time.monotonic,
                 first_s: float = 0.1) -> None:
        self.max_s, self.log, self.clock, self.first_s = max_s, logger, clock, first_s
        self.delay = first_s
        self.since: float | None = None
        self._said = float("-inf")

    def refused(self, what: str) -> float:
        """One more refusal of ``what`` (said when due): the pause to take before trying again."""
        now = self.clock()
        self.since = now if self.since is None else self.since
        if now - self._said >= FULL_SAY_EVERY_S:
            self.log.error("%s, for %.0f s: nothing of it was written; waiting for memory", what, now - self.since)
            self._said = now
        pause, self.delay = self.delay, min(self.max_s, self.delay * 2)
        return pause

    def taken(self, what: str) -> None:
        """A write went through: said once if Redis had been full."""
        if self.since is not None:
            self.log.warning("%s: Redis takes writes again after %.0f s full", what, self.clock() - self.since)
            self.since, self.delay, self._said = None, self.first_s, float("-inf")


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


try:
    import hiredis
except ImportError:  # pragma: no cover - redis-py works without it, only slower
    hiredis = None

READONLY = "READONLY"
"""The error code of a write sent to a replica: raw replies keep it (redis-py's parser makes it ``ReadOnlyError``)."""
MULTI = b"*1\r\n$5\r\nMULTI\r\n"
EXEC = b"*1\r\n$4\r\nEXEC\r\n"


class Replies:
    """Reads batched replies straight off the connection's socket with a hiredis Reader.

    redis-py's ``read_response`` costs about 3 us per reply (more than Redis takes
    for the XADD); this is ~0.3 us. Only used on a connection its channel holds
    exclusively, so no other reader shares the socket. Without hiredis it falls
    back to ``read_response``.
    """

    def __init__(self, conn: redis.connection.Connection) -> None:
        self.conn = conn
        sock = getattr(conn, "_sock", None)
        self.reader = hiredis.Reader() if hiredis is not None and sock is not None else None
        self.sock = sock

    def read(self, n: int) -> list[Any]:
        """The next ``n`` replies; error replies come back as exception objects, never raised."""
        reader = self.reader
        out: list[Any] = []
        if reader is None:
            for _ in range(n):
                try:
                    out.append(self.conn.read_response(disable_decoding=True))
                except redis.ResponseError as exc:
                    out.append(exc)
            return out
        gets, recv, feed, append = reader.gets, self.sock.recv, reader.feed, out.append
        while len(out) < n:
            reply = gets()
            if reply is False:
                data = recv(1 << 18)
                if not data:
                    raise redis.ConnectionError("Redis closed the connection while replies were pending")
                feed(data)
                continue
            append(reply)
        return out


class Transaction(CoreCommands):
    """One commit's transaction on a connection of its own, through redis-py's public API only.

    Reads run at once (after :meth:`watch`, as a redis-py pipeline's do before ``multi()``); after :meth:`multi`
    every command is packed and queued, and :meth:`execute` sends MULTI, the commands and EXEC in one write and
    reads the replies raw (no response callbacks: the commits read none). Big columns are queued packed with Arrow
    (:func:`watermark.store.commit.queue_packed`: the same bytes as the connection packs). Every command method of
    redis-py's clients works here (``CoreCommands``), each going through :meth:`execute_command`.

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
