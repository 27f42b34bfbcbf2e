"""The status line: what a person must know before trusting the charts, in plain words.

Pure: a :class:`~dashboard.data.Snapshot` and the time in, messages out, so
every message is unit-tested with a hand-built snapshot and an injected clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from dashboard.data import BatchPoint, Snapshot
from watermark.alerting.config import AlertConfig
from watermark.alerting.verdicts import Flat, WatermarkPoint, flat_run, is_behind
from watermark.schema.timeutil import clock, human_ms  # noqa: F401 - the pages import them from here

STALE_TRIGGERS = 5
"""No commit for this many trigger intervals (and at least :data:`STALE_MIN_MS`) is worth saying."""
STALE_MIN_MS = 10_000
SLOW_WINDOW = 10
"""Recent batches judged for falling behind."""


class Level(StrEnum):
    OK = "ok"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True)
class Status:
    level: Level
    text: str


def pace(snap: Snapshot, trigger: int, behind: int, waiting_text: str, quiet: bool) -> list[Status]:
    """Falling behind (most recent batches over the trigger) or, with nothing else to say, behind."""
    slow = [b for b in snap.batches[-SLOW_WINDOW:] if b.duration_ms is not None]
    late = [b for b in slow if b.duration_ms > trigger]  # type: ignore[operator]
    if slow and len(late) * 2 > len(slow):
        worst = max(b.duration_ms for b in late)  # type: ignore[type-var]
        return [Status(Level.WARNING, f"Falling behind: {len(late)} of the last {len(slow)} batches took longer "
                                      f"than the {human_ms(trigger)} trigger (slowest {human_ms(worst)}); "
                                      f"{waiting_text}.")]
    if is_behind(behind, trigger, snap.thresholds) and quiet:  # a capped batch is quick and leaves entries waiting
        return [Status(Level.WARNING, f"Behind: {waiting_text}; batches are capped, so the job catches up "
                                      "by reading at most its cap per batch.")]
    return []


INGEST_DOC = "docs/ingest.md"
"""How to write one's own events into the stream: where production mode (``DEMO=off``) points."""


def assess(snap: Snapshot, now_ms: int, demo: bool = True) -> list[Status]:
    """The messages for the status line, worst first; one OK message when all is well. ``demo`` false
    (production mode: no generator) says where events are awaited rather than how to start the demo."""
    out = _assess(snap, now_ms, demo)
    if memory := full(snap):  # whatever else: nothing moves while Redis refuses writes
        out = [*memory, *(s for s in out if s.level is not Level.OK)]
    order = [Level.ERROR, Level.WARNING, Level.INFO, Level.OK]
    return sorted(out, key=lambda s: order.index(s.level))


def _assess(snap: Snapshot, now_ms: int, demo: bool) -> list[Status]:
    ns = snap.namespace
    state = snap.state
    if state is None:
        if snap.stream.length:
            return [Status(Level.WARNING, f"{snap.stream.length:,} events wait in `{ns}:events` but no batch has "
                                          "completed yet: is the Spark job running? (`./run.sh` starts it)")]
        if not demo:
            return [Status(Level.INFO, f"Waiting for events on `{ns}:events`: nothing in namespace `{ns}` yet. "
                                       f"Your game servers write them there (see {INGEST_DOC}); or set "
                                       "PIPELINE_NAMESPACE to the one your job writes.")]
        return [Status(Level.INFO, f"Nothing in namespace `{ns}` yet: no events and no batches. Start the pipeline "
                                   "with `./run.sh`, or set PIPELINE_NAMESPACE to the one your job writes.")]
    out: list[Status] = []
    trigger = max(state.trigger_ms, 1)
    since = max(0, now_ms - state.updated_ms)
    waiting = snap.stream.waiting
    behind = snap.stream.behind_ms(now_ms)
    waiting_text = behind_text(waiting, behind)
    if state.stopped_ms is not None:
        out.append(Status(Level.INFO, f"Stopped: the job was stopped at {clock(state.stopped_ms)} "
                                      f"({human_ms(now_ms - state.stopped_ms)} ago) after batch "
                                      f"#{state.last_batch}; {waiting_line(waiting, behind)}. `./run.sh` starts it "
                                      "again, and it goes on from there."))
    elif since > max(STALE_TRIGGERS * trigger, STALE_MIN_MS):
        if waiting > 0:
            out.append(Status(Level.ERROR, f"No batch has completed for {human_ms(since)} (trigger "
                                           f"{human_ms(trigger)}) while {waiting_text}: the Spark job is down or "
                                           "stuck."))
        else:
            out.append(Status(Level.INFO, f"Idle: no new events for {human_ms(since)}; the last batch "
                                          f"(#{state.last_batch}) completed at {clock(state.updated_ms)}. Windows "
                                          "close only when new events move the watermark."))
    idle = state.stopped_ms is not None or since > max(STALE_TRIGGERS * trigger, STALE_MIN_MS)
    run = None if idle else stall(snap.batches, now_ms, snap.thresholds)  # a quiet pipeline has no arrivals
    if run is not None:
        head = state.head_ms
        out.append(Status(Level.WARNING, f"The watermark has not moved for {human_ms(run.held_ms(now_ms))} while "
                                         f"{run.arrived:,} events arrived: it stays at "
                                         f"{clock(state.next_watermark_ms)} because every new event is "
                                         f"older than the max event time seen ({clock(head) if head else '-'}). No "
                                         "window closes until newer events arrive; a server clock running ahead "
                                         "causes this."))
    out.extend(pace(snap, trigger, behind, waiting_text, quiet=not out))
    lost = state.lost_at_batch
    if lost is not None and snap.batches and snap.batches[0].batch <= lost:  # the break is in the range shown
        out.append(Status(Level.WARNING, f"History lost at batch {lost}: Redis came back empty, so the totals "
                                         "and the windows open then count only what came after it; windows "
                                         "that opened later are whole."))
    if not out:
        wm = state.next_watermark_ms
        since_loss = "" if lost is None else f" · totals from batch {lost} (Redis came back empty then)"
        out.append(Status(Level.OK, f"Live: batch #{state.last_batch} committed {human_ms(since)} ago · watermark "
                                    f"{clock(wm)} (lag {human_ms(now_ms - wm)}) · "
                                    f"{waiting_line(waiting, behind)}{since_loss}"))
    return out


def full(snap: Snapshot) -> list[Status]:
    """Redis at its ``maxmemory``: it refuses writes, so nothing moves until memory is freed (Redis' own rule:
    the monitor's RedisFull alert pages before, at a share of it)."""
    used, limit = snap.redis_memory
    if used is None or limit <= 0 or used < limit:
        return []
    return [Status(Level.ERROR, f"Redis is full: it uses {used / 2**20:,.0f} MB of its {limit / 2**20:,.0f} MB "
                                "maxmemory and refuses writes. The job's commits wait (it has trimmed the input kept "
                                "for look-back) and producers back off: nothing accepted is lost, and everything "
                                "goes on once memory is freed or maxmemory raised.")]


def unreachable(url: str, error: BaseException) -> Status:
    """For a Redis that cannot be read; ``url`` must already be redacted."""
    name = type(error).__name__
    if name == "AuthenticationError":
        why = "rejected the dashboard's credentials"
    elif name == "NoPermissionError":
        why = "denied the dashboard a read (its user needs +@read on the namespace's keys)"
    elif isinstance(error, (ConnectionError, TimeoutError)) or name in ("ConnectionError", "TimeoutError",
                                                                         "BusyLoadingError"):
        why = "is unreachable"
    else:
        why = "answered with an error"
    return Status(Level.ERROR, f"Redis at {url} {why} ({name}: {error}). The dashboard keeps retrying and "
                               "recovers by itself once Redis is back.")


def watermark_points(batches: Sequence[BatchPoint]) -> list[WatermarkPoint]:
    """Each batch's watermark after it, with the events that had arrived by then (accepted or dropped as late)."""
    out, arrived = [], 0
    for b in batches:
        arrived += b.events + b.dropped
        out.append(WatermarkPoint(b.batch_ts_ms, b.next_watermark_ms, arrived))
    return out


def stall(batches: Sequence[BatchPoint], now_ms: int, cfg: AlertConfig) -> Flat | None:
    """The watermark's unmoved run when it is stalled by the alerts' rule (:meth:`.verdicts.Flat.stalled`, with the
    monitor's thresholds), else None: the status line, the lab and the WatermarkFlat alert say it together."""
    run = flat_run(watermark_points(batches))
    return run if run is not None and run.stalled(now_ms, cfg) else None


def behind_text(waiting: int, behind_ms: int) -> str:
    """``behind by 1,234 entries / 2.5 s``: entries not committed yet, and how long the oldest has waited."""
    if waiting <= 0:
        return "no entries wait"
    return f"behind by {waiting:,} {'entry' if waiting == 1 else 'entries'} / {human_ms(behind_ms)}"


def waiting_line(waiting: int, behind_ms: int) -> str:
    """For a pipeline keeping up: entries that arrived since the last batch are waiting, not "behind"."""
    if waiting <= 0:
        return "up to date"
    return f"{waiting:,} {'entry' if waiting == 1 else 'entries'} waiting (the oldest {human_ms(behind_ms)})"


