"""A connection of our own to the Redis a redis-py client reaches, for a writer that holds it alone and reads its
replies a batch at a time (decision 0026).

redis-py's public ``Connection.read_response`` costs about 0.9 us a reply; a hiredis ``Reader`` fed straight from
the socket about 0.2 us, and a batch of 1,000 XADDs in a transaction is 1,003 replies. redis-py gives no public way
to its socket, so :class:`OwnConnection` opens one itself, as the client's own connection class would: the same
address (a Sentinel's primary asked when it connects), TLS settings, Unix socket, credentials, database, name and
timeouts, read from an unconnected instance of that class (``pool.connection_class(**pool.connection_kwargs)``).
:meth:`OwnConnection.of` gives None where it cannot (another connection class, OCSP checks, a connect hook of
the user's or a cluster's reading replicas): the
caller then uses one of redis-py's connections, slower but the same. It speaks RESP2 whatever the client's protocol
(redis-py 8 asks for RESP3): the writer's commands (XADD, SET, MULTI/EXEC, WAIT, GET, CLIENT, INFO) reply alike
in both, but for ``INFO``'s text, a bulk string here, a verbatim string there.

It speaks the few calls of redis-py's ``Connection`` its writer makes (``send_command``, ``send_packed_command``,
``read_response``, ``disconnect``, ``is_connected``) with their errors, plus :meth:`OwnConnection.read`: ``n``
replies as they are, error replies as ``hiredis.ReplyError`` objects (their code kept), never raised. It never
reconnects by itself.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import hiredis
import redis
from redis import exceptions as ex
from redis.cluster import RedisCluster
from redis.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.credentials import CredentialProvider, UsernamePasswordCredentialProvider
from redis.sentinel import SentinelConnectionPool, SentinelManagedConnection, SentinelManagedSSLConnection

KNOWN = (Connection, SSLConnection, UnixDomainSocketConnection, SentinelManagedConnection,
         SentinelManagedSSLConnection)
"""The connection classes whose connecting :class:`OwnConnection` repeats; any other (a subclass too) is redis-py's."""

ERRORS: dict[str, type[ex.RedisError]] = {
    "ASK": ex.AskError, "CLUSTERDOWN": ex.ClusterDownError, "CROSSSLOT": ex.ClusterCrossSlotError,
    "EXECABORT": ex.ExecAbortError, "LOADING": ex.BusyLoadingError, "MASTERDOWN": ex.MasterDownError,
    "MOVED": ex.MovedError, "NOAUTH": ex.AuthenticationError, "NOPERM": ex.NoPermissionError,
    "NOSCRIPT": ex.NoScriptError, "OOM": ex.OutOfMemoryError, "READONLY": ex.ReadOnlyError,
    "TRYAGAIN": ex.TryAgainError, "WRONGPASS": ex.AuthenticationError,
}
"""An error reply's code and the exception redis-py raises for it (its parser's table, public classes)."""

ERR_ERRORS: dict[str, type[ex.RedisError]] = {
    "invalid password": ex.AuthenticationError, "Client sent AUTH, but no password is set": ex.AuthenticationError,
    "AUTH <password> called without any password configured for the default user. Are you sure your configuration "
    "is correct?": ex.AuthenticationError, "max number of clients reached": ex.MaxClientsReachedError,
}
"""``ERR`` replies redis-py raises as an exception of their own (any other ``ERR`` as ``ResponseError``)."""


def error(reply: str) -> ex.RedisError:
    """An error reply as redis-py raises it: a known code's class (``ERR``'s by its text) with the code taken
    off, else ``ResponseError`` with the code.

    >>> said = lambda e: (type(e).__name__, str(e))
    >>> said(error("NOPERM this user has no permissions to run the 'info' command"))
    ('NoPermissionError', "this user has no permissions to run the 'info' command")
    >>> said(error("ERR no such client")), said(error("ERR invalid password"))
    (('ResponseError', 'no such client'), ('AuthenticationError', 'invalid password'))
    >>> said(error("WRONGTYPE Operation against a key holding the wrong kind of value"))
    ('ResponseError', 'WRONGTYPE Operation against a key holding the wrong kind of value')
    """
    code, _, rest = reply.partition(" ")
    if code in ERRORS:
        return ERRORS[code](rest)
    if code == "ERR":
        return ERR_ERRORS.get(rest, ex.ResponseError)(rest)
    return ex.ResponseError(reply)


@dataclass(frozen=True)
class Settings:
    """How the client's own connection class connects, read from an unconnected instance of it."""

    address: Callable[[], tuple[str, int]] | str
    """A Unix socket's path, or what gives the host and port when connecting (a Sentinel's primary is asked)."""
    tls: ssl.SSLContext | None
    credentials: CredentialProvider | None
    db: int
    client_name: str | None
    timeout: float | None
    connect_timeout: float | None
    keepalive: bool
    keepalive_options: dict[int, int | bytes]
    socket_type: int


def settings_of(client: redis.Redis) -> Settings | None:
    """The settings of ``client``'s connections (a plain client's: a cluster's node through ``home``), or None
    where :class:`OwnConnection` would not connect as they do."""
    pool = client.connection_pool
    cls = pool.connection_class
    if cls not in KNOWN:
        return None
    probe = cls(**pool.connection_kwargs)  # never connected: redis-py's own reading of its settings
    if (not plain_hook(probe.redis_connect_func) or getattr(probe, "ssl_validate_ocsp", False)
            or getattr(probe, "ssl_validate_ocsp_stapled", False)):
        return None
    address: Callable[[], tuple[str, int]] | str
    if isinstance(pool, SentinelConnectionPool):
        address = pool.get_master_address
    elif isinstance(probe, UnixDomainSocketConnection):
        address = probe.path
    else:
        host, port = probe.host, int(probe.port)
        address = lambda: (host, port)  # noqa: E731 - one line
    credentials = probe.credential_provider or (
        UsernamePasswordCredentialProvider(probe.username, probe.password) if probe.username or probe.password
        else None)
    return Settings(address, tls_context(probe) if isinstance(probe, SSLConnection) else None, credentials,
                    int(probe.db or 0), probe.client_name, probe.socket_timeout, probe.socket_connect_timeout,
                    bool(getattr(probe, "socket_keepalive", False)),
                    dict(getattr(probe, "socket_keepalive_options", None) or {}),
                    int(getattr(probe, "socket_type", 0) or 0))


def plain_hook(hook: Callable[..., object] | None) -> bool:
    """Whether a connection's connect hook does nothing but connect: none, or a Redis Cluster's own (every node's
    connection has it) where it reads from primaries only and the user gave none (``RedisCluster.on_connect``)."""
    owner = getattr(hook, "__self__", None)
    return hook is None or (isinstance(owner, RedisCluster) and hook == owner.on_connect
                            and not owner.read_from_replicas and getattr(owner, "load_balancing_strategy", None) is None
                            and owner.user_on_connect_func is None)


def tls_context(conn: SSLConnection) -> ssl.SSLContext:
    """The TLS context redis-py's ``SSLConnection`` makes of its settings (certificates, checks, versions)."""
    context = ssl.create_default_context()
    context.check_hostname = conn.check_hostname
    context.verify_mode = conn.cert_reqs
    for flag in conn.ssl_include_verify_flags or ():
        context.verify_flags |= flag
    for flag in conn.ssl_exclude_verify_flags or ():
        context.verify_flags &= ~flag
    if conn.certfile or conn.keyfile:
        context.load_cert_chain(certfile=conn.certfile, keyfile=conn.keyfile, password=conn.certificate_password)
    if conn.ca_certs is not None or conn.ca_path is not None or conn.ca_data is not None:
        context.load_verify_locations(cafile=conn.ca_certs, capath=conn.ca_path, cadata=conn.ca_data)
    if conn.ssl_min_version is not None:
        context.minimum_version = conn.ssl_min_version
    if conn.ssl_ciphers:
        context.set_ciphers(conn.ssl_ciphers)
    return context


def open_socket(s: Settings) -> tuple[socket.socket, str]:
    """A connected socket as redis-py's connection classes make it (``TCP_NODELAY``, keepalive, the connect
    timeout while connecting, TLS), and where it goes (for messages)."""
    if isinstance(s.address, str):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(s.connect_timeout)
        try:
            sock.connect(s.address)
        except OSError:
            sock.close()
            raise
        sock.settimeout(s.timeout)
        return sock, s.address
    host, port = s.address()
    err: OSError | None = None
    for family, socktype, proto, _, addr in socket.getaddrinfo(host, port, s.socket_type, socket.SOCK_STREAM):
        sock = socket.socket(family, socktype, proto)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if s.keepalive:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
                for k, v in s.keepalive_options.items():
                    sock.setsockopt(socket.IPPROTO_TCP, k, v)
            sock.settimeout(s.connect_timeout)
            sock.connect(addr)
            if s.tls is not None:
                sock = s.tls.wrap_socket(sock, server_hostname=host)
            sock.settimeout(s.timeout)
            return sock, f"{host}:{port}"
        except OSError as exc:
            err = exc
            sock.close()
    raise err or OSError("socket.getaddrinfo returned an empty list")


class OwnConnection:
    """One connection to Redis, made by :meth:`of` from a client's settings; see the module's docstring."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.sock: socket.socket | None = None
        self.reader = hiredis.Reader()
        self.where = ""

    @classmethod
    def of(cls, client: redis.Redis) -> OwnConnection | None:
        """A connection (not yet connected) to where ``client`` connects, as it does; None where it cannot."""
        settings = settings_of(client)
        return None if settings is None else cls(settings)

    @property
    def is_connected(self) -> bool:
        return self.sock is not None

    def connect(self) -> None:
        """Connect and say who we are (``AUTH``, ``CLIENT SETNAME``, ``SELECT``), as redis-py does on RESP2; called
        once, by the writer that then holds it. Errors as redis-py's (``ConnectionError``, ``TimeoutError``,
        ``AuthenticationError``); a failed connect leaves nothing open."""
        if self.sock is not None:
            return
        try:
            self.sock, self.where = open_socket(self.settings)
        except TimeoutError as exc:
            raise ex.TimeoutError("Timeout connecting to server") from exc
        except OSError as exc:
            raise ex.ConnectionError(f"Error {exc.errno} connecting to Redis. {exc.strerror or exc}.") from exc
        self.reader = hiredis.Reader()
        s = self.settings
        try:
            hello: list[tuple[Any, ...]] = []
            if s.credentials is not None:
                hello.append(("AUTH", *s.credentials.get_credentials()))
            if s.client_name:
                hello.append(("CLIENT", "SETNAME", s.client_name))
            if s.db:
                hello.append(("SELECT", s.db))
            for args in hello:
                self.send_command(*args)
            for args in hello:
                if self.read_response() not in (b"OK", "OK"):
                    raise ex.ConnectionError(f"{args[0]} was not accepted")
        except BaseException:
            self.disconnect()
            raise

    def send_packed_command(self, parts: list[bytes], check_health: bool = False) -> None:  # noqa: ARG002
        """Send ``parts`` as they are (``check_health``, redis-py's, is never done: nothing else uses the
        connection)."""
        if self.sock is None:
            raise ex.ConnectionError("the connection is closed")
        try:
            self.sock.sendall(b"".join(parts))
        except TimeoutError as exc:
            self.disconnect()
            raise ex.TimeoutError("Timeout writing to socket") from exc
        except OSError as exc:
            self.disconnect()
            raise ex.ConnectionError(f"Error while writing to {self.where}: {exc}") from exc

    def send_command(self, *args: Any) -> None:  # noqa: ANN401 - str, bytes or numbers, as redis-py takes them
        self.send_packed_command([hiredis.pack_command(args)])

    def read_response(self, disable_decoding: bool = True) -> Any:  # noqa: ANN401, ARG002 - a raw reply
        """The next reply, as bytes (nothing is decoded here); an error reply raised as redis-py raises it
        (:func:`error`), and a lost connection as ``ConnectionError`` / ``TimeoutError``."""
        try:
            reply = self.read(1)[0]
        except TimeoutError as exc:
            self.disconnect()
            raise ex.TimeoutError(f"Timeout reading from {self.where}") from exc
        except OSError as exc:
            self.disconnect()
            raise ex.ConnectionError(f"Error while reading from {self.where}: {exc}") from exc
        if isinstance(reply, hiredis.ReplyError):
            raise error(str(reply))
        return reply

    def read(self, n: int) -> list[Any]:
        """The next ``n`` replies; error replies come back as ``hiredis.ReplyError`` objects, never raised. A lost
        connection raises ``OSError`` (``redis.ConnectionError`` when Redis closed it)."""
        sock = self.sock
        if sock is None:
            raise ex.ConnectionError("the connection is closed")
        reader = self.reader
        out: list[Any] = []
        gets, recv, feed, append = reader.gets, sock.recv, reader.feed, out.append
        while len(out) < n:
            reply = gets()
            if reply is False:
                data = recv(1 << 18)
                if not data:
                    raise ex.ConnectionError("Redis closed the connection while replies were pending")
                feed(data)
                continue
            append(reply)
        return out

    def disconnect(self) -> None:
        """Close the socket (idempotent); replies not read are dropped with it."""
        sock, self.sock = self.sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
