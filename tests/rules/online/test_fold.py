"""The vectorised batch fold against the per-player rule it implements (streaming.rules.online.player), as a table of
edge cases and on random batches: same new states, same transitions in the same order, same late/stale."""

from __future__ import annotations

import random

import numpy as np
import pytest

from streaming.rules.online.fold import CAUSES, KIND_CODES, Prior, fold
from streaming.rules.online.player import PlayerState, Seen, Transition, apply_events, on_timer

TIMEOUT = 10_000


def by_rule(prior: dict[str, PlayerState], events: list[tuple[str, int, int, str | None]], wm: int,
            next_wm: int) -> tuple[dict[str, PlayerState | None], dict[str, list[Transition]], int, int]:
    """Each player through apply_events, then the timer the next watermark fires (Spark's no-data batch)."""
    players = sorted({e[0] for e in events})
    states: dict[str, PlayerState | None] = {}
    trans: dict[str, list[Transition]] = {}
    late = stale = 0
    for p in players:
        seen = [Seen(us, (entry, 0), kind) for q, us, entry, kind in events if q == p]
        out = apply_events(prior.get(p), seen, wm, TIMEOUT)
        late, stale = late + out.late, stale + out.stale
        trans[p] = []
        if out.late + out.stale == len(seen):  # a player the batch does not touch expires in the store
            continue
        ts = list(out.transitions)
        state = out.state
        if state is not None and state.timer_ms(TIMEOUT) <= next_wm:
            timed, _ = on_timer(state, next_wm, TIMEOUT)
            ts += timed.transitions
            state = timed.state
        states[p] = state
        trans[p] = ts
    return states, trans, late, stale


def by_fold(prior: dict[str, PlayerState], events: list[tuple[str, int, int, str | None]], wm: int,
            next_wm: int) -> tuple[dict[str, PlayerState | None], dict[str, list[Transition]], int, int]:
    players = sorted({e[0] for e in events})
    index = {p: i for i, p in enumerate(players)}
    known = np.array([p in prior for p in players], bool)
    pr = Prior(known, np.array([prior[p].online if p in prior else False for p in players], bool),
               np.array([prior[p].last_us if p in prior else 0 for p in players], np.int64))
    f = fold(np.array([index[e[0]] for e in events], np.int64), np.array([e[1] for e in events], np.int64),
             np.array([e[2] for e in events], np.int64), np.array([KIND_CODES[e[3]] for e in events], np.int8),
             pr, wm, next_wm, TIMEOUT)
    states: dict[str, PlayerState | None] = {}
    for i, online, last_us in zip(f.player, f.online, f.last_us, strict=True):
        states[players[i]] = PlayerState(bool(online), int(last_us), (0, 0))
    for i in f.gone:
        states[players[i]] = None
    trans: dict[str, list[Transition]] = {p: [] for p in players}
    for i, online, at, cause in zip(f.t_player, f.t_online, f.t_at_us, f.t_cause, strict=True):
        trans[players[i]].append(Transition(bool(online), int(at), CAUSES[cause]))
    return states, trans, f.late, f.stale


def comparable(states: dict[str, PlayerState | None]) -> dict[str, tuple[bool, int] | None]:
    """The entry of a state is not kept by the fold: entries of later batches always come after it."""
    return {p: None if s is None else (s.online, s.last_us) for p, s in states.items()}


S = 1_000_000  # one second in microseconds

# (prior states, events (player, event_us, entry, kind), watermark ms, next watermark ms)
CASES = [
    # a login, then the next watermark is far below its expiry
    ({}, [("p", 100 * S, 1, "login")], 0, 50_000),
    # the next watermark reaches the expiry exactly: online and timed out in one batch
    ({}, [("p", 100 * S, 1, "login")], 0, 110_000),
    # a millisecond short of it
    ({}, [("p", 100 * S, 1, "login")], 0, 109_999),
    # a logout is forgotten once the next watermark reaches it, kept a millisecond before
    ({"p": PlayerState(True, 90 * S, (0, 0))}, [("p", 100 * S, 1, "logout")], 0, 100_000),
    ({"p": PlayerState(True, 90 * S, (0, 0))}, [("p", 100 * S, 1, "logout")], 0, 99_999),
    # equal event times: arrival decides
    ({}, [("p", 100 * S, 2, "login"), ("p", 100 * S, 1, "logout")], 0, 0),
    ({}, [("p", 100 * S, 1, "login"), ("p", 100 * S, 2, "logout")], 0, 0),
    # late at the watermark exactly, accepted a microsecond above it
    ({}, [("p", 50 * S, 1, "login"), ("q", 50 * S + 1, 2, "login")], 50_000, 50_000),
    # stale against the state; equal to the state's time is not stale (a later entry)
    ({"p": PlayerState(False, 103 * S, (0, 0))}, [("p", 101 * S, 1, "heartbeat")], 0, 0),
    ({"p": PlayerState(False, 103 * S, (0, 0))}, [("p", 103 * S, 1, "login")], 0, 0),
    # a gap of the whole timeout inside one batch, and a gap a microsecond shorter
    ({"p": PlayerState(True, 100 * S, (0, 0))}, [("p", 110 * S, 1, "heartbeat"), ("p", 125 * S - 1, 2, None)], 0, 0),
    # every event of a known player late: the state stands (untouched by the batch)
    ({"p": PlayerState(True, 100 * S, (0, 0))}, [("p", 40 * S, 1, "heartbeat")], 50_000, 60_000),
    # logout then login after the timeout, with a late one between
    ({"p": PlayerState(True, 100 * S, (0, 0))},
     [("p", 101 * S, 1, "logout"), ("p", 99 * S, 2, "login"), ("p", 130 * S, 3, "login")], 100_000, 100_000),
]


@pytest.mark.parametrize(("prior", "events", "wm", "next_wm"), CASES)
def test_fold_equals_the_per_player_rule(prior: dict, events: list, wm: int, next_wm: int) -> None:
    a_states, a_trans, a_late, a_stale = by_rule(prior, events, wm, next_wm)
    b_states, b_trans, b_late, b_stale = by_fold(prior, events, wm, next_wm)
    assert comparable(b_states) == comparable(a_states)
    assert b_trans == a_trans
    assert (b_late, b_stale) == (a_late, a_stale)


def random_case(rng: random.Random) -> tuple[dict, list, int, int]:
    players = [f"p{i}" for i in range(rng.randint(1, 6))]
    wm = rng.choice([0, 20_000, 50_000, 50_500])
    prior = {p: PlayerState(rng.random() < 0.7, rng.randrange(30, 80) * S // 2, (0, 0))
             for p in players if rng.random() < 0.6}
    events = [(rng.choice(players), rng.randrange(30, 90) * S // 2 + rng.choice([0, 0, 1]), entry,
               rng.choice([None, "login", "heartbeat", "heartbeat", "logout"])) for entry in range(rng.randint(1, 12))]
    next_wm = wm + rng.choice([0, 500, 5_000, 12_000, 30_000])
    return prior, events, wm, next_wm


@pytest.mark.parametrize("seed", range(300))
def test_fold_equals_the_per_player_rule_on_random_batches(seed: int) -> None:
    prior, events, wm, next_wm = random_case(random.Random(seed))
    test_fold_equals_the_per_player_rule(prior, events, wm, next_wm)


def test_random_batches_reach_every_branch() -> None:
    """So the random comparison cannot pass by never meeting a case."""
    causes: set[str] = set()
    late = stale = gone = 0
    for seed in range(300):
        states, trans, n_late, n_stale = by_fold(*random_case(random.Random(seed)))
        causes |= {t.cause for ts in trans.values() for t in ts}
        late, stale = late + n_late, stale + n_stale
        gone += sum(v is None for v in states.values())
    assert causes == set(CAUSES)
    assert late and stale and gone
