"""The online view folded by groups of servers (decision 0020): each group folds its servers' share of every batch
under its own guard and leaves its part; the last part in merges the batch into the view. Whatever the groups'
order, lags, retries and restarts, everything the view keeps in Redis (the state, the counts, every batch's
record, the minutes, the peaks, the day's history, each server's players) is what one fold of every server keeps,
provided each group is told the batch's newest arrival: the one thing a server's fold takes from the others' (a
server without events runs its clock on to it). Real redis-server, the real commit, the random games of the clock
tests (clocks ahead, behind and set forward, lags, silences, logouts, late events)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable

import redis

from streaming.rules.online.groups import Group
from streaming.rules.online.table import OnlineBatch
from streaming.schema.keys import KeySchema
from streaming.schema.records import OnlineRecord
from streaming.store.online.commit import OnlineMirror, commit_online
from tests.schema.params import built_params
from tests.store.online.rows import events
from tests.store.test_server_clocks import DELAY, T0, TIMEOUT, game
from tests.store.test_server_clocks import random_game as clock_game

PARAMS = built_params(60_000, 60_000, DELAY)
NOW_MS = T0 + 7 * 86_400_000  # one wall clock for every run: the records' updated_ms and expiries alike


def now() -> int:
    return NOW_MS


def share(batches: list[list[tuple]], i: int, group: Group, tell_newest: bool = True) -> OnlineBatch:
    """The group's share of batch ``i`` (rows: server, player, event ms, kind, arrival ms)."""
    batch = batches[i]
    newest = max((row[4] for row in batch), default=None) if tell_newest else None
    mine = [row for row in batch if group.owns(row[0])]
    return OnlineBatch(i, 0, T0 + i * 1000, f"{T0 + i * 1000}-0", events(*mine), DELAY,
                         newest_arrival_ms=newest if group.of > 1 else None)


def dump(r: redis.Redis, keys: KeySchema) -> dict[str, object]:
    """Every key of the namespace but the groups' own, by its name past the namespace, with its content."""
    out: dict[str, object] = {}
    for raw in r.scan_iter(f"{keys.namespace}:*"):
        name = raw.decode()[len(keys.namespace) + 1:]
        if name.startswith(("online:group:", "online:parts")):
            continue
        kind = r.type(raw).decode()
        if kind == "string":
            out[name] = r.get(raw)
        elif kind == "hash":
            out[name] = r.hgetall(raw)
        elif kind == "zset":
            out[name] = r.zrange(raw, 0, -1, withscores=True)
        else:
            assert kind == "stream", (name, kind)
            out[name] = [fields for _, fields in r.xrange(raw)]  # entry IDs are Redis' clock: not compared
    return out


def run(r: redis.Redis, batches: list[list[tuple]], groups: int,
        schedule: Callable[[int, int], list[int]] | None = None, tell_newest: bool = True, restart_every: int = 0,
        seed: int = 0) -> KeySchema:
    """Every batch through ``groups`` groups, in the order ``schedule(groups, batches)`` gives (a group's next batch
    each time; lockstep when None), in one namespace; each group keeps its mirror as a process would, a fresh one
    every ``restart_every``-th step (a restart), and retries its last batch now and then (a lost reply)."""
    keys = KeySchema(f"grp-{uuid.uuid4().hex[:8]}")
    order = schedule(groups, len(batches)) if schedule else [g for _ in batches for g in range(groups)]
    mirrors = [OnlineMirror() for _ in range(groups)]
    done = [0] * groups
    rng = random.Random(seed)
    for step, g in enumerate(order):
        group = Group(g, groups)
        if restart_every and step % restart_every == restart_every - 1:
            mirrors[g] = OnlineMirror()
        assert commit_online(r, keys, share(batches, done[g], group, tell_newest), PARAMS, TIMEOUT, mirrors[g],
                               now, group)
        if rng.random() < 0.1:  # the same batch again: nothing changes
            assert not commit_online(r, keys, share(batches, done[g], group, tell_newest), PARAMS, TIMEOUT,
                                       mirrors[g], now, group)
        done[g] += 1
    assert not r.zcard(keys.online_parts_index)  # every batch merged, no part left behind
    assert not list(r.scan_iter(f"{keys.namespace}:online:parts:*"))
    return keys


def random_order(seed: int) -> Callable[[int, int], list[int]]:
    """Groups running at their own pace: any one of those not finished takes its next batch."""
    def order(groups: int, batches: int) -> list[int]:
        rng = random.Random(seed)
        left = {g: batches for g in range(groups)}
        out = []
        while left:
            g = rng.choice(sorted(left))
            out.append(g)
            left[g] -= 1
            if not left[g]:
                del left[g]
        return out
    return order


def random_game(seed: int) -> list[list[tuple]]:
    """The clock tests' random games (clocks ahead, behind and set forward, lags, silences, logouts and late
    events), on four servers."""
    return clock_game(seed, "ABCD", glitches=16, silent_p=0.6)


def test_the_games_split_servers_among_the_groups() -> None:
    """Four servers in two groups (D | A, B, C) and in four (D | B | none | A, C): an empty group too."""
    assert [[s for s in "ABCD" if Group(g, 2).owns(s)] for g in range(2)] == [["D"], ["A", "B", "C"]]
    assert [[s for s in "ABCD" if Group(g, 4).owns(s)] for g in range(4)] == [["D"], ["B"], [], ["A", "C"]]


def test_a_silent_group_runs_its_clock_on_the_batch_s_newest_arrival(r: redis.Redis) -> None:
    """A and C's servers go silent from 20 s to 80 s while D keeps sending: one fold times their players out by
    arrival time (D's arrivals run their clocks on). Their group, not told the batch's newest arrival, would keep
    them online until they return, then time them all out at once."""
    batches = game(90, {"A": 5, "C": 5, "D": 5}, silent={"A": (20, 80), "C": (20, 80)})
    whole = dump(r, run(r, batches, 1))
    assert dump(r, run(r, batches, 2)) == whole
    blind = dump(r, run(r, batches, 2, tell_newest=False))
    assert [online_a(whole, i) for i in (45, 60, 79, 89)] == [5, 0, 0, 5]  # last heard at 19 s, back at 80 s
    assert [online_a(blind, i) for i in (45, 60, 79, 89)] == [5, 5, 5, 5]


def online_a(view: dict[str, object], batch_id: int) -> int:
    """A's players online after one batch, from the view's record of it."""
    records = [OnlineRecord.decode(m, "a record") for m, _ in view["online:history"]]  # type: ignore[attr-defined]
    return next(rec.counts["A"] for rec in records if rec.batch == batch_id)


def test_redis_emptied_between_two_groups_commits_loses_history_not_players(r: redis.Redis) -> None:
    """Redis comes back empty after group 0 committed batch 40 and before group 1 did: batch 40's part can never be
    whole (group 0's went with the rest); the merges go on from the next batch, the view says it lost its history
    there, and every server's players are written again from the groups' copies."""
    batches = random_game(3)
    whole = dump(r, run(r, batches, 1))
    keys = KeySchema(f"grp-{uuid.uuid4().hex[:8]}")
    mirrors = [OnlineMirror(), OnlineMirror()]
    for i in range(len(batches)):
        for g in (0, 1):
            if (i, g) == (40, 1):
                r.delete(*r.scan_iter(f"{keys.namespace}:*"))
            assert commit_online(r, keys, share(batches, i, Group(g, 2)), PARAMS, TIMEOUT, mirrors[g], now,
                                   Group(g, 2))
    got = dump(r, keys)
    assert int(got["online:state"][b"lost_at_batch"]) == 41
    assert int(got["online:state"][b"last_batch"]) == len(batches) - 1
    assert not r.zcard(keys.online_parts_index)
    players = {k: v for k, v in got.items() if k.startswith(("online:players:", "online:loggedout:"))}
    assert players == {k: v for k, v in whole.items() if k.startswith(("online:players:", "online:loggedout:"))}
    assert got["online:counts"] == whole["online:counts"]


def test_the_number_of_groups_changes_once_caught_up(r: redis.Redis) -> None:
    """One fold for 30 batches, then three groups for 30, then two: each new number's groups start from the view
    (their keys are named with the number: group 0 of 2 holds D, which group 2 of 3 held), and the view is what
    one fold keeps throughout."""
    batches = random_game(2)
    whole = dump(r, run(r, batches, 1))
    keys = KeySchema(f"grp-{uuid.uuid4().hex[:8]}")
    for groups, span in ((1, range(0, 30)), (3, range(30, 60)), (2, range(60, 90))):
        mirrors = [OnlineMirror() for _ in range(groups)]
        for i in span:
            for g in range(groups):
                assert commit_online(r, keys, share(batches, i, Group(g, groups)), PARAMS, TIMEOUT, mirrors[g], now,
                                       Group(g, groups))
    assert dump(r, keys) == whole
