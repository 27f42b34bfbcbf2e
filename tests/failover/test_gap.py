"""A commit Redis lost while it kept older ones (a failover to a replica that did not have it yet): committed again
from the input when that is still there, else recorded and said, on the status line and in ``/metrics``, the way
history lost is (decision 0023)."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

import pytest
import redis
from prometheus_client.samples import Sample

from streaming.apps.monitor.metrics import health_families
from streaming.schema.keys import KeySchema
from streaming.store.commit import commit_batch
from streaming.store.views.snapshot import read_snapshot
from tests.failover.test_sentinel import PARAMS, T0, summary


def _samples(verdicts: dict) -> dict[str, float]:
    out = {}
    for family in health_families(verdicts):
        for s in family.samples:
            assert isinstance(s, Sample)
            if s.name.startswith("wm_commits_lost"):
                out[s.name] = s.value
    return out


def test_a_commit_lost_under_a_later_one_is_recorded_and_said(r: redis.Redis) -> None:
    from dashboard.status import Level, assess, verdict

    keys = KeySchema(f"gap-{uuid.uuid4().hex[:8]}")
    for batch in (0, 1, 2):
        assert commit_batch(r, keys, summary(batch), PARAMS)
    assert r.hget(keys.state, "lost_from_batch") in (b"", None)  # batch after batch: nothing lost
    # Redis holds batch 2's commit, Spark has committed 3 (its commit is gone) and now commits 4 on top
    assert commit_batch(r, keys, summary(4), PARAMS)
    assert (r.hget(keys.state, "lost_from_batch"), r.hget(keys.state, "lost_to_batch")) == (b"3", b"3")
    assert commit_batch(r, keys, summary(5), PARAMS)
    assert r.hget(keys.state, "lost_from_batch") == b"3"  # and it stays said
    assert int(r.hget(keys.totals, "events")) == 10  # batch 3's 2 events are missing, and said to be

    now = T0 + 1_000
    r.hset(keys.state, "updated_ms", now)
    snap = read_snapshot(r, keys, range_ms=3_600_000, now_ms=now)
    said = [s for s in assess(snap, now) if s.text.startswith("Commits lost")]
    assert [s.level for s in said] == [Level.WARNING]
    assert "the commit of batch 3 " in said[0].text and "went on from batch 4" in said[0].text
    v = verdict(snap, now)
    assert v.commits_lost == (3, 3)
    assert _samples({"main": v}) == {"wm_commits_lost_from_batch": 3, "wm_commits_lost_to_batch": 3}
    assert _samples({"main": replace(v, commits_lost=None)}) == {}


def test_a_lab_lane_starting_late_is_not_a_lost_commit(r: redis.Redis) -> None:
    keys = KeySchema(f"lane-{uuid.uuid4().hex[:8]}")
    lane = replace(PARAMS, trims=False)  # a lane's first commit is whatever batch it was added at
    assert commit_batch(r, keys, summary(7), lane)
    assert commit_batch(r, keys, summary(9), lane)
    assert r.hget(keys.state, "lost_from_batch") in (b"", None)


def test_a_follower_whose_commits_redis_lost_is_not_built_on(r: redis.Redis, redis_url: str) -> None:
    from streaming.spark.sink import FollowerBehind, LaneSink, RedisSink

    keys = KeySchema(f"fol-{uuid.uuid4().hex[:8]}")
    lane = LaneSink(KeySchema(f"{keys.namespace}.lane"), replace(PARAMS, trims=False))
    sink = RedisSink(redis_url, keys, PARAMS, "unused", lanes=[lane], online_timeout_ms=30_000)
    r.hset(lane.keys.state, "last_batch", 3)
    r.hset(keys.online_state, "last_batch", 4)
    sink.followers_in_step(4)  # the next batch for the lane, one already there for the online view
    sink.followers_in_step(2)  # a batch run again: each has it
    with pytest.raises(FollowerBehind, match=f"batch 5: lane {lane.keys.namespace} at batch 3: Redis lost"):
        sink.followers_in_step(5)


@pytest.mark.spark
def test_a_commit_redis_lost_is_committed_again_from_the_input(spark, redis_url: str, tmp_path: Path) -> None:  # noqa: ANN001
    from tests.failover.restore import restored_run

    expected, got, keys, client = restored_run(spark, redis_url, tmp_path)
    assert client.hget(keys.state, "lost_from_batch") in (b"", None)  # committed again: nothing is missing
    assert got == expected
