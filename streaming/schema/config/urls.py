"""Redis' and the receivers' addresses as logs, errors and pages show them: without their passwords
(:func:`redact_url`), their paths and queries (:func:`shown_url`, :func:`hidden_url`, :func:`scrub_url`); and whether
an address is this machine's alone (:func:`is_loopback`)."""

from __future__ import annotations

import ipaddress
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

SECRET_OPTIONS = ("password", "sentinel_password")
"""URL options that hold a password (``redis://h?password=...``, :mod:`watermark_client.sentinel`)."""


def redact_url(url: str) -> str:
    """The URL with any password replaced (the user's, and any in its options), safe for logs and the dashboard.
    Takes every form ``REDIS_URL`` does, a ``redis+sentinel://`` URL's list of Sentinels included."""
    parts = urlsplit(url)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    secret_user = bool(at) and ":" in userinfo
    options = parse_qsl(parts.query, keep_blank_values=True)
    if not secret_user and not any(k in SECRET_OPTIONS for k, _ in options):
        return url
    if secret_user:
        parts = parts._replace(netloc=f"{userinfo.partition(':')[0]}:***@{hosts}")
    query = [(k, "***" if k in SECRET_OPTIONS else v) for k, v in options]
    return parts._replace(query=urlencode(query, safe="*")).geturl()


def is_loopback(address: str) -> bool:
    """Whether only this machine can connect to a server bound to ``address``: 127.0.0.0/8, ``::1`` or
    ``localhost``. Any other name, and the empty address (every interface), is taken as beyond loopback."""
    host = address.strip().strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def shown_url(url: str) -> str:
    """A receiver's address as pages and logs show it: scheme, host and port only. Its user, password, query and
    path are left out: chat integrations keep their token in the path (``/services/T000/B000/XXXX``).

    >>> shown_url("https://u:pw@hooks.example.com:8443/services/T0/B0/secret?token=x")
    'https://hooks.example.com:8443/…'
    >>> shown_url("http://alertmanager:9093"), shown_url("")
    ('http://alertmanager:9093', '')
    """
    if not url:
        return ""
    u = urlsplit(url)
    try:
        port = f":{u.port}" if u.port else ""
    except ValueError:
        port = ""
    hidden = "/…" if u.path not in ("", "/") or u.query else ""
    return f"{u.scheme}://{u.hostname or ''}{port}{hidden}"


def hidden_url(url: str) -> str:
    """``url`` as given, for an error about the URL itself: its password, path and query replaced by ``…``, the
    rest (scheme, user, host, port, right or wrong) kept.

    >>> hidden_url("http://alice:pw@h:abc/hook/T0?token=x"), hidden_url("h:9")
    ('http://alice:…@h:abc/…?…', 'h:/…')
    """
    parts = urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    user = (userinfo.partition(":")[0] + (":…" if ":" in userinfo else "") + "@") if at else ""
    path = "/…" if parts.path not in ("", "/") else parts.path
    return urlunsplit((parts.scheme, user + hostport, path, "…" if parts.query else "", ""))


def scrub_url(text: str, url: str) -> str:
    """``text`` (an error about ``url``) without what :func:`shown_url` leaves out of ``url``: the URL whole, its
    user and password, its path and its query, each replaced by ``…`` wherever it shows (an error may quote the
    address, or a part of it it could not parse).

    >>> scrub_url("InvalidURL: nonnumeric port: 's3cret@127.0.0.1'", "http://alice:s3cret@127.0.0.1/hook/T0/x")
    "InvalidURL: nonnumeric port: '…@127.0.0.1'"
    >>> scrub_url("HTTP 500 <urlopen error for /hook/T0/x?token=abc>", "http://h/hook/T0/x?token=abc")
    'HTTP 500 <urlopen error for …?…>'
    """
    if not url:
        return text
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    secrets = {url, userinfo, userinfo.partition(":")[2], parts.query}
    if parts.path not in ("", "/"):
        secrets.add(parts.path)
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, "…")
    return text
