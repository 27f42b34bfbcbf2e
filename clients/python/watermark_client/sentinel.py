"""A Redis reached through Redis Sentinel, named by one URL string (decision 0023). No redis-py here: the
schema parses, :func:`streaming.store.redis_conn.open_client` connects.

Every process takes one Redis address (``REDIS_URL``, ``Config.redis_url``, the Spark source's ``url`` option, the
producer's argument), so a primary found through Sentinels is one more form of that string, and it reaches every
process unchanged::

    redis+sentinel://[user:password@]host1:26379,host2:26379,host3:26379/<master name>[/<db>][?options]
    rediss+sentinel://...                  TLS, to the Sentinels and to the primary alike

The user and password are the primary's (as in ``redis://``); the Sentinels' own, when they ask for one, are the
options ``sentinel_username`` and ``sentinel_password``. Every other option is one ``redis://`` takes
(``socket_timeout``, ``ssl_ca_certs``, ``ssl_cert_reqs``, ...) and is parsed the same way. A host without a port is
on Sentinel's port, 26379.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

SCHEMES = ("redis+sentinel", "rediss+sentinel")
SENTINEL_PORT = 26379
SENTINEL_OPTIONS = ("sentinel_username", "sentinel_password")
"""Options of the Sentinels' own credentials: taken out of the query before the rest goes to the primary's
connections."""


@dataclass(frozen=True)
class SentinelAddress:
    """What a ``redis+sentinel://`` URL names."""

    sentinels: tuple[tuple[str, int], ...]
    master: str
    db: int = 0
    tls: bool = False
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None
    options: tuple[tuple[str, str], ...] = ()
    """The other query options, as ``redis://`` takes them (parsed by redis-py the same way)."""

    def node_url(self) -> str:
        """A ``redis://`` (``rediss://``) URL of the primary's credentials, database and options, its host a
        placeholder: what redis-py's own URL parser makes the primary's connection settings of."""
        user = quote(self.username or "", safe="")
        auth = f"{user}:{quote(self.password, safe='')}@" if self.password is not None else (
            f"{user}@" if user else "")
        query = f"?{urlencode(self.options)}" if self.options else ""
        return f"{'rediss' if self.tls else 'redis'}://{auth}localhost/{self.db}{query}"


def is_sentinel(url: str) -> bool:
    return url.split("://", 1)[0].lower() in SCHEMES


def parse_sentinel_url(url: str) -> SentinelAddress:
    """The address in ``url``; raises ValueError saying what is wrong (never the password)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in SCHEMES:
        raise ValueError("must start with redis+sentinel:// or rediss+sentinel://")
    rest, _, query = rest.partition("?")
    netloc, slash, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    if not at:
        userinfo, hosts = "", netloc
    parts = [p for p in path.split("/") if p] if slash else []
    if not parts:
        raise ValueError("names no primary: add its name as Sentinel knows it, e.g. /mymaster")
    if len(parts) > 2 or (len(parts) == 2 and not parts[1].isdigit()):
        raise ValueError(f"path /{path} must be /<master name> or /<master name>/<db number>")
    sentinels = tuple(_host_port(h.strip()) for h in hosts.split(",") if h.strip())
    if not sentinels:
        raise ValueError("names no Sentinel: list them as host:port,host:port")
    user, colon, password = userinfo.partition(":")
    options = dict(parse_qsl(query, keep_blank_values=False))
    return SentinelAddress(
        sentinels=sentinels, master=unquote(parts[0]), db=int(parts[1]) if len(parts) == 2 else 0,
        tls=scheme.lower() == "rediss+sentinel", username=unquote(user) or None,
        password=unquote(password) if colon else None,
        sentinel_username=options.pop("sentinel_username", None),
        sentinel_password=options.pop("sentinel_password", None),
        options=tuple(sorted(options.items())))


def _host_port(text: str) -> tuple[str, int]:
    """``host``, ``host:port``, ``[::1]:port``."""
    if text.startswith("["):
        host, _, tail = text[1:].partition("]")
        port = tail[1:] if tail.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, ""
    if not host:
        raise ValueError(f"Sentinel {text!r} has no host")
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"port {port!r} of {text!r} is not a port number")
    return host, int(port) if port else SENTINEL_PORT


def sentinel_url(sentinels: str, master: str, base: str | None = None) -> str:
    """The URL of ``REDIS_SENTINELS`` (``host:port,...``) and ``REDIS_SENTINEL_MASTER``; with ``base`` (a
    ``redis://`` or ``rediss://`` ``REDIS_URL``) its user, password, database, TLS and options, its host not used.
    Raises ValueError saying what is wrong."""
    hosts = ",".join(h.strip() for h in sentinels.split(",") if h.strip())
    for h in hosts.split(","):
        _host_port(h)
    if not hosts:
        raise ValueError("names no Sentinel: list them as host:port,host:port")
    name = master.strip()
    if not name or "/" in name:
        raise ValueError(f"{master!r} is not a master name")
    tls, auth, db, query = False, "", "0", ""
    if base:
        parts = urlsplit(base)
        if parts.scheme not in ("redis", "rediss"):
            raise ValueError("must be a redis:// or rediss:// URL to give its credentials and TLS to the Sentinels' "
                             "primary")
        tls = parts.scheme == "rediss"
        auth = parts.netloc.rpartition("@")[0]
        auth = f"{auth}@" if auth else ""
        db = parts.path.strip("/") or "0"
        query = f"?{parts.query}" if parts.query else ""
    return f"{'rediss' if tls else 'redis'}+sentinel://{auth}{hosts}/{quote(name, safe='')}/{db}{query}"
