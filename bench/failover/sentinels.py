"""One primary, its replicas and three Sentinels on the loopback, real processes started and stopped by a test.

Debian's ``redis-server`` (``--sentinel`` makes it a Sentinel, as ``redis-sentinel`` does). Every wait polls a
condition against a deadline; :meth:`SentinelGroup.stop` ends every process it started, a stopped (SIGSTOP) one
included, and each dies with the test run however that ends (``PR_SET_PDEATHSIG``: SIGKILL). With :class:`Users`
every node and Sentinel loads the users ``wm-redis acl`` generates, the default user off (issue 63).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

import redis

from streaming.apps.redis_server import redis_server_binary
from streaming.runtime.children import die_with_parent
from streaming.runtime.ports import free_port

MASTER = "wm-primary"
DOWN_AFTER_MS = 1_000
FAILOVER_TIMEOUT_MS = 3_000
T = TypeVar("T")


def until(check: Callable[[], T], what: str, timeout_s: float = 30.0, every_s: float = 0.05) -> T:
    """``check()`` once it returns something true (Redis errors count as not yet); raises after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        try:
            got = check()
            if got:
                return got
            last = got
        except redis.RedisError as exc:
            last = exc
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s (last: {last!r})")
        time.sleep(every_s)  # a poll's pace, not a synchronisation: the condition decides


@dataclass(frozen=True)
class Users:
    """What ``wm-redis acl`` prints for a replicated Redis, loaded by every process of a group: ``nodes`` the ACL file
    of every node (``--nodes``), ``replication`` their ``redis.conf`` lines (``--replication``), ``sentinels`` every
    Sentinel's lines (``--sentinels``); ``admin`` the user and password the harness itself works as."""

    nodes: str
    replication: str
    sentinels: str
    admin: tuple[str, str]


class Proc:
    """One server: its port, its directory and log, its process."""

    def __init__(self, root: Path, name: str, auth: tuple[str, str] | None = None) -> None:
        self.name = name
        self.auth = dict(zip(("username", "password"), auth, strict=True)) if auth else {}
        self.port = 0
        """Picked by :meth:`SentinelGroup.start` just before the server first binds it; kept across restarts."""
        self.dir = root / name
        self.dir.mkdir(parents=True)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, args: list[str]) -> None:
        log = open(self.dir / "log", "ab")  # noqa: SIM115 - the child holds it; closed with the Popen below
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir,
                                     start_new_session=True, preexec_fn=die_with_parent(signal.SIGKILL))
        log.close()
        until(self._ours, f"{self.name} answering on port {self.port}", timeout_s=15)

    def _ours(self) -> bool:
        """Whether the server on the port is this process: with tests in parallel another's may hold the port."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited ({self.proc.returncode}) on port {self.port}:\n{self.log_tail()}")
        return int(self.client().info("server")["process_id"]) == self.proc.pid

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2, socket_connect_timeout=2, **self.auth)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.kill()  # a stopped process takes SIGKILL too
        self.proc.wait(timeout=10)

    def log_tail(self, n: int = 15) -> str:
        path = self.dir / "log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:]) if path.exists() else ""


class SentinelGroup:
    """A primary, ``replicas`` replicas of it, three Sentinels monitoring it as :data:`MASTER` (quorum 2)."""

    def __init__(self, root: Path, replicas: int = 1, users: Users | None = None) -> None:
        self.binary = redis_server_binary()
        self.users = users
        admin = users.admin if users else None
        self.primary = Proc(root, "primary", admin)
        self.replicas = [Proc(root, f"replica{i}", admin) for i in range(replicas)]
        self.sentinels = [Proc(root, f"sentinel{i}", admin) for i in range(3)]

    @property
    def nodes(self) -> list[Proc]:
        return [self.primary, *self.replicas]

    @property
    def url(self) -> str:
        """The ``redis+sentinel://`` URL every process would be given."""
        return f"redis+sentinel://{','.join(f'127.0.0.1:{s.port}' for s in self.sentinels)}/{MASTER}/0"

    def url_as(self, user: str, password: str) -> str:
        """The URL a part given ``user`` connects with: the primary and the Sentinels asked as that user."""
        secret = quote(password, safe="")
        return (f"redis+sentinel://{quote(user)}:{secret}@{','.join(f'127.0.0.1:{s.port}' for s in self.sentinels)}"
                f"/{MASTER}/0?sentinel_username={quote(user)}&sentinel_password={secret}")

    def _server(self, node: Proc, *extra: str) -> list[str]:
        # A full sync starts at once: Redis' default waits 5 s for more replicas to share one diskless transfer.
        return [self.binary, *self._users(node), "--port", str(node.port), "--bind", "127.0.0.1", "--dir",
                str(node.dir), "--save", "", "--appendonly", "no", "--daemonize", "no", "--repl-diskless-sync-delay",
                "0", *extra]

    def _users(self, node: Proc) -> list[str]:
        """With users: a node's own ``redis.conf`` (the replication lines, its ACL file), rewritten at each start (a
        password in an argument could begin with ``--``); nothing without."""
        if self.users is None:
            return []
        (node.dir / "users.acl").write_text(self.users.nodes)
        conf = node.dir / "redis.conf"
        conf.write_text(f"{self.users.replication}aclfile {node.dir / 'users.acl'}\n")
        return [str(conf)]

    def start(self) -> None:
        try:
            # Each port is taken just before its server binds it: another process (a test beside this one) may
            # take a port between the pick and the bind, and the longer between them, the likelier.
            self.primary.port = free_port()
            self.primary.start(self._server(self.primary))
            for node in self.replicas:
                node.port = free_port()
                node.start(self._server(node, "--replicaof", "127.0.0.1", str(self.primary.port)))
                until(lambda n=node: n.client().info("replication").get("master_link_status") == "up",
                      f"{node.name} in sync with the primary")
            # In sync is not yet acknowledging: for most of a second after its sync a replica's WAIT count is 0.
            until(self._acknowledged, "the replicas acknowledging the primary's writes")
            # Each Sentinel starts knowing its peers and the replicas, as the config a Sentinel rewrites after
            # discovering them says: discovery by hello messages and INFO took 7 s a group, and a test of a
            # failover needs the group, not its discovery.
            ids = {s.name: os.urandom(20).hex() for s in self.sentinels}
            for s in self.sentinels:
                s.port = free_port()
            for s in self.sentinels:
                conf = s.dir / "sentinel.conf"
                conf.write_text("".join([
                    f"port {s.port}\nbind 127.0.0.1\ndir {s.dir}\nsentinel myid {ids[s.name]}\n",
                    f"sentinel monitor {MASTER} 127.0.0.1 {self.primary.port} 2\n",
                    f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n",
                    f"sentinel failover-timeout {MASTER} {FAILOVER_TIMEOUT_MS}\n",
                    *(f"sentinel known-replica {MASTER} 127.0.0.1 {node.port}\n" for node in self.replicas),
                    *(f"sentinel known-sentinel {MASTER} 127.0.0.1 {peer.port} {ids[peer.name]}\n"
                      for peer in self.sentinels if peer is not s),
                    self.users.sentinels if self.users else ""]))
                s.start([self.binary, str(conf), "--sentinel"])
            until(self._agreed, "the Sentinels knowing each other and the replicas")
        except BaseException:
            self.stop()
            raise

    def _acknowledged(self) -> bool:
        """A write, and every replica acknowledges it within 100 ms (the key goes again: tests see no trace)."""
        client = self.primary.client()
        client.set("sentinel-group:ready", 1)
        client.delete("sentinel-group:ready")
        return int(client.execute_command("WAIT", len(self.replicas), 100)) == len(self.replicas)

    def _agreed(self) -> bool:
        for s in self.sentinels:
            state = s.client().sentinel_master(MASTER)
            if (int(state["num-other-sentinels"]) < len(self.sentinels) - 1
                    or int(state["num-slaves"]) < len(self.replicas) or state["port"] != self.primary.port):
                return False
        return True

    def primary_port(self) -> int:
        """The primary's port as the Sentinels say it (the first that answers)."""
        for s in self.sentinels:
            try:
                return int(s.client().sentinel_get_master_addr_by_name(MASTER)[1])
            except redis.ConnectionError:
                continue
        raise redis.ConnectionError("no Sentinel answers")

    def node(self, port: int) -> Proc:
        return next(n for n in self.nodes if n.port == port)

    def promoted(self, old_port: int, timeout_s: float = 30.0) -> Proc:
        """The node that took over from the one at ``old_port``, once every Sentinel names it and it is a primary."""

        def new() -> Proc | None:
            ports = {int(s.client().sentinel_get_master_addr_by_name(MASTER)[1]) for s in self.sentinels}
            if len(ports) != 1 or old_port in ports:
                return None
            node = self.node(ports.pop())
            return node if node.client().info("replication").get("role") == "master" else None

        return until(new, f"a replica promoted in place of port {old_port}", timeout_s=timeout_s)

    def stop(self) -> None:
        for p in [*self.sentinels, *self.replicas, self.primary]:
            p.stop()
