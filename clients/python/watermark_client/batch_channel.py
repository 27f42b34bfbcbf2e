"""Batches of XADDs that are written exactly once, even across a lost connection or a Redis restart.

Shared by the generator's :class:`~streaming.store.stream_writer.StreamWriter` and the public
:class:`~watermark_client.Producer` (decision record 0010). Each batch is one transaction, packed by hand as a
single RESP buffer (decision 0008: redis-py's per-command packing costs more than the XADD)::

    MULTI
    XADD {stream} * e {payload}      (one per event)
    SET {marker} {seq} EX {ttl}
    EXEC

``{marker}`` belongs to this producer alone (``{ns}:producer:{id}``, :func:`~watermark_client.stream.producer_key`)
and ``seq`` counts its batches from 1. A transaction is atomic, in memory and in the append-only file, so after a lost
connection the marker says exactly which batches Redis has: :meth:`BatchChannel.attach` reads it on the new
connection and sends again only the batches above it. Before that it closes the old connection on the server
(``CLIENT KILL ID``, when the server is the same instance), so a transaction still sitting in the server's
buffers cannot run after the resend.

Up to ``depth`` batches are in flight on the connection (sent, not yet confirmed), so Redis works on one while the
caller builds the next. The connection is the channel's own, its replies read straight off its socket with a
hiredis ``Reader`` (:class:`~watermark_client.own_connection.OwnConnection`, decision 0026); where it cannot connect
as the client does, one of the client's pool, read through redis-py's public API (:class:`Replies`).

With ``wait_replicas`` each transaction is followed by ``WAIT {replicas} {timeout}`` on the same connection, and
:attr:`Batch.replicas` says how many replicas had it (and everything before it: replication is one ordered stream)
when WAIT returned. The caller decides what too few means (:class:`~watermark_client.Producer` keeps such a batch
unconfirmed); :meth:`BatchChannel.wait_again` asks again.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from watermark_client.connection import EXEC, FULL, FULL_SAY_EVERY_S, MULTI, Replies, home, own_connection
from watermark_client.stream import input_shard_key

if TYPE_CHECKING:
    from watermark_client.own_connection import OwnConnection

log = logging.getLogger(__name__)

LOST_REDIS = (redis.ConnectionError, redis.TimeoutError, OSError)
"""What losing Redis looks like to a writer: its raw reply path raises OSError."""

MARKER_TTL_S = 7 * 86_400
"""How long a producer's marker outlives its last batch: a producer cut off from Redis for longer than this may
write its in-flight batches twice (decision 0010)."""


class WriteError(RuntimeError):
    """Redis rejected some XADDs (e.g. an explicit ID not above the stream's last ID)."""


class RedisFull(WriteError):
    """Redis refused a batch because it is at its ``maxmemory``: the transaction ran none of its commands, so nothing
    of it is in Redis. :attr:`batch` (no longer in flight) is to be sent again once memory is freed, as a new
    batch: those sent behind it may have been written meanwhile."""

    def __init__(self, message: str, batch: Batch) -> None:
        super().__init__(message)
        self.batch = batch


class BacklogGate:
    """Backpressure on the input: before a writer sends a batch, the stream's length (read at most every
    ``every_s``, on a connection of its own) must be under ``max_entries``; at it or above, the writer waits and
    looks again until the readers have caught up and the job's trim has made room. So the stream stays within the
    bound plus what one look's interval lets through, however far the writers outrun the job, and nothing a
    reader still needs is trimmed. ``max_entries`` None or 0: no bound. With ``shards``, the input is that many
    streams (``input_shard_key(stream_key, k)``) and the bound is on their sum."""

    def __init__(self, client: redis.Redis, stream_key: str, max_entries: int | None, every_s: float = 0.1,
                 logger: logging.Logger = log, clock: Callable[[], float] = time.monotonic, shards: int = 1) -> None:
        self.client, self.stream_key, self.max_entries = client, stream_key, max_entries or None
        self.streams = [input_shard_key(stream_key, k) for k in range(shards)]
        self.every_s, self.log, self.clock = every_s, logger, clock
        self._looked = float("-inf")
        self.waited = 0
        """Times a writer found the stream at its bound."""

    def admit(self, wait: Callable[[float], bool]) -> bool:
        """Return once the stream has room (True), or False when ``wait(seconds)`` (the writer's pause, True to
        stop) asks to stop first."""
        if self.max_entries is None or self.clock() - self._looked < self.every_s:
            return True
        since: float | None = None
        said = float("-inf")
        pause = self.every_s
        while True:
            pipe = self.client.pipeline(transaction=False)
            for stream in self.streams:
                pipe.xlen(stream)
            length = sum(int(n) for n in pipe.execute())
            self._looked = now = self.clock()
            if length < self.max_entries:
                if since is not None:
                    self.log.warning("the input stream %s has room again after %.0f s (%s entries)", self.stream_key,
                                     now - since, f"{length:,}")
                return True
            if since is None:
                since = now
                self.waited += 1
            if now - said >= FULL_SAY_EVERY_S:
                self.log.warning("the input stream %s holds %s entries, its bound is %s (STREAM_MAX_ENTRIES): its "
                                 "readers are behind; holding new events until they catch up", self.stream_key,
                                 f"{length:,}", f"{self.max_entries:,}")
                said = now
            if wait(pause):
                return False
            pause = min(1.0, pause * 2)


def _command(*args: bytes) -> bytes:
    """One command packed as RESP."""
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def xadd_head(stream_key: str) -> str:
    """The start of ``XADD {stream_key} * e`` (append ``${len}\\r\\n{payload}\\r\\n``): latin-1 text."""
    return f"*5\r\n$4\r\nXADD\r\n${len(stream_key.encode())}\r\n{stream_key.encode().decode('latin-1')}\r\n" \
           f"$1\r\n*\r\n$1\r\ne\r\n"


@dataclass(slots=True)
class Batch:
    """One batch of XADDs: its RESP ``frames`` (without MULTI/EXEC), how many, and the caller's ``info``."""

    seq: int
    frames: bytes
    n: int
    info: Any = None
    last_id: str | None = None
    """The last XADD's entry ID, once confirmed (None when the marker confirmed it after a lost connection)."""
    replicas: int | None = None
    """With ``wait_replicas``: the replicas WAIT counted once it was confirmed (None: not asked)."""


class BatchChannel:
    """Sends batches of XADDs on one connection it holds alone; see the module's docstring.

    ``idempotent=False`` sends plain batched XADDs (no MULTI, no marker) and, after a lost connection,
    sends every unconfirmed batch again: at least once. It exists to measure what the transaction costs.
    """

    def __init__(self, stream_key: str, marker_key: str, *, idempotent: bool = True,
                 ttl_s: int = MARKER_TTL_S, wait_replicas: int = 0, wait_timeout_ms: int = 1_000) -> None:
        if ttl_s < 1:
            raise ValueError(f"ttl_s must be at least 1, got {ttl_s}")
        if wait_replicas < 0 or (wait_replicas and wait_timeout_ms < 1):
            # WAIT with a timeout of 0 blocks for ever: a replica that never comes must not hang the writer
            raise ValueError(f"wait_replicas must not be negative and wait_timeout_ms at least 1, got "
                             f"{wait_replicas} and {wait_timeout_ms}")
        if wait_replicas and not idempotent:
            raise ValueError("wait_replicas needs idempotent batches (the marker settles them after a failover)")
        self.wait_replicas = wait_replicas
        self._wait = _command(b"WAIT", b"%d" % wait_replicas, b"%d" % wait_timeout_ms) if wait_replicas else b""
        self.stream_key = stream_key
        self.marker_key = marker_key
        self.idempotent = idempotent
        self.ttl_s = ttl_s
        self.seq = 0
        self.inflight: deque[Batch] = deque()
        self._settled: list[Batch] = []  # confirmed by an attach that then failed: the next one returns them
        self.conn: redis.connection.AbstractConnection | OwnConnection | None = None
        self._pool: redis.ConnectionPool | None = None  # where the connection goes back (None: the channel's own)
        self._replies: Replies | OwnConnection | None = None
        self._server: tuple[str, int] | None = None  # (run_id, client id) of the connection in use
        self._fence_refused = False
        self.recovered = 0
        """Batches a recovery found already in Redis (confirmed by the marker, not sent again)."""
        self.resent = 0
        """Batches a recovery sent again."""
        key = marker_key.encode()
        self._set_head = b"*5\r\n$3\r\nSET\r\n$%d\r\n%s\r\n" % (len(key), key)
        self._ex = b"$2\r\nEX\r\n$%d\r\n%d\r\n" % (len(str(ttl_s)), ttl_s)

    # ------------------------------------------------------------------ connection

    def attach(self, client: redis.Redis) -> list[Batch]:
        """Connect (the channel's own connection, else one of ``client``'s pool: see the module's docstring); if
        batches were in flight on a lost one, settle them: the ones Redis has are confirmed, the others sent again
        and confirmed. Returns the settled batches in order (each confirmed exactly once, by this call or by
        :meth:`confirm`). Batches settled by an attach that then failed (the connection lost again while sending
        the rest) are returned by the next one: they are in Redis, and their sender must hear it once."""
        self.detach()
        node = home(client, self.stream_key)  # a cluster's: the stream's node (decision 0018)
        own = own_connection(node)
        conn = own or node.connection_pool.get_connection()
        try:
            conn.connect()
            self.conn, self._pool = conn, None if own else node.connection_pool
            self._replies = own or Replies(conn)  # type: ignore[arg-type]
            if own is None:
                conn.register_connect_callback(self._refuse_reconnect)  # type: ignore[union-attr]
            old, self._server = self._server, self._identify(conn)
            if not self.inflight:
                return self._take_settled()
            if not self.idempotent:
                self._resend()
                return self._take_settled()
            self._fence(old)
            conn.send_command("GET", self.marker_key)
            marker = conn.read_response(disable_decoding=True)
            have = int(marker) if marker is not None else 0
            found = 0
            while self.inflight and self.inflight[0].seq <= have:
                self._settled.append(self.inflight.popleft())
                found += 1
            self.recovered += found
            if found:
                log.info("after a lost connection: %d batch(es) in flight were committed (marker %s at %d)",
                         found, self.marker_key, have)
            self._resend()
            if self.wait_replicas:
                self._replicated(have)
            return self._take_settled()
        except BaseException:
            self.detach(broken=True)
            raise

    def _replicated(self, have: int) -> None:
        """How many replicas have the batches the marker confirmed: the old connection wrote them, so WAIT after a
        write of this one covers them (replication is one ordered stream): a batch sent again, else the marker
        written again as it is."""
        unknown = [b for b in self._settled if b.replicas is None]
        if not unknown or self.conn is None or self._replies is None:
            return
        resent = [b.replicas for b in self._settled if b.replicas is not None]
        if resent:
            n = resent[-1]
        else:
            self.conn.send_packed_command([self._marker(have) + self._wait], check_health=False)
            written, waited = self._replies.read(2)
            if isinstance(written, Exception):
                raise WriteError(f"rewriting the marker {self.marker_key!r} failed: {written}")
            n = self._replicas(waited)
        for b in unknown:
            b.replicas = n

    def _identify(self, conn: redis.connection.AbstractConnection | OwnConnection) -> tuple[str, int] | None:
        """(run_id, client id) of this connection, for :meth:`_fence`; None when the user may not ask
        (``INFO`` is not a producer's, :mod:`streaming.schema.acl`): a lost connection is then not fenced."""
        if not self.idempotent:
            return None
        conn.send_command("CLIENT", "ID")
        conn.send_command("INFO", "server")
        client_id = conn.read_response()
        try:
            info = conn.read_response(disable_decoding=True)
        except redis.exceptions.NoPermissionError as exc:
            if not self._fence_refused:
                log.warning("cannot tell this Redis server apart (%s): a lost connection will not be closed on the "
                            "server before its batches are sent again (docs/operations.md, \"Redis users\")", exc)
                self._fence_refused = True
            return None
        text = info.decode() if isinstance(info, bytes) else str(info)
        run_id = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("run_id:")),
                      "")
        return run_id, int(client_id)

    def _fence(self, old: tuple[str, int] | None) -> None:
        """Close the lost connection on the server if it is the same server (a socket timeout leaves it open,
        with a transaction perhaps still unread in its buffers): after this no old batch can run."""
        if old is None or self._server is None or old[0] != self._server[0] or self.conn is None:
            return  # another server instance: the old one's buffers went with it
        self.conn.send_command("CLIENT", "KILL", "ID", str(old[1]))
        try:
            self.conn.read_response()
        except redis.ResponseError as exc:
            if "no such client" in str(exc).lower():
                return
            if not self._fence_refused:
                log.warning("cannot close the lost connection on the server (%s): a batch still in its buffers "
                            "could run after being sent again", exc)
                self._fence_refused = True

    def _resend(self) -> None:
        """Send every batch in flight again, in order, and confirm them (into ``_settled`` one by one, so that
        a connection lost half way loses none of the confirmations)."""
        batches = list(self.inflight)
        if batches:
            log.info("after a lost connection: sending %d batch(es) again", len(batches))
            self.resent += len(batches)
        for b in batches:
            self._send(b)
        for _ in batches:
            self._settled.append(self.confirm())

    def _take_settled(self) -> list[Batch]:
        settled, self._settled = self._settled, []
        return settled

    def detach(self, broken: bool = True) -> None:
        """Give the connection back (``broken``: disconnect it first, its replies are not all read)."""
        conn, pool = self.conn, self._pool
        self.conn = self._pool = self._replies = None
        if conn is None:
            return
        if pool is None or broken or self.inflight:  # (the channel's own is never reused)
            conn.disconnect()
        if pool is None:
            return
        conn.deregister_connect_callback(self._refuse_reconnect)  # type: ignore[union-attr]
        pool.release(conn)

    def _refuse_reconnect(self, conn: object) -> None:
        """Called by redis-py when a connection of its pool the channel holds connects again: redis-py would
        quietly send on a new socket, and a lost connection must go through :meth:`attach`."""
        raise redis.ConnectionError("the connection was lost: attach again")

    # ------------------------------------------------------------------ batches

    def send(self, frames: bytes, n: int, info: Any = None) -> Batch:  # noqa: ANN401 - the caller's own
        """Send one batch; it stays in flight until :meth:`confirm` (or a recovery) settles it. A batch whose
        send fails is still in flight: the next :meth:`attach` settles it."""
        self.seq += 1
        batch = Batch(self.seq, frames, n, info)
        self.inflight.append(batch)
        self._send(batch)
        return batch

    def hold(self, frames: bytes, n: int, info: Any = None) -> Batch:  # noqa: ANN401 - the caller's own
        """Put one batch in flight without sending it (the connection is known lost): the next :meth:`attach`
        sends it, as a batch whose send failed."""
        self.seq += 1
        batch = Batch(self.seq, frames, n, info)
        self.inflight.append(batch)
        return batch

    def _send(self, batch: Batch) -> None:
        conn = self.conn
        if conn is None or self._replies is None or (self._pool is None and not conn.is_connected):
            # (one of redis-py's connecting again refuses to: _refuse_reconnect)
            raise redis.ConnectionError("the connection was lost: attach again")
        if not self.idempotent:
            conn.send_packed_command([batch.frames], check_health=False)
            return
        conn.send_packed_command([b"".join((MULTI, batch.frames, self._marker(batch.seq), EXEC, self._wait))],
                                 check_health=False)

    def _marker(self, seq: int) -> bytes:
        """``SET {marker} {seq} EX {ttl}``, packed."""
        value = b"%d" % seq
        return b"".join((self._set_head, b"$%d\r\n%s\r\n" % (len(value), value), self._ex))

    def wait_again(self) -> int:
        """With ``wait_replicas``, nothing in flight: WAIT again on the connection (it covers every batch it sent)
        and return how many replicas have them all."""
        if self.conn is None or self._replies is None or self.inflight:
            raise redis.ConnectionError("wait_again needs an attached connection with nothing in flight")
        self.conn.send_packed_command([self._wait], check_health=False)
        return self._replicas(self._replies.read(1)[0])

    def _replicas(self, reply: Any) -> int:  # noqa: ANN401 - a raw reply
        if not isinstance(reply, int):  # e.g. WAIT sent to a replica: the writer is not on a primary
            raise WriteError(f"WAIT for {self.wait_replicas} replica(s) failed: {reply}")
        return reply

    def confirm(self) -> Batch:
        """Read the oldest batch's replies (all of them, so the connection stays usable); raises
        :class:`WriteError` naming how many XADDs Redis rejected and the first reason."""
        batch = self.inflight[0]
        if self._replies is None:
            raise redis.ConnectionError("no connection: attach first")
        n = batch.n
        if self.idempotent:
            replies = self._replies.read(n + 3 + bool(self.wait_replicas))  # OK, n + 1 QUEUED, EXEC's array, WAIT's
            if self.wait_replicas:
                *replies, waited = replies
            queued, results = replies[:-1], replies[-1]
            if isinstance(results, Exception):  # EXECABORT (a command did not queue) or a refused EXEC: nothing ran
                refused = [r for r in queued if isinstance(r, Exception)]
                self.inflight.popleft()
                first = refused[0] if refused else results
                if FULL in str(first):
                    raise RedisFull(f"Redis is full: {n} XADDs to {self.stream_key!r} refused, none written: {first}",
                                    batch)
                raise WriteError(f"{n} of {n} XADDs to {self.stream_key!r} failed: {first}")
            xadds = results[:-1]
        else:
            xadds = self._replies.read(n)
        self.inflight.popleft()
        if self.wait_replicas:
            batch.replicas = self._replicas(waited)
        errors = [r for r in xadds if type(r) is not bytes]
        if errors:
            raise WriteError(f"{len(errors)} of {n} XADDs to {self.stream_key!r} failed: {errors[0]}")
        if xadds:
            last = xadds[-1]
            batch.last_id = last.decode() if isinstance(last, bytes) else str(last)
        return batch
