"""A Redis user per part (issue 63, item 1), against a real ``redis-server`` loading the ACL file ``wm-redis acl``
writes: a game server's credential appends events exactly once through the public ``Producer`` and is refused
everything else it tries; the monitor and the dashboard write only their own keys; without a user Redis answers
nothing. The rules themselves, as a table, in :mod:`streaming.schema.acl`'s doctest and below."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from streaming.apps import redis_users
from streaming.apps.redis_server import RedisServer, main, server_version
from streaming.schema.acl import PARTS, SERVERS, part_rules
from streaming.schema.config import Config
from streaming.schema.keys import KeySchema
from watermark_client import Producer
from watermark_client.sharded import ShardedProducer
from watermark_client.stream import input_shard_key

NS = "{wm}"
KEYS = KeySchema(NS)
SHARDS = 2


@pytest.fixture(scope="module")
def users(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisServer, Callable[[str], redis.Redis]]]:
    data = tmp_path_factory.mktemp("users")
    cfg = Config.from_env({"DEMO": "off", "PIPELINE_NAMESPACE": NS, "STREAM_SHARDS": str(SHARDS),
                           "REDIS_DATA_DIR": str(data)})
    server = RedisServer(str(data), port=0, aclfile=str(redis_users.acl_path(cfg)))
    if server_version(server.binary) < (7, 0):
        pytest.skip("a user per part needs Redis 7 (key selectors %R~)")
    passwords = redis_users.ensure_users(cfg)
    server.start()

    def as_part(part: str) -> redis.Redis:
        return redis.Redis(port=server.port, username=f"wm-{part}", password=passwords[part], socket_timeout=10)

    yield server, as_part
    server.stop()


def url(server: RedisServer, part: str) -> str:
    passwords = json.loads((server.data_dir / redis_users.PASSWORDS_FILE).read_text())
    return f"redis://wm-{part}:{passwords[part]}@127.0.0.1:{server.port}/0"


def test_a_game_servers_credential_appends_events_exactly_once_to_every_shard(users: tuple) -> None:
    server, as_part = users
    events = [{"server": f"s{i}", "player_id": f"p{i}", "kind": "login", "event_time": "2026-12-06T10:00:00Z"}
              for i in range(200)]
    with ShardedProducer(url(server, "producer"), namespace=NS, shards=SHARDS, batch_size=16) as producer:
        for e in events:
            producer.send(e)
    admin = as_part("admin")
    streams = [input_shard_key(KEYS.events, i) for i in range(SHARDS)]
    assert sum(admin.xlen(s) for s in streams) == len(events) and all(admin.xlen(s) for s in streams)
    before = admin.xlen(KEYS.events)
    with Producer(url(server, "producer"), namespace=NS) as one:  # one stream's producer, its marker beside it
        one.send(events[0])
    assert admin.xlen(KEYS.events) == before + 1


REFUSED = [
    ("the control hash", ("HSET", KEYS.control, "delay_ms", "1")),
    ("the job's state", ("HGETALL", KEYS.state)),
    ("the counts", ("HGETALL", KEYS.totals)),
    ("a window's count", ("GET", f"{NS}:window:0")),
    ("another stream", ("XADD", KEYS.alerts_history, "*", "e", "x")),
    ("reading the input", ("XRANGE", KEYS.events, "-", "+")),
    ("deleting the input", ("DEL", KEYS.events)),
    ("trimming the input", ("XTRIM", KEYS.events, "MAXLEN", "0")),
    ("another namespace", ("XADD", "other:events", "*", "e", "x")),
    ("FLUSHALL", ("FLUSHALL",)),
    ("CONFIG", ("CONFIG", "GET", "*")),
    ("ACL", ("ACL", "LIST")),
    ("KEYS", ("KEYS", "*")),
    ("SCAN", ("SCAN", "0")),
    ("INFO", ("INFO",)),
    ("CLIENT KILL", ("CLIENT", "KILL", "ID", "1")),
    ("CLIENT LIST", ("CLIENT", "LIST")),
    ("a script", ("EVAL", "return 1", "0")),
    ("SHUTDOWN", ("SHUTDOWN", "NOSAVE")),
    ("a subscription", ("PUBLISH", "x", "y")),
]


@pytest.mark.parametrize(("what", "command"), REFUSED, ids=[w for w, _ in REFUSED])
def test_a_game_servers_credential_is_refused_everything_else(users: tuple, what: str, command: tuple) -> None:
    _, as_part = users
    with pytest.raises(redis.exceptions.NoPermissionError):
        as_part("producer").execute_command(*command)


@pytest.mark.parametrize(("part", "allowed", "refused"), [
    ("monitor", ("HSET", KEYS.alerts_monitor, "round_ms", "1"), ("HSET", KEYS.control, "delay_ms", "1")),
    ("monitor", ("XADD", KEYS.annotations, "*", "a", "1"), ("DEL", KEYS.state)),
    ("dashboard", ("HSET", KEYS.control, "delay_ms", "1"), ("HSET", KEYS.state, "x", "1")),
    ("dashboard", ("XADD", KEYS.control_audit, "*", "a", "1"), ("XADD", KEYS.events, "*", "e", "x")),
    ("online", ("HSET", KEYS.online_counts, "s", "1"), ("FLUSHALL",)),
    ("job", ("XADD", f"{input_shard_key(KEYS.events, 1)}", "*", "idle", "1"), ("CONFIG", "SET", "maxmemory", "1")),
])
def test_each_part_writes_its_own_keys_and_no_other(users: tuple, part: str, allowed: tuple,
                                                    refused: tuple) -> None:
    _, as_part = users
    as_part(part).execute_command(*allowed)
    with pytest.raises(redis.exceptions.NoPermissionError):
        as_part(part).execute_command(*refused)


def test_the_monitor_and_the_dashboard_read_every_key_of_the_namespace_and_its_lanes(users: tuple) -> None:
    _, as_part = users
    as_part("admin").hset(f"{NS}.per-server-min:state", "x", "1")
    for part in ("monitor", "dashboard"):
        assert as_part(part).hget(f"{NS}.per-server-min:state", "x") == b"1"
        assert as_part(part).xlen(input_shard_key(KEYS.events, 1)) >= 0


def test_without_a_user_redis_answers_nothing(users: tuple) -> None:
    server, _ = users
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis(port=server.port, socket_timeout=5).ping()


def test_the_acl_file_keeps_no_password_and_the_passwords_only_their_owner_reads(users: tuple) -> None:
    server, _ = users
    acl = (server.data_dir / redis_users.ACL_FILE).read_text()
    passwords = json.loads((server.data_dir / redis_users.PASSWORDS_FILE).read_text())
    assert set(passwords) == {*PARTS, *SERVERS} and not any(p in acl for p in passwords.values())
    assert "wm-replica" not in acl and "wm-sentinel" not in acl  # one Redis: no replica, no Sentinel
    assert (server.data_dir / redis_users.PASSWORDS_FILE).stat().st_mode & 0o077 == 0


def test_the_producers_keys_are_its_streams_and_markers_alone() -> None:
    rules = part_rules("wm", shards=3)["producer"]
    assert rules.keys == ("~wm:events", "~wm:producer:*", "~wm:events:1", "~wm:events:1:producer:*",
                          "~wm:events:2", "~wm:events:2:producer:*")
    braced = part_rules("{wm}", shards=2)
    assert braced["producer"].keys == ("~{wm}:events", "~{wm}:producer:*", "~{wm:events:1}",
                                       "~{wm:events:1}:producer:*")
    assert "~{wm:events:1}*" in braced["job"].keys and "~{wm:events:1}*" not in braced["online"].keys
    assert not [c for c in rules.commands if c.startswith("+@")]  # no category: each command named


def test_wm_redis_url_names_each_part_and_keeps_a_redis_of_ones_own(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DEMO", "off")
    monkeypatch.setenv("REDIS_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("REDIS_URL", raising=False)
    assert main(["url", "job"]) == 0
    password = json.loads((tmp_path / redis_users.PASSWORDS_FILE).read_text())["job"]
    assert capsys.readouterr().out.strip() == f"redis://wm-job:{password}@127.0.0.1:6379/0"
    assert main(["url", "job"]) == 0 and password in capsys.readouterr().out  # made once, kept
    assert main(["url", "nobody"]) == 2
    monkeypatch.setenv("REDIS_URL", "redis://mine:6379/0")
    assert main(["url", "job"]) == 0 and capsys.readouterr().out.strip() == "redis://mine:6379/0"
    assert main(["acl", "--setuser"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(PARTS) and all(ln.startswith("ACL SETUSER wm-") for ln in lines)


def test_wm_redis_acl_prints_a_replicated_redis_its_nodes_and_sentinels_lines(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Each line's use is proved against real processes in tests/failover/test_sentinel_users.py and
    tests/cluster/test_cluster_users.py; here what each output holds, and which passwords it gives away."""
    monkeypatch.setenv("REDIS_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("REDIS_URL", "redis://node:6379/0")
    for name in ("REDIS_SENTINELS", "REDIS_SENTINEL_MASTER"):
        monkeypatch.delenv(name, raising=False)

    def acl(flag: str) -> tuple[int, str]:
        code = main(["acl", flag])
        return code, capsys.readouterr().out

    code, cluster = acl("--nodes")
    assert code == 0 and "user wm-replica " in cluster and "wm-sentinel" not in cluster  # a Cluster has no Sentinel
    assert acl("--sentinels") == (2, "")
    monkeypatch.delenv("REDIS_URL")
    monkeypatch.setenv("REDIS_SENTINELS", "s1:26379,s2:26379")
    monkeypatch.setenv("REDIS_SENTINEL_MASTER", "prod")
    (_, nodes), (_, replication), (_, sentinels) = acl("--nodes"), acl("--replication"), acl("--sentinels")
    passwords = json.loads((tmp_path / redis_users.PASSWORDS_FILE).read_text())
    assert [ln.split()[1] for ln in nodes.splitlines()] == ["default", *(f"wm-{u}" for u in (*PARTS, *SERVERS))]
    assert replication == f"masteruser wm-replica\nmasterauth {passwords['replica']}\n"
    assert f"sentinel auth-user prod wm-sentinel\nsentinel auth-pass prod {passwords['sentinel']}\n" in sentinels
    # the only passwords in the clear: the ones a replica and a Sentinel send
    told = {user for user, secret in passwords.items() if secret in nodes + replication + sentinels}
    assert told == {"replica", "sentinel"}
    users = {ln.split()[1]: ln for ln in sentinels.splitlines() if ln.startswith("user ")}
    assert "+sentinel|masters" in users["wm-producer"] and "+sentinel|set" not in users["wm-producer"]
    assert "+@all" not in users["wm-producer"] and "+@all" in users["wm-admin"]
