"""How a client reaches Redis: one server, a Redis Cluster or the primary Sentinels name
(:func:`open_client`), the node that holds a key (:func:`home`), waiting while Redis is full (:class:`FullWait`),
and batched replies read off a connection a writer holds alone (:class:`Replies`). The producers and the pipeline
share it; it needs redis-py and nothing of the pipeline."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.connection import parse_url
from redis.retry import Retry
from redis.sentinel import Sentinel

from watermark_client.sentinel import is_sentinel, parse_sentinel_url

if TYPE_CHECKING:
    from watermark_client.own_connection import OwnConnection

log = logging.getLogger(__name__)

def open_client(url: str, **kwargs: Any) -> redis.Redis:
    """A client for ``url``: a :class:`redis.cluster.RedisCluster` when the server there is a node of a Redis
    Cluster (``INFO cluster``), else a plain :class:`redis.Redis` (``kwargs`` go to either). Asks the server once
    per URL and process. When it cannot ask (Redis away), the plain client, which connects on first use as
    before: processes that start before their Redis (the monitor, the dashboard) still start; on a cluster such a
    client is refused ``MOVED`` for keys of other nodes (said, never silent) until the process starts again. A
    cluster client routes each command by its key's slot; what must stay on one node (a guarded commit, a raw-RESP
    writer) takes :func:`home` (decision 0018).

    A ``redis+sentinel://`` URL (:mod:`watermark_client.sentinel`) gives the primary the Sentinels name, through
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

try:
    import hiredis
except ImportError:  # pragma: no cover - redis-py works without it, only slower
    hiredis = None

MULTI = b"*1\r\n$5\r\nMULTI\r\n"
EXEC = b"*1\r\n$4\r\nEXEC\r\n"


def own_connection(client: redis.Redis) -> OwnConnection | None:
    """A connection of our own to where ``client`` (a plain client: a cluster's node through :func:`home`)
    connects, for a writer that holds it alone and reads its replies in batches
    (:class:`~watermark_client.own_connection.OwnConnection`, decision 0026); None without hiredis, or where it
    cannot connect as the client does: the writer then takes one of the client's pool."""
    if hiredis is None:
        return None
    from watermark_client.own_connection import OwnConnection

    return OwnConnection.of(client)


class Replies:
    """Reads batched replies through redis-py's public ``read_response``, one call a reply (~0.9 us each: hiredis
    parses underneath); for a writer on one of redis-py's connections, where :func:`own_connection` gives none
    (whose :meth:`~watermark_client.own_connection.OwnConnection.read` takes ~0.2 us a reply, decision 0026). Error
    replies come back as exception objects, never raised."""

    def __init__(self, conn: redis.connection.AbstractConnection) -> None:
        self.conn = conn

    def read(self, n: int) -> list[Any]:
        """The next ``n`` replies."""
        out: list[Any] = []
        for _ in range(n):
            try:
                out.append(self.conn.read_response(disable_decoding=True))
            except redis.ResponseError as exc:
                out.append(exc)
        return out
