"""Redis users, one per part of the pipeline, each with only the keys and commands it needs (issue 63).

The rule, in words:

* **producer** (a game server, the least trusted part): append to the input stream(s) and keep its own
  exactly-once markers (``XADD``, ``XLEN``, ``GET``/``SET`` of a marker, ``MULTI``/``EXEC``, ``WAIT``), and the
  connection's own commands. It reads nothing else, writes nothing else, and cannot ``FLUSHALL``, ``CONFIG``,
  ``ACL``, ``CLIENT KILL``, ``KEYS`` or ``INFO``.
* **job** (the Spark query, its workers and followers) and **online** (the ``wm-online`` groups): every key of the
  namespace and its lab lanes (the job also the input shards), every command but Redis' ``@dangerous`` ones
  (``INFO`` given back: they read memory and the cluster's state).
* **monitor** and **dashboard**: read every key of the namespace and its lanes; write only their own keys (the
  monitor its alerts and annotations; the dashboard lab control, its audit and annotations).
* **admin**: everything, for an operator's ``redis-cli`` and ``wm-redis`` itself. The ``default`` user is off.

Key selectors ``%R~`` / ``%W~`` need Redis 7: the embedded Redis refuses production's users on an older one.

>>> rules = part_rules("wm", shards=2)
>>> rules["producer"].keys
('~wm:events', '~wm:producer:*', '~wm:events:1', '~wm:events:1:producer:*')
>>> "+hset" in rules["producer"].commands, "-@dangerous" in rules["job"].commands
(False, True)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from watermark.schema.keys import KeySchema, producer_marker_key
from watermark.schema.shards import input_shard_key

PARTS = ("producer", "job", "online", "monitor", "dashboard", "admin")
"""Every part with a user of its own; its user name is ``wm-{part}``."""

CONNECTION = ("+ping", "+echo", "+hello", "+auth", "+select", "+quit", "+reset", "+client|setname",
              "+client|getname", "+client|id", "+readonly", "+readwrite", "+asking", "+cluster|slots",
              "+cluster|shards", "+cluster|nodes", "+cluster|info", "+cluster|myid", "+command", "+command|docs",
              "+command|info", "+command|count")
"""What any client does on its own connection (redis-py's handshake, a cluster client finding the slots and the
commands' keys); none of it reads or writes data. Not ``CLIENT SETINFO`` (Redis 7.2, unknown to 7.0's ACL):
redis-py sends it on connecting and lets a refusal pass."""

PRODUCER = ("+xadd", "+xlen", "+get", "+set", "+multi", "+exec", "+discard", "+wait")
"""A producer's writes (decision 0010): a batch of ``XADD`` and its marker's ``SET`` in one transaction, ``GET``
of the marker after a lost connection, ``XLEN`` for back-pressure, ``WAIT`` for replicas."""

INSIDE = ("+@all", "-@dangerous", "+info")
"""The job's and the online groups' commands: all but Redis' dangerous ones (``FLUSHALL``, ``CONFIG``, ``ACL``,
``KEYS``, ``CLIENT KILL``, ``SHUTDOWN``, ``DEBUG``, ``MONITOR``, ``REPLICAOF``...); ``INFO`` given back."""

READER = ("+@read", "+@write", "+@transaction", "+@scripting", "+@connection", "-@dangerous", "+info")
"""The monitor's and the dashboard's commands; what they may write is bounded by their keys (``%W~``)."""


@dataclass(frozen=True)
class Rules:
    """One user's keys (``~`` read and write, ``%R~`` read only) and commands, in ``ACL SETUSER`` syntax."""

    keys: tuple[str, ...]
    commands: tuple[str, ...]

    def line(self, user: str, password: str) -> str:
        """The user as an ACL file line; the password stored as its SHA-256, never as it is."""
        digest = hashlib.sha256(password.encode()).hexdigest()
        return " ".join(("user", user, "reset", "on", f"#{digest}", "resetchannels", *self.keys, "-@all",
                         *self.commands))


def user_name(part: str) -> str:
    return f"wm-{part}"


def part_rules(namespace: str, shards: int = 1) -> dict[str, Rules]:
    """Each part's rules for ``namespace`` with ``shards`` input streams (see the module's docstring)."""
    keys = KeySchema(namespace)
    streams = [input_shard_key(keys.events, i) for i in range(shards)]
    appended = tuple(k for s in streams for k in (f"~{s}", f"~{producer_marker_key(s, '*')}"))
    own = (f"~{namespace}:*", f"~{namespace}.*")  # the namespace and its lab lanes ({ns}.{lane}:...)
    # under a braced namespace input shard i is a key of its own ({wm:events:i}), with its trimmed count beside it
    outside = tuple(f"~{s}*" for s in streams if not s.startswith(f"{namespace}:"))
    read = tuple(f"%R{k}" for k in (*own, *outside))
    return {
        "producer": Rules(appended, (*PRODUCER, *CONNECTION)),
        "job": Rules((*own, *outside), (*INSIDE, *CONNECTION)),
        "online": Rules(own, (*INSIDE, *CONNECTION)),
        "monitor": Rules((*read, f"~{keys.alerts}", f"~{keys.alerts}:*", f"~{keys.annotations}"),
                         (*READER, *CONNECTION)),
        "dashboard": Rules((*read, f"~{keys.control}", f"~{keys.control_audit}", f"~{keys.annotations}"),
                           (*READER, *CONNECTION)),
        "admin": Rules(("~*", "&*"), ("+@all",)),
    }


def acl_file(namespace: str, shards: int, passwords: dict[str, str]) -> str:
    """The ACL file (``redis-server --aclfile``, Redis 7 or newer) of every part, ``passwords`` by part; the
    default user off. Generated by ``wm-redis acl`` for a namespace and its shards, never written by hand."""
    rules = part_rules(namespace, shards)
    lines = ["user default reset off resetchannels -@all"]  # an ACL file takes no comments
    lines += [rules[part].line(user_name(part), passwords[part]) for part in PARTS]
    return "\n".join(lines) + "\n"
