"""The online view's Redis commit (:mod:`streaming.store.online.commit`): applied once, players expired, Redis
emptied while the job runs or restarts, servers drained and forgotten, the table loaded again, the reader."""

from __future__ import annotations

import json
import uuid

import pytest
import redis

from streaming.rules.online.table import OnlineBatch, PlayerTable
from streaming.schema.keys import KeySchema
from streaming.schema.records import OnlineStateRecord
from streaming.store.online.commit import OnlineMirror, commit_online
from streaming.store.views.online import OnlineView, read_online
from tests.schema.params import built_params
from tests.store.online.rows import events, members

TIMEOUT = 10_000  # ms
DELAY = 5_000



def test_commit_is_applied_once(r: redis.Redis) -> None:
    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    params = built_params(60_000, 60_000, DELAY)
    b0 = OnlineBatch(0, 0, 1, "1-0", events(("A", "p1", 100_000, "login"), ("A", "p2", 100_000, "login")), DELAY)
    b1 = OnlineBatch(1, 95_000, 2, "2-0", events(("A", "p1", 101_000, "logout")), DELAY)
    assert commit_online(r, keys, b0, params, TIMEOUT)
    assert commit_online(r, keys, b1, params, TIMEOUT)
    assert not commit_online(r, keys, b0, params, TIMEOUT)  # replayed after a crash: no-op
    assert not commit_online(r, keys, b1, params, TIMEOUT)
    assert members(r, keys.online("A")) == {"p2": 100_000_000}
    assert members(r, keys.logged_out("A")) == {"p1": 101_000_000}  # kept: the watermark (96 s) is below it
    view = read_online(r, keys)
    assert view is not None and view.counts == {"A": 1} and view.last_batch == 1
    assert [(p.batch, p.counts, p.online, p.offline) for p in view.history] == [(0, {"A": 2}, 2, 0),
                                                                                (1, {"A": 1}, 0, 1)]
    assert view.watermark_ms == 101_000 - DELAY  # the one its expiries used: after the batch


def test_commit_expires_players_the_batch_does_not_touch(r: redis.Redis) -> None:
    """Expiry needs no event of the player: the server's next watermark reaching last + timeout is enough, and a
    logout is forgotten once it passes it. A silent server's clock runs on by arrival time. Transitions are
    counted per server and cause."""
    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    params = built_params(60_000, 60_000, DELAY)
    first = events(("A", "p1", 100_000, "login", 1_000), ("A", "p2", 100_000, "login", 1_000),
                   ("B", "p3", 103_000, "logout", 1_000))
    assert commit_online(r, keys, OnlineBatch(0, 0, 1, "1-0", first, DELAY), params, TIMEOUT)
    # 15 s of arrival later: silent A's clock runs on to 115 s, its watermark to 110 s, so p1 and p2
    # (100 + 10 s) time out exactly; B's p4 moves B's to 110 s, past p3's logout, which is forgotten
    later = events(("B", "p4", 115_000, "login", 16_000))
    assert commit_online(r, keys, OnlineBatch(1, 98_000, 2, "2-0", later, DELAY), params, TIMEOUT)
    assert members(r, keys.online("A")) == {} and members(r, keys.logged_out("B")) == {}
    assert members(r, keys.online("B")) == {"p4": 115_000_000}
    view = read_online(r, keys)
    assert view is not None and view.counts == {"A": 0, "B": 1}
    last = json.loads(r.zrange(keys.online_history, -1, -1)[0])
    assert last["causes"] == {"A": {"timeout": 2}, "B": {"login": 1}}
    assert (last["online"], last["offline"]) == (1, 2)


def flush(r: redis.Redis, keys: KeySchema) -> None:
    """Redis came back empty (no persistence, a failover, a FLUSHALL): every key of the namespace is gone."""
    for key in list(r.scan_iter(match=f"{keys.namespace}:*", count=1000)):
        r.delete(key)


LOSS_BATCHES = [  # (server, player, event ms, kind, arrival ms); delay 5 s, timeout 10 s
    [("A", "p1", 100_000, "login", 100_000), ("A", "p2", 100_000, "login", 100_000),
     ("B", "p3", 101_000, "login", 101_000)],
    [("A", "p1", 104_000, "heartbeat", 104_000)],  # A's wm 99 s: nobody expires; p2 and p3 say nothing
    [("A", "p1", 108_000, "heartbeat", 108_000), ("B", "p3", 108_000, "heartbeat", 108_000)],  # wm 103 s
    # A's wm 115 s: p2 (100 + 10 s) is gone by the rule; silent B's runs on to 115 s too: p3 (118 s) not yet
    [("A", "p1", 120_000, "heartbeat", 120_000)],
]


def commit_all(r: redis.Redis, keys: KeySchema, batches: list[list[tuple]], mirror: OnlineMirror,
               flush_before: int | None = None, new_mirror: bool = False) -> list[OnlineView]:
    """Commit the batches in order, losing Redis' data (and the job's copy, if ``new_mirror``) before one."""
    views, wm = [], 0
    for i, batch in enumerate(batches):
        if i == flush_before:
            flush(r, keys)
            mirror = OnlineMirror() if new_mirror else mirror
        b = OnlineBatch(i, wm, 1_000 + i, f"{i + 1}-0", events(*batch), DELAY)
        assert commit_online(r, keys, b, built_params(60_000, 60_000, DELAY), TIMEOUT, mirror)
        view = read_online(r, keys)
        assert view is not None
        views.append(view)
        wm = view.watermark_ms
    return views


def test_redis_empty_while_the_job_runs_rewrites_the_whole_view(r: redis.Redis) -> None:
    """The job's copy still holds every player: the next batch writes the whole view again, says so, and
    from then on equals a run that lost nothing."""
    calm = commit_all(r, KeySchema(f"t-{uuid.uuid4().hex[:8]}"), LOSS_BATCHES, OnlineMirror())
    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    views = commit_all(r, keys, LOSS_BATCHES, OnlineMirror(), flush_before=1)
    assert [v.counts for v in views] == [v.counts for v in calm]
    assert members(r, keys.online("A")) == {"p1": 120_000_000} and members(r, keys.online("B")) == {"p3": 108_000_000}
    assert [(v.lost_at_batch, v.partial) for v in views] == [(None, False), (1, False), (1, False), (1, False)]
    assert calm[-1].lost_at_batch is None


def test_redis_empty_and_a_job_restart_together_rebuild_and_say_partial_until_whole(r: redis.Redis) -> None:
    """Nobody holds the players any more: the view is rebuilt from new events, says it is partial until the
    watermark passes the first rebuilt batch's newest event + the timeout, and is whole from then on."""
    calm = commit_all(r, KeySchema(f"t-{uuid.uuid4().hex[:8]}"), LOSS_BATCHES, OnlineMirror())
    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    views = commit_all(r, keys, LOSS_BATCHES, OnlineMirror(), flush_before=1, new_mirror=True)
    assert views[1].counts == {"A": 1} != calm[1].counts  # p2 and p3 are missing: partial
    assert views[1].partial_until_ms == 104_000 + TIMEOUT and views[1].lost_at_batch == 1
    assert [v.partial for v in views] == [False, True, True, False]
    assert [v.watermark_ms for v in views] == [v.watermark_ms for v in calm]
    assert views[-1].counts == calm[-1].counts  # whole: everyone who could be online has spoken since
    assert views[2].counts == {"A": 1, "B": 1} != calm[2].counts  # p3 spoke again; p2 (silent) still missing


def test_a_server_drains_and_is_forgotten_and_a_crash_does_not_drain(r: redis.Redis) -> None:
    """``streaming.rules.fleet`` in the online view: A's players log out (drained at that arrival), C's time out
    (not drained: they were there when it fell silent); once silent for RETIRE_AFTER with no player kept, both
    are forgotten (no clock, no count: what a batch costs is the live fleet's); A speaking again starts afresh."""
    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    params = built_params(60_000, 60_000, DELAY, retire_after_ms=60_000)

    def commit(i: int, *rows: tuple) -> dict:
        view = read_online(r, keys)
        wm = view.watermark_ms if view is not None else 0
        assert commit_online(r, keys, OnlineBatch(i, wm, rows[-1][4], f"{rows[-1][4]}-0", events(*rows), DELAY),
                               params, TIMEOUT)
        return {s: c.drained_ms for s, c in OnlineStateRecord.from_hash(r.hgetall(keys.online_state),
                                                                          "t").clocks.items()}

    drained = commit(0, ("A", "p1", 100_000, "login", 100_000), ("A", "p2", 100_000, "login", 100_000),
                     ("B", "p3", 100_000, "login", 100_000), ("C", "p4", 100_000, "login", 100_000))
    assert drained == {"A": 0, "B": 0, "C": 0}
    drained = commit(1, ("A", "p1", 103_000, "logout", 103_000), ("A", "p2", 104_000, "logout", 104_000),
                     ("B", "p3", 104_000, "heartbeat", 104_000))
    assert drained == {"A": 104_000, "B": 0, "C": 0}  # A drained at its last event's arrival
    for i, t in enumerate(range(110_000, 164_000, 9_000), start=2):  # B goes on; C's p4 times out at 110 s
        drained = commit(i, ("B", "p3", t, "heartbeat", t))
    assert drained == {"A": 104_000, "B": 0, "C": 0} and members(r, keys.online("C")) == {}
    assert read_online(r, keys).counts == {"A": 0, "B": 1, "C": 0}
    assert {k.decode() for k in r.hkeys(keys.online_peak_ever)} >= {"A", "B", "C"}
    drained = commit(9, ("B", "p3", 165_000, "heartbeat", 165_000))  # 61 s after A's last event, 65 s after C's
    assert drained == {"B": 0}
    assert read_online(r, keys).counts == {"B": 1}
    assert {k.decode() for k in r.hkeys(keys.online_peak_ever)} >= {"A", "C"}  # their highest ever stays
    drained = commit(10, ("A", "p9", 170_000, "login", 170_000))
    assert drained == {"A": 0, "B": 0} and read_online(r, keys).counts == {"A": 1, "B": 1}


def test_a_server_an_operator_forgets_goes_with_its_own_history_once_drained(r: redis.Redis) -> None:
    """``wm-control forget`` (issue 65: a test server's traces): the pipeline's per-server fields go at once; the
    online view's next batch forgets the drained server as if it had retired, with its peaks, per-minute series and
    place in the minute records; the region's and the total's figures stay. A request about a server that spoke
    after it is void, and dropped."""
    from streaming.rules.online.rollup import Minute
    from streaming.store.online.forget import ask, players_online

    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    params = built_params(60_000, 60_000, DELAY, retire_after_ms=3_600_000)

    def commit(i: int, *rows: tuple) -> None:
        view = read_online(r, keys)
        assert commit_online(r, keys, OnlineBatch(i, view.watermark_ms if view else 0, rows[-1][4],
                                                  f"{rows[-1][4]}-0", events(*rows), DELAY), params, TIMEOUT)

    commit(0, ("A", "p1", 100_000, "login", 100_000), ("B", "p3", 100_000, "login", 100_000))
    commit(1, ("A", "p1", 104_000, "logout", 104_000), ("B", "p3", 104_000, "heartbeat", 104_000))
    for i, t in enumerate(range(110_000, 140_000, 9_000), start=2):  # the minute at 60 s closes at 120 s
        commit(i, ("B", "p3", t, "heartbeat", t))
    r.hset(keys.seen, mapping={"A": 104_000, "B": 128_000})
    r.hset(keys.totals, mapping={"events|A": 2, "events|B": 5, "events": 7})
    r.sadd(keys.servers, "A", "B")
    assert players_online(r, keys, ["A", "B"]) == {"A": 0, "B": 1}
    assert r.exists(keys.history(0, "A")) and "A" in json.loads(r.zrange(keys.online_minutes, 0, 0)[0])["last"]

    ask(r, keys, ["A"], ttl_s=60)  # now (Redis' clock): after A's last event
    r.hset(keys.forget, "B", 105_000)  # before B's last: B spoke after it
    assert members(r, keys.seen) == {"B": 128_000} and r.smembers(keys.servers) == {b"B"}
    assert {k.decode() for k in r.hkeys(keys.totals)} == {"events|B", "events"}  # the total keeps every event
    assert read_online(r, keys).counts == {"A": 0, "B": 1}  # the view: with its next batch

    commit(6, ("B", "p3", 137_000, "heartbeat", 137_000))
    assert read_online(r, keys).counts == {"B": 1}
    assert "A" not in OnlineStateRecord.from_hash(r.hgetall(keys.online_state), "t").clocks
    assert r.hgetall(keys.forget) == {}  # A done, B's void
    assert not r.exists(keys.history(0, "A")) and r.exists(keys.history(0, "B"))
    for peaks in (keys.online_peak(0), keys.online_peak_ever):
        assert {k.decode() for k in r.hkeys(peaks)} == {"B", "*"}, peaks
    minutes = [Minute.from_json(m) for m in r.zrange(keys.online_minutes, 0, -1)]
    assert minutes and all("A" not in {*m.last, *m.peak, *m.causes} for m in minutes)
    assert minutes[0].peak["*"] == 2  # A's player was counted in the total: that stays
    assert "A" not in Minute.from_json(r.hget(keys.online_state, "minute")).peak  # the open minute too


def test_the_players_table_is_loaded_again_once_it_holds_far_more_than_the_view_keeps(r: redis.Redis) -> None:
    """Every match a new server, every server new players: the job's copy is rebuilt from Redis once its slots or
    server codes outgrow what the view keeps, so it is bounded by the live fleet, not by every name seen."""
    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    params = built_params(60_000, 60_000, DELAY, retire_after_ms=1_000)
    mirror = OnlineMirror()
    sizes = []
    for i in range(4 * PlayerTable.SLACK // 50):  # 50 new players a batch: 16,384 in all
        t = 100_000 + i * 2_000
        rows = [(f"match-{i}", f"p{i}-{k}", t, "login", t) for k in range(50)]
        rows += [(f"match-{i - 1}", f"p{i - 1}-{k}", t, "logout", t) for k in range(50) if i]
        assert commit_online(r, keys, OnlineBatch(i, 0, t, f"{t}-0", events(*rows), DELAY), params, TIMEOUT,
                               mirror)
        sizes.append((mirror.players.size, len(mirror.players.servers)))
    assert max(size for size, _ in sizes) <= PlayerTable.SLACK + 1_000  # twice what it keeps, and the slack
    assert any(b < a for (a, _), (b, _) in zip(sizes, sizes[1:], strict=False))  # it was loaded again
    assert len(read_online(r, keys).counts) <= 5  # the match on now, those whose logouts are still kept


def test_a_reader_that_reads_again_decodes_only_the_online_records_it_has_not_seen(
        r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """``OnlinePoints`` keeps the per-batch records it decoded: each read decodes the new ones only and ends equal to
    a fresh read of the newest ``last``; when Redis no longer holds the kept span (emptied, a pipeline started
    afresh, a record written again) it reads everything again."""
    from streaming.schema.records import OnlineRecord
    from streaming.store.views import online

    keys = KeySchema(f"pts-{uuid.uuid4().hex[:8]}")
    decoded: list[bytes] = []
    real = online.OnlinePoint.from_json
    monkeypatch.setattr(online.OnlinePoint, "from_json", lambda raw: decoded.append(raw) or real(raw))

    def add(batch: int, count: int = 1) -> None:
        rec = OnlineRecord(batch=batch, watermark_ms=batch, batch_ts_ms=batch, counts={"A": count}, online=0,
                             offline=0)
        r.zadd(keys.online_history, {rec.encode(): batch})

    def fresh(last: int) -> tuple[online.OnlinePoint, ...]:
        return tuple(real(m) for m in r.zrange(keys.online_history, -last, -1))

    points = online.OnlinePoints()
    for b in range(5):
        add(b)
    assert points.read(r, keys, 3) == fresh(3) and len(decoded) == 3
    add(5)
    add(6)
    assert points.read(r, keys, 3) == fresh(3) and len(decoded) == 5  # batches 5 and 6 only
    assert [p.batch for p in points.read(r, keys, 3)] == [4, 5, 6] and len(decoded) == 5
    r.delete(keys.online_history)  # Redis came back empty; the pipeline goes on from batch 0
    add(0, count=7)
    assert [(p.batch, p.counts) for p in points.read(r, keys, 3)] == [(0, {"A": 7})]
    add(0, count=8)  # batch 0's record written again beside the first: the span no longer matches
    assert points.read(r, keys, 3) == fresh(3)
