"""The pipeline's health, one verdict: the status line, the Watermark lab, the alerts and ``/metrics`` all take it
from :func:`judge`, with the thresholds of one :class:`AlertConfig` (the running monitor's, which it publishes),
so no two of them can name a different state for the same moment.

A pipeline is in exactly one :class:`Health` state, the first that holds, in this order:

==================== ============================================================================================
``redis_unreachable`` Redis cannot be read: nothing else can be known.
``redis_full``        Redis is at its ``maxmemory`` and refuses writes: nothing moves until memory is freed.
``empty``             No batch committed yet and no entry waiting: nothing to do.
``starting``          No batch committed yet; entries wait, the oldest for no longer than ``[job_quiet]
                      first_batch`` (a Spark session takes a while to start, and its first batch to read).
``down``              Entries wait, and no batch has been committed for longer than the quiet limit (or never,
                      with the oldest entry waiting longer than ``first_batch``): the job is down or stuck.
``stopped``           The job was stopped on request (it says so in its state) and not started again.
``stalled``           Most servers in play (neither drained nor retired) are silent: no event for ``[server_silent]
                      after`` with players online (:func:`streaming.rules.fleet.fleet_silence`, ServerSilent's
                      rule). Batches may still commit (the job's idle markers keep them coming), but nothing in
                      them is news: every number stands as of the newest arrival.
``idle``              No batch for longer than the quiet limit, and nothing waits: no events come in.
``stalled``           Batches commit, events arrive, and the watermark has not moved for
                      ``[watermark_flat] after`` (:meth:`.verdicts.Flat.stalled`).
``behind``            Batches commit, but the oldest waiting entry has waited longer than the trigger plus
                      ``[freshness] above_trigger`` (:func:`.verdicts.is_behind`); or the watermark lags now by
                      more than the delay, the trigger and ``above_trigger`` together (windows close that late).
``live``              None of the above.
==================== ============================================================================================

The quiet limit is the longer of ``[job_quiet] after`` and ``[job_quiet] triggers`` trigger intervals. Whether
Redis once came back empty (history lost at a batch) is said beside the state, not as one: a pipeline whose
history was lost an hour ago is live, with totals that start at that batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from streaming.alerting.config import AlertConfig
from streaming.alerting.observation import MAIN, Memory, Observation, PipelineObs, ServerObs
from streaming.alerting.verdicts import Flat, behind_limit_ms, is_behind
from streaming.rules.fleet import FleetSilence, fleet_silence


class Health(StrEnum):
    REDIS_UNREACHABLE = "redis_unreachable"
    REDIS_FULL = "redis_full"
    EMPTY = "empty"
    STARTING = "starting"
    DOWN = "down"
    STOPPED = "stopped"
    IDLE = "idle"
    STALLED = "stalled"
    BEHIND = "behind"
    LIVE = "live"


class Severity(StrEnum):
    OK = "ok"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


SEVERITY: dict[Health, Severity] = {
    Health.REDIS_UNREACHABLE: Severity.ERROR, Health.REDIS_FULL: Severity.ERROR, Health.DOWN: Severity.ERROR,
    Health.STALLED: Severity.WARNING, Health.BEHIND: Severity.WARNING, Health.STARTING: Severity.INFO,
    Health.STOPPED: Severity.INFO, Health.IDLE: Severity.INFO, Health.EMPTY: Severity.INFO, Health.LIVE: Severity.OK,
}


@dataclass(frozen=True)
class Verdict:
    health: Health
    quiet_ms: int | None = None
    """How long since the last commit (None: no commit yet, or Redis not read)."""
    stall: Flat | None = None
    """The watermark's unmoved run, when it is the stall (``stalled``)."""
    history_lost_at: int | None = None
    """Redis came back empty before this batch: totals and the windows open then count only what came after."""
    commits_lost: tuple[int, int] | None = None
    """The first and last batch whose commits Redis lost while keeping older ones (a failover to a replica that
    did not have them): their events are missing from the totals and the windows."""
    fleet: FleetSilence | None = None
    """The servers in play and how many are silent, when most are (``stalled`` for that reason)."""
    lag_ms: int | None = None
    """How far the watermark lags now, when that is why the pipeline is ``behind``."""

    @property
    def severity(self) -> Severity:
        return SEVERITY[self.health]


def quiet_limit_ms(trigger_ms: int, cfg: AlertConfig) -> int:
    """No commit for longer than this is worth saying: down when entries wait, idle when none does."""
    return max(cfg.job_quiet.triggers * max(trigger_ms, 1), cfg.job_quiet.after_ms)


def judge(p: PipelineObs | None, now_ms: int, cfg: AlertConfig, *, run: Flat | None = None,
          redis_error: str | None = None, redis_full: bool = False, fleet: FleetSilence | None = None) -> Verdict:
    """The pipeline's state at ``now_ms``. ``p``: as read (None: Redis not read); ``run``: its watermark's latest
    unmoved run, from whatever history the caller keeps (the monitor's samples, the dashboard's batch records);
    ``redis_full``: Redis' used memory at or above its ``maxmemory``; ``fleet``: the servers' silence
    (:func:`silence_of`)."""
    if redis_error is not None or p is None:
        return Verdict(Health.REDIS_UNREACHABLE)
    lost, gap = p.lost_at_batch, p.lost_batches
    if redis_full:
        return Verdict(Health.REDIS_FULL, _quiet(p, now_ms), history_lost_at=lost, commits_lost=gap)
    limit = quiet_limit_ms(p.trigger_ms, cfg)
    if p.last_batch is None:
        if p.waiting <= 0:
            return Verdict(Health.EMPTY)
        return Verdict(Health.DOWN if p.behind_ms > max(limit, cfg.job_quiet.first_batch_ms) else Health.STARTING)
    quiet = _quiet(p, now_ms)
    if p.stopped_ms is not None:
        return Verdict(Health.STOPPED, quiet, history_lost_at=lost, commits_lost=gap)
    if quiet is not None and quiet > limit and p.waiting > 0:
        return Verdict(Health.DOWN, quiet, history_lost_at=lost, commits_lost=gap)
    if fleet is not None and fleet.most_silent:
        return Verdict(Health.STALLED, quiet, history_lost_at=lost, commits_lost=gap, fleet=fleet)
    if quiet is not None and quiet > limit:
        return Verdict(Health.IDLE, quiet, history_lost_at=lost, commits_lost=gap)
    if run is not None and run.stalled(now_ms, cfg):
        return Verdict(Health.STALLED, quiet, run, lost, gap)
    if is_behind(p.behind_ms, p.trigger_ms, cfg):
        return Verdict(Health.BEHIND, quiet, history_lost_at=lost, commits_lost=gap)
    if p.watermark_ms is not None and (lag := now_ms - p.watermark_ms) > lag_limit_ms(p, cfg):
        return Verdict(Health.BEHIND, quiet, history_lost_at=lost, commits_lost=gap, lag_ms=lag)
    return Verdict(Health.LIVE, quiet, history_lost_at=lost, commits_lost=gap)


def lag_limit_ms(p: PipelineObs, cfg: AlertConfig) -> int:
    """How far the watermark may lag now before the pipeline is behind: its delay, plus what an entry may wait
    (the trigger and ``[freshness] above_trigger``)."""
    return p.delay_ms + behind_limit_ms(p.trigger_ms, cfg)


def silence_of(servers: Iterable[ServerObs], now_ms: int, cfg: AlertConfig) -> FleetSilence:
    """The fleet's silence (:func:`streaming.rules.fleet.fleet_silence`) from the servers as observed, retired
    ones left out, with ServerSilent's ``after``."""
    return fleet_silence(((s.last_arrival_ms, s.drained_ms) for s in servers if not s.retired), now_ms,
                         cfg.server_silent.after_ms)


def redis_at_limit(used_bytes: int | None, maxmemory_bytes: int) -> bool:
    """Redis refuses writes: its used memory has reached its ``maxmemory`` (0: none set, never)."""
    return used_bytes is not None and maxmemory_bytes > 0 and used_bytes >= maxmemory_bytes


def judge_all(obs: Observation, memory: Memory, cfg: AlertConfig,
              prior: Mapping[str, Verdict] | None = None) -> dict[str, Verdict]:
    """Every pipeline's verdict from one monitor round. ``prior``: the previous round's, kept when Redis answered
    with a malformed record (nothing is judged then) and naming the pipelines when Redis could not be read."""
    prior = prior or {}
    if obs.redis_error is not None:
        return {name: Verdict(Health.REDIS_UNREACHABLE) for name in (list(prior) or [MAIN])}
    if obs.data_error is not None:
        return dict(prior)
    full = redis_at_limit(obs.redis_used_bytes, obs.redis_maxmemory_bytes)
    fleet = silence_of(obs.servers, obs.at_ms, cfg)  # every pipeline reads the same servers' events
    return {p.name: judge(p, obs.at_ms, cfg, run=memory.watermark_run(p.name), redis_full=full, fleet=fleet)
            for p in obs.pipelines}


def _quiet(p: PipelineObs, now_ms: int) -> int | None:
    return None if p.committed_ms is None else max(0, now_ms - p.committed_ms)
