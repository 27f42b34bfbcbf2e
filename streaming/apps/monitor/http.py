"""The monitor's HTTP server: ``/metrics`` and ``/annotations`` on one port, bounded whatever a client sends.

The monitor is all the alerting there is, so nothing a client sends may knock it over. The rule, in words:

- A request's line and headers are read first (16 KiB at most, else 431), and judged by :func:`admit` before a
  byte of its body is read: a ``Host`` this monitor does not serve is refused (421), a ``POST`` without a valid
  ``Content-Length`` is refused (411 when missing or chunked, 400 when negative or not a number, 413 past
  ``MAX_BODY``), without the token (401), from a foreign ``Origin`` (403), or, with no token configured, when it is
  not ``application/json`` (415: a cross-site form cannot send that without the browser asking first, which this
  server never allows).
- A whole request (line, headers and body) must arrive within ``timeout_s`` (10 s); the connection is then closed.
- At most ``max_connections`` (128) are open at once: one more closes the oldest that is still sending its request,
  so idle or slow clients cannot starve a scrape. One request a connection (``Connection: close``).
- The connections are read by one event loop; the applications (which read Redis) run on ``workers`` (4) threads.
  Memory is bounded by connections × (headers + body) and threads by ``workers`` + 1.

``Host`` is served when it is an IP address (DNS rebinding needs a name), ``localhost``, or a name in ``hosts``
(``METRICS_HOSTS``, e.g. the Kubernetes service's name that Prometheus scrapes).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from io import BytesIO
from typing import Any
from urllib.parse import unquote, urlsplit

MAX_BODY = 16_384
MAX_HEAD = 16_384
REQUEST_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 128
WORKERS = 4

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

REFUSED_WITHOUT_TOKEN = ("POST /annotations is refused: the monitor listens beyond loopback and has no token; set "
                         "ANNOTATIONS_TOKEN (or ANNOTATIONS_TOKEN_FILE) on the monitor and send it as "
                         "'Authorization: Bearer <token>'")
_BEARER = 'Bearer realm="annotations"'


@dataclass(frozen=True)
class Gate:
    """Who this server answers: the token a ``POST`` needs (None: open on loopback, refused beyond it), whether it
    listens on loopback only, and the ``Host`` names it serves beside IP addresses and ``localhost``."""

    token: str | None = None
    loopback: bool = True
    hosts: frozenset[str] = frozenset()

    def serves(self, host: str) -> bool:
        """Whether ``host`` (a ``Host`` header or an ``Origin``'s host, port or not) names this server."""
        name = _hostname(host)
        if not name:
            return False
        if name == "localhost" or name in self.hosts:
            return True
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True


@dataclass(frozen=True)
class Refusal:
    status: str
    error: str
    headers: tuple[tuple[str, str], ...] = ()


def _hostname(host: str) -> str:
    """``Host``'s name without the port, lower case; ``[::1]:9108`` is ``::1``."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    if host.count(":") > 1:  # a bare IPv6 address (not valid in Host, but never a name)
        return host
    return host.partition(":")[0].rstrip(".")


def admit(method: str, headers: Mapping[str, str], gate: Gate) -> Refusal | None:
    """The refusal of a request from its method and headers (names lower case), before its body is read; None to
    read the body (``content-length`` bytes) and answer it.

    >>> g = Gate(token=None, loopback=True)
    >>> admit("GET", {"host": "127.0.0.1:9108"}, g) is None
    True
    >>> admit("GET", {"host": "attacker.example"}, g).status
    '421 Misdirected Request'
    >>> admit("POST", {"host": "localhost", "content-length": "-1"}, g).status
    '400 Bad Request'
    """
    host = headers.get("host")
    if host is None:
        return Refusal("400 Bad Request", "a request names the server it is for: HTTP/1.1 needs a Host header")
    if not gate.serves(host):
        return Refusal("421 Misdirected Request",
                       f"Host {host[:100]!r} is not a name this monitor serves; add it to METRICS_HOSTS")
    if method in ("GET", "HEAD"):
        return None
    if method != "POST":
        return Refusal("405 Method Not Allowed", "GET or POST", (("Allow", "GET, HEAD, POST"),))
    if "transfer-encoding" in headers or "content-length" not in headers:
        return Refusal("411 Length Required", "a POST needs Content-Length (not chunked)")
    size = headers["content-length"].strip()
    if not size.isascii() or not size.isdigit():
        return Refusal("400 Bad Request", f"Content-Length {size[:40]!r} is not a byte count")
    if int(size) > MAX_BODY:
        return Refusal("413 Payload Too Large", f"at most {MAX_BODY} bytes")
    if (refusal := _token_refusal(headers.get("authorization", ""), gate)) is not None:
        return refusal
    origin = headers.get("origin")
    if origin is not None and not _same_site(origin, host, gate):
        return Refusal("403 Forbidden", f"a POST from another site ({origin[:100]!r}) is refused")
    kind = headers.get("content-type", "").partition(";")[0].strip().lower()
    if gate.token is None and kind != "application/json":
        return Refusal("415 Unsupported Media Type", "POST /annotations takes Content-Type: application/json")
    return None


def _same_site(origin: str, host: str, gate: Gate) -> bool:
    """Whether a browser's ``Origin`` is this server itself (the ``Host`` it asked, port included) or a name
    configured in ``METRICS_HOSTS``: a page of any other site, this machine's other ports included, is not.

    >>> g = Gate(hosts=frozenset({"ops.example"}))
    >>> [_same_site(o, "127.0.0.1:9108", g) for o in ("http://127.0.0.1:9108", "http://127.0.0.1:3000",
    ...                                                "http://203.0.113.7", "https://ops.example", "null")]
    [True, False, False, True, False]
    """
    netloc = urlsplit(origin).netloc.lower() if "://" in origin else ""
    return bool(netloc) and (netloc == host.strip().lower() or _hostname(netloc) in gate.hosts)


def _token_refusal(authorization: str, gate: Gate) -> Refusal | None:
    if gate.token is None:  # beyond loopback a token is needed and none is configured: no token could pass
        return None if gate.loopback else Refusal("401 Unauthorized", REFUSED_WITHOUT_TOKEN,
                                                  (("WWW-Authenticate", _BEARER),))
    scheme, _, given = authorization.partition(" ")
    # headers arrive as latin-1 text: back to the bytes sent, compared in constant time.
    if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode("latin-1", "replace"),
                                                          gate.token.encode()):
        return None
    if not given.strip():
        return Refusal("401 Unauthorized", "POST /annotations needs the monitor's token: 'Authorization: Bearer "
                                           "<token>'", (("WWW-Authenticate", _BEARER),))
    return Refusal("401 Unauthorized", "the token is not the monitor's",
                   (("WWW-Authenticate", f'{_BEARER}, error="invalid_token"'),))


def _reply(status: str, headers: Iterable[tuple[str, str]], body: bytes, head: bool = False) -> bytes:
    lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers if k.lower() not in ("connection",
                                                                                          "content-length")),
             f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1", "replace") + (b"" if head else body)


def _refused(r: Refusal) -> bytes:
    body = json.dumps({"error": r.error}).encode()
    return _reply(r.status, (("Content-Type", "application/json"), *r.headers), body)


@dataclass
class _Conn:
    writer: asyncio.StreamWriter
    reading: bool = True


@dataclass
class Server:
    """A running server: ``close()`` stops it. ``port`` is the one bound (0 asks for a free one)."""

    port: int
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    pool: ThreadPoolExecutor

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.pool.shutdown(wait=False, cancel_futures=True)


def serve(address: str, port: int, app: WsgiApp, gate: Gate, *, timeout_s: float = REQUEST_TIMEOUT_S,
          max_connections: int = MAX_CONNECTIONS, workers: int = WORKERS) -> Server:
    """Serve ``app`` on its own thread; raises OSError when it cannot listen."""
    loop = asyncio.new_event_loop()
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="http-app")
    conns: dict[int, _Conn] = {}
    counter = iter(range(sys.maxsize))

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        me = next(counter)
        conns[me] = conn = _Conn(writer)
        if len(conns) > max_connections:  # the oldest still sending its request goes
            oldest = next((k for k, c in conns.items() if c.reading and k != me), None)
            if oldest is None:  # every other one is being answered: this one waits for none of them
                conns.pop(me)
                writer.write(_refused(Refusal("503 Service Unavailable", "too many requests at once")))
                writer.close()
                return
            conns.pop(oldest).writer.transport.abort()
        try:
            try:
                request = await asyncio.wait_for(_read(reader, gate), timeout_s)
            except TimeoutError:
                writer.write(_refused(Refusal("408 Request Timeout", f"the request took over {timeout_s:g} s")))
                return
            conn.reading = False
            if isinstance(request, Refusal):
                writer.write(_refused(request))
                return
            environ = _environ(request, address, port)
            out = await loop.run_in_executor(pool, _call, app, environ)
            writer.write(_reply(*out, head=request.method == "HEAD"))
            await asyncio.wait_for(writer.drain(), timeout_s)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, TimeoutError):
            pass
        finally:
            conns.pop(me, None)
            writer.close()

    async def start() -> asyncio.AbstractServer:
        return await asyncio.start_server(handle, address, port, limit=MAX_HEAD, backlog=128)

    server = loop.run_until_complete(start())  # OSError here when it cannot listen
    bound = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
    thread = threading.Thread(target=loop.run_forever, name="http", daemon=True)
    thread.start()
    return Server(bound, loop, thread, pool)


@dataclass(frozen=True)
class _Request:
    method: str
    target: str
    version: str
    headers: dict[str, str]
    body: bytes


async def _read(reader: asyncio.StreamReader, gate: Gate) -> _Request | Refusal:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        return Refusal("431 Request Header Fields Too Large", f"at most {MAX_HEAD} bytes of headers")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return Refusal("400 Bad Request", "not an HTTP/1.x request line")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            return Refusal("400 Bad Request", "a malformed header line")
        key = name.lower()
        if key in headers and key in ("host", "content-length", "authorization", "origin", "content-type"):
            return Refusal("400 Bad Request", f"{name} is given twice")
        headers[key] = value.strip()
    method = parts[0]
    if (refusal := admit(method, headers, gate)) is not None:
        return refusal
    body = await reader.readexactly(int(headers["content-length"])) if method == "POST" else b""
    return _Request(method, parts[1], parts[2], headers, body)


def _environ(r: _Request, address: str, port: int) -> dict[str, Any]:
    path, _, query = r.target.partition("?")
    env: dict[str, Any] = {
        "REQUEST_METHOD": "GET" if r.method == "HEAD" else r.method, "PATH_INFO": unquote(path),
        "QUERY_STRING": query, "SERVER_NAME": address, "SERVER_PORT": str(port), "SERVER_PROTOCOL": r.version,
        "CONTENT_LENGTH": str(len(r.body)), "CONTENT_TYPE": r.headers.get("content-type", ""),
        "wsgi.input": BytesIO(r.body), "wsgi.errors": sys.stderr, "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http", "wsgi.multithread": True, "wsgi.multiprocess": False, "wsgi.run_once": False,
    }
    for k, v in r.headers.items():
        if k not in ("content-length", "content-type"):
            env["HTTP_" + k.upper().replace("-", "_")] = v
    return env


def _call(app: WsgiApp, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
    """Run the application on a worker thread: its status, headers and whole body."""
    said: dict[str, Any] = {}

    def start(status: str, headers: list[tuple[str, str]], exc_info: object = None) -> Callable[[bytes], None]:
        said["status"], said["headers"] = status, headers
        return lambda data: None

    try:
        body = b"".join(app(environ, start))
    except Exception as exc:  # an application's fault answers 500, and the server goes on
        return "500 Internal Server Error", [("Content-Type", "text/plain")], f"{type(exc).__name__}".encode()
    return said["status"], said["headers"], body
