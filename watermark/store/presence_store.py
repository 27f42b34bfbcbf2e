"""The online players in Redis: their state, one batch folded in once, and read back for the dashboard.

Each player's state lives in two hashes per server (:meth:`watermark.schema.keys.KeySchema.online` and
``logged_out``): player -> event time (us) of their latest event. The job keeps the same state in arrays
(:class:`PresenceMirror`), folds each batch into it (:mod:`watermark.rules.presence_batch`), and writes only what
changed, in one MULTI/EXEC guarded by ``{ns}:presence:state`` ``last_batch``, so a replayed batch is a
no-op, as :func:`watermark.store.commit.commit_batch` does for the windows. No pyspark: the dashboard imports this.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import redis
from msgspec.structs import replace

from watermark.rules import fleet, server_clock
from watermark.rules.presence import TIMEOUT
from watermark.rules.presence_batch import CAUSES, Fold, Prior, fold
from watermark.rules.presence_rollup import (
    DAY_MS,
    MINUTE_MS,
    Minute,
    arrival_ms,
    day_of,
    expire_in_s,
    format_peak,
    parse_peaks,
    raise_peaks,
    roll,
)
from watermark.rules.windows import next_watermark
from watermark.schema.config import Config
from watermark.schema.keys import KeySchema
from watermark.schema.records import (
    ClockRecord,
    CommitEntry,
    OnlineBatch,
    PresencePart,
    PresenceRecord,
    PresenceStateRecord,
)
from watermark.schema.shards import shard_of
from watermark.store import redis_conn
from watermark.store.commit import Params, guarded, queue_packed, records_kept, replicated
from watermark.store.history_store import queue_minute

HOUR_MS = 3_600_000
_V = TypeVar("_V")


@dataclass(frozen=True)
class PresenceEvents:
    """One batch's accepted events for the online view, any order: ``entry`` orders them by arrival,
    ``kind`` holds :data:`watermark.rules.presence_batch.KIND_CODES`."""

    server: np.ndarray
    player: np.ndarray
    event_us: np.ndarray
    entry: np.ndarray
    kind: np.ndarray
    ingest_ms: np.ndarray | None = None
    """Arrival (the stream entry ID's milliseconds, Redis' clock): runs a silent server's clock on
    (:mod:`watermark.rules.server_clock`). None: unknown (as if every event arrived at once)."""

    @classmethod
    def empty(cls) -> PresenceEvents:
        return cls(np.array([], object), np.array([], object), np.array([], np.int64), np.array([], np.int64),
                   np.array([], np.int8), np.array([], np.int64))

    def by_server(self) -> dict[str, np.ndarray]:
        """Each server's events as indices, in batch order: one hash and one stable sort for the batch (a
        comparison per server was O(servers x events): 66 ms a batch with 300 servers)."""
        if not len(self.server):
            return {}
        encoded = pc.dictionary_encode(pa.array(self.server, pa.string()))
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        order = np.argsort(codes, kind="stable")
        ends = np.cumsum(np.bincount(codes, minlength=len(encoded.dictionary))).tolist()
        return {name: order[a:b] for name, a, b in zip(encoded.dictionary.to_pylist(), [0, *ends[:-1]], ends,
                                                        strict=True)}

    def arrivals(self) -> np.ndarray:
        return self.ingest_ms if self.ingest_ms is not None else np.zeros(len(self.event_us), np.int64)

    def newest_arrival_ms(self) -> int | None:
        """The newest arrival among the events (None: there is none)."""
        return int(self.arrivals().max()) if len(self.event_us) else None


@dataclass(frozen=True)
class PresenceBatch:
    batch_id: int
    watermark_ms: int  # in force for the batch: events at or below it are late
    batch_ts_ms: int
    end_id: str
    events: PresenceEvents
    delay_ms: int
    next_watermark_ms: int | None = None  # per-server pipelines: Spark's combined one, from the sink's model
    newest_arrival_ms: int | None = None
    """The newest arrival of the whole batch, when ``events`` are a part of it (a group of servers folded apart):
    a server with no event in the batch runs its clock on to it (:mod:`watermark.rules.server_clock`), the one
    thing a server's fold takes from the others'. None: the newest of ``events``."""
    missed: bool = False
    """Batches before this one never reached the fold (a group down longer than the handover keeps them, or its
    share gone): the view is partial from here, as after a loss."""
    consumed: tuple[str, ...] = ()
    """Keys the commit deletes in its transaction: the group's share of the batch, handed over by the job."""

    def record(self, groups: int, timeout_ms: int) -> OnlineBatch:
        """The batch's own record, as the job hands it over to ``groups`` groups and as each group's part carries it
        (decision 0020)."""
        newest = self.newest_arrival_ms if self.newest_arrival_ms is not None else self.events.newest_arrival_ms()
        return OnlineBatch(batch=self.batch_id, groups=groups, watermark_ms=self.watermark_ms,
                           batch_ts_ms=self.batch_ts_ms, end_id=self.end_id, delay_ms=self.delay_ms,
                           timeout_ms=timeout_ms, next_watermark_ms=self.next_watermark_ms, newest_arrival_ms=newest)

    @classmethod
    def of(cls, record: OnlineBatch, events: PresenceEvents, missed: bool = False,
           consumed: tuple[str, ...] = ()) -> PresenceBatch:
        """A group's share of a batch handed over: the batch's record and the group's events."""
        return cls(record.batch, record.watermark_ms, record.batch_ts_ms, record.end_id, events, record.delay_ms,
                   record.next_watermark_ms, record.newest_arrival_ms, missed, consumed)


@dataclass(frozen=True)
class PlayerTimes:
    """Players (``names``, str) with the event time (us) of each one's latest event applied, as arrays: what a
    server's hash gets written (:func:`watermark.store.commit.queue_packed`)."""

    names: np.ndarray
    us: np.ndarray

    def __len__(self) -> int:
        return len(self.names)


class _PlayerIndex:
    """One server's players -> their slots: a dict (every player), and for a server whose batches are large a pandas
    index beside it. A large batch's look-up is then a hash probe per event in C (the index keeps its hash table
    between calls) rather than a Python dict call each: about 30 ms a batch of 50,000 events among 500,000 players
    (``bench/driver_costs.py``). A small one (a server of many, at 300 servers) stays with the dict, where a pandas
    call would cost more than its few look-ups. Players added since the index was built are found in the dict, and
    are folded in once they are an eighth of it: building costs O(1) a new player, amortised."""

    BULK = 512
    """Look-ups a batch needs before the index is used (and built)."""

    def __init__(self) -> None:
        self.slot: dict[str, int] = {}
        self.index: pd.Index | None = None
        self.index_slots = np.zeros(0, np.int64)  # by position in ``index``

    def find(self, players: np.ndarray) -> np.ndarray:
        """Each player's slot, -1 for one not found: new, or added since the index was built (the caller asks
        :attr:`slot`, as for a new player)."""
        if len(players) < self.BULK:
            get = self.slot.get
            return np.array([get(p, -1) for p in players.tolist()], np.int64)
        if self.index is None or len(self.slot) - len(self.index) > max(1024, len(self.index) // 8):
            self.index = pd.Index(list(self.slot), dtype=object)
            self.index_slots = np.fromiter(self.slot.values(), np.int64, len(self.slot))
        out = np.full(len(players), -1, np.int64)
        pos = self.index.get_indexer(players) if len(self.index) else out
        hit = pos >= 0
        out[hit] = self.index_slots[pos[hit]]
        return out


class PlayerTable:
    """Every player the rule still keeps, of every server: online, or logged out and kept until the watermark
    passes the logout. Arrays by slot (``server`` holds each slot's server, a code into ``servers``), so a batch
    of any number of servers is folded, and every server expired against its own watermark, in a few array
    operations, without a Python pass per server or per player (one per server cost about 2 ms a batch each at
    300 servers: ``bench/driver_costs.py``). A player keeps their slot for the life of the process."""

    SLACK = 4_096
    """Slots and codes past twice what the table keeps before :meth:`outgrown` says so."""

    def __init__(self) -> None:
        self.servers: list[str] = []
        self.code: dict[str, int] = {}
        self.slot: dict[str, _PlayerIndex] = {}  # server -> its players' slots
        self.size = 0  # slots in use
        self.names = np.zeros(0, object)  # each slot's player
        self.server = np.zeros(0, np.int64)
        self.known = np.zeros(0, bool)
        self.online = np.zeros(0, bool)
        self.last_us = np.zeros(0, np.int64)

    def code_of(self, server: str) -> int:
        code = self.code.get(server)
        if code is None:
            code = self.code[server] = len(self.servers)
            self.servers.append(server)
            self.slot[server] = _PlayerIndex()
        return code

    def slots_of(self, server: str, players: np.ndarray | Sequence[str]) -> np.ndarray:
        code = self.code_of(server)
        index = self.slot[server]
        players = np.asarray(players, object)
        out = index.find(players)
        fresh = np.flatnonzero(out < 0)
        if len(fresh):
            slot = index.slot
            for i in fresh.tolist():  # a batch's players are mostly known: this loop is for the new ones
                p = players[i]
                s = slot.get(p)
                if s is None:
                    s = slot[p] = self.size
                    self.size += 1
                out[i] = s
            self._grow()
            self.names[out[fresh]] = players[fresh]
            self.server[out[fresh]] = code
        return out

    def _grow(self) -> None:
        if self.size > len(self.known):
            grow = max(self.size - len(self.known), len(self.known))
            self.names = np.concatenate([self.names, np.full(grow, None, object)])
            self.server = np.concatenate([self.server, np.full(grow, -1, np.int64)])
            self.known = np.concatenate([self.known, np.zeros(grow, bool)])
            self.online = np.concatenate([self.online, np.zeros(grow, bool)])
            self.last_us = np.concatenate([self.last_us, np.zeros(grow, np.int64)])

    def load(self, server: str, online: Mapping[bytes, bytes], logged_out: Mapping[bytes, bytes]) -> None:
        for mapping, flag in ((online, True), (logged_out, False)):
            slots = self.slots_of(server, [k.decode() for k in mapping])
            self.known[slots], self.online[slots] = True, flag
            self.last_us[slots] = np.array([int(v) for v in mapping.values()], np.int64)

    def counts(self) -> np.ndarray:
        """Players online by server code."""
        on = self.known & self.online
        return np.bincount(self.server[on], minlength=len(self.servers))

    def count(self) -> int:
        return int((self.known & self.online).sum())

    def outgrown(self, servers: int) -> bool:
        """Whether the table holds far more than it keeps: slots of players long gone, codes of servers forgotten
        (a player keeps their slot, a server its code, for the table's life). Loaded again from Redis then, it
        holds only what the view keeps: its size is bounded by the live fleet and its players."""
        return self.size > 2 * int(self.known.sum()) + self.SLACK or len(self.servers) > 2 * servers + self.SLACK

    def entries(self, server: str, online: bool) -> PlayerTimes:
        code = self.code.get(server)
        return self.times(np.flatnonzero(self.known & (self.online == online) & (self.server == code)))

    def times(self, slots: np.ndarray) -> PlayerTimes:
        """The players of ``slots`` with the event time of their latest event applied."""
        return PlayerTimes(self.names[slots], self.last_us[slots])

    def by_server(self, slots: np.ndarray) -> dict[int, np.ndarray]:
        """``slots`` split by server code, each part in ascending slot order."""
        if not len(slots):
            return {}
        slots = np.sort(slots)
        codes = self.server[slots]
        order = np.argsort(codes, kind="stable")
        codes, slots = codes[order], slots[order]
        cut = np.flatnonzero(codes[1:] != codes[:-1]) + 1
        return {int(part[0]): s for part, s in zip(np.split(codes, cut), np.split(slots, cut), strict=True)}


@dataclass
class _ServerWrites:
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
    forget: bool = False  # the server is forgotten (watermark.rules.fleet.forgotten): its count goes


@dataclass(frozen=True)
class _BatchOf:
    """One server's share of a batch: its events (indices into the batch) and what the clock rule asks of them."""

    rows: np.ndarray
    newest_us: int  # the newest of its events, late ones too
    players: int  # distinct players among them
    now_ms: int  # the arrival of its newest event
    ahead_ms: int  # how far its events ran ahead of their arrival (rules.server_clock.ahead_ms)


def _shares(table: PlayerTable, ev: PresenceEvents) -> tuple[dict[str, _BatchOf], np.ndarray]:
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
    return len(set(values.tolist())) if len(values) < _PlayerIndex.BULK else len(pd.unique(values))


def _decide_servers(mirror: PresenceMirror, ev: PresenceEvents, before: Mapping[str, ClockRecord], delay_ms: int,
                    timeout_ms: int, now_ingest: int | None = None,
                    retire_after_ms: int = Config.retire_after_ms) -> tuple[dict[str, _ServerWrites],
                                                                            dict[str, ClockRecord]]:
    """Each server's players against its own clock (:mod:`watermark.rules.server_clock`), never another's: the
    batch is folded into the table once, each player against their own server's watermark in force, each
    server's clock moves with what its players did, and every server's players expire against its next
    watermark, all in whole-table array operations; only the clocks (a few numbers a server) are decided one
    server at a time. Only the servers the view still keeps are decided (a clock, a player, or events in the batch:
    :mod:`watermark.rules.fleet`), so a batch costs what the live fleet costs, not every name ever seen."""
    t = mirror.players
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
    _life(t, servers, writes, shares, before, after, timed_out, now_ingest, retire_after_ms)
    return writes, after


def _life(t: PlayerTable, servers: Sequence[str], writes: Mapping[str, _ServerWrites],
          shares: Mapping[str, _BatchOf], before: Mapping[str, ClockRecord], after: dict[str, ClockRecord],
          timed_out: np.ndarray, now_ingest: int | None, retire_after_ms: int) -> None:
    """Each server's drained mark moved on (:func:`watermark.rules.fleet.drained_after`: its players counted as
    the batch's events left them, before the expiry that follows), and the servers the view forgets dropped from
    the clocks and marked in their writes (:func:`watermark.rules.fleet.forgotten`)."""
    n = len(t.servers)
    expired = np.bincount(t.server[timed_out], minlength=n)
    kept = np.bincount(t.server[t.known], minlength=n)
    for server in servers:
        code, share, clock = t.code[server], shares.get(server), after.get(server)
        if fleet.forgotten(had_events=share is not None, players_kept=int(kept[code]),
                           heard_ms=clock.heard_ms if clock is not None else None, now_ms=now_ingest,
                           retire_after_ms=retire_after_ms):
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
    """Each server's clock set back before the batch is applied (:func:`watermark.rules.server_clock.step_back`),
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
    """Each clock moved with what its players did (:func:`watermark.rules.server_clock.advance`): the clocks after,
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
            timed_out: np.ndarray) -> dict[str, _ServerWrites]:
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
        writes[server] = _ServerWrites(
            online=t.times(on.get(code, none)), logged_out=t.times(out.get(code, none)),
            drop_online=names[was_on.get(code, none)].tolist(),
            drop_logged_out=names[was_out.get(code, none)].tolist(),
            count=counts[code], causes={CAUSES[c]: int(k) for c, k in sorted(
                ((c, k) for c, k in enumerate(by_cause[code].tolist()) if k), key=lambda ck: CAUSES[ck[0]])},
            came_online=came[code], went_offline=went[code])
    return writes


def _follow_a_forward_step(t: PlayerTable, code: int, before: ClockRecord | None, after: ClockRecord | None,
                           now_ms: int | None, timeout_ms: int) -> np.ndarray:
    """The server's slots moved forward with a clock set forward (:func:`watermark.rules.server_clock.forward_step`)."""
    if before is None or after is None or now_ms is None:
        return np.zeros(0, np.int64)
    step, bound = server_clock.forward_step(before, after, now_ms, timeout_ms)
    if not step:
        return np.zeros(0, np.int64)
    slots = np.flatnonzero(t.known & (t.server == code) & (t.last_us <= bound))
    t.last_us[slots] += step
    return slots


class PresenceMirror:
    """The job's copy of every player's state, one :class:`PlayerTable` for all servers, as of ``batch``.

    Redis holds the durable copy (two hashes per server); the mirror spares each batch reading its players'
    state back, and when Redis comes back empty it still has what Redis lost, so the next batch writes the
    whole view again. It is trusted only while it reflects the batch Redis last committed; otherwise (a
    restart, a failed commit) it is loaded from Redis first."""

    def __init__(self) -> None:
        self.players = PlayerTable()
        self.batch: int | None = None  # the last committed batch it reflects; None: nothing yet
        self.valid = True
        self.clocks: dict[str, ClockRecord] = {}  # each server's clock as of ``batch``

    def load(self, client: redis.Redis, keys: KeySchema, servers: Sequence[str], batch: int | None) -> None:
        self.players = PlayerTable()
        pipe = client.pipeline(transaction=False)
        for server in servers:
            pipe.hgetall(keys.online(server))
            pipe.hgetall(keys.logged_out(server))
        replies = iter(pipe.execute())
        for server in servers:
            self.players.load(server, next(replies), next(replies))
        self.batch, self.valid = batch, True


@dataclass(frozen=True)
class Group:
    """The servers one fold of the online view keeps (decision 0020): group ``index`` of ``of``, a server in group
    ``shard_of(server, of)``, the CRC-32 of decision 0017, so that with ``of`` dividing the input's shards each
    shard's servers are in one group. One group of one (:data:`ALL`): every server, the job's own fold."""

    index: int = 0
    of: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.of:
            raise ValueError(f"group {self.index} of {self.of}: a group is numbered from 0 to {self.of - 1}")

    def owns(self, server: str) -> bool:
        return group_of(server, self.of) == self.index


def group_of(server: str, groups: int) -> int:
    """The group of ``groups`` that folds ``server``'s players."""
    return shard_of(server, groups)


ALL = Group()


def commit_presence(client: redis.Redis, keys: KeySchema, b: PresenceBatch, params: Params, timeout_ms: int,
                    mirror: PresenceMirror | None = None,
                    now_ms: Callable[[], int] = lambda: int(time.time() * 1000), group: Group = ALL) -> bool:
    """Apply one batch to ``group``'s servers once (guarded by the group's own ``last_batch``), then merge into the
    online view every batch all groups have committed (:func:`merge_ready`). Returns False when the group had
    committed it already. ``b.events``: the group's share of the batch (with ``b.newest_arrival_ms`` the whole
    batch's newest arrival when there are other groups).

    The batch's events are folded into the players' state (:func:`watermark.rules.presence_batch.fold`); every
    other online player whose time + timeout the next watermark reaches times out, and logouts it passes are
    forgotten. The next watermark is the pipeline's: ``max(in force, running max event - delay)`` from the
    running maximum kept here, or the per-server one handed over. When Redis came back empty while ``mirror``
    still holds the state, the whole view is written again and the loss is recorded (``lost_at_batch``). With
    ``params.wait_replicas`` it is done only once that many replicas have it (:func:`watermark.store.commit.replicated`:
    :class:`redis_conn.ReplicasBehind` otherwise, and run again it finds itself applied and waits again)."""
    mirror = mirror if mirror is not None else PresenceMirror()
    try:
        applied = _commit_group(client, keys, b, params, timeout_ms, mirror, group)
    except BaseException:
        mirror.valid = False  # it may be ahead of Redis now: load it again before the next batch
        raise
    merge_ready(client, keys, group.of, params, now_ms)
    # As the pipeline's commit (decision 0023): done once ``params.wait_replicas`` replicas have the group's commit
    # and the merge after it, applied now or found applied; else ReplicasBehind and the batch is not done.
    replicated(client, keys.presence_group(group.index, group.of), b.batch_id, params,
               f"the online view's commit of batch {b.batch_id} (group {group.index + 1} of {group.of})")
    return applied


@dataclass
class _Rollups:
    """What one batch adds to the online view over time, at its arrival (decision 0012): the minute it closes
    (into the last day's minutes and every series' day record, ``watermark.store.history_store``), the day's
    peaks and the highest ever it raises, per server, region and in total. Read while the commit WATCHes, queued
    in its transaction."""

    at_ms: int
    peaks: dict[str, tuple[int, int]]
    ever: dict[str, tuple[int, int]]
    regions: dict[str, str]
    closed: Minute | None = None
    raised: dict[str, tuple[int, int]] = field(default_factory=dict)
    raised_ever: dict[str, tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def read(cls, pipe: redis.client.Pipeline, keys: KeySchema, at_ms: int) -> _Rollups:
        return cls(at_ms, parse_peaks(pipe.hgetall(keys.presence_peak(day_of(at_ms)))),
                   parse_peaks(pipe.hgetall(keys.presence_peak_ever)),
                   {k.decode(): v.decode() for k, v in pipe.hgetall(keys.regions).items()})

    def add(self, prior_minute: str | None, counts: Mapping[str, int],
            causes: Mapping[str, Mapping[str, int]]) -> Minute:
        """The batch into the open minute and the peaks; the open minute after it."""
        self.closed, open_minute = roll(Minute.from_json(prior_minute) if prior_minute else None, self.at_ms,
                                        counts, causes, self.regions)
        self.raised = raise_peaks(self.peaks, counts, self.at_ms, self.regions)
        self.raised_ever = raise_peaks(self.ever, counts, self.at_ms, self.regions)
        return open_minute

    def queue(self, pipe: redis.client.Pipeline, keys: KeySchema, params: Params, record: PresenceRecord,
              now_ms: int) -> None:
        """The batch's history record, the minute it closed, the peaks it raised."""
        closed, day = self.closed, day_of(self.at_ms)
        if closed is not None:
            pipe.zadd(keys.presence_minutes, {closed.to_json(): closed.minute_ms})
            pipe.zremrangebyscore(keys.presence_minutes, "-inf", f"({closed.minute_ms - DAY_MS}")
            pipe.expire(keys.presence_minutes, params.ttl_s)
            queue_minute(pipe, keys, closed, self.regions,
                         expire_in_s(day_of(closed.minute_ms), params.history_days, now_ms, params.ttl_s))
            # the highest ever outlives every day it could come from; a namespace no job writes goes in the end
            pipe.expire(keys.presence_peak_ever, max(params.ttl_s, (params.history_days + 1) * DAY_MS // 1000))
        if self.raised:
            pipe.hset(keys.presence_peak(day), mapping={k: format_peak(*v) for k, v in self.raised.items()})
            pipe.expire(keys.presence_peak(day), expire_in_s(day, params.history_days, now_ms, params.ttl_s))
        if self.raised_ever:
            pipe.hset(keys.presence_peak_ever, mapping={k: format_peak(*v) for k, v in self.raised_ever.items()})
        batch_id = record.batch
        encoded = record.encode()
        pipe.zadd(keys.presence_history, {encoded: batch_id})
        pipe.zremrangebyscore(keys.presence_history, "-inf", batch_id - records_kept(params, len(encoded)))
        pipe.expire(keys.presence_history, params.ttl_s)


_GROUP_FIELDS = ("last_batch", "clocks")


def _commit_group(client: redis.Redis, keys: KeySchema, b: PresenceBatch, params: Params, timeout_ms: int,
                  mirror: PresenceMirror, group: Group) -> bool:
    """The group's fold of the batch: its players written, its own guard and clocks, and its part of the batch
    (:class:`watermark.schema.records.PresencePart`) for the merge, in one transaction."""
    ev = b.events
    key, counts_key = keys.presence_group(group.index, group.of), keys.presence_group_counts(group.index, group.of)
    with guarded(client, key, b.batch_id, counts_key) as pipe:
        prior = _group_prior(pipe, keys, group) if pipe is not None else None  # None: committed, by the guard
        if prior is None or (prior.last_batch is not None and prior.last_batch >= b.batch_id):
            mirror.valid = False
            return False
        committed = prior.last_batch
        lost = committed is None and mirror.batch is not None and mirror.valid
        # Redis has no view and the job no copy, yet batches ran before (a restart after Redis came back
        # empty): rebuilt from new events only, so partial until every online player has sent one more.
        rebuilt = committed is None and not lost and b.batch_id > 0
        if not lost and (not mirror.valid or mirror.batch != committed):
            names = pipe.hkeys(counts_key) or pipe.hkeys(keys.presence_counts)  # the view's: before groups
            mirror.load(client, keys, [s for s in (n.decode() for n in names) if group.owns(s)], committed)
        mirror.valid = False  # until the transaction is in
        writes, clocks = _decide_servers(mirror, ev, mirror.clocks if lost else prior.clocks, b.delay_ms,
                                         timeout_ms, b.newest_arrival_ms, params.retire_after_ms)
        for w in writes.values():
            w.rewrite = lost
        batch_servers = set(ev.server.tolist())
        part = PresencePart(
            group=group.index, of=b.record(group.of, timeout_ms),
            counts={s: w.count for s, w in writes.items() if not w.forget},
            forgotten=tuple(s for s, w in writes.items() if w.forget),
            causes={s: w.causes for s, w in writes.items() if w.causes},
            came_online=sum(w.came_online for w in writes.values()),
            went_offline=sum(w.went_offline for w in writes.values()),
            ahead_ms={s: c.ahead_ms for s, c in clocks.items() if c.ahead_ms > 0 and s in batch_servers},
            clocks=clocks, newest_event_us=int(ev.event_us.max()) if len(ev.event_us) else None, lost=lost,
            rebuilt=rebuilt or b.missed)
        pipe.multi()
        _apply(pipe, keys, writes, mirror, params.ttl_s, counts_key)
        pipe.hset(key, mapping=PresenceStateRecord(last_batch=b.batch_id, clocks=clocks).to_hash(*_GROUP_FIELDS))
        pipe.expire(key, params.ttl_s)
        parts = keys.presence_parts(b.batch_id)
        pipe.hset(parts, str(group.index), part.encode())
        pipe.expire(parts, params.ttl_s)
        pipe.zadd(keys.presence_parts_index, {str(b.batch_id): b.batch_id})
        pipe.expire(keys.presence_parts_index, params.ttl_s)
        if b.consumed:
            pipe.delete(*b.consumed)
        redis_conn.execute(pipe)
    # valid unless it outgrew what the view keeps: then loaded again from Redis before the next batch
    mirror.batch, mirror.valid, mirror.clocks = b.batch_id, not mirror.players.outgrown(len(clocks)), clocks
    return True


def last_committed(client: redis.Redis, keys: KeySchema, group: Group) -> int | None:
    """The last batch ``group`` committed (the online view's, for a group without a record of its own)."""
    return _group_record(client, keys, group, ("last_batch",)).last_batch


def _group_prior(pipe: redis.client.Pipeline, keys: KeySchema, group: Group) -> PresenceStateRecord:
    """The group's guard and its servers' clocks (read under the commit's WATCH)."""
    rec = _group_record(pipe, keys, group, _GROUP_FIELDS)
    return PresenceStateRecord(last_batch=rec.last_batch,
                               clocks={s: c for s, c in rec.clocks.items() if group.owns(s)})


def _group_record(reader: redis.Redis | redis.client.Pipeline, keys: KeySchema, group: Group,
                  fields: Sequence[str]) -> PresenceStateRecord:
    """``fields`` (``last_batch`` first) of the group's record; a group without a record of its own starts where the
    online view is (a view committed before groups, or by another number of them: its servers' clocks are in it)."""
    key = keys.presence_group(group.index, group.of)
    raw = reader.hmget(key, fields)
    if raw[0] is None:
        key = keys.presence_state
        raw = reader.hmget(key, fields)
    return PresenceStateRecord.from_hash(dict(zip(fields, raw, strict=True)), key)


def merge_ready(client: redis.Redis, keys: KeySchema, groups: int, params: Params,
                now_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> list[int]:
    """Merge into the online view, in batch order, every batch whose parts all ``groups`` have committed: its record,
    its minute, its peaks, the counts of every server and the view's state, in one transaction guarded by the view's
    own ``last_batch`` (so any group may merge, and a merge raced or repeated is applied once). Batch ``N`` is
    merged only once every group has committed it, and so ``N - 1`` too: merges go in order. Returns the batches
    merged."""
    merged: list[int] = []
    while (batch_id := _merge_next(client, keys, groups, params, now_ms)) is not None:
        merged.append(batch_id)
    return merged


_VIEW_FIELDS = ("last_batch", "max_event_us", "lost_at_batch", "minute", "partial_until_ms")


def _merge_next(client: redis.Redis, keys: KeySchema, groups: int, params: Params,
                now_ms: Callable[[], int]) -> int | None:
    """Merge the lowest batch with parts, if every group's is in; None when it is not (or there is none)."""
    home = redis_conn.home(client, keys.presence_state)
    while True:
        lowest = home.zrange(keys.presence_parts_index, 0, 0, withscores=True)
        if not lowest:
            return None
        member, batch_id = lowest[0][0], int(lowest[0][1])
        parts_key = keys.presence_parts(batch_id)
        try:
            with home.pipeline(transaction=True) as pipe:
                pipe.watch(keys.presence_state, parts_key)
                # parts of groups past the number now: a number changed under a batch not merged (not counted)
                raw = {k: v for k, v in pipe.hgetall(parts_key).items() if int(k) < groups}
                prior = PresenceStateRecord.from_hash(
                    dict(zip(_VIEW_FIELDS, pipe.hmget(keys.presence_state, _VIEW_FIELDS), strict=True)),
                    keys.presence_state)
                done = prior.last_batch is not None and prior.last_batch >= batch_id
                merge = not done and len(raw) == groups
                if not done and not merge and not _never_whole(pipe, keys, groups, raw, batch_id):
                    pipe.unwatch()
                    return None
                if merge:
                    parts = sorted((PresencePart.decode(v, f"{parts_key} {k.decode()}") for k, v in raw.items()),
                                   key=lambda p: p.group)
                    _merge(pipe, keys, parts, prior, params, now_ms)
                else:  # merged already, or never whole: its parts go
                    pipe.multi()
                pipe.delete(parts_key)
                pipe.zrem(keys.presence_parts_index, member)
                redis_conn.execute(pipe)
        except redis.WatchError:
            continue  # another group merged it, or added its part: look again
        if merge:
            return batch_id


def _never_whole(pipe: redis.client.Pipeline, keys: KeySchema, groups: int, raw: Mapping[bytes, bytes],
                 batch_id: int) -> bool:
    """A group without a part in the batch has committed a later one: its part can never come (Redis lost it with
    the rest, the group went on). The batch is dropped; the groups' parts after a loss say so in the view."""
    for g in range(groups):
        if str(g).encode() not in raw:
            last = pipe.hget(keys.presence_group(g, groups), "last_batch")
            if last is not None and int(last) >= batch_id:
                return True
    return False


def _merge(pipe: redis.client.Pipeline, keys: KeySchema, parts: Sequence[PresencePart], prior: PresenceStateRecord,
           params: Params, now_ms: Callable[[], int]) -> None:
    """Queue the merge of one batch's parts (the pipeline is in ``multi()`` after this call's reads)."""
    first = parts[0].of  # the batch's own record is the same in every part
    rollups = _Rollups.read(pipe, keys, arrival_ms(first.end_id, first.batch_ts_ms))
    known = [v for v in (prior.max_event_us, *(p.newest_event_us for p in parts)) if v is not None]
    running = max(known) if known else None
    next_wm = (first.next_watermark_ms if first.next_watermark_ms is not None
               else next_watermark(first.watermark_ms, running, first.delay_ms))
    next_wm = max(first.watermark_ms, next_wm)
    partial_until = prior.partial_until_ms
    if any(p.rebuilt for p in parts):
        newest_ms = running // 1000 if running is not None else next_wm + first.delay_ms
        partial_until = newest_ms + first.timeout_ms
    counts, causes = _by_server(p.counts for p in parts), _by_server(p.causes for p in parts)
    record = PresenceRecord(batch=first.batch, watermark_ms=next_wm, in_force_ms=first.watermark_ms,
                            batch_ts_ms=first.batch_ts_ms, counts=counts, online=sum(p.came_online for p in parts),
                            offline=sum(p.went_offline for p in parts), causes=causes,
                            ahead_ms=_by_server(p.ahead_ms for p in parts))
    open_minute = rollups.add(prior.minute, counts, causes)
    pipe.multi()
    if forgotten := [s for p in parts for s in p.forgotten]:  # its highest ever stays: a long-lived server empty
        pipe.hdel(keys.presence_counts, *forgotten)  # at night is forgotten too, and keeps its record
    if counts:
        pipe.hset(keys.presence_counts, mapping=counts)
        pipe.expire(keys.presence_counts, params.ttl_s)
    rollups.queue(pipe, keys, params, record, now_ms())
    lost = any(p.lost or p.rebuilt for p in parts)
    pipe.hset(keys.presence_state, mapping=PresenceStateRecord(
        last_batch=first.batch, watermark_ms=next_wm, in_force_ms=first.watermark_ms, batch_ts_ms=first.batch_ts_ms,
        timeout_ms=first.timeout_ms, updated_ms=now_ms(), max_event_us=running, committed_id=first.end_id,
        lost_at_batch=first.batch if lost else prior.lost_at_batch, minute=open_minute.to_json(),
        partial_until_ms=partial_until, clocks=_by_server(p.clocks for p in parts)).to_hash())
    pipe.xadd(keys.presence_commits, CommitEntry(first.batch, first.end_id).fields(), maxlen=1000, approximate=True)


def _by_server(maps: Iterable[Mapping[str, _V]]) -> dict[str, _V]:
    """The groups' maps of their servers as one, in server order: the order one fold of every server writes."""
    return dict(sorted((s, v) for m in maps for s, v in m.items()))


def _apply(pipe: redis.client.Pipeline, keys: KeySchema, writes: dict[str, _ServerWrites], mirror: PresenceMirror,
           ttl_s: int, counts_key: str) -> None:
    expire = redis_conn.Bulk()  # a server's two EXPIREs as one script for all: 600 commands at 300 servers
    gone = [server for server, w in writes.items() if w.forget]
    if gone:  # no player kept: its hashes are empty already; its count goes
        pipe.hdel(counts_key, *gone)
    for server, w in writes.items():
        if w.forget:
            continue
        on_key, out_key = keys.online(server), keys.logged_out(server)
        if w.rewrite:
            pipe.delete(on_key, out_key)
            online, logged_out = mirror.players.entries(server, True), mirror.players.entries(server, False)
        else:
            online, logged_out = w.online, w.logged_out
            if w.drop_online:
                pipe.hdel(on_key, *w.drop_online)
            if w.drop_logged_out:
                pipe.hdel(out_key, *w.drop_logged_out)
        if len(online):
            queue_packed(pipe, "HSET", on_key, online.names, online.us)
        if len(logged_out):
            queue_packed(pipe, "HSET", out_key, logged_out.names, logged_out.us)
        expire.expire(on_key)
        expire.expire(out_key)
    expire.queue(pipe, ttl_s)
    if len(writes) > len(gone):
        pipe.hset(counts_key, mapping={s: w.count for s, w in writes.items() if not w.forget})
        pipe.expire(counts_key, ttl_s)


@dataclass(frozen=True)
class OnlinePoint:
    """Online counts per server after one batch."""

    batch: int
    watermark_ms: int
    batch_ts_ms: int
    counts: dict[str, int]
    online: int  # transitions to online in the batch
    offline: int

    @classmethod
    def from_json(cls, raw: str | bytes) -> OnlinePoint:
        r = PresenceRecord.decode(raw, "a member of the online view's history")
        return cls(batch=r.batch, watermark_ms=r.watermark_ms, batch_ts_ms=r.batch_ts_ms, counts=dict(r.counts),
                   online=r.online, offline=r.offline)


@dataclass(frozen=True)
class OnlineView:
    last_batch: int
    watermark_ms: int
    timeout_ms: int
    updated_ms: int
    batch_ts_ms: int
    counts: dict[str, int]
    history: tuple[OnlinePoint, ...]
    minutes: tuple[Minute, ...] = ()  # the last hour's minutes of arrival time, the open one last
    peaks: dict[str, tuple[int, int]] = field(default_factory=dict)  # today's: server, region or TOTAL -> (count, at)
    peaks_ever: dict[str, tuple[int, int]] = field(default_factory=dict)  # the highest ever, the same keys
    lost_at_batch: int | None = None  # Redis came back empty before this batch: history before it is gone
    partial_until_ms: int | None = None  # rebuilt from new events after a loss: whole once the watermark is here
    clocks: dict[str, ClockRecord] = field(default_factory=dict)  # each server's own clock (rules.server_clock)

    @property
    def partial(self) -> bool:
        """Rebuilt after Redis and the job lost the state together; players who have not sent an event since
        are missing until the watermark passes :attr:`partial_until_ms` (then they would have timed out)."""
        return self.partial_until_ms is not None and self.watermark_ms < self.partial_until_ms

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def queue_online_reads(pipe: redis.client.Pipeline, keys: KeySchema, last: int, now_ms: int) -> None:
    """Six replies, parsed by :func:`online_view`; lets a caller share one round trip. A fixed number of
    commands, whatever the number of players."""
    pipe.hgetall(keys.presence_state)
    pipe.hgetall(keys.presence_counts)
    pipe.zrange(keys.presence_history, -last, -1)
    pipe.zrangebyscore(keys.presence_minutes, now_ms - now_ms % MINUTE_MS - HOUR_MS, "+inf")
    pipe.hgetall(keys.presence_peak(day_of(now_ms)))
    pipe.hgetall(keys.presence_peak_ever)


def online_view(state: Mapping[bytes, bytes], counts: Mapping[bytes, bytes], history: Sequence[bytes],
                minutes: Sequence[bytes] = (), peaks: Mapping[bytes, bytes] | None = None,
                peaks_ever: Mapping[bytes, bytes] | None = None) -> OnlineView | None:
    """None until the online view has committed a batch."""
    rec = PresenceStateRecord.from_hash(state, "the online view's state")
    if rec.last_batch is None:
        return None
    closed = [Minute.from_json(m) for m in minutes]
    open_minute = [Minute.from_json(rec.minute)] if rec.minute else []
    return OnlineView(
        last_batch=rec.last_batch, watermark_ms=rec.watermark_ms, timeout_ms=rec.timeout_ms,
        updated_ms=rec.updated_ms, batch_ts_ms=rec.batch_ts_ms,
        counts={k.decode(): int(v) for k, v in sorted(counts.items())},
        history=tuple(OnlinePoint.from_json(m) for m in history),
        minutes=tuple([*closed, *(m for m in open_minute if not closed or m.minute_ms > closed[-1].minute_ms)]),
        peaks=parse_peaks(peaks or {}), peaks_ever=parse_peaks(peaks_ever or {}), lost_at_batch=rec.lost_at_batch,
        partial_until_ms=rec.partial_until_ms,
        clocks=dict(rec.clocks),
    )


def read_online(client: redis.Redis, keys: KeySchema, last: int = 1_000,
                now_ms: int | None = None) -> OnlineView | None:
    pipe = client.pipeline(transaction=False)
    queue_online_reads(pipe, keys, last, int(time.time() * 1000) if now_ms is None else now_ms)
    return online_view(*pipe.execute())
