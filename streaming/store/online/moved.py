"""The online view's keys under their one name: ``{ns}:online:*``, and the hand-off's under ``{ns}:handoff:*``.

Before issue 45 the view's keys were ``{ns}:presence:*``, ``{ns}:present:{server}`` and ``{ns}:loggedout:{server}``,
and the hand-off's ``{ns}:online:rows|batches|handoff``. The job renames any it finds when it starts, before its
query runs, so an upgrade keeps the week of history, the peaks and every player online. Each key is one
``RENAME`` on the namespace's node (in a Redis Cluster the namespace is braced: one slot), so a start that stops
half-way is finished by the next; a key already moved is not there to move again.
"""

from __future__ import annotations

import redis

from streaming.schema.keys import KeySchema
from watermark_client import connection

OLD_PREFIXES = ("presence:", "present:", "loggedout:", "online:rows:", "online:batches", "online:handoff")
"""What the old layout's keys start with, past ``{ns}:`` (the new view's keys never do: see :func:`new_name`)."""


def new_name(keys: KeySchema, old: str) -> str | None:
    """The key ``old`` (the old layout's, in ``keys``' namespace) is now; None when it is not an old key."""
    ns = keys.namespace + ":"
    if not old.startswith(ns):
        return None
    rest = old[len(ns):]
    if rest.startswith("present:"):
        return keys.online(rest[len("present:"):])
    if rest.startswith("loggedout:"):
        return keys.logged_out(rest[len("loggedout:"):])
    if rest.startswith("online:rows:"):
        return ns + "handoff:rows:" + rest[len("online:rows:"):]
    if rest == "online:batches":
        return keys.handoff_batches
    if rest == "online:handoff":
        return keys.handoff_guard
    if rest.startswith("presence:"):
        return ns + "online:" + rest[len("presence:"):]
    return None


def move_old_keys(client: redis.Redis, keys: KeySchema) -> int:
    """Rename every key of the old layout in ``keys``' namespace to its new name; how many were."""
    node = connection.home(client, keys.state)
    moved = 0
    for prefix in OLD_PREFIXES:
        for raw in node.scan_iter(match=_glob(keys.namespace + ":" + prefix) + "*", count=1_000):
            old = raw.decode() if isinstance(raw, bytes) else raw
            new = new_name(keys, old)
            if new is not None and new != old:
                try:
                    node.rename(old, new)
                    moved += 1
                except redis.ResponseError as exc:  # gone meanwhile (expired, moved by another start)
                    if "no such key" not in str(exc).lower():
                        raise
    return moved


def _glob(text: str) -> str:
    """``text`` as a literal in a SCAN pattern (a braced namespace holds no glob character; a name might)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
