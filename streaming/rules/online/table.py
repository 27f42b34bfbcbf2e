"""The online view's player table, and one batch's events for it, as arrays.

A batch's events come in as :class:`OnlineEvents`, the batch's own numbers with them as :class:`OnlineBatch`.
:class:`PlayerTable` holds every player the view keeps, of every server, one slot each. The job keeps the table
between batches, so a batch never reads its players' state back from Redis. :mod:`streaming.rules.online.decide`
folds a batch into the table; :mod:`streaming.store.online.commit` writes what changed. Pure: no Redis, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from streaming.schema.records import HandoffBatch


@dataclass(frozen=True)
class OnlineEvents:
    """One batch's accepted events for the online view, any order: ``entry`` orders them by arrival,
    ``kind`` holds :data:`streaming.rules.online.fold.KIND_CODES`."""

    server: np.ndarray
    player: np.ndarray
    event_us: np.ndarray
    entry: np.ndarray
    kind: np.ndarray
    ingest_ms: np.ndarray | None = None
    """Arrival (the stream entry ID's milliseconds, Redis' clock): runs a silent server's clock on
    (:mod:`streaming.rules.server_clock`). None: unknown (as if every event arrived at once)."""

    @classmethod
    def empty(cls) -> OnlineEvents:
        return cls(np.array([], object), np.array([], object), np.array([], np.int64), np.array([], np.int64),
                   np.array([], np.int8), np.array([], np.int64))

    def by_server(self) -> dict[str, np.ndarray]:
        """Each server's events as indices, in batch order: one hash and one stable sort for the batch (a
        comparison per server was O(servers x events): 66 ms a batch with 300 servers). The servers come in the
        order of their first event, as Arrow's dictionary encoding gave them (the rules import no pyarrow)."""
        if not len(self.server):
            return {}
        codes, names = pd.factorize(self.server)
        order = np.argsort(codes, kind="stable")
        ends = np.cumsum(np.bincount(codes, minlength=len(names))).tolist()
        return {name: order[a:b] for name, a, b in zip(names.tolist(), [0, *ends[:-1]], ends, strict=True)}

    def arrivals(self) -> np.ndarray:
        return self.ingest_ms if self.ingest_ms is not None else np.zeros(len(self.event_us), np.int64)

    def newest_arrival_ms(self) -> int | None:
        """The newest arrival among the events (None: there is none)."""
        return int(self.arrivals().max()) if len(self.event_us) else None


@dataclass(frozen=True)
class OnlineBatch:
    batch_id: int
    watermark_ms: int  # in force for the batch: events at or below it are late
    batch_ts_ms: int
    end_id: str
    events: OnlineEvents
    delay_ms: int
    next_watermark_ms: int | None = None  # per-server pipelines: Spark's combined one, from the sink's model
    newest_arrival_ms: int | None = None
    """The newest arrival of the whole batch, when ``events`` are a part of it (a group of servers folded apart):
    a server with no event in the batch runs its clock on to it (:mod:`streaming.rules.server_clock`), the one
    thing a server's fold takes from the others'. None: the newest of ``events``."""
    missed: bool = False
    """Batches before this one never reached the fold (a group down longer than the hand-off keeps them, or its
    share gone): the view is partial from here, as after a loss."""
    consumed: tuple[str, ...] = ()
    """Keys the commit deletes in its transaction: the group's share of the batch, handed off by the job."""

    def record(self, groups: int, timeout_ms: int) -> HandoffBatch:
        """The batch's own record, as the job hands it over to ``groups`` groups and as each group's part carries it
        (decision 0020)."""
        newest = self.newest_arrival_ms if self.newest_arrival_ms is not None else self.events.newest_arrival_ms()
        return HandoffBatch(batch=self.batch_id, groups=groups, watermark_ms=self.watermark_ms,
                           batch_ts_ms=self.batch_ts_ms, end_id=self.end_id, delay_ms=self.delay_ms,
                           timeout_ms=timeout_ms, next_watermark_ms=self.next_watermark_ms, newest_arrival_ms=newest)

    @classmethod
    def of(cls, record: HandoffBatch, events: OnlineEvents, missed: bool = False,
           consumed: tuple[str, ...] = ()) -> OnlineBatch:
        """A group's share of a batch handed off: the batch's record and the group's events."""
        return cls(record.batch, record.watermark_ms, record.batch_ts_ms, record.end_id, events, record.delay_ms,
                   record.next_watermark_ms, record.newest_arrival_ms, missed, consumed)


@dataclass(frozen=True)
class PlayerTimes:
    """Players (``names``, str) with the event time (us) of each one's latest event applied, as arrays: what a
    server's hash gets written (:func:`streaming.store.batch.arrow_pack.queue_packed`)."""

    names: np.ndarray
    us: np.ndarray

    def __len__(self) -> int:
        return len(self.names)


class PlayerIndex:
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
        self.slot: dict[str, PlayerIndex] = {}  # server -> its players' slots
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
            self.slot[server] = PlayerIndex()
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
