"""Online players: the per-player rule as a table, the Redis commit, and the real query (the online view is
folded by the pipeline's own sink from the same read) against an independent oracle, across restarts."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import pytest
import redis
from pyspark.sql import SparkSession
from streamlit.testing.v1 import AppTest

from dashboard.charts import online_over_batches
from streaming.rules.online.fold import KIND_CODES
from streaming.rules.online.player import PlayerState, Seen, Transition, apply_events, expiry_ms, on_timer
from streaming.rules.online.table import OnlineBatch, OnlineEvents, PlayerTable
from streaming.schema.config import Config, ConfigError
from streaming.schema.keys import KeySchema
from streaming.schema.records import OnlineStateRecord
from streaming.spark.query import start_query
from streaming.store.online.commit import OnlineMirror, commit_online
from streaming.store.views.online import OnlinePoint, OnlineView, read_online
from tests.oracle import T0_MS, online_oracle, random_online_batches
from tests.schema.params import built_params
from watermark_client.events import PAYLOAD_FIELD, Event

TIMEOUT = 10_000  # ms
DELAY = 5_000


def seen(ms: int, seq: int, kind: str | None) -> Seen:
    return Seen(ms * 1000, (ms, seq), kind)


def st(online: bool, ms: int, seq: int = 0) -> PlayerState:
    return PlayerState(online, ms * 1000, (ms, seq))


def on(ms: int, cause: str) -> Transition:
    return Transition(True, ms * 1000, cause)


def off(ms: int, cause: str) -> Transition:
    return Transition(False, ms * 1000, cause)


# (state before, events, watermark ms, state after, transitions, late, stale); timeout 10 s
APPLY_CASES = [
    # a login makes a new player online at the login's time
    (None, [seen(100_000, 0, "login")], 0, st(True, 100_000), [on(100_000, "login")], 0, 0),
    # a heartbeat alone keeps a player online (the login may have been dropped as late)
    (None, [seen(100_000, 0, "heartbeat")], 0, st(True, 100_000), [on(100_000, "heartbeat")], 0, 0),
    # an event without a kind (replayed sets) keeps a player online too
    (None, [seen(100_000, 0, None)], 0, st(True, 100_000), [on(100_000, "event")], 0, 0),
    # a heartbeat refreshes an online player without a transition
    (st(True, 100_000), [seen(105_000, 0, "heartbeat")], 0, st(True, 105_000), [], 0, 0),
    # logout: offline at the logout's time; the state stays until the watermark passes it
    (st(True, 100_000), [seen(103_000, 0, "logout")], 0, st(False, 103_000), [off(103_000, "logout")], 0, 0),
    # events are applied in event time, not arrival order: heartbeat 101 s then logout 102 s -> offline
    (st(True, 100_000), [seen(102_000, 5, "logout"), seen(101_000, 6, "heartbeat")], 0, st(False, 102_000, 5),
     [off(102_000, "logout")], 0, 0),
    # equal event times: arrival (entry ID) decides, the later login wins over the logout
    (st(True, 100_000), [seen(102_000, 1, "logout"), seen(102_000, 2, "login")], 0, st(True, 102_000, 2),
     [off(102_000, "logout"), on(102_000, "login")], 0, 0),
    # an event older than the player's latest one cannot change the status: stale
    (st(False, 103_000), [seen(101_000, 0, "heartbeat")], 0, st(False, 103_000), [], 0, 1),
    # at or below the watermark: late, ignored (it would reopen an expired session)
    (None, [seen(50_000, 0, "login"), seen(49_000, 0, "login")], 50_000, None, [], 2, 0),
    # one millisecond above the watermark is accepted
    (None, [seen(50_001, 0, "login")], 50_000, st(True, 50_001), [on(50_001, "login")], 0, 0),
    # silent for the whole timeout between two events of one batch: that session ended in between
    (st(True, 100_000), [seen(110_000, 0, "heartbeat")], 0, st(True, 110_000),
     [off(110_000, "timeout"), on(110_000, "heartbeat")], 0, 0),
    # one millisecond less and the session goes on
    (st(True, 100_000), [seen(109_999, 0, "heartbeat")], 0, st(True, 109_999), [], 0, 0),
    # a login after a logout starts a new session
    (st(False, 100_000), [seen(100_500, 0, "login")], 0, st(True, 100_500), [on(100_500, "login")], 0, 0),
]


@pytest.mark.parametrize(("before", "events", "wm", "after", "transitions", "late", "stale"), APPLY_CASES)
def test_apply_events(before: PlayerState | None, events: list[Seen], wm: int, after: PlayerState | None,
                      transitions: list[Transition], late: int, stale: int) -> None:
    out = apply_events(before, events, wm, TIMEOUT)
    assert (out.state, out.transitions, out.late, out.stale) == (after, transitions, late, stale)


# (state, watermark ms when the timer fires, state after, transitions, next timer); timeout 10 s
TIMER_CASES = [
    # online, watermark reached last + timeout: offline at exactly that event time, state forgotten
    (st(True, 100_000), 110_000, None, [off(110_000, "timeout")], None),
    # the watermark passed it by far: the transition is still at last + timeout, not at the watermark
    (st(True, 100_000), 500_000, None, [off(110_000, "timeout")], None),
    # a timer from a shorter timeout (before a restart) fires early: keep the player, wait for the real expiry
    (st(True, 100_000), 105_000, st(True, 100_000), [], 110_000),
    # logged out and the watermark passed the logout: no event can be older any more, forget quietly
    (st(False, 100_000), 100_000, None, [], None),
    # no state (already cleared): nothing
    (None, 200_000, None, [], None),
]


@pytest.mark.parametrize(("before", "wm", "after", "transitions", "next_timer"), TIMER_CASES)
def test_on_timer(before: PlayerState | None, wm: int, after: PlayerState | None, transitions: list[Transition],
                  next_timer: int | None) -> None:
    out, timer = on_timer(before, wm, TIMEOUT)
    assert (out.state, out.transitions, timer) == (after, transitions, next_timer)


@pytest.mark.parametrize(("last_us", "expected"), [
    (100_000_000, 110_000),  # whole milliseconds: the watermark reaching last + timeout expires it
    (100_000_001, 110_001),  # a microsecond later: the watermark (whole ms) must pass it, round up
])
def test_expiry_ms(last_us: int, expected: int) -> None:
    assert expiry_ms(last_us, TIMEOUT) == expected


@pytest.mark.parametrize(("raw", "message"), [
    ("0s", "ONLINE_TIMEOUT (0s) must be positive"),
    ("soon", "ONLINE_TIMEOUT='soon' is not a duration"),
])
def test_online_timeout_config(raw: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Config.from_env({"ONLINE_TIMEOUT": raw})


def test_online_timeout_default_and_parse() -> None:
    assert Config.from_env({}).online_timeout_ms == 30_000
    assert Config.from_env({"ONLINE_TIMEOUT": "1m30s"}).online_timeout_ms == 90_000


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_player_keeps_one_slot_of_their_own_while_the_index_grows(seed: int) -> None:
    """Batches of known and new players of two servers, enough new ones to rebuild each server's index many times
    (it folds in the players added since once they pass 1,024 and an eighth of it): every look-up equals a dict
    of the slots given out, and a slot names its player and server."""
    rng = np.random.default_rng(seed)
    table, model = PlayerTable(), {}
    for _ in range(40):
        for server in ("A", "B"):
            pool = max(10, len(model) + int(rng.integers(0, 900)))
            players = [f"{server}-p{i}" for i in rng.integers(0, pool, int(rng.integers(1, 2_000)))]
            slots = table.slots_of(server, players).tolist()
            for player, slot in zip(players, slots, strict=True):
                assert model.setdefault((server, player), slot) == slot
    assert sorted(model.values()) == list(range(len(model))) == list(range(table.size))
    for (server, player), slot in model.items():
        assert table.names[slot] == player and table.servers[table.server[slot]] == server
    assert len(model) > 20_000  # the index was rebuilt: past 1,024 and many times an eighth


def events(*rows: tuple) -> OnlineEvents:
    """(server, player, event ms, kind[, arrival ms]) in arrival order (no arrival: 0)."""
    return OnlineEvents(np.array([r[0] for r in rows], object), np.array([r[1] for r in rows], object),
                          np.array([r[2] * 1000 for r in rows], np.int64), np.arange(len(rows), dtype=np.int64),
                          np.array([KIND_CODES[r[3]] for r in rows], np.int8),
                          np.array([r[4] if len(r) > 4 else 0 for r in rows], np.int64))


def members(r: redis.Redis, key: str) -> dict[str, int]:
    return {m.decode(): int(v) for m, v in r.hgetall(key).items()}


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


# --- the real query ---------------------------------------------------------------------------------

# (server, player, ms after T0, kind) per batch, in arrival order; delay 5 s, timeout 10 s. The watermark
# after each batch is in the comment; the oracle, not these comments, is what the test compares with.
HANDMADE = [
    [("A", "p1", 0, "login"), ("A", "p2", 1_000, "login"), ("B", "p3", 2_000, "heartbeat"), ("A", "p4", 500, None)],
    # wm 7 s. p2 logs out; p5 arrives
    [("A", "p1", 8_000, "heartbeat"), ("A", "p2", 6_000, "logout"), ("B", "p3", 9_000, "heartbeat"),
     ("A", "p5", 12_000, "login")],
    # late: p4 at 6.5 s and p2 exactly at the watermark (7 s) are dropped; wm 15 s expires p4 (0.5 + 10 s)
    [("A", "p4", 6_500, "heartbeat"), ("A", "p2", 7_000, "heartbeat"), ("B", "p6", 20_000, "login")],
    # p1: logout at 17 s arrives before a heartbeat at 16 s: offline. wm 25 s expires p5 (22 s)
    [("A", "p1", 17_000, "logout"), ("A", "p1", 16_000, "heartbeat"), ("B", "p3", 30_000, "login")],
    # p6 exactly at the watermark (25 s): late. Equal times: arrival decides (p7 out, p8 in). wm 36 s
    [("B", "p6", 25_000, "heartbeat"), ("A", "p7", 40_000, "login"), ("A", "p7", 40_000, "logout"),
     ("A", "p8", 41_000, "logout"), ("A", "p8", 41_000, "login")],
    # wm exactly 40 s: p3 (30 + 10 s) expires with the watermark exactly at its expiry
    [("B", "p9", 45_000, "login")],
    # p9 silent for 13 s between two events of one batch: offline at 55 s and back at 58 s. wm 53 s expires p8
    [("B", "p9", 58_000, "heartbeat"), ("A", "p10", 50_000, "login")],
    [],  # an empty write: nothing changes
]


def online_cfg(redis_url: str, tmp_path: Path) -> Config:
    ns = f"online-{uuid.uuid4().hex[:8]}"
    return Config(redis_url=redis_url, embedded_redis=False, namespace=ns, window_ms=60_000, slide_ms=60_000,
                  delay_ms=DELAY, online_timeout_ms=TIMEOUT, checkpoint_dir=str(tmp_path / ns),
                  spark_master="local[2]", max_future_skew_ms=None, retention_ms=100 * 365 * 86_400_000)


def arrival_ms(batches: list[list[tuple]], i: int) -> int:
    """When batch ``i`` arrives: at its newest event time (the newest so far for an empty one), so arrival
    time passes as event time does, as it does live (the online view runs a silent server's clock on it)."""
    return T0_MS + max((ms for batch in batches[:i + 1] for _, _, ms, _ in batch), default=0) + i  # IDs increase


def timed(batches: list[list[tuple]]) -> list[list[tuple]]:
    """The batches as the oracle takes them: epoch ms, with each event's arrival."""
    return [[(s, p, T0_MS + ms, k, arrival_ms(batches, i)) for s, p, ms, k in batch]
            for i, batch in enumerate(batches)]


def write_batch(client: redis.Redis, keys: KeySchema, batch: list[tuple], bad: bool = False,
                arrival: int | None = None) -> None:
    pipe = client.pipeline(transaction=True)  # a batch becomes visible at once
    ids = (f"{arrival}-{n + 1}" for n in range(len(batch) + 1)) if arrival is not None else iter(lambda: "*", None)
    for server, player, ms, kind in batch:
        pipe.xadd(keys.events, Event(server, player, (T0_MS + ms) * 1000, kind=kind).fields(), id=next(ids))
    if bad:
        pipe.xadd(keys.events, {PAYLOAD_FIELD: b'{"server": "A", "player_id": "p1", "event_time": "never"}'},
                  id=next(ids))
    pipe.execute()


def online_sets(client: redis.Redis, keys: KeySchema) -> dict[str, set[str]]:
    view = read_online(client, keys)
    servers = view.counts if view else {}
    sets = {s: set(members(client, keys.online(s))) for s in servers}
    return {s: ps for s, ps in sets.items() if ps}


def run(spark: SparkSession, cfg: Config, batches: list[list[tuple]],
        restart_after: int | None = None) -> list[dict[str, set[str]]]:
    """Write the batches one by one, processing each fully; the online sets after each."""
    client = redis.Redis.from_url(cfg.redis_url)
    keys = KeySchema(cfg.namespace)
    query = start_query(spark, cfg, trigger_ms=0)
    seen: list[dict[str, set[str]]] = []
    try:
        for i, batch in enumerate(batches):
            write_batch(client, keys, [(s, p, ms, k) for s, p, ms, k in batch], bad=(i == 1),
                        arrival=arrival_ms(batches, i))
            query.processAllAvailable()
            seen.append(online_sets(client, keys))
            if i == restart_after:
                query.stop()
                query = start_query(spark, cfg, trigger_ms=0)
    finally:
        query.stop()
    return seen


def check_counts(client: redis.Redis, keys: KeySchema, expected: dict[str, set[str]]) -> None:
    """The counts hash, the sets' sizes and the history's last record all agree with the oracle."""
    view = read_online(client, keys)
    assert view is not None
    nonzero = {s: n for s, n in view.counts.items() if n}
    assert nonzero == {s: len(ps) for s, ps in expected.items()}
    assert {s: client.hlen(keys.online(s)) for s in view.counts} == view.counts
    assert view.history[-1].counts == view.counts
    batches = [p.batch for p in view.history]
    assert batches == list(range(len(batches)))  # every batch recorded once, none twice


@pytest.mark.spark
def test_handmade_batches_match_the_oracle(spark: SparkSession, redis_url: str, tmp_path: Path) -> None:
    cfg = online_cfg(redis_url, tmp_path)
    seen = run(spark, cfg, HANDMADE)
    expected = online_oracle(timed(HANDMADE), DELAY, TIMEOUT)
    assert seen == expected
    # what the rows above are there for, so a weak oracle cannot hide a wrong rule
    assert expected[0] == {"A": {"p1", "p2", "p4"}, "B": {"p3"}}
    assert expected[2] == {"A": {"p1", "p5"}, "B": {"p3", "p6"}}  # late p4/p2 ignored, p4 expired
    assert expected[4] == {"A": {"p8"}, "B": {"p3"}}  # late p6 did not refresh; equal times by arrival
    assert expected[5] == {"A": {"p8"}, "B": {"p9"}}  # p3 expired with the watermark exactly at 40 s
    assert expected[6] == {"A": {"p8", "p10"}, "B": {"p9"}}  # A's own clock (50 s, wm 45 s) keeps p8 (41 s)
    client = redis.Redis.from_url(redis_url)
    keys = KeySchema(cfg.namespace)
    check_counts(client, keys, expected[-1])
    view = read_online(client, keys)
    assert view is not None and view.timeout_ms == TIMEOUT
    # batch 5 (p9 logs in) moves B's watermark to 40 s, which expires p3; batch 6: p9's gap (off and back on)
    # and p10 on; p8 stays, judged by A's clock, not by B's 58 s (the history keeps the global watermark)
    records = {json.loads(m)["batch"]: json.loads(m) for m in client.zrange(keys.online_history, 0, -1)}
    assert [(records[b]["watermark_ms"] - T0_MS, records[b]["online"], records[b]["offline"]) for b in (5, 6)] == [
        (40_000, 1, 1), (53_000, 2, 1)]
    assert records[6]["causes"] == {"A": {"login": 1}, "B": {"heartbeat": 1, "timeout": 1}}


@pytest.mark.spark
@pytest.mark.parametrize("seed", [3, 8])
def test_random_batches_match_the_oracle(spark: SparkSession, redis_url: str, tmp_path: Path, seed: int) -> None:
    batches = random_online_batches(seed)
    cfg = online_cfg(redis_url, tmp_path)
    expected = online_oracle(timed(batches), DELAY, TIMEOUT)
    assert run(spark, cfg, batches) == expected
    check_counts(redis.Redis.from_url(redis_url), KeySchema(cfg.namespace), expected[-1])
    # the set really exercises going offline: someone online after one batch is not after the next
    assert any(before[s] - after.get(s, set()) for after, before in zip(expected[1:], expected, strict=False)
               for s in before)


@pytest.mark.spark
def test_state_survives_a_restart(spark: SparkSession, redis_url: str, tmp_path: Path) -> None:
    """Stop the query after batch 2 and start a new one on the same checkpoint: players online before the
    restart stay online, and expire, by the state kept in Redis."""
    cfg = online_cfg(redis_url, tmp_path)
    seen = run(spark, cfg, HANDMADE, restart_after=2)
    assert seen == online_oracle(timed(HANDMADE), DELAY, TIMEOUT)
    check_counts(redis.Redis.from_url(redis_url), KeySchema(cfg.namespace), seen[-1])


@pytest.mark.spark
def test_live_ops_page_shows_the_online_counts(spark: SparkSession, redis_url: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = online_cfg(redis_url, tmp_path)
    client = redis.Redis.from_url(redis_url)
    keys = KeySchema(cfg.namespace)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", cfg.namespace)
    from tests.paths import APP as app

    def page(now_ms: int) -> AppTest:  # a new "now" each time: the snapshot is cached per refresh tick
        at = AppTest.from_file(app, default_timeout=60)
        at.session_state["now_ms"] = now_ms
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        return at

    # nothing has run: no online counts yet
    at = page(T0_MS + 60_000)
    assert not [m for m in at.metric if m.label.endswith("online now")]

    seen = run(spark, cfg, HANDMADE)
    expected = online_oracle(timed(HANDMADE), DELAY, TIMEOUT)[-1]
    assert seen[-1] == expected
    at = page(T0_MS + 120_000)
    # the total says "online now", or "as of" the newest arrival when most servers are silent by the page's clock
    shown = {m.label.removesuffix(" · online now"): int(m.value.replace(",", ""))
             for m in at.metric if m.label.endswith(" · online now") or m.label.startswith("All servers · as of ")}
    (total,) = [label for label in shown if label.startswith("All servers")]
    assert shown.pop(total) == sum(shown.values())
    view = read_online(client, keys)
    assert view is not None
    assert shown == view.counts
    assert {s: n for s, n in shown.items() if n} == {s: len(ps) for s, ps in expected.items()}
    # which batch the numbers are of: in the total's help (?), as the page keeps prose out of the way of data
    assert any(f"As of batch {view.last_batch}," in m.proto.help for m in at.metric)


def test_online_chart_has_each_servers_count_after_each_batch() -> None:
    history = [OnlinePoint(0, T0_MS, 1, {"A": 2}, 2, 0), OnlinePoint(1, T0_MS + 5_000, 2, {"A": 1, "B": 3}, 3, 1)]
    fig = online_over_batches(history, ["A", "B"])
    assert [(t.name, list(t.y)) for t in fig.data] == [("A", [2, 1]), ("B", [0, 3])]  # B unseen in batch 0: 0
    assert [c[0] for c in fig.data[0].customdata] == [0, 1]


@pytest.mark.parametrize(("lost_at", "until", "watermark", "phrase"), [
    (None, None, 50_000, None),  # nothing lost: nothing said
    (4, None, 50_000, "Players online are whole again (rewritten from the job's copy)"),
    (4, 60_000, 50_000, "Partial: Redis came back empty before batch 4 while the job restarted"),
    (4, 60_000, 60_000, "Players online are whole again (rebuilt from new events)"),  # the watermark got there
])
def test_live_ops_says_what_a_loss_did_to_the_online_view(lost_at: int | None, until: int | None, watermark: int,
                                                         phrase: str | None) -> None:
    from dashboard.screens.live_ops.model import online_loss_note
    view = OnlineView(last_batch=9, watermark_ms=T0_MS + watermark, timeout_ms=TIMEOUT, updated_ms=0, batch_ts_ms=0,
                      counts={"A": 3}, history=(), lost_at_batch=lost_at,
                      partial_until_ms=None if until is None else T0_MS + until)
    note = online_loss_note(view)
    assert note == phrase if phrase is None else phrase in (note or "")


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
