"""The pipeline's health as a table: one row per state and per boundary (``streaming.alerting.health``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from prometheus_client.core import Metric

from streaming.alerting.config import AlertConfig, Freshness, JobQuiet, WatermarkFlat
from streaming.alerting.health import (
    Health,
    Severity,
    Verdict,
    judge,
    judge_all,
    quiet_limit_ms,
    redis_at_limit,
    silence_of,
)
from streaming.alerting.observation import MAIN, Memory, Observation, PipelineObs, ServerObs
from streaming.alerting.verdicts import Flat
from streaming.apps.monitor.metrics import health_families
from streaming.rules.fleet import FleetSilence
from streaming.schema.config import ConfigError

NOW = 1_767_225_600_000
CFG = AlertConfig()  # quiet limit max(5 x 1 s, 10 s) = 10 s; behind over 1 s + 5 s; stalled after 1 min

LIVE = PipelineObs(name=MAIN, watermark_ms=NOW - 30_000, max_event_ms=NOW, delay_ms=30_000, trigger_ms=1_000,
                   accepted=1_000, waiting=20, behind_ms=400, last_batch=41, committed_ms=NOW - 300)
NEVER = replace(LIVE, watermark_ms=None, max_event_ms=None, accepted=0, last_batch=None, committed_ms=None)
STALL = Flat(watermark_ms=NOW - 30_000, since_ms=NOW - 60_000, arrived=500, seen_from_start=False)


@pytest.mark.parametrize(("p", "kw", "health"), [
    (LIVE, {}, Health.LIVE),
    # Redis first: unreadable, then full (at maxmemory it refuses writes, whatever else holds)
    (None, {}, Health.REDIS_UNREACHABLE),
    (LIVE, {"redis_error": "ConnectionError: refused"}, Health.REDIS_UNREACHABLE),
    (replace(LIVE, committed_ms=NOW - 60_000), {"redis_full": True}, Health.REDIS_FULL),
    # no batch yet: empty, starting while the oldest entry has waited up to `first_batch` (2 min), then down
    (replace(NEVER, waiting=0, behind_ms=0), {}, Health.EMPTY),
    (replace(NEVER, waiting=42, behind_ms=120_000), {}, Health.STARTING),
    (replace(NEVER, waiting=42, behind_ms=120_001), {}, Health.DOWN),
    # stopped on request: stopped, however long ago and whatever waits
    (replace(LIVE, stopped_ms=NOW - 60_000, committed_ms=NOW - 60_000, waiting=5_000, behind_ms=59_000), {},
     Health.STOPPED),
    # no commit for longer than the quiet limit: down when entries wait, idle when none does; at the limit, live
    (replace(LIVE, committed_ms=NOW - 10_001, behind_ms=10_000), {}, Health.DOWN),
    (replace(LIVE, committed_ms=NOW - 10_001, waiting=0, behind_ms=0), {}, Health.IDLE),
    (replace(LIVE, committed_ms=NOW - 10_000, waiting=0, behind_ms=0), {}, Health.LIVE),
    # a slower trigger stretches the quiet limit to 5 triggers
    (replace(LIVE, trigger_ms=5_000, committed_ms=NOW - 20_000, waiting=0, behind_ms=0), {}, Health.LIVE),
    (replace(LIVE, trigger_ms=5_000, committed_ms=NOW - 25_001, waiting=0, behind_ms=0), {}, Health.IDLE),
    # the watermark unmoved for `after` while events arrive: stalled; a quiet pipeline is idle first
    (LIVE, {"run": STALL}, Health.STALLED),
    (LIVE, {"run": replace(STALL, since_ms=NOW - 59_999)}, Health.LIVE),
    (LIVE, {"run": replace(STALL, arrived=0)}, Health.LIVE),
    (replace(LIVE, committed_ms=NOW - 60_000, waiting=0, behind_ms=0), {"run": STALL}, Health.IDLE),
    # the oldest waiting entry older than the trigger + 5 s: behind (a stall is said first)
    (replace(LIVE, behind_ms=6_001), {}, Health.BEHIND),
    (replace(LIVE, behind_ms=6_000), {}, Health.LIVE),
    (replace(LIVE, behind_ms=6_001), {"run": STALL}, Health.STALLED),
    # the watermark lagging now by more than delay (30 s) + trigger (1 s) + 5 s: behind, even with nothing waiting
    (replace(LIVE, watermark_ms=NOW - 36_001, waiting=0, behind_ms=0), {}, Health.BEHIND),
    (replace(LIVE, watermark_ms=NOW - 36_000, waiting=0, behind_ms=0), {}, Health.LIVE),
    (replace(LIVE, watermark_ms=NOW + 60_000), {}, Health.LIVE),  # a clock ahead moved it past now: not behind
    # most servers in play silent (idle markers keep the batches coming): stalled, never live
    (LIVE, {"fleet": FleetSilence(in_play=300, silent=300, heard_ms=NOW - 100_000)}, Health.STALLED),
    (LIVE, {"fleet": FleetSilence(in_play=3, silent=2, heard_ms=NOW)}, Health.STALLED),
    (LIVE, {"fleet": FleetSilence(in_play=4, silent=2, heard_ms=NOW)}, Health.LIVE),  # half is not most
    (LIVE, {"fleet": FleetSilence()}, Health.LIVE),  # no server in play: nothing to be silent
    # ... and no batch for longer than the quiet limit: stalled (players online, silent), not merely idle
    (replace(LIVE, committed_ms=NOW - 60_000, waiting=0, behind_ms=0), {"fleet": FleetSilence(3, 3, NOW - 70_000)},
     Health.STALLED),
    (replace(LIVE, committed_ms=NOW - 60_000, waiting=0, behind_ms=0), {"fleet": FleetSilence(0, 0, None)},
     Health.IDLE),  # every server drained: a maintenance, not an incident
    (replace(LIVE, committed_ms=NOW - 60_000, behind_ms=50_000), {"fleet": FleetSilence(3, 3, NOW)}, Health.DOWN),
])
def test_one_state_the_first_that_holds(p: PipelineObs | None, kw: dict, health: Health) -> None:
    assert judge(p, NOW, CFG, **kw).health is health


@pytest.mark.parametrize(("servers", "want"), [
    # (last arrival, drained mark, retired) at NOW with ServerSilent's 1 min
    ([(NOW - 1_000, 0, False), (NOW - 61_000, 0, False)], FleetSilence(2, 1, NOW - 1_000)),
    ([(NOW - 60_000, 0, False)], FleetSilence(1, 1, NOW - 60_000)),  # at `after`: silent, as the alert says
    ([(NOW - 59_999, 0, False)], FleetSilence(1, 0, NOW - 59_999)),
    ([(NOW - 90_000, NOW - 90_000, False)], FleetSilence(0, 0, None)),  # drained: not in play
    ([(NOW - 90_000, NOW - 95_000, False)], FleetSilence(1, 1, NOW - 90_000)),  # an event after the drain
    ([(NOW - 900_000, 0, True)], FleetSilence(0, 0, None)),  # retired
    ([(None, 0, False)], FleetSilence(1, 0, None)),  # nothing committed yet: live
])
def test_the_fleets_silence_is_the_server_silent_rule(servers: list[tuple[int | None, int, bool]],
                                                      want: FleetSilence) -> None:
    obs = [ServerObs(name=f"s{i}", last_arrival_ms=last, drained_ms=mark, retired=gone)
           for i, (last, mark, gone) in enumerate(servers)]
    assert silence_of(obs, NOW, CFG) == want


def test_the_verdict_says_why_it_is_stalled_or_behind() -> None:
    quiet = FleetSilence(300, 300, NOW - 100_000)
    v = judge(LIVE, NOW, CFG, fleet=quiet)
    assert (v.health, v.fleet, v.stall, v.severity) == (Health.STALLED, quiet, None, Severity.WARNING)
    v = judge(replace(LIVE, watermark_ms=NOW - 214_000), NOW, CFG)
    assert (v.health, v.lag_ms) == (Health.BEHIND, 214_000)


def test_history_lost_is_said_beside_the_state() -> None:
    v = judge(replace(LIVE, lost_at_batch=7), NOW, CFG)
    assert (v.health, v.history_lost_at) == (Health.LIVE, 7)
    assert judge(replace(LIVE, lost_at_batch=7, committed_ms=NOW - 20_000, waiting=0), NOW, CFG).history_lost_at == 7
    assert judge(LIVE, NOW, CFG).history_lost_at is None


def test_the_verdict_carries_the_quiet_time_and_the_stall() -> None:
    v = judge(LIVE, NOW, CFG, run=STALL)
    assert (v.quiet_ms, v.stall, v.severity) == (300, STALL, Severity.WARNING)
    assert judge(replace(LIVE, committed_ms=NOW - 20_000), NOW, CFG).severity is Severity.ERROR
    assert judge(replace(NEVER, waiting=0), NOW, CFG).quiet_ms is None


def test_the_thresholds_file_moves_every_limit() -> None:
    cfg = AlertConfig(job_quiet=JobQuiet(after_ms=2_000, triggers=1, first_batch_ms=1_000),
                      freshness=Freshness(above_trigger_ms=100), watermark_flat=WatermarkFlat(after_ms=1_000))
    assert quiet_limit_ms(1_000, cfg) == 2_000 and quiet_limit_ms(5_000, cfg) == 5_000
    assert judge(replace(NEVER, waiting=1, behind_ms=2_001), NOW, cfg).health is Health.DOWN  # the longer of two
    assert judge(replace(LIVE, committed_ms=NOW - 2_001, waiting=0), NOW, cfg).health is Health.IDLE
    assert judge(replace(LIVE, behind_ms=1_101), NOW, cfg).health is Health.BEHIND
    assert judge(LIVE, NOW, cfg, run=replace(STALL, since_ms=NOW - 1_000)).health is Health.STALLED


def test_job_quiet_is_read_from_the_file_and_checked() -> None:
    cfg = AlertConfig.from_toml('[job_quiet]\nafter = "30s"\ntriggers = 2\nfirst_batch = "5m"\n')
    assert cfg.job_quiet == JobQuiet(after_ms=30_000, triggers=2, first_batch_ms=300_000)
    with pytest.raises(ConfigError, match=r"\[job_quiet\] triggers must be at least 1, got 0"):
        AlertConfig.from_toml("[job_quiet]\ntriggers = 0\n")


@pytest.mark.parametrize(("used", "limit", "full"), [
    (100, 100, True), (101, 100, True), (99, 100, False), (10**12, 0, False), (None, 100, False)])
def test_redis_is_full_at_its_maxmemory(used: int | None, limit: int, full: bool) -> None:
    assert redis_at_limit(used, limit) is full


def test_a_monitor_round_judges_every_pipeline_from_its_samples() -> None:
    memory = Memory(started_ms=NOW - 120_000, reach_ms=180_000)
    lane = replace(LIVE, name="lane")
    for t in range(NOW - 70_000, NOW + 1, 1_000):  # the lane's watermark never moves while events arrive
        memory.remember(Observation(at_ms=t, pipelines=(replace(LIVE, watermark_ms=t),
                                                        replace(lane, accepted=t - NOW + 100_000))))
    obs = Observation(at_ms=NOW, pipelines=(LIVE, lane))
    verdicts = judge_all(obs, memory, CFG)
    assert {n: v.health for n, v in verdicts.items()} == {MAIN: Health.LIVE, "lane": Health.STALLED}
    full = replace(obs, redis_used_bytes=10, redis_maxmemory_bytes=10)
    assert {v.health for v in judge_all(full, memory, CFG).values()} == {Health.REDIS_FULL}
    down = judge_all(Observation(at_ms=NOW, redis_error="ConnectionError"), memory, CFG, verdicts)
    assert {n: v.health for n, v in down.items()} == {MAIN: Health.REDIS_UNREACHABLE,
                                                      "lane": Health.REDIS_UNREACHABLE}
    assert judge_all(Observation(at_ms=NOW, redis_error="x"), memory, CFG) == {MAIN: Verdict(Health.REDIS_UNREACHABLE)}
    assert judge_all(Observation(at_ms=NOW, data_error="bad record"), memory, CFG, verdicts) == verdicts


def _samples(families: list[Metric]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def test_metrics_give_each_pipeline_one_state_of_all() -> None:
    got = _samples(list(health_families({MAIN: Verdict(Health.BEHIND, history_lost_at=3),
                                         "lane": Verdict(Health.LIVE)})))
    for name, state in ((MAIN, Health.BEHIND), ("lane", Health.LIVE)):
        ones = [k for k, v in got.items() if k[0] == "wm_pipeline_health" and ("pipeline", name) in k[1] and v == 1]
        assert ones == [("wm_pipeline_health", (("pipeline", name), ("state", state.value)))]
        assert sum(1 for k in got if k[0] == "wm_pipeline_health" and ("pipeline", name) in k[1]) == len(Health)
    assert got[("wm_history_lost_at_batch", (("pipeline", MAIN),))] == 3
    assert not any(k[0] == "wm_history_lost_at_batch" and ("pipeline", "lane") in k[1] for k in got)
