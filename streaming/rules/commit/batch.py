"""A batch as the Spark side hands it to the commit: each window's counts, each server's input figures, the
quarantined entries and the late events kept (:class:`BatchSummary`). Built by :mod:`streaming.spark.local_agg`,
planned by :func:`streaming.rules.commit.plan.plan_commit`, written by :func:`streaming.store.commit.commit_batch`.
Pure: no Spark, no Redis.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streaming.rules.late import LateEvent
from streaming.schema.keys import WindowKey
from streaming.schema.records import NameGuardRecord, ServerRecord


@dataclass
class WindowAgg:
    start_ms: int
    end_ms: int
    server: str
    events: int = 0
    dropped: int = 0
    late: int = 0
    players: int = 0  # accepted players the batch added to the window (streaming.spark.window_players)

    @property
    def key(self) -> WindowKey:
        return WindowKey(self.start_ms, self.end_ms, self.server)


@dataclass(frozen=True)
class BadRow:
    entry_id: str
    reason: str
    detail: str
    raw: str
    shard: int = 0
    """The input shard it was read from: kept in that shard's dead stream under its entry ID."""


@dataclass
class BatchSummary:
    batch_id: int
    watermark_ms: int
    batch_ts_ms: int
    start_id: str
    end_id: str
    windows: list[WindowAgg]
    servers: dict[str, ServerRecord]
    bad: list[BadRow]
    server_watermarks: dict[str, int] | None = None  # per-server mode: Spark's per-input map after the batch
    server_heard_ms: dict[str, int] | None = None  # a lane following the fleet: when each of those last spoke
    next_watermark_ms: int | None = None  # per-server mode: the combined watermark for the next batch
    aggregation: str = "driver"  # where the batch was counted (the driver, since the source packs its rows)
    late_events: list[LateEvent] = field(default_factory=list)  # behind the watermark: kept in {ns}:late
    regions: dict[str, str] = field(default_factory=dict)  # each server's region, as its events carry it
    refused: tuple[str, ...] = ()  # new names the flood guard refused: their events are in `bad`
    refused_max_event_us: int | None = None  # ... whose times Spark's watermark saw all the same
    name_guard: NameGuardRecord | None = None  # the guard's minute after the batch (None: unchanged)

    @property
    def parsed(self) -> int:
        return sum(s.rows for s in self.servers.values())

    @property
    def ticks(self) -> int:
        return sum(s.ticks for s in self.servers.values())

    @property
    def input(self) -> int:
        return self.parsed + self.ticks + len(self.bad)

    @property
    def max_event_us(self) -> int | None:
        """The batch's newest event time, refused names' included: Spark's watermark had read them before the
        guard judged (``streaming.rules.fleet.admit``)."""
        times = [s.max_event_us for s in self.servers.values() if s.max_event_us is not None]
        return max([*times, self.refused_max_event_us] if self.refused_max_event_us is not None else times,
                   default=None)

    @property
    def min_event_us(self) -> int | None:
        return min((s.min_event_us for s in self.servers.values() if s.min_event_us is not None), default=None)


@dataclass(frozen=True)
class Added:
    """What one batch added to its windows' players (:func:`streaming.store.batch.window_players.read_added`)."""

    counts: dict[str, int]
    """Window member (:meth:`WindowKey.member`) -> players the batch added to it."""
    closed_ms: int
    """Windows ending at or below this are closed for every namespace: the partitions counted none of their players."""

    def of(self, wk: WindowKey) -> int:
        """The players the batch added to ``wk``; a window the partitions did not count and that is not closed
        fails the batch (its players would silently be none)."""
        n = self.counts.get(wk.member())
        if n is not None:
            return n
        if wk.end_ms <= self.closed_ms:
            return 0
        raise ValueError(f"window {wk.member()} has events in the batch but no count of its players: the source "
                         "must be read with preAggregate=true and windowPlayers naming the pipeline "
                         "(streaming.spark.query.source_options), whose partitions count them")


def no_players() -> Added:
    """For a read whose windows' players nobody needs (the online view's catch-up): every window counts none."""
    return Added({}, 1 << 62)
