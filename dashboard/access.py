"""Who may use the dashboard, and for what (decision 0022): the sign-in settings and the rule that makes a
signed-in user an operator.

Pure: no Streamlit, no environment of its own. The settings are the configuration's (:class:`Config` reads them:
``streaming.schema.config.signin``); the launcher (:mod:`dashboard.serve`) hands Streamlit the ``[auth]`` secrets
:meth:`SignIn.secrets_toml` writes; the shell (``dashboard.ui.access``) gives :func:`role` the signed-in user's
claims (``st.user``).

- **Sign-in off** (no ``DASHBOARD_OIDC_*``): the dashboard is open, as a local demo is; everyone who reaches it is an
  operator, unless an operator rule is set, which nobody can then meet.
- **Sign-in on**: nothing is shown before sign-in. Everyone signed in is a viewer (every page, read-only); an
  operator also changes the Lab control settings. The operator rule reads the provider's claims: the email's
  domain (``DASHBOARD_OPERATORS_DOMAIN``; never an email the provider says is unverified) or a group in the
  ``groups`` claim (``DASHBOARD_OPERATORS_GROUP``). No rule: nobody is an operator.
"""

from __future__ import annotations

from collections.abc import Mapping

from streaming.schema.config.signin import (
    CLIENT_ID,
    CLIENT_SECRET,
    COOKIE_SECRET,
    DEFAULT_SCOPE,
    METADATA_URL,
    MIN_COOKIE_SECRET,
    OPERATORS_DOMAIN,
    OPERATORS_GROUP,
    REDIRECT_URI,
    REQUIRED,
    SCOPE,
    AccessError,
    Operators,
    SignIn,
    toml_string,
)

VIEWER = "viewer"
OPERATOR = "operator"
__all__ = ["CLIENT_ID", "CLIENT_SECRET", "COOKIE_SECRET", "DEFAULT_SCOPE", "METADATA_URL", "MIN_COOKIE_SECRET",
           "OPERATOR", "OPERATORS_DOMAIN", "OPERATORS_GROUP", "REDIRECT_URI", "REQUIRED", "SCOPE", "VIEWER",
           "AccessError", "Operators", "SignIn", "domain_rule_problem", "role", "toml_string"]

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


