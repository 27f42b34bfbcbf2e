"""The alert rules: each turns an observation (and the memory of earlier ones) into findings, one per subject.

A finding says whether the rule's condition holds now (``active``), or that it cannot tell (``None``: not
enough history yet), and, where the data it would judge is delayed rather than wrong, why (``held``): a
players-drop while a server's events are late says so instead of paging. What fires and when is
:mod:`streaming.alerting.lifecycle`'s business; here is only the condition, with its edges:

==================  ======================================================================  ===============
rule                condition                                                                held while
==================  ======================================================================  ===============
players_drop        online fell by more than ``percent`` of its peak within ``within``        server quiet or
                    (peak at least ``min_players``), not counting logouts its region's       trailing, its clock
                    live servers absorbed (players who moved); never for a drained server    stepped, pipeline
                    (every player logged out: a match over, a pod drained)                   behind, settling
region_players_drop the same, for the sum of a region's servers                             any of its servers
                                                                                             held
name_flood          the job's flood guard refused new server names (NEW_SERVERS_PER_MINUTE)   -
                    in this minute or the one before: one alert for the burst, with a count
server_silent       per region, the servers silent (``streaming.rules.fleet``: no event for   pipeline behind
                    ``after`` or longer with players online, not drained, not retired):
                    one alert a region with the count, not one a server
clock_ahead         the server's events arrived more than ``ahead`` before their own time    -
                    (its clock runs fast) in the online view's last batch with them
late_drops          more than ``per_minute`` events dropped as late in the last minute         -
freshness           oldest waiting entry waited more than trigger + ``above_trigger``         -
watermark_flat      watermark unchanged for ``after`` or longer while events were accepted     -
watermark_jump      watermark more than ``ahead`` ahead of now minus the delay                 -
redis_unreachable   Redis could not be read                                                  -
redis_full          Redis' used memory at ``percent`` of its ``maxmemory`` or above (at 100 %   -
                    it refuses writes: commits and producers wait)
==================  ======================================================================  ===============
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from streaming.alerting.config import AlertConfig
from streaming.alerting.health import redis_at_limit
from streaming.alerting.observation import (
    MAIN,
    Memory,
    Observation,
    OnlineWindow,
    PipelineObs,
    ServerObs,
)
from streaming.alerting.verdicts import behind_limit_ms, is_behind
from streaming.rules.fleet import Life, life
from watermark_client.timeutil import clock, human_ms

MINUTE_MS = 60_000
SAMPLE_GAP_MS = 5_000
"""A sample this much older than the minute it stands for is a gap (Redis was away), not the minute's start."""

RULES: dict[str, tuple[str, str]] = {
    "players_drop": ("PlayersDrop", "critical"),
    "region_players_drop": ("RegionPlayersDrop", "critical"),
    "server_silent": ("ServerSilent", "warning"),
    "name_flood": ("NameFlood", "warning"),
    "clock_ahead": ("ClockAhead", "warning"),
    "late_drops": ("LateDrops", "warning"),
    "freshness": ("PipelineBehind", "warning"),
    "watermark_flat": ("WatermarkFlat", "warning"),
    "watermark_jump": ("WatermarkJump", "warning"),
    "redis_unreachable": ("RedisUnreachable", "critical"),
    "redis_full": ("RedisFull", "critical"),
}
"""Rule -> (alert name, severity): the names Prometheus, Alertmanager and the Alerts page show."""

SUBJECT_LABEL = {"players_drop": "server", "region_players_drop": "region", "server_silent": "region",
                 "name_flood": "pipeline",
                 "clock_ahead": "server", "late_drops": "server", "freshness": "pipeline", "watermark_flat": "pipeline",
                 "watermark_jump": "pipeline", "redis_unreachable": "", "redis_full": ""}
"""What a rule's subject is: its label name in notifications and in Prometheus."""


def subject_labels(rule: str, subject: str) -> dict[str, str]:
    """The alert's subject as a label (``server="B"``), as Prometheus' and the webhook's alerts carry it."""
    label = SUBJECT_LABEL[rule]
    return {label: subject} if label else {}


def pages(rule: str, subject: str, lab_alerts: bool) -> bool:
    """Whether an alert reaches the webhook and Alertmanager: the configured pipeline's always, a lab lane's only
    with ``lab_alerts`` (``LAB_ALERTS``, on in the demo, off in production: a lane runs for the lab, and its alerts
    would page the team). Every alert still shows on the Alerts page, in its history and in ``wm_alerts``.

    >>> pages("watermark_flat", "per-server-min", False), pages("watermark_flat", "main", False)
    (False, True)
    >>> pages("server_silent", "eu", False), pages("watermark_flat", "per-server-min", True)
    (True, True)
    """
    return lab_alerts or subject_labels(rule, subject).get("pipeline", MAIN) == MAIN


def one_server(servers: tuple[str, ...]) -> str:
    """The server a fleet alert is about when it is about one (ServerSilent in a region with one silent server:
    its finding names up to :data:`SILENT_NAMED`), else ``""``: the metric's ``server`` label and the notices'
    ``server`` annotation."""
    return servers[0] if len(servers) == 1 else ""


def watching(cfg: AlertConfig) -> str:
    """The thresholds in force in one line, for the page: what the monitor is watching for."""
    pd = cfg.players_drop
    return " · ".join((
        f"PlayersDrop: down over {pd.percent:g} % within {human_ms(pd.within_ms)}, not counting players who moved "
        "to another server (RegionPlayersDrop: a region's sum)",
        f"ServerSilent: {human_ms(cfg.server_silent.after_ms)} with players online, counted by region",
        "NameFlood: new server names over the job's limit a minute",
        f"ClockAhead: {human_ms(cfg.clock_ahead.ahead_ms)} ahead",
        f"LateDrops: over {cfg.late_drops.per_minute:,} a minute",
        f"PipelineBehind: trigger + {human_ms(cfg.freshness.above_trigger_ms)}",
        f"WatermarkFlat: {human_ms(cfg.watermark_flat.after_ms)}",
        f"WatermarkJump: {human_ms(cfg.watermark_jump.ahead_ms)} ahead",
        "RedisUnreachable",
        f"RedisFull: {cfg.redis_full.percent:g} % of maxmemory"))


@dataclass(frozen=True)
class Finding:
    rule: str
    subject: str
    active: bool | None
    value: float | None = None
    summary: str = ""
    held: str | None = None
    servers: tuple[str, ...] = ()
    """A fleet alert's silent servers, the longest silent first (at most :data:`SILENT_NAMED`): one alone is named
    by the metric's and the notices' ``server``."""


def evaluate(obs: Observation, memory: Memory, cfg: AlertConfig) -> list[Finding]:
    """Every rule's findings for one observation; ``memory`` must already hold it."""
    if obs.redis_error is not None:
        return [Finding("redis_unreachable", "", True, None, f"Redis could not be read: {obs.redis_error}")]
    out = [Finding("redis_unreachable", "", False, None, "Redis answers"), redis_full(obs, cfg)]
    if obs.data_error is not None:
        return out
    online = _judged(_online_servers(memory), obs)
    delays = note_delays(obs, memory, cfg, online)
    out.extend(servers_silent(obs, cfg))
    for s in obs.servers:
        if s.retired:  # out of the live views and the alerts until its next event
            continue
        out.append(clock_ahead(s, cfg))
        out.append(late_drops(s.name, memory, obs.at_ms, cfg))
    samples = [v for _, v in memory.online.since(obs.at_ms - cfg.players_drop.within_ms)]
    window = OnlineWindow.of(samples, online, memory.online_rows)  # type: ignore[arg-type]
    lives = {s.name: server_life(s, obs.at_ms, cfg) for s in obs.servers}
    regions = _regions(obs, lives)
    fleets = {s.name: regions.get(s.region or "", []) for s in obs.servers}
    # A drained server's players all logged out (a match over, a pod drained): no drop to page for.
    drops = {server: players_drop(server, window, cfg, delays.get(server), moved_within=fleets.get(server, [server]))
             for server in online if lives.get(server) is not Life.DRAINED}
    for region, servers in regions.items():
        if not region:
            continue
        held = next((delays[s] for s in servers if s in delays), None)
        whole = players_drop(region, window, cfg, held, servers)
        out.append(whole)
        if whole.active and whole.held is None:  # one page for the region, not one per server in it
            for server in servers:
                if server in drops and drops[server].held is None:
                    drops[server] = replace(drops[server], held=(f"its region {region} lost its players as a "
                                                                 f"whole: RegionPlayersDrop {region} says it"))
    out.extend(drops.values())
    main = obs.main
    if main is not None:
        out.append(freshness(main, cfg))
        out.append(name_flood(main, obs.at_ms))
    for p in obs.pipelines:
        out.append(watermark_flat(p, memory, obs.at_ms, cfg))
        out.append(watermark_jump(p, obs.at_ms, cfg))
    return out


def note_delays(obs: Observation, memory: Memory, cfg: AlertConfig,
                online: list[str] | None = None) -> dict[str, str]:
    """Per server, why its players online cannot be judged now (its events or the pipeline delayed, or just
    caught up); records each delay in ``memory`` so the settling after it is known. ``online``: the servers in
    the memory's online samples, when the caller has them."""
    now, pd = obs.at_ms, cfg.players_drop
    main = obs.main
    behind = max(main.behind_ms if main else 0, obs.online_behind_ms)
    limit = behind_limit_ms(main.trigger_ms, cfg) if main else cfg.freshness.above_trigger_ms
    out: dict[str, str] = {}
    by_name = {x.name: x for x in obs.servers}
    for server in sorted({*by_name, *(_online_servers(memory) if online is None else online)}):
        s = by_name.get(server)
        if behind > limit:
            why = (f"the pipeline is behind by {human_ms(behind)}: players time out before their events "
                   "are read")
        elif s is not None and s.last_arrival_ms is not None and now - s.last_arrival_ms >= pd.quiet_ms:
            why = (f"no event from {server} for {human_ms(now - s.last_arrival_ms)}: its players time out "
                   "while its events are delayed")
        elif s is not None and s.lag_p95_ms is not None and s.lag_p95_ms >= pd.lag_ms:
            why = (f"{server}'s events arrive {human_ms(s.lag_p95_ms)} late (p95): its players time out behind the "
                   "watermark before their next event is read")
        elif (step := _clock_step_ms(memory, server)) > cfg.clock_ahead.ahead_ms:
            why = (f"{server}'s clock stepped {human_ms(step)}: its players time out by the step, not by leaving, "
                   "and come back with their next event")
        elif (trail := memory.trail_ms(server)) is not None and trail >= pd.lag_ms:
            why = (f"{server}'s newest event is {human_ms(trail)} behind the other servers': its events "
                   "arrive late, and its players time out behind the watermark the others move")
        else:
            why = ""
        if why:
            memory.mark_delayed(server, now, why)
            out[server] = why
            continue
        since = memory.delayed_at.get(server)
        if since is not None and now - since[0] < pd.settle_ms:
            out[server] = (f"{server}'s events caught up {human_ms(now - since[0])} ago: its players come "
                           "back with their next event")
        elif now - memory.started_ms < pd.settle_ms:
            out[server] = f"the monitor started {human_ms(now - memory.started_ms)} ago: still settling"
    return out


def _clock_step_ms(memory: Memory, server: str) -> int:
    """How far the server's clock stepped since the previous observation (0: not observed to step)."""
    before, now = memory.clock_ahead.get(server, (0, 0))
    return abs(now - before)


def _judged(online: list[str], obs: Observation) -> list[str]:
    """The servers of the online history a drop is judged for: not those retired, nor those no reading names any
    more (forgotten once retired), so the work is bounded by the live fleet, not by every name in the window. An
    observation naming no server at all judges them all."""
    if not obs.servers:
        return online
    live = {s.name for s in obs.servers if not s.retired}
    return [s for s in online if s in live]


def _online_servers(memory: Memory) -> list[str]:
    last = memory.online.last
    names: set[str] = set()
    for _, sample in memory.online.since(last[0] - memory.reach_ms) if last else []:
        names.update(sample.counts)  # type: ignore[attr-defined]
    return sorted(names)


def _regions(obs: Observation, lives: dict[str, Life]) -> dict[str, list[str]]:
    """Each region's servers that are not drained, as their events carry it; ``""``: the servers without one (no
    RegionPlayersDrop for them, but it is where their players reconnect). A drained server's players are in
    neither the region's peak nor its sum: they logged out, and the servers they moved to count them."""
    out: dict[str, list[str]] = {}
    for s in obs.servers:
        if lives.get(s.name) is not Life.DRAINED:
            out.setdefault(s.region or "", []).append(s.name)
    return out


def _fall(window: OnlineWindow, cols: list[int]) -> tuple[int, int, int, int, int]:
    """The sum of ``cols`` within the window: its peak (the earliest of equal ones), now, how far it fell, and the
    logouts and timeouts since the peak."""
    counts = window.counts[:, cols].sum(axis=1)
    peak_at = int(counts.argmax())
    peak, current = int(counts[peak_at]), int(counts[-1])
    logouts, timeouts = (int(a[peak_at, cols].sum()) for a in (window.logouts_after, window.timeouts_after))
    return peak, current, max(0, peak - current), logouts, timeouts


def players_drop(server: str, window: OnlineWindow, cfg: AlertConfig, held: str | None,
                 region_of: list[str] | None = None, moved_within: list[str] | None = None) -> Finding:
    """A server's players online against their peak within the window; with ``region_of``, the region ``server``'s
    (the sum of those servers', exactly as the pages sum them), held when any of them is held. ``moved_within``:
    the servers a server's players may reconnect to (its region's live servers): its logouts that their sum
    absorbed (it did not fall by them) are players who moved, not a drop."""
    pd = cfg.players_drop
    rule = "players_drop" if region_of is None else "region_players_drop"
    if not len(window.counts):
        return Finding(rule, server, None, None, "no online view batch within the window yet", held)
    peak, current, fell, logouts, timeouts = _fall(window, window.columns([server] if region_of is None
                                                                          else region_of))
    moved = 0
    if moved_within is not None and logouts:
        moved = min(logouts, fell, max(0, logouts - _fall(window, window.columns(moved_within))[2]))
    lost = fell - moved
    drop = 0.0 if peak == 0 else lost * 100.0 / peak
    causes = f" ({logouts:,} logged out, {timeouts:,} timed out)" if logouts or timeouts else ""
    where = "the others" if moved_within is None else "other servers"
    summary = (f"{server}: {current:,} players online, down {drop:.0f} % from {peak:,} within "
               f"{human_ms(pd.within_ms)}{causes}" + (f"; {moved:,} moved to {where}" if moved else ""))
    if peak < pd.min_players:
        return Finding(rule, server, False, drop, f"{summary} (a peak under {pd.min_players} is not judged)", held)
    # lost / peak > percent / 100, without the division's rounding at the threshold
    return Finding(rule, server, lost * 100 > pd.percent * peak, drop, summary, held)


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


__all__ = ["MAIN", "RULES", "Finding", "evaluate"]
