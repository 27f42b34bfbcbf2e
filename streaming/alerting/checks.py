"""The rules besides the players' drops, each judging one subject: a region's silent servers, a server's clock
and late drops, the pipeline's freshness, watermark and flood guard, Redis' memory. Which rule holds when is
told in ``streaming.alerting.conditions``' table; :func:`streaming.alerting.conditions.evaluate` calls them."""

from __future__ import annotations

from streaming.alerting.config import AlertConfig
from streaming.alerting.findings import Finding
from streaming.alerting.health import redis_at_limit
from streaming.alerting.observation import Memory, Observation, PipelineObs, ServerObs
from streaming.alerting.verdicts import is_behind
from streaming.rules.fleet import Life, life
from watermark_client.timeutil import clock, human_ms

MINUTE_MS = 60_000
SAMPLE_GAP_MS = 5_000
"""A sample this much older than the minute it stands for is a gap (Redis was away), not the minute's start."""


def server_life(s: ServerObs, now_ms: int, cfg: AlertConfig) -> Life:
    """Where the server is in its life (:mod:`streaming.rules.fleet`); retirement as the observation says."""
    if s.retired:
        return Life.RETIRED
    return life(last_arrival_ms=s.last_arrival_ms, drained_ms=s.drained_ms, now_ms=now_ms,
                silent_after_ms=cfg.server_silent.after_ms, retire_after_ms=None)


SILENT_NAMED = 5
"""Servers named in a region's ServerSilent summary; the rest counted."""


def servers_silent(obs: Observation, cfg: AlertConfig) -> list[Finding]:
    """One finding per region (``""``: the servers without one): how many of its servers are silent with players
    online. A drained server (its players logged out) and a retired one are not silent. "38 servers silent in
    eu" is one alert, not 38."""
    after = cfg.server_silent.after_ms
    main = obs.main
    by_region: dict[str, list[ServerObs]] = {}
    for s in obs.servers:
        if s.retired:
            continue
        mine = by_region.setdefault(s.region or "", [])
        if server_life(s, obs.at_ms, cfg) is Life.SILENT:
            mine.append(s)
    out = []
    for region, silent in sorted(by_region.items()):
        where = f" in {region}" if region else ""
        held = None
        if main is not None and main.behind_ms >= after:
            held = f"the pipeline is behind by {human_ms(main.behind_ms)}: newer events may be waiting"
        if not silent:
            out.append(Finding("server_silent", region, False, 0.0, f"no server silent{where}", held))
            continue
        silent.sort(key=lambda s: (s.last_arrival_ms or 0, s.name))  # the longest silent first
        ages = [obs.at_ms - (s.last_arrival_ms or obs.at_ms) for s in silent]
        named = ", ".join(f"{s.name} ({human_ms(age)})"
                          for s, age in list(zip(silent, ages, strict=True))[:SILENT_NAMED])
        more = f" and {len(silent) - SILENT_NAMED:,} more" if len(silent) > SILENT_NAMED else ""
        n = len(silent)
        out.append(Finding("server_silent", region, True, float(n),
                           f"{n:,} server{'s' if n > 1 else ''} silent{where} with players online (no event for "
                           f"{human_ms(after)} or longer): {named}{more}", held,
                           tuple(s.name for s in silent[:SILENT_NAMED])))
    return out


def clock_ahead(s: ServerObs, cfg: AlertConfig) -> Finding:
    if s.clock_ahead_ms is None:
        return Finding("clock_ahead", s.name, None, None, f"the online view has not judged {s.name}'s clock yet")
    ahead = s.clock_ahead_ms
    fast = ahead > cfg.clock_ahead.ahead_ms
    return Finding("clock_ahead", s.name, fast, ahead / 1000,
                   f"{s.name}'s clock runs {human_ms(ahead)} ahead: its events arrived before they happened by it; "
                   "its players are judged by its own clock, other servers' are not affected, the windowed "
                   "pipeline's watermark is pushed ahead" if fast else
                   f"{s.name}'s events arrive after their own time (clock not ahead)")


def late_drops(server: str, memory: Memory, now_ms: int, cfg: AlertConfig) -> Finding:
    series = memory.dropped.get(server)
    last = series.last if series else None
    then = series.at_or_before(now_ms - MINUTE_MS) if series else None
    if last is None or then is None:
        return Finding("late_drops", server, None, None, "less than a minute watched")
    if then[0] < now_ms - MINUTE_MS - SAMPLE_GAP_MS:  # a gap in the samples (Redis away): not one minute
        return Finding("late_drops", server, None, None, "no sample from a minute ago")
    n = int(last[1]) - int(then[1])  # type: ignore[call-overload]
    if n < 0:  # the totals started again (Redis lost its data): a minute from now
        return Finding("late_drops", server, None, None, "the totals started again")
    return Finding("late_drops", server, n > cfg.late_drops.per_minute, float(n),
                   f"{server}: {n:,} events dropped as late in the last minute")


def name_flood(p: PipelineObs, now_ms: int) -> Finding:
    """The flood guard's last burst, while its minute is this one or the one before."""
    g = p.name_guard
    if g is None or g.burst_minute_ms is None or now_ms - g.burst_minute_ms >= 2 * MINUTE_MS:
        return Finding("name_flood", p.name, False, 0.0, "no new server name refused in the last two minutes")
    more = f", such as {', '.join(g.burst_sample)}" if g.burst_sample else ""
    return Finding("name_flood", p.name, True, float(g.burst_names),
                   f"{g.burst_names:,} new server names refused in the minute from {clock(g.burst_minute_ms)}: over "
                   f"the limit of {g.limit:,} a minute (NEW_SERVERS_PER_MINUTE); their {g.burst_events:,} events "
                   f"are quarantined as name_flood{more}")


def freshness(p: PipelineObs, cfg: AlertConfig) -> Finding:
    return Finding("freshness", p.name, is_behind(p.behind_ms, p.trigger_ms, cfg), p.behind_ms / 1000,
                   f"the oldest of {p.waiting:,} waiting entries has waited {human_ms(p.behind_ms)} "
                   f"(trigger {human_ms(p.trigger_ms)})")


def redis_full(obs: Observation, cfg: AlertConfig) -> Finding:
    used, limit = obs.redis_used_bytes, obs.redis_maxmemory_bytes
    if used is None:
        return Finding("redis_full", "", None, None, "Redis' memory could not be read (INFO refused)")
    if limit <= 0:
        return Finding("redis_full", "", False, None, f"Redis uses {used / 2**20:,.0f} MB, no maxmemory set")
    share = used * 100 / limit
    full = redis_at_limit(used, limit)
    return Finding("redis_full", "", share >= cfg.redis_full.percent, share,
                   f"Redis uses {used / 2**20:,.0f} of its {limit / 2**20:,.0f} MB maxmemory ({share:.0f} %)"
                   + (": it refuses writes; the job's commits and the producers wait, nothing is lost; free memory "
                      "or raise maxmemory" if full else ""))


def watermark_flat(p: PipelineObs, memory: Memory, now_ms: int, cfg: AlertConfig) -> Finding:
    run = memory.watermark_run(p.name)
    verdict = None if run is None else run.stalled(now_ms, cfg)
    if verdict is None or run is None or p.watermark_ms is None:
        return Finding("watermark_flat", p.name, None, None,
                       f"less than {human_ms(cfg.watermark_flat.after_ms)} watched")
    held = run.held_ms(now_ms) if run.watermark_ms == p.watermark_ms else 0
    return Finding("watermark_flat", p.name, verdict, held / 1000,
                   f"{p.name}: watermark at {clock(p.watermark_ms)}, "
                   + (f"unmoved for {human_ms(held)} while {run.arrived:,} events arrived" if held else "moving"))


def watermark_jump(p: PipelineObs, now_ms: int, cfg: AlertConfig) -> Finding:
    if p.watermark_ms is None:
        return Finding("watermark_jump", p.name, None, None, "no watermark yet")
    ahead = p.watermark_ms + p.delay_ms - now_ms
    newest = f"; newest event time {clock(p.max_event_ms)}" if p.max_event_ms is not None else ""
    return Finding("watermark_jump", p.name, ahead > cfg.watermark_jump.ahead_ms, ahead / 1000,
                   f"{p.name}: watermark {human_ms(abs(ahead))} {'ahead of' if ahead >= 0 else 'behind'} "
                   f"now minus the delay{newest}" + (": future-dated events pushed it; on-time events of the other "
                                                     "servers count as late" if ahead > cfg.watermark_jump.ahead_ms
                                                     else ""))
