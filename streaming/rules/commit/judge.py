"""A batch judged: its records (:class:`BatchTable`, read once from its aggregate by
:func:`streaming.spark.local_agg.read`) against a watermark, into the :class:`BatchSummary` its commit writes
(:func:`judge`, called once a batch by the sink; each lab lane judges the same table under its own watermark with
:meth:`BatchTable.summary` and :func:`per_server`). Pure: no Spark, no Redis, no Arrow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from msgspec.structs import replace

from streaming.rules.commit.batch import BadRow, BatchSummary, WindowAgg
from streaming.rules.late import LateEvent
from streaming.rules.watermarks import ServerWatermarks
from streaming.rules.windows import Histograms, event_ms, late_counts
from streaming.schema.params import Params
from streaming.schema.records import NameGuardRecord, ServerRecord


@dataclass(frozen=True)
class Refusal:
    """What the flood guard refused in a batch: the names, why, their newest event time (set by
    :func:`streaming.spark.local_agg.read`), and
    the guard's minute after the batch (None: unchanged, or already committed)."""

    names: tuple[str, ...] = ()
    detail: str = ""
    max_event_us: int | None = None
    record: NameGuardRecord | None = None


NO_REFUSAL = Refusal()


@dataclass(frozen=True)
class BatchTable:
    """A batch's aggregate read once: everything in it that no watermark changes, shared by the configured
    pipeline and its lanes. ``windows``: (start ms, server, (event, window) pairs, players the batch added) per
    window; ``servers``: each server's input figures (rows, event time range, lags, idle markers) before any
    window is judged; ``event_hist``: each server's events per event time, ascending (late counts come from it)."""

    windows: list[tuple[int, str, int, int]]
    servers: dict[str, ServerRecord]
    event_hist: dict[str, tuple[np.ndarray, np.ndarray]]
    bad: list[BadRow]
    regions: dict[str, str] = field(default_factory=dict)
    """Each server's region as its events carry it (none when they carry none)."""
    refusal: Refusal = NO_REFUSAL
    """What the flood guard refused (their events are in ``bad``). Spark's watermark read their newest event time
    before the guard judged, so every watermark here does too."""
    late: list[LateEvent] = field(default_factory=list)
    """The accepted events behind the pipeline's watermark, in arrival order, for the Events page (lanes keep
    none)."""
    aggregate: Any = None
    """The aggregate itself (an Arrow table, opaque here), for the online view (None when the pipeline has none):
    :func:`streaming.spark.local_agg.online_events` reads its
    PLAYER items on the followers' thread, off the pipeline's commit. Not a filtered copy: with one, the whole stack
    at 300 servers and 50,000 events/s was slower in every run (docs/benchmarks.md)."""
    hists: Histograms | None = None
    """``event_hist`` keyed together, so a judgement counts every server's late events in one pass (None: judged
    server by server)."""

    def __post_init__(self) -> None:
        if self.hists is None:  # frozen: set once, here
            object.__setattr__(self, "hists", Histograms.of(self.event_hist))

    def _late_counts(self, accepted: list[WindowAgg], watermark_ms: int) -> list[int]:
        """Each accepted window's late events: every server's at once, or server by server where their event
        times span too much to key together."""
        if not accepted:
            return []
        starts = np.array([w.start_ms for w in accepted], np.int64)
        ends = np.array([w.end_ms for w in accepted], np.int64)
        if self.hists is not None:
            servers = [w.server for w in accepted]
            counted: list[int] = self.hists.late_counts(servers, starts, ends, watermark_ms).tolist()
            return counted
        return [int(late_counts(starts[i:i + 1], ends[i:i + 1], *self.event_hist[w.server], watermark_ms)[0])
                for i, w in enumerate(accepted)]

    def summary(self, batch_id: int, watermark_ms: int, batch_ts_ms: int, start_id: str, end_id: str,
                params: Params) -> BatchSummary:
        """The batch judged against ``watermark_ms``: each window's pairs dropped (``end <= watermark``) or
        accepted, and of the accepted ones those before the watermark counted as late."""
        windows: list[WindowAgg] = []
        accepted: list[WindowAgg] = []
        for start_ms, server, n, players in self.windows:
            w = WindowAgg(start_ms, start_ms + params.window_ms, server)
            windows.append(w)
            if w.end_ms <= watermark_ms:  # closed: Spark drops the pair
                w.dropped = n
            else:
                w.events, w.players = n, players
                accepted.append(w)
        for w, k in zip(accepted, self._late_counts(accepted, watermark_ms), strict=True):
            w.late = k
        # Summed here, then each server's record made once: records are frozen, and the lanes share self.servers.
        sums = {name: dict.fromkeys(("events", "dropped", "late"), 0) for name in self.servers}
        for w in windows:
            total = sums[w.server]
            total["events"] += w.events
            total["dropped"] += w.dropped
            total["late"] += w.late
        servers = {name: replace(st, **sums[name]) for name, st in self.servers.items()}
        return BatchSummary(
            batch_id=batch_id, watermark_ms=watermark_ms, batch_ts_ms=batch_ts_ms, start_id=start_id,
            end_id=end_id, windows=sorted(windows, key=lambda w: (w.start_ms, w.server, w.end_ms)),
            servers=servers, bad=list(self.bad), regions=dict(self.regions),
            refused_max_event_us=self.refusal.max_event_us,
        )


def judge(batch: BatchTable, batch_id: int, watermark_ms: int, batch_ts_ms: int, start_id: str, end_id: str,
          params: Params, watermarks: ServerWatermarks | None) -> BatchSummary:
    """The batch judged against the pipeline's watermark in force (``watermark_ms``, from the batch's offset log
    entry), with what the flood guard refused and the late events it keeps; per server, the watermarks advanced
    (``watermarks``: this run's model). Called once a batch by the sink, and for a batch read again by the
    recovery (without a model)."""
    summary = batch.summary(batch_id, watermark_ms, batch_ts_ms, start_id, end_id, params)
    summary.refused, summary.name_guard = batch.refusal.names, batch.refusal.record
    summary.late_events = batch.late
    if watermarks is not None:
        per_server(summary, watermarks, params.idle_timeout_ms is not None)
    return summary


def per_server(summary: BatchSummary, model: ServerWatermarks, idle: bool) -> None:
    """Advance the per-input watermarks with what each server's input saw (idle markers too, where idleness
    is on: they are in that input), as Spark does after running the batch; a lane following the fleet retires the
    servers silent for RETIRE_AFTER (:class:`ServerWatermarks`)."""
    seen: dict[str, int] = {}
    for server, st in summary.servers.items():
        top = st.input_max_us(idle)
        if top is not None:
            seen[server] = event_ms(top)
    spoke = {s: st.max_ingest_us // 1000 for s, st in summary.servers.items() if st.max_ingest_us is not None}
    newest = max(spoke.values(), default=None)  # arrival time, from the entry IDs: a replayed batch decides the same
    summary.server_watermarks = model.update(seen, spoke, newest)
    summary.next_watermark_ms = model.combined(summary.watermark_ms)
    if model.retire_after_ms is not None and not model.servers:
        summary.server_heard_ms = dict(model.heard)
