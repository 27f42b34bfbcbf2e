"""The token ``POST /annotations`` asks for (:func:`annotations_token`): read from the environment mapping given
by ``wm-monitor`` and ``wm-annotate`` alone, not a field of ``Config``."""

from __future__ import annotations

import re
from collections.abc import Mapping

from streaming.schema.config.parse import ConfigError, check

_TOKEN = re.compile(r"^[\x21-\x7e]+$")
"""A bearer token as a header carries it: printable ASCII without spaces."""


MIN_TOKEN = 32
"""The shortest token ``POST /annotations`` accepts: guessing 32 random characters is out of reach."""


def annotations_token(env: Mapping[str, str]) -> str | None:
    """The token ``POST /annotations`` asks for: ``ANNOTATIONS_TOKEN``, or the content of the file
    ``ANNOTATIONS_TOKEN_FILE`` names (a Kubernetes secret mounted as a file); None when neither is set. Not a
    field of :class:`Config`: only ``wm-monitor`` and ``wm-annotate`` read it, so no other process reads the file
    or holds the secret."""
    given = (env.get("ANNOTATIONS_TOKEN") or "").strip()
    path = (env.get("ANNOTATIONS_TOKEN_FILE") or "").strip()
    check(not (given and path), "ANNOTATIONS_TOKEN_FILE", "and ANNOTATIONS_TOKEN are both set; set one")
    var, token = "ANNOTATIONS_TOKEN", given
    if path:
        var = "ANNOTATIONS_TOKEN_FILE"
        try:
            with open(path, encoding="utf-8") as f:
                token = f.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{var}={path!r} cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
        check(bool(token), var, f"{path!r} is empty")
    if not token:
        return None
    check(bool(_TOKEN.match(token)), var, "must be printable ASCII without spaces (an HTTP header carries it)")
    check(len(token) >= MIN_TOKEN, var, f"is {len(token)} characters: at least {MIN_TOKEN} are needed (e.g. "
           "`openssl rand -hex 24`)")
    return token
