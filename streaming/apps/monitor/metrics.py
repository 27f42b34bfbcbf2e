"""``/metrics``: the stack in Prometheus' text format, read from Redis at each scrape.

Counters are the pipeline's own exact totals (what the dashboard shows), so they never decrease across a job
restart; they start again from zero only if Redis loses its data, which Prometheus takes as a counter reset.
A scrape reads with a few batched commands per pipeline (O(servers) fields) through its own connection with
a short timeout: it never takes part in a batch's transaction, so it cannot hold one up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from streaming.alerting.conditions import one_server, subject_labels
from streaming.alerting.health import Health, Verdict
from streaming.alerting.lifecycle import AlertState
from streaming.alerting.observation import ServerObs
from streaming.rules.fleet import drained
from streaming.rules.fleet import in_view as fleet_in_view
from streaming.schema.keys import parse_buckets
from streaming.store.observe import StackReading

METRICS: dict[str, str] = {
    "wm_redis_up": "1 when the monitor could read Redis at this scrape, else 0",
    "wm_players_online": "Players online per server (the online view)",
    "wm_region_players_online": "Players online per region: the sum of its servers' (regions from the events)",
    "wm_events_accepted_total": "Events accepted into their windows, per pipeline and server",
    "wm_events_dropped_late_total": "Events dropped as late (every window closed), per pipeline and server",
    "wm_events_accepted_late_total": "Events behind the watermark but counted (a window still open)",
    "wm_input_entries_total": "Entries ever appended to the input stream",
    "wm_quarantined_entries_total": "Input entries quarantined, per reason",
    "wm_watermark_seconds": "The watermark now (in force for the next batch), Unix seconds",
    "wm_watermark_delay_seconds": "The watermark's delay behind the newest event time",
    "wm_max_event_time_seconds": "The newest event time accepted, Unix seconds",
    "wm_trigger_interval_seconds": "The query's trigger interval",
    "wm_last_batch": "The last batch committed",
    "wm_batch_duration_seconds": "Batch durations (trigger execution), per pipeline",
    "wm_behind_entries": "Input entries not committed yet",
    "wm_behind_seconds": "How long the oldest entry not committed yet has waited",
    "wm_online_view_age_seconds": "Now minus the trigger time of the online view's newest batch",
    "wm_online_behind_seconds": "How long the oldest entry the online view has not committed yet has waited",
    "wm_server_last_event_timestamp_seconds": "Arrival of each server's newest committed event, Unix seconds",
    "wm_server_max_event_time_seconds": "Each server's newest event time in the last batch, Unix seconds",
    "wm_server_ingest_lag_p95_seconds": "p95 of arrival minus event time of each server's events in the last batch",
    "wm_server_clock_ahead_seconds": "How far each server's events ran ahead of their arrival (its clock fast), "
                                     "in the online view's last batch with them",
    "wm_server_info": "1 per server in the live views, with its region (drained and retired servers have no "
                      "series: the live fleet bounds them)",
    "wm_servers": "Servers by their life (streaming.rules.fleet): in the live views, drained (every player logged "
                  "out), retired (silent for RETIRE_AFTER)",
    "wm_alerts": "The product's alerts: 1 per alert pending, firing or held",
    "wm_pipeline_health": "1 for the state each pipeline is in (live, idle, behind, stalled, stopped, down, starting, "
                          "empty, redis_full, redis_unreachable), 0 for the others: the dashboard's status line "
                          "names the same",
    "wm_history_lost_at_batch": "The batch before which Redis came back empty (totals count from it); absent if "
                                "never",
    "wm_commits_lost_from_batch": "The first batch whose commit Redis lost while keeping older ones (a failover to a "
                                  "replica that did not have it): its events are missing; absent if never",
    "wm_commits_lost_to_batch": "The last batch of that run of lost commits; absent if never",
    "wm_redis_used_memory_bytes": "Redis' used_memory (absent when INFO is refused)",
    "wm_redis_maxmemory_bytes": "Redis' maxmemory (0: none set); at it, Redis refuses writes",
}
"""Every metric with its help text; docs/alerts.md lists the same (a test compares)."""


def families(r: StackReading) -> Iterator[Metric]:
    shown = [s for s in r.obs.servers if in_view(s)]
    yield from _server_families(r, shown)
    yield from _pipeline_families(r, {s.name for s in shown})
    yield CounterMetricFamily("wm_input_entries", METRICS["wm_input_entries_total"], value=r.input_entries)
    q = CounterMetricFamily("wm_quarantined_entries", METRICS["wm_quarantined_entries_total"], labels=["reason"])
    for reason, n in sorted(r.quarantined.items()):
        q.add_metric([reason], n)
    yield q
    if r.online_age_ms is not None:
        yield GaugeMetricFamily("wm_online_view_age_seconds", METRICS["wm_online_view_age_seconds"],
                                value=r.online_age_ms / 1000)
    yield GaugeMetricFamily("wm_online_behind_seconds", METRICS["wm_online_behind_seconds"],
                            value=r.obs.online_behind_ms / 1000)
    if r.obs.redis_used_bytes is not None:
        yield GaugeMetricFamily("wm_redis_used_memory_bytes", METRICS["wm_redis_used_memory_bytes"],
                                value=r.obs.redis_used_bytes)
        yield GaugeMetricFamily("wm_redis_maxmemory_bytes", METRICS["wm_redis_maxmemory_bytes"],
                                value=r.obs.redis_maxmemory_bytes)


def in_view(s: ServerObs) -> bool:
    """Whether a server's series are served: not drained, not retired (``streaming.rules.fleet``). A deploy that
    replaces every pod leaves no series behind: their number is bounded by the live fleet."""
    return fleet_in_view(retired=s.retired, drained=drained(s.last_arrival_ms, s.drained_ms), players=s.players or 0)


def _server_families(r: StackReading, shown: list[ServerObs]) -> Iterator[Metric]:
    states = GaugeMetricFamily("wm_servers", METRICS["wm_servers"], labels=["state"])
    retired_n = sum(s.retired for s in r.obs.servers)
    for state, n in (("live", len(shown)), ("drained", len(r.obs.servers) - len(shown) - retired_n),
                     ("retired", retired_n)):
        states.add_metric([state], n)
    yield states
    info = GaugeMetricFamily("wm_server_info", METRICS["wm_server_info"], labels=["server", "region"])
    for s in shown:
        info.add_metric([s.name, s.region or ""], 1)
    yield info
    players = GaugeMetricFamily("wm_players_online", METRICS["wm_players_online"], labels=["server"])
    seen = GaugeMetricFamily("wm_server_last_event_timestamp_seconds",
                             METRICS["wm_server_last_event_timestamp_seconds"], labels=["server"])
    newest = GaugeMetricFamily("wm_server_max_event_time_seconds", METRICS["wm_server_max_event_time_seconds"],
                               labels=["server"])
    lag = GaugeMetricFamily("wm_server_ingest_lag_p95_seconds", METRICS["wm_server_ingest_lag_p95_seconds"],
                            labels=["server"])
    ahead = GaugeMetricFamily("wm_server_clock_ahead_seconds", METRICS["wm_server_clock_ahead_seconds"],
                              labels=["server"])
    regions = GaugeMetricFamily("wm_region_players_online", METRICS["wm_region_players_online"], labels=["region"])
    per_region: dict[str, int] = {}
    for s in r.obs.servers:
        if s.region is not None and s.players is not None:
            per_region[s.region] = per_region.get(s.region, 0) + s.players
    for region, n in sorted(per_region.items()):
        regions.add_metric([region], n)
    for s in shown:
        if s.clock_ahead_ms is not None:
            ahead.add_metric([s.name], s.clock_ahead_ms / 1000)
        if s.lag_p95_ms is not None:
            lag.add_metric([s.name], s.lag_p95_ms / 1000)
        if s.players is not None:
            players.add_metric([s.name], s.players)
        if s.last_arrival_ms is not None:
            seen.add_metric([s.name], s.last_arrival_ms / 1000)
        if s.newest_event_ms is not None:
            newest.add_metric([s.name], s.newest_event_ms / 1000)
    yield players
    yield regions
    yield seen
    yield newest
    yield lag
    yield ahead


def _pipeline_families(r: StackReading, shown: set[str]) -> Iterator[Metric]:
    names = ("wm_events_accepted_total", "wm_events_dropped_late_total", "wm_events_accepted_late_total")
    counters = {name: CounterMetricFamily(name.removesuffix("_total"), METRICS[name], labels=["pipeline", "server"])
                for name in names}
    for pipeline, servers in r.server_totals.items():
        for server, (events, dropped, late) in sorted(servers.items()):
            if server not in shown:  # its counters end with it (rate() and increase() take a series ending)
                continue
            counters["wm_events_accepted_total"].add_metric([pipeline, server], events)
            counters["wm_events_dropped_late_total"].add_metric([pipeline, server], dropped)
            counters["wm_events_accepted_late_total"].add_metric([pipeline, server], late)
    yield from counters.values()
    gauges = {name: GaugeMetricFamily(name, METRICS[name], labels=["pipeline"]) for name in (
        "wm_watermark_seconds", "wm_watermark_delay_seconds", "wm_max_event_time_seconds",
        "wm_trigger_interval_seconds", "wm_last_batch", "wm_behind_entries", "wm_behind_seconds")}
    for p in r.obs.pipelines:
        values = {"wm_watermark_delay_seconds": p.delay_ms / 1000, "wm_trigger_interval_seconds": p.trigger_ms / 1000,
                  "wm_behind_entries": p.waiting, "wm_behind_seconds": p.behind_ms / 1000,
                  "wm_watermark_seconds": None if p.watermark_ms is None else p.watermark_ms / 1000,
                  "wm_max_event_time_seconds": None if p.max_event_ms is None else p.max_event_ms / 1000,
                  "wm_last_batch": p.last_batch}
        for name, v in values.items():
            if v is not None:
                gauges[name].add_metric([p.name], v)
    yield from gauges.values()
    h = HistogramMetricFamily("wm_batch_duration_seconds", METRICS["wm_batch_duration_seconds"], labels=["pipeline"])
    for pipeline, fields in r.batch_seconds.items():
        buckets, _count, total = parse_buckets(dict(fields))
        h.add_metric([pipeline], [(le, float(n)) for le, n in buckets], sum_value=total)
    yield h


def alert_family(alerts: Mapping[str, AlertState]) -> Metric:
    g = GaugeMetricFamily("wm_alerts", METRICS["wm_alerts"],
                          labels=["alertname", "state", "server", "pipeline", "region"])
    for a in sorted(alerts.values(), key=lambda a: a.key):
        # a fleet alert about one server (ServerSilent with one silent) names it; its identity stays the region's
        subject = {"server": one_server(a.servers), **subject_labels(a.rule, a.subject)}
        g.add_metric([a.alertname, a.status, *(subject.get(k, "") for k in ("server", "pipeline", "region"))], 1)
    return g


def health_families(verdicts: Mapping[str, Verdict]) -> Iterator[Metric]:
    """One series per pipeline and state, as kube-state-metrics gives a pod's phase: ``wm_pipeline_health ==
    1`` selects the state, and a state no pipeline is in reads 0 rather than vanishing."""
    g = GaugeMetricFamily("wm_pipeline_health", METRICS["wm_pipeline_health"], labels=["pipeline", "state"])
    lost = GaugeMetricFamily("wm_history_lost_at_batch", METRICS["wm_history_lost_at_batch"], labels=["pipeline"])
    gap = [GaugeMetricFamily(m, METRICS[m], labels=["pipeline"])
           for m in ("wm_commits_lost_from_batch", "wm_commits_lost_to_batch")]
    for name, v in sorted(verdicts.items()):
        for state in Health:
            g.add_metric([name, state.value], 1 if v.health is state else 0)
        if v.history_lost_at is not None:
            lost.add_metric([name], v.history_lost_at)
        if v.commits_lost is not None:
            for family, batch in zip(gap, v.commits_lost, strict=True):
                family.add_metric([name], batch)
    yield g
    yield lost
    yield from gap


class StackCollector(Collector):
    """Reads at each scrape; ``read`` returns the reading and the alerts, or raises ``redis.RedisError``;
    ``health``: each pipeline's verdict after the monitor's last round (it needs the rounds' memory)."""

    def __init__(self, read: Callable[[], tuple[StackReading, Mapping[str, AlertState]]],
                 health: Callable[[], Mapping[str, Verdict]] = dict) -> None:
        self.read = read
        self.health = health

    def collect(self) -> Iterator[Metric]:
        import redis
        yield from health_families(self.health())
        try:
            reading, alerts = self.read()
        except redis.RedisError:
            yield GaugeMetricFamily("wm_redis_up", METRICS["wm_redis_up"], value=0)
            return
        yield GaugeMetricFamily("wm_redis_up", METRICS["wm_redis_up"], value=1)
        yield from families(reading)
        yield alert_family(alerts)
