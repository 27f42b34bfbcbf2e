"""The online view's per-player rule as a table (:mod:`streaming.rules.online.player`): events applied, the timer,
expiry, the timeout's setting, and a player's slot in the table."""

from __future__ import annotations

import numpy as np
import pytest

from streaming.rules.online.player import PlayerState, Seen, Transition, apply_events, expiry_ms, on_timer
from streaming.rules.online.table import PlayerTable
from streaming.schema.config import Config, ConfigError

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

