"""One batch folded into the player table, each server against its own clock.

:func:`decide_servers` folds a batch's events into the :class:`streaming.rules.online.table.PlayerTable`. It moves
each server's clock (:mod:`streaming.rules.server_clock`) and expires each server's players against that server's
next watermark. It returns what changed, per server, as :class:`ServerWrites`. Nothing is written here:
:mod:`streaming.store.online.commit` writes the decisions. The work is whole-table array operations; only the clocks
are decided one server at a time. Pure: no Redis, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from msgspec.structs import replace

from streaming.rules import fleet, server_clock
from streaming.rules.online.fold import CAUSES, Fold, Prior, fold
from streaming.rules.online.player import TIMEOUT
from streaming.rules.online.table import OnlineEvents, PlayerIndex, PlayerTable, PlayerTimes
from streaming.schema.config import Config
from streaming.schema.records import ClockRecord


@dataclass
class ServerWrites:
    """What one batch does to one server's players, decided before anything is written."""

    online: PlayerTimes  # online now, with their latest event's time
    logged_out: PlayerTimes  # logged out, with their logout's time: kept until the watermark passes it
    drop_online: list[str]
    drop_logged_out: list[str]
    count: int
    causes: dict[str, int]
    came_online: int
    went_offline: int
    rewrite: bool = False  # Redis lost the server's state: write the whole of it
    forget: bool = False  # the server is forgotten (streaming.rules.fleet.forgotten): its count goes


@dataclass(frozen=True)
class _BatchOf:
    """One server's share of a batch: its events (indices into the batch) and what the clock rule asks of them."""

    rows: np.ndarray
    newest_us: int  # the newest of its events, late ones too
    players: int  # distinct players among them
    now_ms: int  # the arrival of its newest event
    ahead_ms: int  # how far its events ran ahead of their arrival (rules.server_clock.ahead_ms)


def _shares(table: PlayerTable, ev: OnlineEvents) -> tuple[dict[str, _BatchOf], np.ndarray]:
    """Each server's share of the batch, and every event's slot in ``table`` (new players get one)."""
    slots = np.zeros(len(ev.event_us), np.int64)
    shares: dict[str, _BatchOf] = {}
    arrivals = ev.arrivals()
    for server, rows in ev.by_server().items():
        mine = slots[rows] = table.slots_of(server, ev.player[rows])
        event_us, ingest = ev.event_us[rows], arrivals[rows]
        shares[server] = _BatchOf(rows, int(event_us.max()), _distinct(mine), int(ingest.max()),
                                  server_clock.ahead_ms(event_us, ingest))
    return shares, slots


def _distinct(values: np.ndarray) -> int:
    """How many different values: a hash table in C for a large batch (a sort was 9 % of the online view's commit at
    100,000 events/s), a set for a small one (a pandas call costs more than a few hundred values)."""
    return len(set(values.tolist())) if len(values) < PlayerIndex.BULK else len(pd.unique(values))


def decide_servers(t: PlayerTable, ev: OnlineEvents, before: Mapping[str, ClockRecord], delay_ms: int,
                   timeout_ms: int, now_ingest: int | None = None,
                   retire_after_ms: int = Config.retire_after_ms,
                   asked: Mapping[str, int] | None = None) -> tuple[dict[str, ServerWrites], dict[str, ClockRecord]]:
    """The batch folded into ``t`` (the job's table, changed in place), each server's players against its own
    clock (:mod:`streaming.rules.server_clock`), never another's: the batch is folded into the table once, each
    player against their own server's watermark in force, each server's clock moves with what its players did,
    and every server's players expire against its next watermark, all in whole-table array operations; only the
    clocks (a few numbers a server) are decided one server at a time. Only the servers the view still keeps are
    decided (a clock, a player, or events in the batch: :mod:`streaming.rules.fleet`), so a batch costs what the
    live fleet costs, not every name ever seen. ``asked``: the servers an operator asked to forget, with when
    (``{ns}:forget``), forgotten once no player is kept (:func:`streaming.rules.fleet.forgotten`)."""
    if now_ingest is None:
        now_ingest = ev.newest_arrival_ms()
    shares, slots = _shares(t, ev)
    for server in before:
        t.code_of(server)
    with_players = np.bincount(t.server[t.known], minlength=len(t.servers))
    servers = sorted({*before, *shares, *(t.servers[c] for c in np.flatnonzero(with_players).tolist())})
    clocks, in_force = _set_back(t, servers, before, shares, delay_ms, timeout_ms)
    # The batch folded in, each player against their server's watermark in force. Expiry is left to the whole
    # table below, once the clocks have moved: no accepted event expires at the watermark in force, so the fold's
    # own expiry is a no-op here.
    prior = Prior(t.known.copy(), t.online.copy(), t.last_us.copy())
    wm = in_force[np.maximum(t.server, 0)]
    f = fold(slots, ev.event_us, ev.entry, ev.kind, prior, wm, wm, timeout_ms)
    t.known[f.player], t.online[f.player], t.last_us[f.player] = True, f.online, f.last_us
    t.known[f.gone] = False
    after, next_wm, shifted = _advance(t, servers, clocks, in_force, shares, f, now_ingest, delay_ms, timeout_ms)
    # Every server's players against its next watermark.
    next_us = next_wm[np.maximum(t.server, 0)] * 1000
    timed_out = t.known & t.online & (t.last_us + timeout_ms * 1000 <= next_us)
    forgotten = t.known & ~t.online & (t.last_us <= next_us)
    t.known[timed_out | forgotten] = False
    writes = _writes(t, servers, f, prior, shifted, timed_out)
    _life(t, servers, writes, shares, before, after, timed_out, now_ingest, (retire_after_ms, asked or {}))
    return writes, after


def _life(t: PlayerTable, servers: Sequence[str], writes: Mapping[str, ServerWrites],
          shares: Mapping[str, _BatchOf], before: Mapping[str, ClockRecord], after: dict[str, ClockRecord],
          timed_out: np.ndarray, now_ingest: int | None, forgetting: tuple[int, Mapping[str, int]]) -> None:
    """Each server's drained mark moved on (:func:`streaming.rules.fleet.drained_after`: its players counted as
    the batch's events left them, before the expiry that follows), and the servers the view forgets dropped from
    the clocks and marked in their writes (:func:`streaming.rules.fleet.forgotten`, by ``forgetting``: RETIRE_AFTER
    and the operator's requests)."""
    retire_after_ms, asked = forgetting
    n = len(t.servers)
    expired = np.bincount(t.server[timed_out], minlength=n)
    kept = np.bincount(t.server[t.known], minlength=n)
    for server in servers:
        code, share, clock = t.code[server], shares.get(server), after.get(server)
        if fleet.forgotten(had_events=share is not None, players_kept=int(kept[code]),
                           heard_ms=clock.heard_ms if clock is not None else None, now_ms=now_ingest,
                           retire_after_ms=retire_after_ms, asked_ms=asked.get(server)):
            after.pop(server, None)
            writes[server].forget = True
            continue
        prior = before.get(server)
        drained = fleet.drained_after(prior.drained_ms if prior is not None else 0, had_events=share is not None,
                                      online_after=writes[server].count + int(expired[code]),
                                      newest_arrival_ms=share.now_ms if share is not None else 0)
        if clock is not None and clock.drained_ms != drained:
            after[server] = replace(clock, drained_ms=drained)


def _set_back(t: PlayerTable, servers: Sequence[str], before: Mapping[str, ClockRecord], shares: Mapping[str, _BatchOf],
              delay_ms: int, timeout_ms: int) -> tuple[dict[str, ClockRecord | None], np.ndarray]:
    """Each server's clock set back before the batch is applied (:func:`streaming.rules.server_clock.step_back`),
    and its watermark in force, by server code."""
    clocks: dict[str, ClockRecord | None] = {}
    in_force = np.zeros(len(t.servers), np.int64)
    for server in servers:
        clock, share = before.get(server), shares.get(server)
        if share is not None and clock is not None:  # step_back reads only the newest of the server's events
            clock = server_clock.step_back(clock, np.array([share.newest_us]), share.players, share.now_ms,
                                           delay_ms, timeout_ms)
        clocks[server] = clock
        in_force[t.code[server]] = clock.watermark_ms if clock is not None else 0
    return clocks, in_force


def _advance(t: PlayerTable, servers: Sequence[str], clocks: Mapping[str, ClockRecord | None], in_force: np.ndarray,
             shares: Mapping[str, _BatchOf], f: Fold, now_ingest: int | None, delay_ms: int,
             timeout_ms: int) -> tuple[dict[str, ClockRecord], np.ndarray, np.ndarray]:
    """Each clock moved with what its players did (:func:`streaming.rules.server_clock.advance`): the clocks after,
    the next watermark by server code, and the slots a clock set forward moved. The rule looks at players far
    ahead of the clock's prediction only: they are found for every server in one pass over the table."""
    # Each server's arrival now: its newest event's, or the batch's when it has none.
    nows = {s: shares[s].now_ms if s in shares else now_ingest for s in servers}
    limit = np.full(len(t.servers), np.iinfo(np.int64).max, np.int64)
    for server in servers:
        clock, now = clocks[server], nows[server]
        if clock is not None and now is not None:
            limit[t.code[server]] = server_clock.trust_limit_us(clock, now, timeout_ms)
    beyond = t.by_server(np.flatnonzero(t.known & (t.last_us > limit[np.maximum(t.server, 0)])))
    applied = t.by_server(f.player)
    none = np.zeros(0, np.int64)
    next_wm = in_force.copy()
    shifted: list[np.ndarray] = [none]
    after: dict[str, ClockRecord] = {}
    for server in servers:
        code, share, before_clock, now = t.code[server], shares.get(server), clocks[server], nows[server]
        clock = server_clock.advance(before_clock, t.last_us[applied.get(code, none)],
                                     t.last_us[beyond.get(code, none)], now, delay_ms, timeout_ms,
                                     share.ahead_ms if share is not None else None)
        shifted.append(_follow_a_forward_step(t, code, before_clock, clock, now, timeout_ms))
        if clock is not None:
            after[server] = clock
            next_wm[code] = clock.watermark_ms
    return after, next_wm, np.concatenate(shifted)


def _writes(t: PlayerTable, servers: Sequence[str], f: Fold, prior: Prior, shifted: np.ndarray,
            timed_out: np.ndarray) -> dict[str, ServerWrites]:
    """What changed, per server: the batch's players as they stand now (and those a clock step moved), those
    who left the online or logged-out hash, the counts and the transitions by cause."""
    kept = t.known[f.player]
    now_on, now_out = f.player[f.online & kept], f.player[~f.online & kept]
    if len(shifted):  # their latest times moved with the clock: written again
        still = shifted[t.known[shifted]]
        now_on = np.union1d(now_on, still[t.online[still]])
        now_out = np.union1d(now_out, still[~t.online[still]])
    was_on = t.by_server(np.flatnonzero(prior.known & prior.online & ~(t.known & t.online)))
    was_out = t.by_server(np.flatnonzero(prior.known & ~prior.online & ~(t.known & ~t.online)))
    on, out = t.by_server(now_on), t.by_server(now_out)
    n = len(t.servers)
    counts = t.counts().tolist()
    t_code = t.server[f.t_player]
    by_cause = np.bincount(t_code * len(CAUSES) + f.t_cause, minlength=n * len(CAUSES)).reshape(n, len(CAUSES))
    timeouts = np.bincount(t.server[timed_out], minlength=n)
    by_cause[:, CAUSES.index(TIMEOUT)] += timeouts
    came = np.bincount(t_code[f.t_online], minlength=n).tolist()
    went = (np.bincount(t_code[~f.t_online], minlength=n) + timeouts).tolist()
    names, none = t.names, np.zeros(0, np.int64)
    writes = {}
    for server in servers:
        code = t.code[server]
        writes[server] = ServerWrites(
            online=t.times(on.get(code, none)), logged_out=t.times(out.get(code, none)),
            drop_online=names[was_on.get(code, none)].tolist(),
            drop_logged_out=names[was_out.get(code, none)].tolist(),
            count=counts[code], causes={CAUSES[c]: int(k) for c, k in sorted(
                ((c, k) for c, k in enumerate(by_cause[code].tolist()) if k), key=lambda ck: CAUSES[ck[0]])},
            came_online=came[code], went_offline=went[code])
    return writes


def _follow_a_forward_step(t: PlayerTable, code: int, before: ClockRecord | None, after: ClockRecord | None,
                           now_ms: int | None, timeout_ms: int) -> np.ndarray:
    """The server's slots moved forward with a clock set forward (:func:`streaming.rules.server_clock.forward_step`)."""
    if before is None or after is None or now_ms is None:
        return np.zeros(0, np.int64)
    step, bound = server_clock.forward_step(before, after, now_ms, timeout_ms)
    if not step:
        return np.zeros(0, np.int64)
    slots = np.flatnonzero(t.known & (t.server == code) & (t.last_us <= bound))
    t.last_us[slots] += step
    return slots
