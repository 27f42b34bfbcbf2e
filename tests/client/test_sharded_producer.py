"""The sharded producer against a real redis-server: each event in its server's shard, in order, exactly once
across killed connections and Redis restarts (``watermark_client.sharded``)."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pytest
import redis

from streaming.apps.redis_server import RedisServer
from streaming.schema.keys import KeySchema
from streaming.schema.shards import shard_key
from tests.client.test_producer import T0, own_redis, send_through_faults, stream_ids  # noqa: F401 - own_redis: a fixture
from watermark_client import ShardedProducer
from watermark_client.events import Event, parse_entry
from watermark_client.stream import shard_of

SHARDS = 4
SERVERS = [f"eu-{i}" for i in range(17)]


def ev(i: int) -> dict[str, Any]:
    return {"event_id": f"e{i}", "server": SERVERS[i % len(SERVERS)], "player_id": f"p{i % 101}",
            "kind": "heartbeat", "event_time": T0}


def by_shard(client: redis.Redis, ns: str) -> dict[int, list[Event]]:
    out = {}
    for k in range(SHARDS):
        events = [parse_entry(f, i.decode()) for i, f in client.xrange(shard_key(KeySchema(ns).events, k))]
        assert all(isinstance(e, Event) for e in events)
        out[k] = events
    return out


def test_each_event_goes_to_its_servers_shard_in_the_order_sent(r: redis.Redis, redis_url: str) -> None:
    ns = "sharded-order"
    n = 5_000
    with ShardedProducer(redis_url, namespace=ns, shards=SHARDS, batch_size=97) as producer:
        for i in range(n):
            producer.send(ev(i))
    assert producer.stats.accepted == producer.stats.written == n and producer.pending == 0
    shards = by_shard(r, ns)
    assert sum(len(v) for v in shards.values()) == n
    assert all(shards[k] for k in range(SHARDS))  # 17 servers spread over all four
    per_server: dict[str, list[int]] = defaultdict(list)
    for k, events in shards.items():
        for e in events:
            assert shard_of(e.server, SHARDS) == k
            per_server[e.server].append(int(e.event_id[1:]))
    assert all(ids == sorted(ids) for ids in per_server.values())  # a server's events in the order sent
    assert sorted(i for ids in per_server.values() for i in ids) == list(range(n))


def test_a_bad_event_is_refused_naming_the_field_and_the_others_go_on(r: redis.Redis, redis_url: str) -> None:
    with ShardedProducer(redis_url, namespace="sharded-bad", shards=SHARDS) as producer:
        with pytest.raises(ValueError, match="server"):
            producer.send({"player_id": "p1", "event_time": T0})
        with pytest.raises(ValueError, match="event_time"):
            producer.send({"server": "eu-1", "player_id": "p1", "event_time": "yesterday"})
        producer.send(ev(1))
    assert sum(len(v) for v in by_shard(r, "sharded-bad").values()) == 1
    with pytest.raises(ValueError, match="shards must be at least 1"):
        ShardedProducer(redis_url, shards=0)


def test_every_event_exactly_once_in_every_shard_across_killed_connections_and_restarts(
        own_redis: RedisServer) -> None:  # noqa: F811 - the fixture
    n, faults, ns = 16_000, 4, "sharded-faults"
    producer = ShardedProducer(own_redis.url, namespace=ns, shards=SHARDS, batch_size=200, max_pending=1_000,
                               max_backoff_s=0.1, send_timeout_s=60)
    done = send_through_faults(own_redis, producer, [ev(i) for i in range(n)], faults)
    assert done == ["kill", "restart"] * (faults // 2)
    client = redis.Redis.from_url(own_redis.url)
    ids = sum((stream_ids(client, shard_key(KeySchema(ns).events, k)) for k in range(SHARDS)), start=Counter())
    assert not [k for k, c in ids.items() if c > 1], "doubled"
    assert set(ids) == {f"e{i}" for i in range(n)}, "lost"
    assert producer.stats.accepted == producer.stats.written == n
    assert producer.stats.reconnects >= 1
