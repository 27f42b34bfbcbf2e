"""The store, the producers and the job's start in a Redis Cluster of three primaries (decision 0018), against
the real redis-server: the key layout, the commit on the pipeline's node, each shard's trim and count, what a
reader sees, and the clear refusals. (The job end to end, SIGKILLed mid-commit, is in
``tests/pipeline/test_exactly_once.py``.)"""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
import redis
from redis.cluster import RedisCluster

from bench.failover.sentinels import until
from streaming.apps.redis_server import LocalCluster
from streaming.rules.commit.batch import BatchSummary
from streaming.rules.online.groups import Group
from streaming.rules.scenarios import fleet
from streaming.rules.simulate import generate
from streaming.schema.config import Config, lane_namespace
from streaming.schema.keys import KeySchema
from streaming.schema.records import ServerRecord
from streaming.schema.shards import shard_key
from streaming.store.commit import commit_batch
from streaming.store.online.runner import GroupRunner
from streaming.store.pipeline_status import read_pipeline
from streaming.store.redis_conn import refresh, same_slot, with_retry
from streaming.store.stream_writer import StreamWriter, WriteStats
from tests.schema.params import built_params
from tests.store.online.test_handoff import hand_off_twice
from tests.store.test_online_groups import PARAMS as ONLINE
from tests.store.test_online_groups import dump, now, random_game, run
from tests.writers import write_through_losses
from watermark_client.connection import home, is_cluster, open_client
from watermark_client.events import parse_entry
from watermark_client.sharded import ShardedProducer
from watermark_client.stream import shard_of

PARAMS = built_params(600_000, 600_000, 300_000)
T0 = 1_767_225_600_000


@pytest.fixture()
def c(redis_cluster: LocalCluster) -> RedisCluster:
    client = open_client(redis_cluster.url)
    assert is_cluster(client)
    return client


@pytest.fixture()
def keys() -> KeySchema:
    return KeySchema(f"{{t{uuid.uuid4().hex[:8]}}}")


def test_a_braced_namespace_keeps_the_pipeline_on_one_node_and_spreads_the_input(c: RedisCluster,
                                                                                 keys: KeySchema) -> None:
    """Every key a commit names (its state, totals, windows, late and dead streams per shard, a lane's and the
    online view's) shares the state's slot; input shards 1-3 each hash on their own name, over the nodes."""
    lane = KeySchema(lane_namespace(keys.namespace, "per-server-min"))
    own = [keys.totals, keys.windows, keys.commits, keys.batches, keys.seen, keys.idleness, keys.online_state,
           keys.online_counts, keys.online("A"), keys.trimmed, keys.events, lane.state, lane.totals,
           *(shard_key(keys.late, k) for k in range(4)), *(shard_key(keys.dead, k) for k in range(4))]
    assert all(same_slot(k, keys.state) for k in own)
    inputs = [keys.input_shard(k) for k in range(1, 4)]
    assert inputs[0] == f"{{{keys.namespace[1:-1]}:events:1}}"
    assert not any(same_slot(k, keys.state) for k in inputs)
    assert all(same_slot(keys.trimmed_of(k), keys.input_shard(k)) for k in range(4))  # a trim is one script
    nodes = {c.get_node_from_key(k).port for k in [keys.state, *inputs]}
    assert len(nodes) >= 2


def test_a_commit_trims_each_shard_on_its_node_and_what_waits_stays_exact(c: RedisCluster, keys: KeySchema) -> None:
    """Four shards with 3,000 entries each, read to different points: the commit (on the pipeline's node) trims
    each shard below its own start, shard 0 in its transaction, the others after it on their nodes; each count
    is exact and a reader's "waiting" is the sum of what the position has not covered."""
    pipe = c.pipeline(transaction=False)
    for k in range(4):
        for i in range(3_000):
            pipe.xadd(keys.input_shard(k), {"e": b"{}"}, id=f"{T0 + i}-0")
    pipe.execute()
    start = f"{T0 + 2_000}-0,{T0 + 1_000}-0,{T0 + 500}-0,0-0"
    end = ",".join([f"{T0 + 2_999}-0"] * 3 + [f"{T0 + 1_999}-0"])
    s = BatchSummary(0, 0, T0 + 86_400_000, start, end, [], {"A": ServerRecord(rows=1, max_event_us=T0 * 1000)}, [])
    assert commit_batch(c, keys, s, PARAMS)
    assert not commit_batch(c, keys, s, PARAMS), "the guard holds: a batch commits once"
    left = [c.xlen(keys.input_shard(k)) for k in range(4)]
    trimmed = [int(c.get(keys.trimmed_of(k)) or 0) for k in range(4)]
    assert [n + t for n, t in zip(left, trimmed, strict=True)] == [3_000] * 4, "each count is exact"
    assert trimmed[3] == 0 and all(t > 0 for t in trimmed[:3])
    c.hset(keys.totals, "input", 3 * 3_000 + 2_000)  # what the batch read (the sink writes it; set here)
    status = read_pipeline(c, keys)
    assert status.stream.waiting == 1_000 and status.stream.length == sum(left)


def test_producers_write_each_shard_on_its_node_exactly_once(c: RedisCluster, redis_cluster: LocalCluster,
                                                            keys: KeySchema) -> None:
    """The producer library sends a server's events to its shard, one transaction per shard on the shard's node
    (its marker beside it); every event arrives once, in its server's shard."""
    servers = [f"s{i}" for i in range(12)]
    with ShardedProducer(redis_cluster.url, shards=4, namespace=keys.namespace) as producer:
        for n in range(600):
            srv = servers[n % len(servers)]
            producer.send({"event_id": f"e{n}", "server": srv, "player_id": f"p{n}", "kind": "heartbeat",
                           "event_time": "2026-01-01T00:00:00Z"})
    per_shard = [c.xlen(keys.input_shard(k)) for k in range(4)]
    assert per_shard == [sum(50 for s in servers if shard_of(s, 4) == k) for k in range(4)]
    for k in range(4):
        marker = f"{keys.input_shard(k)}:producer:{producer.producer_id}" if k else keys.producer(
            producer.producer_id)
        assert same_slot(marker, keys.input_shard(k)) and (c.get(marker) is not None) == (per_shard[k] > 0)


def test_the_generator_writes_each_shard_on_its_node_exactly_once_through_lost_connections(
        c: RedisCluster, keys: KeySchema) -> None:
    """The generator's writer on a cluster: a transaction per shard a batch touches, each on its node with its own
    marker. Its connections to two nodes are killed mid-run four times: every event is in its server's shard
    exactly once, and the writer counted each once."""
    events = generate(fleet(12, 3), seed=4, start_us=T0 * 1000, rate=1000, count=12_000)
    kills = 0

    def on_batch(stats: WriteStats) -> None:
        nonlocal kills
        if stats.batches % 9 == 0 and kills < 4:
            channel = writer.channels[kills % 2 + 1]
            kills += 1
            home(c, channel.stream_key).client_kill_filter(_id=channel._server[1])  # type: ignore[index]

    writer = StreamWriter(c, keys.events, shards=4, batch_size=300, on_batch=on_batch)
    assert writer.split and len(writer.channels) == 4
    lost = write_through_losses(writer, iter(events))
    assert kills == 4 and lost >= 1
    want = Counter(shard_of(e.server, 4) for _, e in events)
    for k in range(4):
        ids = Counter(parse_entry(f, i.decode()).event_id for i, f in c.xrange(keys.input_shard(k)))
        assert set(ids.values()) <= {1} and sum(ids.values()) == want[k]
    assert writer.stats.written == len(events) and len(want) >= 3


def test_the_job_refuses_a_namespace_without_braces_in_a_cluster(c: RedisCluster, redis_cluster: LocalCluster,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    from streaming.apps.job import prepare

    cfg = Config(redis_url=redis_cluster.url, namespace=f"plain{uuid.uuid4().hex[:6]}")
    assert prepare(c, cfg, cfg, []) is None
    assert "must be braced" in caplog.text


def test_a_plain_redis_gets_a_plain_client(redis_url: str) -> None:
    client = open_client(redis_url)
    assert not is_cluster(client) and isinstance(client, redis.Redis)
    assert home(client, "{wm}:state") is client


@pytest.mark.parametrize("online_reach", [0, 5])
def test_the_monitors_reading_works_on_a_cluster(c: RedisCluster, keys: KeySchema, online_reach: int) -> None:
    """What /metrics and each alert round read (``read_stack``), with and without the online history: a cluster's
    pipeline refuses keyless commands such as ECHO (the metrics' placeholder was one: /metrics answered 500)."""
    from streaming.store.observe import read_stack

    c.xadd(keys.input_shard(2), {"e": b"{}"})
    s = BatchSummary(0, 0, T0, "0-0,0-0,0-0", "0-0,0-0,0-0", [], {"A": ServerRecord(rows=1, max_event_us=T0 * 1000)},
                     [])
    assert commit_batch(c, keys, s, PARAMS)
    reading = read_stack(c, keys, {}, T0 + 1_000, None, online_reach)
    assert reading.last_batch == {"main": 0} and reading.input_entries == 1
    assert reading.obs.redis_used_bytes is not None and reading.obs.redis_used_bytes > 0


def _move_slot(c: RedisCluster, key: str) -> int:
    """Reshard ``key``'s slot, with its keys, to another primary (as ``redis-cli --cluster reshard`` does); the
    port it went to."""
    slot = c.keyslot(key)
    src = c.get_node_from_key(key)
    dst = next(n for n in c.get_primaries() if n.name != src.name)
    a, b = c.get_redis_connection(src), c.get_redis_connection(dst)
    src_id, dst_id = a.execute_command("CLUSTER", "MYID").decode(), b.execute_command("CLUSTER", "MYID").decode()
    b.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
    a.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
    while keys := a.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1_000):
        a.execute_command("MIGRATE", dst.host, dst.port, "", 0, 5_000, "KEYS", *keys)
    # the destination first, then the source, then the others (Redis' own order: the destination's new epoch must
    # win over a source that still gossips the slot as its own)
    others = [n for n in c.get_primaries() if n.name not in (src.name, dst.name)]
    for node in (dst, src, *others):
        c.get_redis_connection(node).execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
    # Until every node sends the slot to the new one: under load two nodes were seen sending it to each other for
    # the ten retries the test allows (the epochs settle by gossip), a harness's race and not the commit's.
    until(lambda: all(_sends_to(c.get_redis_connection(n), key, int(dst.port)) for n in c.get_primaries()),
          f"every node sends slot {slot} to port {dst.port}", timeout_s=60)
    return int(dst.port)


def _sends_to(node: redis.Redis, key: str, port: int) -> bool:
    """Whether ``node`` serves ``key`` itself (when it is the one at ``port``) or redirects it to ``port``."""
    try:
        node.exists(key)
    except redis.exceptions.MovedError as exc:
        return str(exc).endswith(f":{port}")
    return int(node.connection_pool.connection_kwargs["port"]) == port


def test_a_commit_finds_its_slot_on_another_node_after_a_resharding(c: RedisCluster, keys: KeySchema) -> None:
    """The pipeline's slot moves to another node between two batches (a resharding; a failover is seen the same
    way): the commit on the old node is refused (MOVED); retried as the sink retries it (``refresh``), it finds
    the new node and commits once, the guard and the counts intact."""
    for k in range(2):
        c.xadd(keys.input_shard(k), {"e": b"{}"}, id="1-0")
    first = BatchSummary(0, 0, T0, "0-0,0-0", "1-0,0-0", [], {"A": ServerRecord(rows=1, max_event_us=T0 * 1000)}, [])
    assert commit_batch(c, keys, first, PARAMS)
    port = _move_slot(c, keys.state)
    second = BatchSummary(1, 0, T0, "1-0,0-0", "1-0,1-0", [], {"B": ServerRecord(rows=1, max_event_us=T0 * 1000)}, [])
    with pytest.raises(redis.exceptions.MovedError):  # the map the client holds names the old node
        commit_batch(c, keys, second, PARAMS)
    assert with_retry(lambda: commit_batch(c, keys, second, PARAMS), "commit", refresh=lambda: refresh(c),
                      sleep=lambda _: None, attempts=10)
    assert home(c, keys.state).connection_pool.connection_kwargs["port"] == port
    assert c.hget(keys.state, "last_batch") == b"1" and not commit_batch(c, keys, second, PARAMS)
    assert c.hget(keys.state, "committed_id") == b"1-0,1-0"


def test_the_jobs_idle_markers_go_to_each_shards_node_with_their_decision(c: RedisCluster, keys: KeySchema) -> None:
    """On a cluster a marker for a server whose shard has a slot of its own is written there, its decision in the
    job's ``{ns}:idleness`` after it (two calls, decision 0018), naming the marker's ID; a server of shard 0 (the
    pipeline's slot) keeps the one script."""
    from streaming.apps.fleet_upkeep import IDLE_LUA, idle_ticker, tick_idle
    from streaming.rules.fleet import IdleDecision
    from watermark_client.events import IDLE_KIND, Event, Rules

    secret = b"k" * 32
    servers = ["A", "B", "D"]  # shards 3, 1 and 0 of 4
    assert [shard_of(s, 4) for s in servers] == [3, 1, 0]
    watcher = Config(namespace=keys.namespace, known_servers=frozenset(servers), watermark_mode="per-server",
                     idle_timeout_ms=1_000, trigger_ms=1_000, stream_shards=4)
    ticker = idle_ticker(c, watcher)
    ticker.started_ms -= 5_000  # every server silent since the job started, five seconds ago
    tick_idle(c, ticker, watcher, secret, keys, c.register_script(IDLE_LUA))
    decisions = {IdleDecision.from_record(f).server: f[b"marker_id"] for _, f in c.xrange(keys.idleness)}
    assert set(decisions) == set(servers)
    for server in servers:
        [(entry_id, fields)] = c.xrange(keys.input_shard(shard_of(server, 4)))
        marker = parse_entry(fields, entry_id.decode(), Rules(idle_key=secret))
        assert isinstance(marker, Event) and marker.kind == IDLE_KIND and marker.server == server
        assert decisions[server] == entry_id


def test_the_online_view_s_groups_fold_on_the_pipeline_s_node(c: RedisCluster, r: redis.Redis) -> None:
    """Decision 0020 in a cluster: the job's hand-off and two groups' commits and merges, under a braced namespace,
    leave the view the job's own fold leaves on one Redis, key for key; every key of it on the pipeline's node."""
    batches = random_game(1)
    whole = dump(r, run(r, batches, 1))
    keys = KeySchema(f"{{grp-{uuid.uuid4().hex[:8]}}}")
    groups = [GroupRunner(c, keys, Group(g, 2), ONLINE, now) for g in range(2)]
    for i in range(len(batches)):
        hand_off_twice(c, keys, batches, i, 2)
        for g in (i % 2, 1 - i % 2):  # now one group first, now the other
            groups[g].step()
    got = dump(c, keys)
    assert {k for k in got if k.startswith("handoff:")} == {"handoff:batches", "handoff:guard"}
    assert {k: v for k, v in got.items() if not k.startswith("handoff:")} == whole
    node = home(c, keys.online_state)
    assert all(node.exists(f"{keys.namespace}:{k}") for k in got)  # one slot: all on the pipeline's node
