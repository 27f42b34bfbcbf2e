"""A producer that waits for a replica (``wait_replicas``): an event it counts as delivered survives a failover,
and one it does not is written once on the primary that takes over. Real processes (:mod:`bench.failover.sentinels`).
"""

from __future__ import annotations

import signal
import uuid
from collections import Counter

import pytest
import redis

from bench.failover.sentinels import SentinelGroup, until
from streaming.schema.keys import KeySchema
from watermark_client import Producer
from watermark_client.producer import ProducerTimeout

T = "2026-11-28T10:00:00Z"


def events(prefix: str, n: int) -> list[dict[str, str]]:
    return [{"event_id": f"{prefix}-{i}", "server": "A", "player_id": f"p{i}", "kind": "login", "event_time": T}
            for i in range(n)]


def ids(client: redis.Redis, stream: str) -> Counter[str]:
    """How many times each event ID is in the stream."""
    import orjson

    return Counter(orjson.loads(f[b"e"])["event_id"] for _, f in client.xrange(stream))


def test_an_event_is_delivered_once_the_replica_has_it(group: SentinelGroup) -> None:
    stream = KeySchema(f"pw-{uuid.uuid4().hex[:8]}").events
    replica = group.replicas[0]
    with Producer(group.url, stream_key=stream, wait_replicas=1, wait_timeout_s=0.2, batch_size=50) as producer:
        for e in events("a", 200):
            producer.send(e)
        producer.flush()
        assert replica.client().xlen(stream) == 200  # delivered means on the replica, with no wait of ours
        replica.signal(signal.SIGSTOP)
        try:
            for e in events("b", 100):
                producer.send(e)
            with pytest.raises(ProducerTimeout, match="not acknowledged"):
                producer.flush(timeout=1.0)
            assert producer.pending == 100  # written on the primary, not delivered
            assert producer.stats.short_waits >= 1
            assert group.primary.client().xlen(stream) == 300
        finally:
            replica.signal(signal.SIGCONT)
        producer.flush()  # the replica is back: a WAIT counts it, the batches are delivered
        assert producer.pending == 0 and producer.stats.written == 300
    assert ids(replica.client(), stream) == Counter({f"{p}-{i}": 1 for p, n in (("a", 200), ("b", 100))
                                                     for i in range(n)})


def test_what_a_failover_lost_before_the_replica_had_it_is_written_again_once(group: SentinelGroup) -> None:
    """The replica is cut off while a batch goes to the primary alone; the primary dies; Sentinel promotes the
    replica, which never had that batch. The producer had not counted it as delivered: it finds the new primary's
    marker below the batch and writes it there, once. What it had counted as delivered is there too."""
    stream = KeySchema(f"pf-{uuid.uuid4().hex[:8]}").events
    replica, old = group.replicas[0], group.primary
    producer = Producer(group.url, stream_key=stream, wait_replicas=1, wait_timeout_s=0.2, batch_size=50,
                        max_backoff_s=0.2)
    try:
        for e in events("a", 100):
            producer.send(e)
        producer.flush()
        delivered = producer.stats.written
        replica.signal(signal.SIGSTOP)
        old.client().client_kill_filter(_type="replica")  # nothing more reaches it, not even buffered
        for e in events("b", 100):
            producer.send(e)
        until(lambda: old.client().xlen(stream) == 200 and producer.stats.short_waits >= 1,
              "the second batches on the primary alone, WAIT short of the replica")
        old.signal(signal.SIGKILL)
        replica.signal(signal.SIGCONT)
        assert group.promoted(old.port) is replica
        # With one replica the new primary has none: nothing is delivered (WAIT counts 0) until one is back
        with pytest.raises(ProducerTimeout, match="WAIT counted 0 replica"):
            producer.flush(timeout=2)
        old.start(group._server(old, "--replicaof", "127.0.0.1", str(replica.port)))  # the old one, back as replica
        producer.flush(timeout=60)
        assert delivered == 100 and producer.stats.written == 200
        assert producer.stats.reconnects >= 1 and producer.stats.resent_batches >= 1
    finally:
        producer.close(timeout=5)
    assert ids(replica.client(), stream) == Counter({f"{p}-{i}": 1 for p in "ab" for i in range(100)})
    assert ids(old.client(), stream) == ids(replica.client(), stream)  # and the replica has them


@pytest.mark.parametrize("options", [{"wait_replicas": -1}, {"wait_replicas": 1, "wait_timeout_s": 0},
                                     {"wait_replicas": 1, "idempotent": False}])
def test_a_wait_that_could_hang_or_duplicate_is_refused_at_start(options: dict) -> None:
    with pytest.raises(ValueError, match="wait"):
        Producer(redis.Redis(), **options)


def test_a_connection_lost_while_asking_the_replica_again_keeps_the_batch(group: SentinelGroup) -> None:
    """A batch the replica had not acknowledged is asked about again (``WAIT``) while nothing else is to send; the
    connection is lost during that question. The batch stays the producer's to settle: on the next connection the
    marker says it is written, and once the replica is back it is delivered, once (it was lost for good before:
    taken off the unacknowledged list before the question, and put nowhere when the question failed)."""
    stream = KeySchema(f"pa-{uuid.uuid4().hex[:8]}").events
    replica, primary = group.replicas[0], group.primary.client()
    with Producer(group.url, stream_key=stream, wait_replicas=1, wait_timeout_s=0.2, batch_size=50,
                  max_backoff_s=0.2) as producer:
        replica.signal(signal.SIGSTOP)
        try:
            for e in events("w", 50):
                producer.send(e)
            until(lambda: producer.stats.short_waits >= 2, "the batch asked about again, WAIT short of the replica")
            waiting = until(lambda: [c["id"] for c in primary.client_list() if c.get("cmd") == "wait"],
                            "the producer's connection asking WAIT")
            for client_id in waiting:
                primary.client_kill_filter(_id=client_id)
            until(lambda: producer.stats.reconnects >= 1, "the producer reconnected")
        finally:
            replica.signal(signal.SIGCONT)
        producer.flush(timeout=30)
        assert producer.pending == 0 and producer.stats.written == 50
    assert ids(primary, stream) == Counter({f"w-{i}": 1 for i in range(50)})
