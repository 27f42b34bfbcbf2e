"""The online view can be folded in groups of servers apart (the design of docs/scaling.md plan step 1: one process
per group of shards, a server in one shard): after every batch each server's players, count, transitions and clock
are what one fold of every server gives, provided each group is told the batch's newest arrival, the one thing a
server's fold takes from the others' (a server without events runs its clock on to it). Checked through the real
commit (real redis-server), each group in a namespace of its own, on the random games of the clock tests."""

from __future__ import annotations

import random
import uuid

import pytest
import redis

from tests.store.test_online import events, members
from tests.store.test_server_clocks import DELAY, T0, TIMEOUT, Steps, at, game
from watermark.schema.keys import KeySchema
from watermark.schema.records import PresenceRecord
from watermark.store.commit import Params
from watermark.store.presence_store import PresenceBatch, PresenceMirror, commit_presence, read_online

PARAMS = Params(60_000, 60_000, DELAY)


def per_server(r: redis.Redis, keys: KeySchema, servers: list[str]) -> dict[str, tuple]:
    """Each server's players online and logged out (with their times), count, clock, the last batch's transitions
    by cause and how far ahead its events ran: everything the online view says of one server."""
    view = read_online(r, keys)
    assert view is not None
    last = PresenceRecord.decode(r.zrange(keys.presence_history, -1, -1)[0], "the last batch's record")
    return {s: (members(r, keys.online(s)), members(r, keys.logged_out(s)), view.counts.get(s, 0),
                view.clocks.get(s), last.causes.get(s, {}), last.ahead_ms.get(s))
            for s in servers if s in view.counts or s in view.clocks}


def fold(r: redis.Redis, batches: list[list[tuple]], groups: list[list[str]],
         tell_newest: bool = True) -> list[dict[str, tuple]]:
    """Every batch folded by each group of servers in its own namespace (one group of all: today's single fold)."""
    names = [KeySchema(f"grp-{uuid.uuid4().hex[:8]}") for _ in groups]
    mirrors = [PresenceMirror() for _ in groups]
    out = []
    for i, batch in enumerate(batches):
        newest = max((row[4] for row in batch), default=None)
        seen: dict[str, tuple] = {}
        for keys, mirror, servers in zip(names, mirrors, groups, strict=True):
            mine = [row for row in batch if row[0] in servers]
            b = PresenceBatch(i, 0, T0 + i * 1000, f"{i + 1}-0", events(*mine), DELAY,
                              newest_arrival_ms=newest if tell_newest and len(groups) > 1 else None)
            assert commit_presence(r, keys, b, PARAMS, TIMEOUT, mirror)
            seen |= per_server(r, keys, servers)
        out.append(seen)
    return out


def random_game(seed: int) -> list[list[tuple]]:
    """Clocks ahead and behind, lags, silences, glitches, logouts and late events, at random, on four servers."""
    rng = random.Random(seed)
    servers = {s: rng.randint(1, 6) for s in "ABCD"}
    offset: dict[str, Steps] = {s: rng.choice([0, 0, 45_000, -40_000, [(rng.randint(10, 60), 50_000)],
                                                [(rng.randint(10, 40), 40_000), (rng.randint(45, 80), 0)]])
                                for s in servers}
    lag: dict[str, Steps] = {s: rng.choice([0, 1_000, 4_000, [(rng.randint(10, 60), 45_000)]]) for s in servers}
    silent = {s: (a, a + rng.randint(5, 70)) for s in servers if rng.random() < 0.6 for a in [rng.randint(5, 40)]}
    extra: dict[int, list[tuple]] = {}
    for _ in range(16):
        sec, s = rng.randint(0, 89), rng.choice("ABCD")
        t = T0 + sec * 1000 + at(offset[s], sec) + rng.choice([-50_000, -8_000, 0, 35_000, 120_000])
        extra.setdefault(sec, []).append((s, f"{s}-{rng.randint(0, 6)}", t, rng.choice(["logout", "login", None]),
                                          T0 + sec * 1000))
    return game(90, servers, offset, lag, silent, extra)


@pytest.mark.parametrize("seed", range(4))
def test_groups_folded_apart_say_what_one_fold_says(r: redis.Redis, seed: int) -> None:
    batches = random_game(seed)
    whole = fold(r, batches, [list("ABCD")])
    assert fold(r, batches, [["A", "C"], ["B", "D"]]) == whole
    assert fold(r, batches, [["A"], ["B"], ["C"], ["D"]]) == whole
    assert sum(s[2] for s in whole[-1].values()) > 0  # players online at the end: the comparison is not of nothing


def test_a_silent_group_runs_its_clock_on_the_batch_s_newest_arrival(r: redis.Redis) -> None:
    """A's server goes silent from 20 s to 80 s while B's keeps sending. One fold times A's players out by arrival
    time (B's arrivals run A's clock on); A's group alone, not told the batch's newest arrival, would keep them
    online (and time them all out at once when A returns)."""
    batches = game(90, {"A": 5, "B": 5}, silent={"A": (20, 80)})
    whole = fold(r, batches, [["A", "B"]])
    assert [b["A"][2] for b in whole][54:80] == [0] * 26  # timed out while silent (last heard at 19 s)
    assert fold(r, batches, [["A"], ["B"]]) == whole
    blind = fold(r, batches, [["A"], ["B"]], tell_newest=False)
    assert [b["A"][2] for b in blind][54:80] == [5] * 26  # what the group would say without it
