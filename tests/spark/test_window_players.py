"""The windows' players counted by the partitions (streaming.spark.window_players, decision 0019), on a real Redis:
the configured pipeline and two lanes with their own watermarks, batches read by two partitions (one of them run
twice, as a retried task is), committed by the real commits; every namespace's players per window against a plain
model of the rule (the distinct players of the events of the batches that namespace accepted the window in)."""

from __future__ import annotations

import random
import uuid
from dataclasses import replace

import pyarrow as pa
import pytest
import redis

from streaming.rules.commit.batch import BatchSummary, WindowAgg
from streaming.rules.windows import window_ranges
from streaming.schema.keys import KeySchema, WindowKey
from streaming.schema.records import ServerRecord
from streaming.spark.window_players import PartitionPlayers
from streaming.store.batch.window_players import drop_replayed, read_added, write_partition_players
from streaming.store.commit import commit_batch
from streaming.store.redis_conn import ReplicasBehind
from tests.schema.params import built_params

WINDOW_MS, SLIDE_MS = 10_000, 5_000
T0 = 1_767_225_600_000
DELAYS = {"pipe": 3_000, "fast": 0, "slow": 9_000}  # a lane closing windows before the pipeline, one after


def events_of(rng: random.Random, b: int) -> list[tuple[str, str, int]]:
    """(server, player, event ms): time moves 2 s a batch, some events up to 15 s behind (late for some)."""
    return [(rng.choice("AB"), f"p{rng.randrange(8)}", T0 + b * 2_000 + rng.randrange(-15_000, 1_000))
            for _ in range(rng.randrange(0, 30))]


def count(part: list[tuple[str, str, int]]) -> PartitionPlayers:
    players = PartitionPlayers(WINDOW_MS, SLIDE_MS, fold_at=5)
    for server, player, ms in part:
        players.add(pa.array([server]), pa.array([player]), pa.array([ms * 1000], pa.int64()))
    return players


def judged(b: int, events: list[tuple[str, str, int]], watermark_ms: int, added) -> BatchSummary:  # noqa: ANN001
    """The batch as BatchTable.summary judges it: a window's pairs dropped at or below the watermark, else accepted
    with the players the batch added to it."""
    pairs: dict[WindowKey, int] = {}
    for server, _, ms in events:
        for w in window_ranges(ms * 1000, WINDOW_MS, SLIDE_MS):
            wk = WindowKey(w.start_ms, w.end_ms, server)
            pairs[wk] = pairs.get(wk, 0) + 1
    windows = []
    for wk, n in sorted(pairs.items(), key=lambda kv: (kv[0].start_ms, kv[0].server)):
        if wk.end_ms <= watermark_ms:
            windows.append(WindowAgg(wk.start_ms, wk.end_ms, wk.server, dropped=n))
        else:
            windows.append(WindowAgg(wk.start_ms, wk.end_ms, wk.server, events=n, players=added.of(wk)))
    servers = {s: ServerRecord(rows=1, max_event_us=max(ms for srv, _, ms in events if srv == s) * 1000)
               for s in {srv for srv, _, _ in events}}
    return BatchSummary(b, watermark_ms, T0 + b * 2_000, f"{b}-0", f"{b + 1}-0", windows, servers, [])


def test_every_namespace_counts_each_windows_distinct_players_exactly(r: redis.Redis) -> None:
    rng = random.Random(29)
    ns = f"wp-{uuid.uuid4().hex[:6]}"
    keys = {name: KeySchema(ns if name == "pipe" else f"{ns}.{name}") for name in DELAYS}
    lanes = tuple(keys[n].state for n in DELAYS if n != "pipe")
    # the lanes here are no catalogue lanes of a Config: the pipeline is told their state hashes
    params = {name: replace(built_params(WINDOW_MS, SLIDE_MS, delay), players_lanes=lanes) if name == "pipe"
              else built_params(WINDOW_MS, SLIDE_MS, delay, input_namespace=ns) for name, delay in DELAYS.items()}
    model: dict[str, dict[WindowKey, set[str]]] = {name: {} for name in DELAYS}
    sets_gone = 0
    for b in range(60):
        events = events_of(rng, b)
        end = f"{b + 1}-0"
        half = len(events) // 2
        for part in (events[:half], events[half:], events[:half]):  # the first partition's task runs twice
            write_partition_players(r, keys["pipe"], end, count(part).windows(), ttl_s=3_600)
        added = read_added(r, keys["pipe"], end)
        for name in DELAYS:  # the pipeline first, then its lanes, as the sink commits them
            wm = int(r.hget(keys[name].state, "next_watermark_ms") or 0)
            assert commit_batch(r, keys[name], judged(b, events, wm, added), params[name])
            for server, player, ms in events:
                for w in window_ranges(ms * 1000, WINDOW_MS, SLIDE_MS):
                    wk = WindowKey(w.start_ms, w.end_ms, server)
                    if wk.end_ms > wm:
                        model[name].setdefault(wk, set()).add(player)
        closed = int(r.hget(keys["pipe"].state, "sets_closed_below_ms"))
        assert closed <= min(int(r.hget(k.state, "next_watermark_ms")) for k in keys.values())
        held = [WindowKey.parse(m) for m in r.zrange(keys["pipe"].players_index, 0, -1)]
        assert all(wk.end_ms > closed for wk in held)  # a closed window's set is gone, and out of the index
        sets_gone += sum(1 for wk in model["slow"] if wk.end_ms <= closed and not r.exists(keys["pipe"].players(wk)))
        # the lanes commit after the pipeline: only this batch's count of players added is still kept
        assert r.zrange(keys["pipe"].players_added_index, 0, -1) in ([], [end.encode()])
        assert not r.exists(keys["pipe"].players_added(f"{b}-0"))
    for name in DELAYS:
        got = {wk: int(r.hget(keys[name].window(wk), "players") or 0) for wk in model[name]}
        assert got == {wk: len(p) for wk, p in model[name].items()}, name
    # windows whose players differ by namespace: late events one dropped and another accepted
    assert any(len(model["slow"][wk]) > len(model["fast"].get(wk, ())) for wk in model["slow"])
    assert any(len(model["pipe"][wk]) > len(model["fast"].get(wk, ())) for wk in model["pipe"])
    assert sets_gone > 0


def test_a_lane_behind_keeps_the_counts_it_needs_and_closed_windows_get_no_set(r: redis.Redis) -> None:
    """A lane that has not committed a batch holds back the removal of that batch's counts (the next run catches it
    up from them); the partitions add nothing to a window every namespace has closed."""
    ns = f"wp-{uuid.uuid4().hex[:6]}"
    pipe, lane = KeySchema(ns), KeySchema(f"{ns}.slow")
    params = replace(built_params(WINDOW_MS, SLIDE_MS, 0), players_lanes=(lane.state,))  # a lane of no catalogue
    lane_params = built_params(WINDOW_MS, SLIDE_MS, 0, input_namespace=ns)
    ev = [("A", "p1", T0 + 1_000), ("A", "p2", T0 + 2_000)]
    for b in range(3):
        write_partition_players(r, pipe, f"{b + 1}-0", count(ev).windows(), ttl_s=3_600)
        added = read_added(r, pipe, f"{b + 1}-0")
        assert commit_batch(r, pipe, judged(b, ev, 0, added), params)
        if b == 0:
            assert commit_batch(r, lane, judged(b, ev, 0, added), lane_params)
    # the lane committed batch 0 only: batches 1 and 2 keep their counts
    assert [m.decode() for m in r.zrange(pipe.players_added_index, 0, -1)] == ["2-0", "3-0"]
    assert r.hgetall(pipe.players_added("2-0")) == {b"1767225600000:1767225610000:A": b"0",
                                                    b"1767225595000:1767225605000:A": b"0"}
    # a window ending at or below the bound is closed for everyone: nothing is added or counted
    r.hset(pipe.state, "sets_closed_below_ms", T0 + 10_000)
    write_partition_players(r, pipe, "9-0", count([("A", "p9", T0 + 500)]).windows(), ttl_s=3_600)
    assert r.hgetall(pipe.players_added("9-0")) == {}
    assert not r.sismember(pipe.players(WindowKey(T0, T0 + 10_000, "A")), "p9")
    assert read_added(r, pipe, "9-0").of(WindowKey(T0, T0 + 10_000, "A")) == 0


def test_a_batch_read_again_after_its_count_went_leaves_no_count_behind(r: redis.Redis) -> None:
    """Spark replays its last batch after a crash: the partitions write its count again (zeros: the players are in
    the sets). The sink drops it when every namespace had committed the batch, keeps it while a lane needs it."""
    ns = f"wp-{uuid.uuid4().hex[:6]}"
    pipe = KeySchema(ns)
    ev = [("A", "p1", T0 + 1_000)]
    write_partition_players(r, pipe, "1-0", count(ev).windows(), ttl_s=3_600)
    assert commit_batch(r, pipe, judged(0, ev, 0, read_added(r, pipe, "1-0")), built_params(WINDOW_MS, SLIDE_MS, 0))
    assert not r.exists(pipe.players_added("1-0"))  # no lane: gone with the commit
    write_partition_players(r, pipe, "1-0", count(ev).windows(), ttl_s=3_600)  # the replay's read
    assert r.exists(pipe.players_added("1-0"))
    assert drop_replayed(r, pipe, "1-0") and not r.exists(pipe.players_added("1-0"))
    r.zadd(pipe.players_added_index, {"2-0": 1})  # a batch a lane has not committed yet
    write_partition_players(r, pipe, "2-0", count(ev).windows(), ttl_s=3_600)
    assert not drop_replayed(r, pipe, "2-0") and r.exists(pipe.players_added("2-0"))


def test_a_partition_asked_to_wait_for_a_replica_is_not_done_without_one(r: redis.Redis) -> None:
    """With REDIS_WAIT_REPLICAS the partition's players must reach a replica before its task ends: else a primary
    lost before the commit's WAIT takes them, while the commit, retried on the new primary, still counts them.
    This Redis has no replica: the write is applied, and refused as not done; run again it counts nothing twice."""
    ns = f"wp-{uuid.uuid4().hex[:6]}"
    pipe = KeySchema(ns)
    ev = [("A", "p1", T0 + 1_000), ("A", "p2", T0 + 1_500)]
    with pytest.raises(ReplicasBehind, match="0 of 1 replica"):
        write_partition_players(r, pipe, "1-0", count(ev).windows(), ttl_s=3_600, wait=(1, 10))
    write_partition_players(r, pipe, "1-0", count(ev).windows(), ttl_s=3_600)  # the retry
    assert sum(read_added(r, pipe, "1-0").counts.values()) == 4  # two players in each of the events' two windows
