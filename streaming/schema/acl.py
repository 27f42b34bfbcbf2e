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

A replicated Redis has two users more on every node (any replica may become the primary): **replica**, a replica's
link to its primary (``masteruser``), and **sentinel**, a Sentinel watching the nodes and failing them over. The
Sentinels have users of their own (:func:`sentinel_conf`): each part may only ask them where the primary is, the
Sentinels ask each other what a failover needs, and ``wm-admin`` does the rest.

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

from streaming.schema.keys import KeySchema
from watermark_client.stream import input_shard_key, producer_marker_key

PARTS = ("producer", "job", "online", "monitor", "dashboard", "admin")
"""Every part with a user of its own; its user name is ``wm-{part}``."""

SERVERS = ("replica", "sentinel")
"""The users Redis' own processes log in as, on a replicated Redis: ``wm-replica``, ``wm-sentinel``."""

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


REPLICA = ("+psync", "+replconf", "+ping")
"""A replica's link to its primary (``masteruser``): what Redis' replication sends, nothing else (its full copy is
the primary's whole data set, so this user is for replicas alone)."""

HELLO = "&__sentinel__:hello"
"""The channel Sentinels find each other on, on the nodes and on each other."""

SENTINEL = ("+ping", "+info", "+role", "+subscribe", "+publish", "+client|setname", "+multi", "+exec", "+slaveof",
            "+config|rewrite", "+client|kill", "+script|kill")
"""A Sentinel on the nodes it watches (``sentinel auth-user``), as Redis' Sentinel documentation lists it: it reads
``INFO``/``ROLE``, says hello on :data:`HELLO`, and fails over in one transaction (``SLAVEOF``, ``CONFIG REWRITE``,
``CLIENT KILL`` of the old primary's clients): without ``CLIENT KILL`` and ``CONFIG REWRITE`` the transaction is
refused whole and every failover aborts (tried: ``-failover-abort-slave-timeout``, again and again)."""

SENTINEL_PEER = ("+ping", "+publish", "+client|setname", "+sentinel|is-master-down-by-addr")
"""A Sentinel on its peers (``sentinel sentinel-user``): hello, and the vote on a primary being down (found by
``ACL LOG`` on Sentinels that refused everything else through SIGKILL and manual failovers)."""

ASK_PRIMARY = ("+sentinel|masters", "+sentinel|master", "+sentinel|get-master-addr-by-name", "+sentinel|slaves",
               "+sentinel|replicas", "+sentinel|sentinels", "+ping", "+hello", "+auth", "+client|setname",
               "+client|getname", "+client|id")
"""What a part may ask a Sentinel (redis-py asks ``SENTINEL MASTERS``, for replicas ``SENTINEL SLAVES``): where the
primary and its replicas are; never ``SENTINEL SET``, ``REMOVE``, ``FAILOVER``, ``CONFIG``, ``ACL`` or ``SHUTDOWN``."""


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


def server_rules() -> dict[str, Rules]:
    """The users of Redis' own processes on every node of a replicated Redis (:data:`SERVERS`)."""
    return {"replica": Rules((), REPLICA), "sentinel": Rules((HELLO,), SENTINEL)}


def acl_file(namespace: str, shards: int, passwords: dict[str, str], servers: tuple[str, ...] = ()) -> str:
    """The ACL file (``redis-server --aclfile``, Redis 7 or newer) of every part, ``passwords`` by part; the
    default user off; with ``servers`` (of :data:`SERVERS`) their users too, for every node of a replicated Redis.
    Generated by ``wm-redis acl`` for a namespace and its shards, never written by hand."""
    rules = {**part_rules(namespace, shards), **server_rules()}
    lines = ["user default reset off resetchannels -@all"]  # an ACL file takes no comments
    lines += [rules[user].line(user_name(user), passwords[user]) for user in (*PARTS, *servers)]
    return "\n".join(lines) + "\n"


def sentinel_conf(master: str, passwords: dict[str, str]) -> str:
    """The lines every Sentinel's ``sentinel.conf`` takes after its ``sentinel monitor {master} ...`` line: its users
    (each part may only ask where the primary is, ``wm-admin`` everything, ``wm-sentinel`` what its peers ask) and
    the user it logs in as, on the nodes and on its peers. The password of ``wm-sentinel`` is in it as it is: Sentinel
    sends it (the file is the Sentinel's own, mode 0600)."""
    asking = Rules((), ASK_PRIMARY)
    users = {**{part: asking for part in PARTS if part != "admin"}, "admin": Rules(("&*",), ("+@all",)),
             "sentinel": Rules((HELLO,), SENTINEL_PEER)}
    lines = ["user default reset off resetchannels -@all"]
    lines += [rules.line(user_name(user), passwords[user]) for user, rules in users.items()]
    name, secret = user_name("sentinel"), passwords["sentinel"]
    lines += [f"sentinel sentinel-user {name}", f"sentinel sentinel-pass {secret}",
              f"sentinel auth-user {master} {name}", f"sentinel auth-pass {master} {secret}"]
    return "\n".join(lines) + "\n"


def replication_conf(passwords: dict[str, str]) -> str:
    """The lines every node of a replicated Redis takes in its ``redis.conf`` (any may become a replica): the user a
    replica logs in to its primary as."""
    return f"masteruser {user_name('replica')}\nmasterauth {passwords['replica']}\n"
