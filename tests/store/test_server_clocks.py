"""One clock cannot take the others' players offline: the online view judges each server's players by that
server's own clock (``streaming.rules.server_clock``), checked through the real commit (real redis-server)
against the independent model (tests/oracle.py ``online_oracle``) on games made for it: one event far ahead,
a server whose clock runs ahead, one behind, one silent, one returning; and random ones."""

from __future__ import annotations

import random
import uuid

import pytest
import redis

from streaming.alerting.conditions import evaluate
from streaming.alerting.config import AlertConfig
from streaming.alerting.observation import Memory
from streaming.rules.online.table import OnlineBatch
from streaming.schema.keys import KeySchema
from streaming.schema.records import OnlineRecord, OnlineStateRecord
from streaming.store.observe import read_stack
from streaming.store.online.commit import OnlineMirror, commit_online
from streaming.store.views.online import read_online
from tests.oracle import online_oracle
from tests.schema.params import built_params
from tests.store.online.rows import events

DELAY, TIMEOUT = 5_000, 30_000
T0 = 1_700_000_000_000


Steps = int | list[tuple[int, int]]
"""A constant, or (from second, value) steps: a clock set forward and back, a link that gets slower."""


def at(v: Steps, sec: int) -> int:
    return v if isinstance(v, int) else max(((f, x) for f, x in v if f <= sec), default=(0, 0))[1]


def game(seconds: int, players: dict[str, int], offset_ms: dict[str, Steps] | None = None,
         lag_ms: dict[str, Steps] | None = None, silent: dict[str, tuple[int, int]] | None = None,
         extra: dict[int, list[tuple]] | None = None) -> list[list[tuple]]:
    """One batch per second of arrival time; every player heartbeats every 5 s (spread over the 5 s). A
    server's events carry its clock (``offset_ms`` ahead, negative behind) and arrive ``lag_ms`` after they
    happened; it sends nothing in its ``silent`` [from, to) seconds. ``extra``: more rows by batch."""
    offset_ms, lag_ms, silent, extra = offset_ms or {}, lag_ms or {}, silent or {}, extra or {}
    batches = []
    for sec in range(seconds):
        rows = []
        for server, n in players.items():
            lo, hi = silent.get(server, (-1, -1))
            if lo <= sec < hi:
                continue
            for p in range(n):
                if (sec + p) % 5 == 0:
                    happened = T0 + sec * 1000 - at(lag_ms.get(server, 0), sec)
                    rows.append((server, f"{server}-{p}", happened + at(offset_ms.get(server, 0), sec),
                                 "login" if sec < 5 else "heartbeat", T0 + sec * 1000))
        batches.append(rows + extra.get(sec, []))
    return batches


def commit_all(r: redis.Redis, batches: list[list[tuple]], keys: KeySchema | None = None) -> list[dict[str, int]]:
    keys = keys or KeySchema(f"clk-{uuid.uuid4().hex[:8]}")
    mirror, out = OnlineMirror(), []
    for i, batch in enumerate(batches):
        b = OnlineBatch(i, 0, T0 + i * 1000, f"{i + 1}-0", events(*batch), DELAY)
        assert commit_online(r, keys, b, built_params(60_000, 60_000, DELAY), TIMEOUT, mirror)
        view = read_online(r, keys)
        assert view is not None
        out.append({s: n for s, n in view.counts.items() if n})
    return out


def model(batches: list[list[tuple]]) -> list[dict[str, int]]:
    return [{s: len(ps) for s, ps in sets.items()} for sets in online_oracle(batches, DELAY, TIMEOUT)]


def test_one_event_ninety_seconds_ahead_takes_nobody_offline(r: redis.Redis) -> None:
    """The replay from the issue: 2 servers x 50 players heartbeating every 5 s; one event from A 90 s ahead."""
    glitch = {20: [("A", "A-0", T0 + 20_000 + 90_000, "heartbeat", T0 + 20_000)]}
    batches = game(60, {"A": 50, "B": 50}, extra=glitch)
    got = commit_all(r, batches)
    assert got == model(batches)
    assert all(counts == {"A": 50, "B": 50} for counts in got[5:]), got


def test_a_server_whose_clock_runs_ahead_is_judged_by_it_and_named(r: redis.Redis) -> None:
    keys = KeySchema(f"clk-{uuid.uuid4().hex[:8]}")
    batches = game(60, {"A": 20, "B": 20}, offset_ms={"A": 90_000})
    got = commit_all(r, batches, keys)
    assert got == model(batches)
    assert all(counts == {"A": 20, "B": 20} for counts in got[5:])
    record = OnlineRecord.decode(r.zrange(keys.online_history, -1, -1)[0], "history")
    assert record.ahead_ms == {"A": 90_000}  # named, by how much; B's clock is right
    state = OnlineStateRecord.from_hash(r.hgetall(keys.online_state), "state")
    assert state.clocks["A"].ahead_ms == 90_000 and state.clocks["B"].ahead_ms == 0


def test_a_server_behind_keeps_its_players(r: redis.Redis) -> None:
    """Under one global watermark every event of B, 60 s behind, would be late and its players gone."""
    batches = game(60, {"A": 20, "B": 20}, offset_ms={"B": -60_000}, lag_ms={"B": 2_000})
    got = commit_all(r, batches)
    assert got == model(batches)
    assert all(counts == {"A": 20, "B": 20} for counts in got[5:])


def test_a_silent_server_times_out_by_arrival_time_and_returns(r: redis.Redis) -> None:
    """B stops at 20 s: its players time out after the timeout (+ the delay) of arrival time, while A's stay;
    B comes back at 80 s and is counted again from its first events."""
    batches = game(110, {"A": 10, "B": 10}, silent={"B": (20, 80)})
    got = commit_all(r, batches)
    assert got == model(batches)
    assert got[30] == {"A": 10, "B": 10}  # silent for 10 s: still online
    gone = [i for i, c in enumerate(got) if "B" not in c and i > 20]
    # B's last heartbeats happened at 15-19 s: the last one times out once arrival passes 19 + 30 + 5 s
    assert gone[0] == 54 and all("B" not in got[i] for i in range(54, 80))
    assert all(c["A"] == 10 for c in got[5:])
    assert got[85] == {"A": 10, "B": 10}  # back: every player heartbeats within 5 s


def test_a_clock_set_back_or_a_slower_link_keeps_its_players(r: redis.Redis) -> None:
    """A's clock is set 60 s forward at 30 s and back at 70 s; B's link delivers everything 60 s later from 30 s.
    Every player stays online throughout: a clock set forward moves its players with it (it is not time that
    passed), one set back or a slower link is judged again from its newest events once they stay behind."""
    batches = game(160, {"A": 20, "B": 20, "C": 20}, offset_ms={"A": [(30, 60_000), (70, 0)]},
                   lag_ms={"B": [(30, 60_000)]})
    got = commit_all(r, batches)
    assert got == model(batches)
    assert all(c["B"] == 20 and c["C"] == 20 for c in got[5:]), got
    assert all(c["A"] == 20 for c in got[5:]), got  # its players moved forward with its clock: nobody timed out


def random_game(seed: int, names: str = "ABC", glitches: int = 12, silent_p: float = 0.5) -> list[list[tuple]]:
    """Clocks ahead and behind, lags, silences, glitches, logouts and late events, at random, on 90 s of batches."""
    rng = random.Random(seed)
    servers = {s: rng.randint(1, 6) for s in names}
    offset: dict[str, Steps] = {s: rng.choice([0, 0, 45_000, -40_000, [(rng.randint(10, 60), 50_000)],
                                                [(rng.randint(10, 40), 40_000), (rng.randint(45, 80), 0)]])
                                for s in servers}
    lag: dict[str, Steps] = {s: rng.choice([0, 1_000, 4_000, [(rng.randint(10, 60), 45_000)]]) for s in servers}
    silent = {s: (a, a + rng.randint(5, 70)) for s in servers if rng.random() < silent_p for a in [rng.randint(5, 40)]}
    extra: dict[int, list[tuple]] = {}
    for _ in range(glitches):
        sec, s = rng.randint(0, 89), rng.choice(names)
        t = T0 + sec * 1000 + at(offset[s], sec) + rng.choice([-50_000, -8_000, 0, 35_000, 120_000])
        extra.setdefault(sec, []).append((s, f"{s}-{rng.randint(0, 6)}", t, rng.choice(["logout", "login", None]),
                                          T0 + sec * 1000))
    return game(90, servers, offset, lag, silent, extra)


@pytest.mark.parametrize("seed", range(6))
def test_random_games_match_the_model(r: redis.Redis, seed: int) -> None:
    batches = random_game(seed)
    assert commit_all(r, batches) == model(batches)


def test_live_ops_names_a_clock_ahead_and_a_silent_server(r: redis.Redis) -> None:
    """From the committed view: A runs 90 s ahead, B falls silent at 20 s; C is right and sends on."""
    from dashboard.screens.live_ops.model import clock_notes

    keys = KeySchema(f"clk-{uuid.uuid4().hex[:8]}")
    commit_all(r, game(80, {"A": 5, "B": 5, "C": 5}, offset_ms={"A": 90_000}, silent={"B": (20, 80)}), keys)
    view = read_online(r, keys)
    assert view is not None
    notes = clock_notes(view)
    assert len(notes) == 2
    assert notes[0].split(" (")[0] == "Clock ahead: A by 1 min 30 s"  # B and C not named
    named = notes[1].split(" of arrival")[0]
    assert named.startswith("Timing out: B (") and ", " not in named
    calm = KeySchema(f"clk-{uuid.uuid4().hex[:8]}")
    commit_all(r, game(30, {"A": 5, "C": 5}), calm)
    calm_view = read_online(r, calm)
    assert calm_view is not None and clock_notes(calm_view) == []


def alerts_over(r: redis.Redis, batches: list[list[tuple]], cfg: AlertConfig) -> list[dict[tuple[str, str], bool]]:
    """What the monitor's rules would page after each batch of the online view (condition true, not held),
    read from Redis as wm-monitor reads it."""
    keys = KeySchema(f"clk-{uuid.uuid4().hex[:8]}")
    memory, mirror, out = Memory(started_ms=T0 - 3_600_000, reach_ms=400_000), OnlineMirror(), []
    for i, batch in enumerate(batches):
        b = OnlineBatch(i, 0, T0 + i * 1000, f"{i + 1}-0", events(*batch), DELAY)
        assert commit_online(r, keys, b, built_params(60_000, 60_000, DELAY), TIMEOUT, mirror)
        reading = read_stack(r, keys, {}, T0 + i * 1000, memory.last_online_batch(), 400)
        memory.remember(reading.obs)
        out.append({(f.rule, f.subject): bool(f.active) and f.held is None
                    for f in evaluate(reading.obs, memory, cfg)})
    return out


def test_one_fast_clock_fires_clock_ahead_for_it_and_no_players_drop_anywhere(r: redis.Redis) -> None:
    """The issue's replay through the monitor's rules: A's clock runs 90 s fast from 30 s to 90 s (all its
    events), then is set right. ClockAhead names A while it is ahead; no PlayersDrop for B at any time, nor for
    A, whose own players time out once by its clock's 90 s step (held: "its clock stepped")."""
    cfg = AlertConfig.from_toml('[players_drop]\nwithin = "1m"\nmin_players = 10\n')
    batches = game(150, {"A": 50, "B": 50}, offset_ms={"A": [(30, 90_000), (90, 0)]})
    got = alerts_over(r, batches, cfg)
    assert [i for i, f in enumerate(got) if f.get(("clock_ahead", "A"))] == list(range(30, 90))
    assert not any(f.get(("clock_ahead", "B")) for f in got)
    assert not [(i, k) for i, f in enumerate(got) for k, v in f.items() if k[0] == "players_drop" and v], got
