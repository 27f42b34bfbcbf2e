"""The alert rules: each turns an observation (and the memory of earlier ones) into findings, one per subject.

A finding says whether the rule's condition holds now (``active``), or that it cannot tell (``None``: not
enough history yet), and, where the data it would judge is delayed rather than wrong, why (``held``): a
players-drop while a server's events are late says so instead of paging. What fires and when is
:mod:`streaming.alerting.lifecycle`'s business; here is only the condition, with its edges (the players' drops
here, the rules judging one subject in :mod:`streaming.alerting.checks`, the rules' names and :class:`Finding` in
:mod:`streaming.alerting.findings`):

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

from dataclasses import replace

from streaming.alerting.checks import (
    clock_ahead,
    freshness,
    late_drops,
    name_flood,
    redis_full,
    server_life,
    servers_silent,
    watermark_flat,
    watermark_jump,
)
from streaming.alerting.config import AlertConfig
from streaming.alerting.findings import RULES, SUBJECT_LABEL, Finding, one_server, pages, subject_labels, watching
from streaming.alerting.observation import MAIN, Memory, Observation, OnlineWindow
from streaming.alerting.verdicts import behind_limit_ms
from streaming.rules.fleet import Life
from watermark_client.timeutil import human_ms


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


__all__ = ["MAIN", "RULES", "SUBJECT_LABEL", "Finding", "evaluate", "note_delays", "one_server", "pages",
           "players_drop", "subject_labels", "watching"]
