"""Snapshots as the dashboard's views read them, made to order: a pipeline's state, its batches and windows, and
two runs of batches (the watermark moving, and stalled)."""

from __future__ import annotations

from dataclasses import replace

import msgspec

from streaming.schema.keys import WindowKey
from streaming.store.views.snapshot import (
    BatchPoint,
    PipelineState,
    Snapshot,
    StreamInfo,
    Totals,
    WindowRow,
)

MIN = 60_000
T = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def state(**kw: object) -> PipelineState:
    base = PipelineState(last_batch=9, watermark_ms=T + 9 * MIN, next_watermark_ms=T + 10 * MIN - 30_000,
                         max_event_us=(T + 10 * MIN) * 1000, committed_id=f"{T}-5", window_ms=MIN,
                         slide_ms=MIN, delay_ms=30_000, trigger_ms=1_000, updated_ms=T + 10 * MIN)
    return replace(base, **kw)


def batch(i: int, wm: int, nxt: int, parsed: int = 10, duration: int | None = 500, **kw: object) -> BatchPoint:
    base = BatchPoint(batch=i, batch_ts_ms=T + 10 * MIN - (9 - i) * 1000, watermark_ms=wm, next_watermark_ms=nxt,
                      min_event_us=None, max_event_us=None, running_max_event_us=(nxt + 30_000) * 1000, input=parsed,
                      parsed=parsed, quarantined=0, events=parsed, dropped=0, late=0, servers={}, bad={},
                      duration_ms=duration, start_id="0-0", end_id="0-0")
    return msgspec.structs.replace(base, **kw)


def slow(batches: tuple[BatchPoint, ...]) -> tuple[BatchPoint, ...]:
    """The same batches, each taking 1.5 s (a 1 s trigger)."""
    return tuple(msgspec.structs.replace(b, duration_ms=1_500) for b in batches)


def window(start: int, server: str, players: int, final: bool, size: int = MIN) -> WindowRow:
    return WindowRow(WindowKey(start, start + size, server), events=players * 2, dropped=0, late=0, players=players,
                     final=final)


def snap(st: PipelineState | None = None, batches: tuple[BatchPoint, ...] = (), waiting: int = 0, length: int = 0,
         windows: tuple[WindowRow, ...] = (), servers: tuple[str, ...] = ("A", "B"),
         oldest_ms: int | None = None) -> Snapshot:
    return Snapshot(namespace="wm", read_ms=T, range_ms=15 * MIN, state=st, totals=Totals(), servers=servers,
                    windows=windows, batches=batches,
                    stream=StreamInfo(length=length, last_id=None, waiting=waiting,
                                      oldest_waiting_ms=oldest_ms if waiting else None))


MOVING = tuple(batch(i, T + i * 1000, T + (i + 1) * 1000) for i in range(10))
STALLED = (batch(-51, T - 1000, T - 1000), *(batch(i, T, T) for i in range(-50, 10)))
"""The watermark last moved in the batch at NOW - 59 s; 59 batches of 10 events since."""
NOW = T + 10 * MIN
