"""The online rule (:mod:`streaming.rules.online.player`) for a whole batch of players at once, vectorised.

Per-key Python state costs a Python call per player per batch; at game scale (a quarter of a million
players, each heard from every few seconds) that is more than two cores can do. The rule needs, per
player, only the previous state (online or logged out, and the event time of the latest event applied)
and the batch's events of that player, and every step of it looks at one event and the one before it.
So a batch is folded with array operations over all its events sorted by (player, event time, entry):

- an event at or below the watermark in force is late; one older than the player's state is stale
  (entries of a later batch always arrive after the state's, so only event time can make it older);
- each remaining event sees the one before it (or the state): a gap of at least the timeout after an
  online one ends that session (``timeout`` at its time + timeout), and a change between online and
  logged out is a transition caused by the event's kind;
- the last one is the player's new state, which then meets the next batch's watermark (what Spark's
  no-data batch did for the stateful query): an online player whose time + timeout is at or below it
  times out, a logged-out one is forgotten once it is at or below their logout.

Players of the batch only: those the batch does not touch expire by the same comparison wherever their
state lives (:mod:`streaming.rules.online.decide`). No Spark, no Redis.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streaming.rules.online.player import ANY_EVENT, LOGOUT, TIMEOUT

CAUSES = (ANY_EVENT, "login", "heartbeat", LOGOUT, TIMEOUT)
"""Transition causes by code; the first four are also the kind codes of events (no kind, login, ...)."""
KIND_CODES = {None: 0, "login": 1, "heartbeat": 2, LOGOUT: 3}
LOGOUT_CODE, TIMEOUT_CODE = 3, 4


@dataclass(frozen=True)
class Prior:
    """The state of each player of the batch before it, by player index: ``known`` False for a player
    with no state; otherwise ``online`` (False: logged out, kept until the watermark passes) and
    ``last_us``, the event time of the latest event applied."""

    known: np.ndarray
    online: np.ndarray
    last_us: np.ndarray

    @classmethod
    def none(cls, players: int) -> Prior:
        return cls(np.zeros(players, bool), np.zeros(players, bool), np.zeros(players, np.int64))


@dataclass(frozen=True)
class Fold:
    """What a batch does to its players. ``player``, ``online`` and ``last_us``: the new state of every
    player with an event applied (``online`` False: logged out and kept); ``gone``: players whose state
    ends (timed out or forgotten after a logout), by index. Transitions in order per player: ``t_player``,
    ``t_online``, ``t_at_us`` (event time it happened at), ``t_cause`` (a code into :data:`CAUSES`)."""

    player: np.ndarray
    online: np.ndarray
    last_us: np.ndarray
    gone: np.ndarray
    t_player: np.ndarray
    t_online: np.ndarray
    t_at_us: np.ndarray
    t_cause: np.ndarray
    late: int
    stale: int


def fold(player: np.ndarray, event_us: np.ndarray, entry: np.ndarray, kind: np.ndarray, prior: Prior,
         watermark_ms: int | np.ndarray, next_watermark_ms: int | np.ndarray, timeout_ms: int) -> Fold:
    """``player``: each event's player index into ``prior``; ``entry``: a key that orders entries by
    arrival; ``kind``: :data:`KIND_CODES`. Late against ``watermark_ms``, expiry against ``next_watermark_ms``:
    one for every player, or an array by player index (each player judged by their own server's watermark, so
    one fold serves a batch of many servers)."""
    timeout_us = timeout_ms * 1000
    order = np.lexsort((entry, event_us, player))
    p, us, kd = player[order], event_us[order].astype(np.int64), kind[order]
    late = us <= _of(watermark_ms, p) * 1000
    stale = ~late & prior.known[p] & (us < prior.last_us[p])
    keep = ~(late | stale)
    p, us, kd = p[keep], us[keep], kd[keep]

    first = np.ones(len(p), bool)
    first[1:] = p[1:] != p[:-1]
    prev_online = np.empty(len(p), bool)
    prev_us = np.empty(len(p), np.int64)
    prev_online[1:], prev_us[1:] = kd[:-1] != LOGOUT_CODE, us[:-1]
    prev_online[first] = prior.known[p[first]] & prior.online[p[first]]
    prev_us[first] = prior.last_us[p[first]]
    gap = prev_online & (us >= prev_us + timeout_us)
    online = kd != LOGOUT_CODE
    change = online != (prev_online & ~gap)

    last = np.ones(len(p), bool)
    last[:-1] = p[:-1] != p[1:]
    fp, fon, fus = p[last], online[last], us[last]
    next_us = _of(next_watermark_ms, fp) * 1000
    expires = fon & (fus + timeout_us <= next_us)
    forgotten = ~fon & (fus <= next_us)
    stays = ~(expires | forgotten)

    # transitions: each event's timeout (before it) and change, then the expiry after the last event
    seq = np.arange(len(p))
    parts = [
        (p[gap], np.zeros(gap.sum(), bool), prev_us[gap] + timeout_us, np.full(gap.sum(), TIMEOUT_CODE), seq[gap] * 3),
        (p[change], online[change], us[change], np.where(online[change], kd[change], LOGOUT_CODE),
         seq[change] * 3 + 1),
        (fp[expires], np.zeros(expires.sum(), bool), fus[expires] + timeout_us, np.full(expires.sum(), TIMEOUT_CODE),
         seq[last][expires] * 3 + 2),
    ]
    rank = np.concatenate([x[4] for x in parts])
    at = np.argsort(rank, kind="stable")

    def col(i: int, dtype: type) -> np.ndarray:
        return np.concatenate([x[i] for x in parts]).astype(dtype)[at]

    return Fold(player=fp[stays], online=fon[stays], last_us=fus[stays], gone=fp[~stays],
                t_player=col(0, np.int64), t_online=col(1, bool), t_at_us=col(2, np.int64), t_cause=col(3, np.int8),
                late=int(late.sum()), stale=int(stale.sum()))


def _of(watermark_ms: int | np.ndarray, players: np.ndarray) -> int | np.ndarray:
    """The watermark of each of ``players`` (by index): the one watermark, or each one's own."""
    return watermark_ms[players] if isinstance(watermark_ms, np.ndarray) else watermark_ms
