"""The online view folded by ``wm-online``'s groups from what the job hands off (decision 0020): each batch's
events split by group and its record, handed off once; each group's runner folds its share of every batch in
order, once, whatever the order the groups run in, their restarts and the job's replays; what the view keeps is
what the job's own fold keeps. A share gone, or batches the hand-off no longer keeps, say the view is partial
from there; a group configured for another number of groups refuses. Real redis-server, no Spark."""

from __future__ import annotations

import random
import uuid

import pytest
import redis

from streaming.rules.online.groups import Group
from streaming.schema.config import ConfigError
from streaming.schema.keys import KeySchema
from streaming.schema.records import HandoffBatch
from streaming.store.online.handoff import hand_off, handed_off
from streaming.store.online.runner import GroupRunner
from tests.store.online.rows import events
from tests.store.test_online_groups import PARAMS, dump, now, random_game, random_order, run
from tests.store.test_server_clocks import DELAY, T0, TIMEOUT

TTL_S = 3_600


def hand_off_twice(r: redis.Redis, keys: KeySchema, batches: list[list[tuple]], i: int, groups: int) -> None:
    """The job's side of batch ``i``, then the same again (a batch replayed after a crash): handed off once."""
    b = HandoffBatch(batch=i, groups=groups, watermark_ms=0, batch_ts_ms=T0 + i * 1000, end_id=f"{T0 + i * 1000}-0",
                    delay_ms=DELAY, timeout_ms=TIMEOUT,
                    newest_arrival_ms=max((row[4] for row in batches[i]), default=None))
    assert hand_off(r, keys, b, events(*batches[i]), TTL_S)
    assert not hand_off(r, keys, b, events(*batches[i]), TTL_S)
    assert handed_off(r, keys) == i


def runners(r: redis.Redis, keys: KeySchema, groups: int) -> list[GroupRunner]:
    return [GroupRunner(r, keys, Group(g, groups), PARAMS, now) for g in range(groups)]


def handed(r: redis.Redis, batches: list[list[tuple]], groups: int, seed: int) -> KeySchema:
    """Every batch handed off while the groups' runners run at their own pace, each restarted now and then (a new
    runner loads its players from Redis); each batch folded once, in order, by every group."""
    keys = KeySchema(f"ho-{uuid.uuid4().hex[:8]}")
    rng = random.Random(seed)
    rs = runners(r, keys, groups)
    folded = [[] for _ in range(groups)]
    for i in range(len(batches)):
        hand_off_twice(r, keys, batches, i, groups)
        for g in rng.sample(range(groups), rng.randint(0, groups)):
            if rng.random() < 0.1:
                rs[g] = GroupRunner(r, keys, Group(g, groups), PARAMS, now)
            folded[g] += rs[g].step()
    for g in range(groups):
        folded[g] += rs[g].step()
        assert folded[g] == list(range(len(batches)))  # each batch once, in order
    got = dump(r, keys)
    assert {k for k in got if k.startswith("handoff:")} == {"handoff:batches", "handoff:guard"}  # shares gone
    assert not r.zcard(keys.online_parts_index)
    return keys


ONE_PATH = [  # (who carries the batches to the fold, groups, seed): decision 0025
    ("job", 2, 0), ("job", 2, 1), ("job", 4, 2), ("job", 3, 3),
    ("hand-off", 1, 0), ("hand-off", 2, 1), ("hand-off", 4, 2), ("hand-off", 3, 3),
]


@pytest.mark.parametrize(("carried", "groups", "seed"), ONE_PATH)
def test_the_online_view_is_one_fold_whoever_carries_the_batches(r: redis.Redis, carried: str, groups: int,
                                                                 seed: int) -> None:
    """The one test matrix of decision 0025. The job's own fold (``ONLINE_GROUPS=0``: every server, group 0 of 1)
    is what the view must hold. The same commit run by N groups in the job's process, in any order, restarted and
    retried, or reached through the hand-off by ``wm-online``'s runners, holds exactly that: every key the view
    keeps (players, counts, state, records, minutes, peaks, history), but the hand-off's own."""
    batches = random_game(seed)
    whole = dump(r, run(r, batches, 1))
    assert any(k.startswith("online:players:") and v for k, v in whole.items())  # not a compare of nothing
    if carried == "job":
        keys = run(r, batches, groups, random_order(seed) if seed % 2 else None, restart_every=7, seed=seed)
    else:
        keys = handed(r, batches, groups, seed)
    assert {k: v for k, v in dump(r, keys).items() if not k.startswith("handoff:")} == whole


def test_a_group_configured_for_another_number_refuses(r: redis.Redis) -> None:
    keys = KeySchema(f"ho-{uuid.uuid4().hex[:8]}")
    hand_off_twice(r, keys, random_game(0), 0, 2)
    with pytest.raises(ConfigError, match="ONLINE_GROUPS: the job splits the online view among 2 groups"):
        GroupRunner(r, keys, Group(0, 3), PARAMS, now).step()


def test_a_share_gone_or_batches_no_longer_kept_say_the_view_is_partial(r: redis.Redis,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    """Group 1's share of batch 30 expires before it runs: its part of batch 30 says so, the view is partial from
    batch 30 and goes on. Later group 1 is away while the hand-off's stream drops batches 50 to 59: it goes on from
    batch 60 and the view is partial from there."""
    batches = random_game(1)
    keys = KeySchema(f"ho-{uuid.uuid4().hex[:8]}")
    rs = runners(r, keys, 2)
    for i in range(len(batches)):
        hand_off_twice(r, keys, batches, i, 2)
        if i == 30:
            r.delete(keys.handoff_rows(30, 1))
        if i == 59:
            first_kept = r.xrange(keys.handoff_batches)[-1][0]  # batch 59's entry: everything before it goes
            r.xtrim(keys.handoff_batches, minid=first_kept, approximate=False)
        if not 50 <= i < 59:
            rs[1].step()
        rs[0].step()
    assert int(r.hget(keys.online_state, "last_batch")) == len(batches) - 1
    record = [m for m in caplog.messages if "group 1" in m]
    assert any("share of batch 30 is gone" in m for m in record), record
    assert any("batches 50 to 58" in m for m in record), record
    assert int(r.hget(keys.online_state, "lost_at_batch")) == 59


def test_the_number_of_groups_changes_once_every_batch_is_folded(r: redis.Redis) -> None:
    """Two groups for 45 batches, then (every one folded) three: the new groups read the hand-off's record from its
    start, pass over the batches folded under the old number, and go on from the view."""
    batches = random_game(3)
    whole = dump(r, run(r, batches, 1))
    keys = KeySchema(f"ho-{uuid.uuid4().hex[:8]}")
    for groups, span in ((2, range(0, 45)), (3, range(45, 90))):
        rs = runners(r, keys, groups)
        for i in span:
            hand_off_twice(r, keys, batches, i, groups)
            for runner in rs:
                runner.step()
    assert {k: v for k, v in dump(r, keys).items() if not k.startswith("handoff:")} == whole
