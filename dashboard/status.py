"""The status line: what a person must know before trusting the charts, in plain words.

Pure: a :class:`~streaming.store.views.snapshot.Snapshot` and the time in, messages out, so
every message is unit-tested with a hand-built snapshot and an injected clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dashboard.text import md
from streaming.alerting.health import Health, Severity, Verdict, judge, redis_at_limit
from streaming.alerting.verdicts import Flat, WatermarkPoint, flat_run
from streaming.rules.fleet import FleetSilence, Life, fleet_silence, life
from streaming.store.observe import pipeline_obs
from streaming.store.pipeline_status import PipelineStatus
from streaming.store.views.snapshot import BatchPoint, Snapshot
from watermark_client.timeutil import clock, human_ms

SLOW_WINDOW = 10
"""Recent batches looked at for slowness (said beside the verdict, which is :mod:`streaming.alerting.health`'s)."""

Level = Severity
"""A message's weight: the health verdict's severity (one scale for the status line, the lab and the alerts)."""


@dataclass(frozen=True)
class Status:
    level: Level
    text: str


def verdict(snap: Snapshot, now_ms: int) -> Verdict:
    """The pipeline's health by the one rule, judged from this snapshot: its state, and its watermark's unmoved run
    from the batch records shown."""
    used, limit = snap.redis_memory
    p = pipeline_obs(snap.namespace, PipelineStatus(snap.state, snap.totals, snap.servers, snap.stream), now_ms)
    return judge(p, now_ms, snap.thresholds, run=flat_run(watermark_points(snap.batches)),
                 redis_full=redis_at_limit(used, limit), fleet=silence(snap, now_ms))


def silence(snap: Snapshot, now_ms: int) -> FleetSilence:
    """The servers in view (neither retired nor drained) and how many are silent, by ServerSilent's rule with the
    monitor's thresholds."""
    return fleet_silence(((snap.seen.get(s), 0) for s in snap.servers), now_ms,
                         snap.thresholds.server_silent.after_ms)


def silent_servers(snap: Snapshot, now_ms: int) -> dict[str, int]:
    """The servers in view that are silent (ServerSilent's rule), with their last arrival (ms)."""
    after = snap.thresholds.server_silent.after_ms
    return {s: t for s in snap.servers if (t := snap.seen.get(s)) is not None
            and life(last_arrival_ms=t, drained_ms=0, now_ms=now_ms, silent_after_ms=after,
                     retire_after_ms=None) is Life.SILENT}


def slow_batches(snap: Snapshot, trigger: int) -> tuple[int, int, int] | None:
    """(slower than the trigger, judged, slowest ms) of the recent batches when most are slower, else None."""
    slow = [b.duration_ms for b in snap.batches[-SLOW_WINDOW:] if b.duration_ms is not None]
    late = [d for d in slow if d > trigger]
    return (len(late), len(slow), max(late)) if slow and len(late) * 2 > len(slow) else None


INGEST_DOC = "docs/ingest.md"
"""How to write one's own events into the stream: where production mode (``DEMO=off``) points."""


def assess(snap: Snapshot, now_ms: int, demo: bool = True) -> list[Status]:
    """The messages for the status line, worst first: the verdict's, then what goes with it (history lost in the
    range shown, batches slower than the trigger). ``demo`` false (production mode: no generator) says where
    events are awaited rather than how to start the demo."""
    v = verdict(snap, now_ms)
    out = [Status(v.severity, _say(snap, v, now_ms, demo))]
    lost = v.history_lost_at
    if lost is not None and snap.batches and snap.batches[0].batch <= lost:  # the break is in the range shown
        out.append(Status(Level.WARNING, f"History lost at batch {lost}: Redis came back empty, so the totals "
                                         "and the windows open then count only what came after it; windows "
                                         "that opened later are whole."))
    if v.commits_lost is not None and snap.batches and snap.batches[0].batch <= v.commits_lost[1] + 1:
        out.append(Status(Level.WARNING, commits_lost_text(*v.commits_lost)))
    if v.health is Health.LIVE and snap.state is not None and (slow := slow_batches(snap, snap.state.trigger_ms)):
        n, of, worst = slow  # said in the status line's one box: data before prose
        out[0] = Status(Level.INFO, f"{out[0].text} · Slow batches: {n} of the last {of} took longer than the "
                                    f"{human_ms(snap.state.trigger_ms)} trigger (slowest {human_ms(worst)}); not "
                                    "behind yet: that is when the oldest waiting entry has waited longer than the "
                                    f"trigger plus {human_ms(snap.thresholds.freshness.above_trigger_ms)}.")
    order = [Level.ERROR, Level.WARNING, Level.INFO, Level.OK]
    return sorted(out, key=lambda s: order.index(s.level))


def _say(snap: Snapshot, v: Verdict, now_ms: int, demo: bool) -> str:  # noqa: PLR0911 - one sentence per state
    ns, state, h = snap.namespace, snap.state, v.health
    if h is Health.REDIS_FULL:
        return full_text(*snap.redis_memory)
    if state is None:
        if h is Health.EMPTY and not demo:
            return (f"Waiting for events on `{ns}:events`: nothing in namespace `{ns}` yet. Your game servers write "
                    f"them there (see {INGEST_DOC}); or set PIPELINE_NAMESPACE to the one your job writes.")
        if h is Health.EMPTY:
            return (f"Nothing in namespace `{ns}` yet: no events and no batches. Start the pipeline with "
                    "`./run.sh`, or set PIPELINE_NAMESPACE to the one your job writes.")
        waited = human_ms(snap.stream.behind_ms(now_ms))
        if h is Health.DOWN:
            return (f"Down: {snap.stream.length:,} events wait in `{ns}:events` (the oldest {waited}) but no batch "
                    "has completed yet: is the Spark job running? (`./run.sh` starts it)")
        return (f"Starting: {snap.stream.length:,} events wait in `{ns}:events` (the oldest {waited}) and no batch "
                "has completed yet: the job is starting.")
    trigger = max(state.trigger_ms, 1)
    waiting, behind = snap.stream.waiting, snap.stream.behind_ms(now_ms)
    quiet = v.quiet_ms or 0
    if h is Health.STOPPED:
        stopped = state.stopped_ms or 0
        return (f"Stopped: the job was stopped at {clock(stopped)} ({human_ms(now_ms - stopped)} ago) after "
                f"batch #{state.last_batch}; {waiting_line(waiting, behind)}. `./run.sh` starts it again, and it "
                "goes on from there.")
    if h is Health.DOWN:
        return (f"Down: no batch has completed for {human_ms(quiet)} (trigger {human_ms(trigger)}) while "
                f"{behind_text(waiting, behind)}: the Spark job is down or stuck.")
    if h is Health.STALLED and v.fleet is not None:
        f = v.fleet
        heard = f" since {clock(f.heard_ms)} ({human_ms(now_ms - f.heard_ms)} ago)" if f.heard_ms else ""
        return (f"Stalled: {f.silent:,} of {f.in_play:,} servers silent{heard}, with players online (no event "
                f"for {human_ms(snap.thresholds.server_silent.after_ms)} or more): the numbers stand as of then. "
                f"Batch #{state.last_batch} committed {human_ms(quiet)} ago, but nothing new arrived in it.")
    if h is Health.IDLE:
        return (f"Idle: no new events for {human_ms(quiet)}; the last batch (#{state.last_batch}) completed at "
                f"{clock(state.updated_ms)}. Windows close only when new events move the watermark.")
    if h is Health.STALLED and v.stall is not None:
        head = state.head_ms
        return (f"Stalled: the watermark has not moved for {human_ms(v.stall.held_ms(now_ms))} while "
                f"{v.stall.arrived:,} events arrived: it stays at {clock(state.next_watermark_ms)} because every new "
                f"event is older than the max event time seen ({clock(head) if head else '-'}). No window closes until "
                "newer events arrive; a server clock running ahead causes this.")
    if h is Health.BEHIND:
        if slow := slow_batches(snap, trigger):
            n, of, worst = slow
            return (f"Falling behind: {n} of the last {of} batches took longer than the {human_ms(trigger)} "
                    f"trigger (slowest {human_ms(worst)}); {behind_text(waiting, behind)}.")
        if v.lag_ms is not None:
            return (f"Behind: the watermark is at {clock(state.next_watermark_ms)}, {human_ms(v.lag_ms)} behind now, "
                    f"past the {human_ms(state.delay_ms)} delay and the {human_ms(trigger)} trigger: the newest "
                    f"events are that old, so windows close that late.")
        return (f"Behind: {behind_text(waiting, behind)}; batches are capped, so the job catches up by reading at "
                "most its cap per batch.")
    wm, lost = state.next_watermark_ms, v.history_lost_at
    since_loss = "" if lost is None else f" · totals from batch {lost} (Redis came back empty then)"
    return (f"Live: batch #{state.last_batch} committed {human_ms(quiet)} ago · watermark {clock(wm)} (lag "
            f"{human_ms(now_ms - wm)}) · {waiting_line(waiting, behind)}{since_loss}")


def commits_lost_text(first: int, last: int) -> str:
    """Redis lost the commits of batches ``first`` to ``last`` and kept older ones (decision 0023)."""
    which = f"batch {first}" if first == last else f"batches {first} to {last}"
    return (f"Commits lost: Redis lost the commit of {which} and kept the batches before (a failover to a replica "
            f"that did not have it yet, or Redis restored from an older copy), and the input was no longer there to "
            f"count it again. The totals, the windows and the online players are missing its events; the job went "
            f"on from batch {last + 1}. REDIS_WAIT_REPLICAS makes each commit wait for a replica (docs/operations.md).")


def full_text(used: int | None, limit: int) -> str:
    """Redis at its ``maxmemory``: it refuses writes, so nothing moves until memory is freed (Redis' own rule:
    the monitor's RedisFull alert pages before, at a share of it)."""
    return (f"Redis is full: it uses {(used or 0) / 2**20:,.0f} MB of its {limit / 2**20:,.0f} MB maxmemory and "
            "refuses writes. The job's commits wait (it has trimmed the input kept for look-back) and producers "
            "back off: nothing accepted is lost, and everything goes on once memory is freed or maxmemory raised.")


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
    return Status(Level.ERROR, f"Redis at {md(url)} {why} ({name}: {md(error)}). The dashboard keeps retrying and "
                               "recovers by itself once Redis is back.")


def watermark_points(batches: Sequence[BatchPoint]) -> list[WatermarkPoint]:
    """Each batch's watermark after it, with the events that had arrived by then (accepted or dropped as late)."""
    out, arrived = [], 0
    for b in batches:
        arrived += b.events + b.dropped
        out.append(WatermarkPoint(b.batch_ts_ms, b.next_watermark_ms, arrived))
    return out


def stall(snap: Snapshot, now_ms: int) -> Flat | None:
    """The watermark's unmoved run when the verdict is a stall (the WatermarkFlat alert's rule, with the monitor's
    thresholds), else None: the status line, the lab and the alert say it together."""
    v = verdict(snap, now_ms)
    return v.stall if v.health is Health.STALLED else None


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


