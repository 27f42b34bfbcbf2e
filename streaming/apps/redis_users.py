"""The embedded Redis' users in production (``DEMO=off``): one per part, each with only what it needs
(:mod:`streaming.schema.acl`).

``wm-redis acl`` writes them for the configured namespace and shards into ``REDIS_DATA_DIR``:

* ``users.acl``, the ACL file ``redis-server --aclfile`` loads (passwords as SHA-256 only);
* ``users.json``, each part's password (mode 0600, readable by the stack's own user alone).

Passwords are made once and kept: a restart, or a change of the namespace or shards, rewrites the rules and keeps
them. ``wm-redis url PART`` prints the address a part connects with (Procfile.production gives each process its
own); with ``REDIS_URL`` set (a Redis of your own) it prints that address as it is: load the rules there with
``wm-redis acl --setuser`` (docs/operations.md, "Redis users").

A replicated Redis (Sentinel's primary and replicas; a Redis Cluster's nodes) loads on every node
``wm-redis acl --nodes`` (the parts' users, ``wm-replica`` and, with ``REDIS_SENTINELS``, ``wm-sentinel``) and
``wm-redis acl --replication`` (``masteruser``/``masterauth``); every Sentinel ``wm-redis acl --sentinels``.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from streaming.schema import acl
from streaming.schema.acl import PARTS, SERVERS, acl_file, part_rules, user_name
from streaming.schema.config import Config
from watermark_client.sentinel import is_sentinel, parse_sentinel_url

ACL_FILE, PASSWORDS_FILE = "users.acl", "users.json"


def uses_acl(cfg: Config) -> bool:
    """Whether the embedded Redis runs with a user per part: in production (``DEMO=off``) it does; the demo, on
    one's own machine, keeps Redis' default user."""
    return cfg.embedded_redis and not cfg.demo


@contextmanager
def _locked(data_dir: Path) -> Iterator[None]:
    """The processes of a stack start at once, each asking for its address: one makes the passwords."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / ".users.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


def ensure_users(cfg: Config) -> dict[str, str]:
    """Each part's password, made once; the ACL file for ``cfg``'s namespace and shards, written when it changed.
    Every process of a stack calls this as it starts (``wm-redis url``) while ``redis-server`` may be reading the
    file, so a new one replaces the old whole (a rename), never a half-written one."""
    where = Path(cfg.redis_data_dir)
    with _locked(where):
        kept = where / PASSWORDS_FILE
        passwords = json.loads(kept.read_text()) if kept.exists() else {}
        if set(passwords) != {*PARTS, *SERVERS}:  # (a file of before wm-replica and wm-sentinel: theirs added)
            passwords = {user: passwords.get(user) or secrets.token_urlsafe(32) for user in (*PARTS, *SERVERS)}
            fd = os.open(kept, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                json.dump(passwords, out)
        os.chmod(kept, 0o600)
        acl, text = where / ACL_FILE, acl_file(cfg.namespace, cfg.stream_shards, passwords)
        if not acl.exists() or acl.read_text() != text:
            fresh = where / f".{ACL_FILE}.new"
            fresh.write_text(text)
            os.replace(fresh, acl)
        return passwords


def acl_path(cfg: Config) -> Path:
    return Path(cfg.redis_data_dir) / ACL_FILE


def part_url(cfg: Config, part: str) -> str:
    """The address ``part`` connects with: the embedded Redis as ``wm-{part}`` in production, else ``REDIS_URL``
    (or the embedded Redis' default user, in the demo) as it is."""
    if part not in PARTS:
        raise ValueError(f"no part {part!r}: one of {', '.join(PARTS)}")
    if not uses_acl(cfg):
        return cfg.redis_url
    return url_as(cfg, part, ensure_users(cfg))


def url_as(cfg: Config, part: str, passwords: dict[str, str]) -> str:
    """The embedded Redis' address with ``part``'s user and password."""
    rest = cfg.redis_url.split("://", 1)[1]
    return f"redis://{quote(user_name(part))}:{quote(passwords[part], safe='')}@{rest}"


def setuser_lines(cfg: Config, passwords: dict[str, str]) -> list[str]:
    """The rules as ``ACL SETUSER`` commands, for a Redis of one's own (``redis-cli < file``)."""
    rules = part_rules(cfg.namespace, cfg.stream_shards)
    return ["ACL SETUSER " + rules[part].line(user_name(part), passwords[part]).split(" ", 1)[1] for part in PARTS]


def node_acl(cfg: Config, passwords: dict[str, str]) -> str:
    """The ACL file every node of a replicated Redis loads (``wm-redis acl --nodes``): the parts' users and
    ``wm-replica``; with Sentinels (``REDIS_SENTINELS``) ``wm-sentinel`` too, which a Cluster has no use for."""
    servers = SERVERS if is_sentinel(cfg.redis_url) else ("replica",)
    return acl_file(cfg.namespace, cfg.stream_shards, passwords, servers)


def sentinel_conf(cfg: Config, passwords: dict[str, str]) -> str:
    """Every Sentinel's lines (``wm-redis acl --sentinels``) for the primary ``REDIS_SENTINEL_MASTER`` names; a
    ValueError without Sentinels."""
    if not is_sentinel(cfg.redis_url):
        raise ValueError("no Sentinels: set REDIS_SENTINELS and REDIS_SENTINEL_MASTER")
    return acl.sentinel_conf(parse_sentinel_url(cfg.redis_url).master, passwords)


def replication_conf(passwords: dict[str, str]) -> str:
    return acl.replication_conf(passwords)
