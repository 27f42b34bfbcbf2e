"""The dashboard's sign-in and operator settings (decision 0022), as :class:`Config` reads them
(``Config.sign_in_from`` and ``Config.operators_from``, both part of ``Config.from_env``): an OpenID Connect provider
(``DASHBOARD_OIDC_*``, ``DASHBOARD_COOKIE_SECRET``, ``DASHBOARD_REDIRECT_URI``) and who is an operator
(``DASHBOARD_OPERATORS_DOMAIN``, ``DASHBOARD_OPERATORS_GROUP``). The rule that uses them is
:mod:`dashboard.access`'s. Secrets stay out of every ``repr``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from streaming.schema.config.parse import ConfigError
from streaming.schema.config.urls import is_loopback

METADATA_URL = "DASHBOARD_OIDC_METADATA_URL"
CLIENT_ID = "DASHBOARD_OIDC_CLIENT_ID"
CLIENT_SECRET = "DASHBOARD_OIDC_CLIENT_SECRET"
COOKIE_SECRET = "DASHBOARD_COOKIE_SECRET"
REDIRECT_URI = "DASHBOARD_REDIRECT_URI"
SCOPE = "DASHBOARD_OIDC_SCOPE"
OPERATORS_DOMAIN = "DASHBOARD_OPERATORS_DOMAIN"
OPERATORS_GROUP = "DASHBOARD_OPERATORS_GROUP"
REQUIRED = (METADATA_URL, CLIENT_ID, CLIENT_SECRET, COOKIE_SECRET, REDIRECT_URI)
"""All of them turn sign-in on; some of them is an error (a half-configured sign-in must not leave it open)."""
DEFAULT_SCOPE = "openid email profile"
MIN_COOKIE_SECRET = 32
"""Characters of ``DASHBOARD_COOKIE_SECRET`` at least (``openssl rand -hex 32`` gives 64)."""


class AccessError(ConfigError):
    """A sign-in or role setting is invalid; the message names the variable."""


@dataclass(frozen=True)
class SignIn:
    """An OpenID Connect provider the dashboard asks to sign people in (Streamlit's ``st.login``)."""

    metadata_url: str
    client_id: str
    client_secret: str = field(repr=False)
    cookie_secret: str = field(repr=False)
    redirect_uri: str
    scope: str = DEFAULT_SCOPE

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> SignIn | None:
        """The settings in ``env``; None when none of them is set (sign-in off)."""
        got = {var: (env.get(var) or "").strip() for var in REQUIRED}
        if not any(got.values()):
            if (env.get(SCOPE) or "").strip():
                raise AccessError(f"{SCOPE} is set but sign-in is not: set {', '.join(REQUIRED)}")
            return None
        missing = [var for var, value in got.items() if not value]
        if missing:
            raise AccessError(f"sign-in needs all of {', '.join(REQUIRED)}; missing: {', '.join(missing)}")
        _check_url(METADATA_URL, got[METADATA_URL])
        _check_url(REDIRECT_URI, got[REDIRECT_URI])
        redirect = urlsplit(got[REDIRECT_URI])
        if redirect.scheme == "http" and not is_loopback(redirect.hostname or ""):
            raise AccessError(f"{REDIRECT_URI}={got[REDIRECT_URI]!r} is plain http:// beyond this machine: the "
                              "provider would send the sign-in code in clear; use https:// (http:// only for "
                              "localhost or 127.0.0.1)")
        if not redirect.path.endswith("/oauth2callback"):
            raise AccessError(f"{REDIRECT_URI}={got[REDIRECT_URI]!r} must end with /oauth2callback (Streamlit's "
                              "callback): the dashboard's address as people open it, then /oauth2callback")
        if len(got[COOKIE_SECRET]) < MIN_COOKIE_SECRET:
            raise AccessError(f"{COOKIE_SECRET} must be at least {MIN_COOKIE_SECRET} characters "
                              "(e.g. `openssl rand -hex 32`)")
        scope = " ".join((env.get(SCOPE) or DEFAULT_SCOPE).split())
        if "openid" not in scope.split():
            raise AccessError(f"{SCOPE}={scope!r} must include openid")
        return cls(got[METADATA_URL], got[CLIENT_ID], got[CLIENT_SECRET], got[COOKIE_SECRET], got[REDIRECT_URI],
                   scope)

    def secrets_toml(self) -> str:
        """Streamlit's ``[auth]`` secrets for this provider (its one, default provider)."""
        rows = [("redirect_uri", self.redirect_uri), ("cookie_secret", self.cookie_secret),
                ("client_id", self.client_id), ("client_secret", self.client_secret),
                ("server_metadata_url", self.metadata_url)]
        lines = ["[auth]", *(f"{k} = {toml_string(v)}" for k, v in rows),
                 f"client_kwargs = {{ scope = {toml_string(self.scope)} }}"]
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Operators:
    """Who is an operator: an email in one of ``domains`` or a group in ``groups``."""

    domains: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()

    @property
    def configured(self) -> bool:
        return bool(self.domains or self.groups)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Operators:
        domains = _names(env, OPERATORS_DOMAIN)
        for d in domains:
            if "@" in d or " " in d or "." not in d.strip("."):
                raise AccessError(f"{OPERATORS_DOMAIN}: {d!r} is not an email domain like example.com")
        return cls(frozenset(d.lower() for d in domains), frozenset(_names(env, OPERATORS_GROUP)))


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string: quotes, backslashes and control characters escaped."""
    out = []
    for ch in value:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _check_url(var: str, url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AccessError(f"{var}={url!r} must be an http:// or https:// URL")


def _names(env: Mapping[str, str], var: str) -> list[str]:
    raw = (env.get(var) or "").strip()
    if not raw:
        return []
    names = [n.strip() for n in raw.split(",")]
    if "" in names:
        raise AccessError(f"{var}={raw!r} has an empty name; use a comma-separated list")
    return names
