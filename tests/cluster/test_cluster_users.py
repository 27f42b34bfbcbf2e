"""A user per part on a Redis Cluster (issue 63, item 1), real processes: three primaries and a replica load the ACL
file ``wm-redis acl --nodes`` prints (the replica logs in to its primary as ``wm-replica``, ``--replication``), the
default user off. The ``ShardedProducer``, the real job, ``wm-online``'s groups, the monitor's and the dashboard's
readings each run as their own user over four input shards on three nodes, and every event is counted once; a game
server's credential is refused everything else on every node, the cluster's own commands too."""

from __future__ import annotations

import contextlib
import io
import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from bench.failover.sentinels import until
from streaming.apps.redis_server import LocalCluster, RedisServer, main, redis_server_binary, server_version
from streaming.apps.redis_users import PASSWORDS_FILE
from streaming.store.observe import read_stack
from streaming.store.views.snapshot import read_snapshot
from tests.failover.test_producer_wait import ids
from tests.pipeline.test_exactly_once import job_env
from tests.procs import Proc
from tests.security.test_redis_users import KEYS, NS, REFUSED
from watermark_client.connection import open_client
from watermark_client.sharded import ShardedProducer
from watermark_client.stream import shard_of

SHARDS = 4
SERVERS = [f"s{i}" for i in range(12)]


@dataclass
class Users:
    cluster: LocalCluster
    replica: RedisServer
    passwords: dict[str, str]

    def url(self, part: str) -> str:
        return f"redis://wm-{part}:{self.passwords[part]}@127.0.0.1:{self.cluster.servers[0].port}/0"

    def node(self, server: RedisServer, part: str = "admin") -> redis.Redis:
        return redis.Redis(port=server.port, username=f"wm-{part}", password=self.passwords[part], socket_timeout=10)

    @property
    def every_node(self) -> list[RedisServer]:
        return [*self.cluster.servers, self.replica]


def printed(*args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(args)) == 0
    return out.getvalue()


@pytest.fixture(scope="module")
def users(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Users]:
    """What an operator runs for a Redis Cluster of their own (``REDIS_URL`` names a node), loaded on every node."""
    if server_version(redis_server_binary()) < (7, 0):  # CI's second pass runs tests/cluster on Redis 6.2
        pytest.skip("a user per part needs Redis 7 (key selectors %R~)")
    data = tmp_path_factory.mktemp("cluster-users")
    with pytest.MonkeyPatch.context() as env:
        for name in ("REDIS_SENTINELS", "REDIS_SENTINEL_MASTER", "DEMO"):
            env.delenv(name, raising=False)
        env.setenv("REDIS_URL", "redis://127.0.0.1:6379/0")
        env.setenv("REDIS_DATA_DIR", str(data))
        env.setenv("PIPELINE_NAMESPACE", NS)
        env.setenv("STREAM_SHARDS", str(SHARDS))
        acl, replication = printed("acl", "--nodes"), printed("acl", "--replication")
    (data / "nodes.acl").write_text(acl)
    passwords = json.loads((data / PASSWORDS_FILE).read_text())
    cluster = LocalCluster(str(data / "cluster"), nodes=3, aclfile=str(data / "nodes.acl"),
                           admin=("wm-admin", passwords["admin"]))
    replica = RedisServer(str(data / "replica"), port=0, cluster=True, aclfile=str(data / "nodes.acl"))
    made = Users(cluster, replica, passwords)
    cluster.start()
    try:
        replica.start()
        admin = made.node(replica)
        for line in replication.splitlines():  # what a node's redis.conf takes, set on the running one
            admin.config_set(*line.split(" ", 1))
        admin.execute_command("CLUSTER", "MEET", "127.0.0.1", cluster.servers[0].port)
        first = made.node(cluster.servers[0]).execute_command("CLUSTER", "MYID").decode()
        until(lambda: int(admin.cluster("INFO")["cluster_known_nodes"]) == 4, "the replica knowing the cluster")
        admin.execute_command("CLUSTER", "REPLICATE", first)
        until(lambda: admin.info("replication").get("master_link_status") == "up", "the replica in sync")
        yield made
    finally:
        replica.stop()
        cluster.stop()


def test_every_node_refuses_a_game_servers_credential_everything_else(users: Users) -> None:
    """The keys' commands are refused before any redirection (``NOPERM``, never ``MOVED``), on every node."""
    cluster_commands = [("CLUSTER", *c) for c in (("SETSLOT", "0", "STABLE"), ("ADDSLOTS", "0"), ("DELSLOTS", "0"),
                                                  ("FORGET", "x"), ("MEET", "127.0.0.1", "1"), ("RESET",),
                                                  ("FAILOVER",), ("REPLICATE", "x"), ("FLUSHSLOTS",),
                                                  ("SAVECONFIG",), ("BUMPEPOCH",), ("COUNTKEYSINSLOT", "0"),
                                                  ("GETKEYSINSLOT", "0", "1"))]
    others = [("MIGRATE", "127.0.0.1", "1", KEYS.events, "0", "1"), ("PSYNC", "?", "-1")]
    for server in users.every_node:
        producer = users.node(server, "producer")
        assert producer.execute_command("CLUSTER", "SLOTS")  # what a cluster client needs to find the shards
        wrong = []
        for command in [*(c for _, c in REFUSED), *cluster_commands, *others]:
            try:
                got: object = producer.execute_command(*command)
            except redis.exceptions.NoPermissionError:
                continue
            except redis.RedisError as exc:
                got = exc
            wrong.append(f"{' '.join(map(str, command))}: {got!r}")
        assert wrong == [], server.port


def shard_counts(client: redis.Redis) -> list[int]:
    """Each shard's entries, the trimmed ones counted (``{shard}:trimmed``)."""
    return [client.xlen(KEYS.input_shard(k)) + int(client.get(KEYS.trimmed_of(k)) or 0) for k in range(SHARDS)]


@pytest.mark.spark
def test_the_producers_the_job_and_the_online_groups_count_every_event_once_each_as_its_own_user(
        users: Users, tmp_path: Path) -> None:
    n = 600
    admin = open_client(users.url("admin"))
    for server in users.every_node:  # what another test was refused is not this one's
        users.node(server).execute_command("ACL", "LOG", "RESET")
    homes = {admin.get_node_from_key(KEYS.input_shard(k)).port for k in range(SHARDS)}
    assert len(homes) >= 2  # the shards are on several nodes
    env = {"DEMO": "off", "REDIS_WAIT_REPLICAS": "0"}
    job = Proc.python("job", ["streaming.apps.job"], {**job_env(users.url("job"), NS, tmp_path / "ck", SHARDS, 2),
                                                      **env}, tmp_path)
    online = Proc.python("online", ["streaming.apps.online"],
                         {**job_env(users.url("online"), NS, tmp_path / "ck", SHARDS, 2), **env}, tmp_path)
    try:
        with ShardedProducer(users.url("producer"), namespace=NS, shards=SHARDS, batch_size=25) as producer:
            for i in range(n):
                producer.send({"event_id": f"e{i}", "server": SERVERS[i % 12], "player_id": f"p{i}",
                               "kind": "login", "event_time": "2026-12-06T10:00:00Z"})
        until(lambda: int(admin.hget(KEYS.totals, "input") or 0) == n, "the job's commits", timeout_s=240,
              every_s=0.2)
        last = int(admin.hget(KEYS.state, "last_batch"))
        until(lambda: int(admin.hget(KEYS.online_state, "last_batch") or -1) == last, "the groups' commits",
              timeout_s=120, every_s=0.2)
    finally:
        codes = {p.name: p.stop() for p in (job, online)}
    assert codes == {"job": 0, "online": 0}, job.tail(40) + online.tail(40)
    assert shard_counts(admin) == [sum(n // 12 for s in SERVERS if shard_of(s, SHARDS) == k) for k in range(SHARDS)]
    seen = sum((ids(admin, KEYS.input_shard(k)) for k in range(SHARDS)), Counter())
    assert set(seen.values()) <= {1}
    totals = {k.decode(): int(v) for k, v in admin.hgetall(KEYS.totals).items()}
    assert totals["input"] == totals["parsed"] == n and totals.get("dropped", 0) == 0
    assert sum(int(v) for v in admin.hgetall(KEYS.online_counts).values()) > 0
    now = int(time.time() * 1000)
    reading = read_stack(open_client(users.url("monitor")), KEYS, {}, now, None, 0)
    assert reading.obs.redis_error is None and reading.last_batch["main"] == last
    snap = read_snapshot(open_client(users.url("dashboard")), KEYS, range_ms=86_400_000, now_ms=now)
    assert snap.totals.input == n
    assert users.node(users.cluster.servers[0]).execute_command("WAIT", 1, 10_000) == 1  # its replica has it all
    refused = {(e["username"], e["object"]) for s in users.every_node for e in users.node(s).acl_log(count=1_000)}
    assert refused <= {("wm-producer", "info")}  # the producer's fence probe alone (docs/operations.md)
