"""Through Sentinel, against real processes: a client follows a failover without being made again, a write sent to a
demoted primary is retried, and a commit is done only once its replica has it (decision 0023)."""

from __future__ import annotations

import signal
import statistics
import time
import uuid
from dataclasses import replace

import pytest
import redis

from bench.failover.sentinels import MASTER, SentinelGroup, until
from streaming.rules.commit.batch import BatchSummary, WindowAgg
from streaming.schema.config import Config
from streaming.schema.keys import KeySchema
from streaming.schema.records import ServerRecord
from streaming.store import redis_conn
from streaming.store.commit import commit_batch
from streaming.store.redis_conn import ReplicasBehind, connect, with_retry
from tests.schema.params import built_params
from watermark_client import connection
from watermark_client.connection import open_client

T0 = 1_767_225_600_000
PARAMS = built_params(600_000, 600_000, 300_000)


def summary(batch_id: int, events: int = 2) -> BatchSummary:
    w = WindowAgg(T0, T0 + 600_000, "A", events=events, players=1)
    st = ServerRecord(rows=events, events=events, min_event_us=T0 * 1000, max_event_us=(T0 + 1000 * batch_id) * 1000)
    return BatchSummary(batch_id, 0, T0, f"{batch_id}-0", f"{batch_id + 1}-0", [w], {"A": st}, [])


def test_the_same_client_writes_on_after_sentinel_promotes_the_replica(group: SentinelGroup) -> None:
    cfg = Config.from_env({"REDIS_SENTINELS": ",".join(f"127.0.0.1:{s.port}" for s in group.sentinels),
                           "REDIS_SENTINEL_MASTER": MASTER})
    assert not cfg.embedded_redis and cfg.redis_url.startswith("redis+sentinel://")
    client = connect(cfg.redis_url)  # what every process does with the URL
    assert not connection.is_cluster(client)
    client.set("k", "before")
    # the replica has it: what is lost when it has not is the WAIT test's
    until(lambda: group.replicas[0].client().get("k") == b"before", "the write on the replica")
    old = group.primary_port()
    assert old == group.primary.port
    group.node(old).signal(signal.SIGKILL)
    killed = time.monotonic()
    with_retry(lambda: client.set("k", "after"), "a write across the failover", give_up_after_s=60, max_delay_s=0.5)
    took = time.monotonic() - killed
    new = group.promoted(old)
    assert new is group.replicas[0] and new.client().get("k") == b"after"
    assert client.get("k") == b"after"
    print(f"written again {took:.1f} s after the primary was killed")  # noqa: T201 - the measurement, with -s


def test_a_transaction_sent_to_a_demoted_primary_is_refused_as_read_only_and_retried(group: SentinelGroup) -> None:
    keys = KeySchema(f"ro-{uuid.uuid4().hex[:8]}")
    replica = redis.Redis(host="127.0.0.1", port=group.replicas[0].port)  # a client still on the old primary
    with pytest.raises(redis.exceptions.ReadOnlyError):
        commit_batch(replica, keys, summary(0), PARAMS)
    assert isinstance(redis.exceptions.ReadOnlyError("x"), redis_conn.TRANSIENT)  # with_retry tries again
    assert replica.hget(keys.state, "last_batch") is None  # nothing of it ran
    client = open_client(group.url)
    assert commit_batch(client, keys, summary(0), PARAMS)


def test_a_commit_is_done_only_once_its_replica_has_it(group: SentinelGroup) -> None:
    client = open_client(group.url, socket_timeout=10)
    keys = KeySchema(f"wait-{uuid.uuid4().hex[:8]}")
    params = built_params(600_000, 600_000, 300_000, wait_replicas=1, wait_timeout_ms=300)
    started = time.monotonic()
    assert commit_batch(client, keys, summary(0), params)
    acked_s = time.monotonic() - started
    replica = group.replicas[0]
    replica.signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(ReplicasBehind, match="0 of 1 replica"):
            commit_batch(client, keys, summary(1), params)
        assert time.monotonic() - started >= 0.3
        assert client.hget(keys.state, "last_batch") == b"1"  # on the primary, but the batch is not done
        with pytest.raises(ReplicasBehind):  # run again, it finds itself applied and waits again
            assert not commit_batch(client, keys, summary(1), params)
    finally:
        replica.signal(signal.SIGCONT)
    # as the sink runs it: retried until the replica has it, which it does once it runs again
    assert with_retry(lambda: commit_batch(client, keys, summary(1), params), "the commit of batch 1",
                      give_up_after_s=30) is False
    assert replica.client().hget(keys.state, "last_batch") == b"1"
    assert int(client.hget(keys.totals, "events")) == 4  # counted once
    print(f"a commit acknowledged by its replica in {acked_s * 1000:.1f} ms")  # noqa: T201


def test_what_waiting_for_the_replica_costs_a_commit(group: SentinelGroup) -> None:
    """Medians of 300 small commits through the Sentinel client, without and with the wait, taken in turn (printed
    with -s: speed is bench/s to judge, this proves both run)."""
    client = open_client(group.url)
    runs = {n: (KeySchema(f"cost-{n}-{uuid.uuid4().hex[:8]}"), replace(PARAMS, wait_replicas=n)) for n in (0, 1)}
    took: dict[int, list[float]] = {0: [], 1: []}
    for batch in range(300):
        for n, (keys, params) in runs.items():
            started = time.perf_counter()
            assert commit_batch(client, keys, summary(batch), params)
            took[n].append(time.perf_counter() - started)
    median = {n: statistics.median(t[20:]) * 1000 for n, t in took.items()}
    print(f"a commit: {median[0]:.2f} ms alone, {median[1]:.2f} ms waiting for the replica")  # noqa: T201


def test_a_commit_a_real_failover_lost_is_seen(group: SentinelGroup) -> None:
    """Redis' asynchronous replication losing a commit, as the issue tells it: batch 2 is committed on the primary
    alone (its replica cut off and stopped), the primary dies, Sentinel promotes the replica, which has batch 1. Batch
    3, committed through the same client, finds the record behind and says batches 2 to 2 were lost."""
    client = open_client(group.url)
    keys = KeySchema(f"lost-{uuid.uuid4().hex[:8]}")
    replica = group.replicas[0]
    for batch in (0, 1):
        assert commit_batch(client, keys, summary(batch), PARAMS)
    until(lambda: replica.client().hget(keys.state, "last_batch") == b"1", "batch 1 on the replica")
    replica.signal(signal.SIGSTOP)
    try:
        group.primary.client().client_kill_filter(_type="replica")  # nothing more reaches it, not even buffered
        assert commit_batch(client, keys, summary(2), PARAMS)  # acknowledged by the primary alone
        group.primary.signal(signal.SIGKILL)
    finally:
        replica.signal(signal.SIGCONT)
    assert with_retry(lambda: commit_batch(client, keys, summary(3), PARAMS), "the commit of batch 3",
                      give_up_after_s=60, max_delay_s=0.5)
    assert group.promoted(group.primary.port) is replica
    state = client.hgetall(keys.state)
    assert (state[b"last_batch"], state[b"lost_from_batch"], state[b"lost_to_batch"]) == (b"3", b"2", b"2")
    assert int(client.hget(keys.totals, "events")) == 6  # batch 2's events are gone, and said to be


def test_the_online_views_commit_is_done_only_once_its_replica_has_it(group: SentinelGroup) -> None:
    """The online view commits apart from the pipeline (the job's fold, or a ``wm-online`` group): it waits too."""
    import numpy as np

    from streaming.rules.online.fold import KIND_CODES
    from streaming.rules.online.table import OnlineBatch, OnlineEvents
    from streaming.store.online.commit import commit_online

    def login(batch: int, player: str) -> OnlineBatch:
        ev = OnlineEvents(np.array(["A"], object), np.array([player], object), np.array([T0 * 1000], np.int64),
                            np.array([0], np.int64), np.array([KIND_CODES["login"]], np.int8),
                            np.array([T0 + batch], np.int64))
        return OnlineBatch(batch, 0, T0 + batch, f"{T0 + batch}-0", ev, 300_000)

    client = open_client(group.url, socket_timeout=10)
    keys = KeySchema(f"online-{uuid.uuid4().hex[:8]}")
    params = replace(PARAMS, wait_replicas=1, wait_timeout_ms=300)
    assert commit_online(client, keys, login(0, "p1"), params, 60_000)
    replica = group.replicas[0]
    replica.signal(signal.SIGSTOP)
    try:
        with pytest.raises(ReplicasBehind, match="online view's commit of batch 1"):
            commit_online(client, keys, login(1, "p2"), params, 60_000)
    finally:
        replica.signal(signal.SIGCONT)
    assert with_retry(lambda: commit_online(client, keys, login(1, "p2"), params, 60_000),
                      "the online view's commit of batch 1", give_up_after_s=30) is False  # applied, now replicated
    assert {k.decode(): int(v) for k, v in replica.client().hgetall(keys.online_counts).items()} == {"A": 2}
