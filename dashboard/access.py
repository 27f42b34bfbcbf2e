"""Who may use the dashboard, and for what (decision 0022): the sign-in settings and the rule that makes a
signed-in user an operator.

Pure: no Streamlit, no environment of its own. The launcher (:mod:`dashboard.serve`) reads the settings from its
environment and hands Streamlit the ``[auth]`` secrets :meth:`SignIn.secrets_toml` writes; the shell
(``dashboard.ui.access``) gives :func:`role` the signed-in user's claims (``st.user``).

- **Sign-in off** (no ``DASHBOARD_OIDC_*``): the dashboard is open, as a local demo is; everyone who reaches it is an
  operator, unless an operator rule is set, which nobody can then meet.
- **Sign-in on**: nothing is shown before sign-in. Everyone signed in is a viewer (every page, read-only); an
  operator also changes the Lab control settings. The operator rule reads the provider's claims: the email's
  domain (``DASHBOARD_OPERATORS_DOMAIN``; never an email the provider says is unverified) or a group in the
  ``groups`` claim (``DASHBOARD_OPERATORS_GROUP``). No rule: nobody is an operator.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from streaming.schema.config import is_loopback

VIEWER = "viewer"
OPERATOR = "operator"

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


class AccessError(ValueError):
    """A sign-in or role setting is invalid; the message names the variable."""


@dataclass(frozen=True)
class SignIn:
    """An OpenID Connect provider the dashboard asks to sign people in (Streamlit's ``st.login``)."""

    metadata_url: str
    client_id: str
    client_secret: str
    cookie_secret: str
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


def role(claims: Mapping[str, object] | None, operators: Operators, sign_in: bool) -> str:
    """:data:`OPERATOR` or :data:`VIEWER` for a user with these ID-token ``claims`` (None: not signed in)."""
    if not sign_in:
        return VIEWER if operators.configured else OPERATOR  # open, as a demo; a rule nobody can meet unsigned
    if claims is None:
        return VIEWER
    return OPERATOR if _by_domain(claims, operators.domains) or _by_group(claims, operators.groups) else VIEWER


def domain_rule_problem(metadata: Mapping[str, object]) -> str | None:
    """Why the email-domain rule cannot be used with the provider whose discovery document is ``metadata``: it
    says which claims it sends (``claims_supported``) and ``email_verified`` is not one, so no email of it is ever
    vouched for; None when it lists it, or lists nothing (each ID token is then checked at sign-in).

    >>> domain_rule_problem({"claims_supported": ["sub", "email"]}) is not None
    True
    >>> domain_rule_problem({"claims_supported": ["email", "email_verified"]}), domain_rule_problem({})
    (None, None)
    """
    listed = metadata.get("claims_supported")
    if isinstance(listed, list) and "email_verified" not in listed:
        return (f"{OPERATORS_DOMAIN} needs a provider that vouches for emails, and this one says it sends no "
                f"email_verified claim (claims_supported: {', '.join(map(str, listed[:12]))}): anyone could set "
                f"an email of your domain. Use {OPERATORS_GROUP} instead")
    return None


def _by_domain(claims: Mapping[str, object], domains: frozenset[str]) -> bool:
    email = claims.get("email")
    if not domains or not isinstance(email, str) or email.count("@") != 1:
        return False
    if claims.get("email_verified") is not True:  # only an email the provider vouches for, in so many words
        return False
    return email.rpartition("@")[2].lower() in domains


def _by_group(claims: Mapping[str, object], groups: frozenset[str]) -> bool:
    got = claims.get("groups")
    held = [got] if isinstance(got, str) else got if isinstance(got, list | tuple) else []
    return any(isinstance(g, str) and g in groups for g in held)


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
