"""Prometheus alerting rules equivalent to the product's (``streaming.alerting.conditions``), from the same
thresholds: ``ops/prometheus/rules.yml`` is this module's output for the defaults (a test keeps them equal), and
``wm-monitor --prometheus-rules`` prints it for any ``alerts.toml``.

Where PromQL cannot say exactly what the product says, the rule says the nearest thing, and the difference is
written beside it: ``increase`` extrapolates over the minute it looks at, and a players-drop's "settling" is
"silent at some point within the settle time", sampled every second; a clock step is "how far the server's
clock ran ahead varied by more than the ClockAhead threshold within the settle time".
"""

from __future__ import annotations

from collections.abc import Iterator

from streaming.alerting.conditions import RULES
from streaming.alerting.config import AlertConfig, Timing
from streaming.rules.fleet import FLOOD_REASON
from watermark_client.timeutil import format_duration_ms

GROUP = "watermark"
MAIN_SEL = '{pipeline="main"}'


def _s(ms: int) -> str:
    """Seconds as PromQL writes a number, exactly."""
    return repr(ms / 1000)


def _d(ms: int) -> str:
    """A PromQL duration."""
    return format_duration_ms(ms) if ms else "0s"


def expressions(cfg: AlertConfig) -> dict[str, str]:
    """Rule -> its PromQL condition."""
    pd, behind = cfg.players_drop, _s(cfg.freshness.above_trigger_ms)
    silence = "(time() - wm_server_last_event_timestamp_seconds)"
    pipeline_behind = (f"(wm_behind_seconds{MAIN_SEL} - wm_trigger_interval_seconds{MAIN_SEL} > {behind})")
    # Players time out before their events are read when either the pipeline or the online view lags
    # (conditions.note_delays judges the larger of the two against the pipeline's trigger).
    online_behind = (f"(wm_online_behind_seconds - on(instance, job) wm_trigger_interval_seconds{MAIN_SEL} > "
                     f"{behind})")
    peak = f"max_over_time(wm_players_online[{_d(pd.within_ms)}])"
    region_peak = f"max_over_time(wm_region_players_online[{_d(pd.within_ms)}])"
    silent, flat = _s(cfg.server_silent.after_ms), _d(cfg.watermark_flat.after_ms)
    newest = "clamp_max(max_over_time(wm_server_max_event_time_seconds[1m]), time())"  # future-dated: now
    newest_all = f"max without (server) ({newest})"
    return {
        "players_drop": (
            f"(({peak} - wm_players_online) * 100 > {pd.percent!r} * {peak}) and ({peak} >= {pd.min_players})\n"
            f"unless max_over_time({silence}[{_d(pd.settle_ms)}:1s]) >= {_s(pd.quiet_ms)}\n"
            f"unless on(instance, job) max_over_time({pipeline_behind}[{_d(pd.settle_ms)}:1s])\n"
            f"unless on(instance, job) max_over_time({online_behind}[{_d(pd.settle_ms)}:1s])\n"
            f"unless on(server, instance, job) ({newest_all} - on(instance, job) group_right {newest} >= "
            f"{_s(pd.lag_ms)})\n"
            f"unless max_over_time(wm_server_ingest_lag_p95_seconds[{_d(pd.settle_ms)}]) >= {_s(pd.lag_ms)}\n"
            f"unless max_over_time(wm_server_clock_ahead_seconds[{_d(pd.settle_ms)}]) - "
            f"min_over_time(wm_server_clock_ahead_seconds[{_d(pd.settle_ms)}]) > {_s(cfg.clock_ahead.ahead_ms)}"),
        "region_players_drop": (
            f"(({region_peak} - wm_region_players_online) * 100 > {pd.percent!r} * {region_peak}) and "
            f"({region_peak} >= {pd.min_players})\n"
            f"unless on(instance, job) max_over_time({pipeline_behind}[{_d(pd.settle_ms)}:1s])\n"
            f"unless on(instance, job) max_over_time({online_behind}[{_d(pd.settle_ms)}:1s])"),
        # per region, the count of its servers silent with players online (drained and retired servers have no
        # series: streaming.rules.fleet); the servers without a region under region=""
        "server_silent": (f"count by (region, instance, job) (({silence} >= {silent}) * on(server, instance, job) "
                          f"group_left(region) wm_server_info)\n"
                          f"unless on(instance, job) (wm_behind_seconds{MAIN_SEL} >= {silent})"),
        "name_flood": f'increase(wm_quarantined_entries_total{{reason="{FLOOD_REASON}"}}[2m]) > 0',
        "clock_ahead": f"wm_server_clock_ahead_seconds > {_s(cfg.clock_ahead.ahead_ms)}",
        "late_drops": f"increase(wm_events_dropped_late_total{MAIN_SEL}[1m]) > {cfg.late_drops.per_minute}",
        "freshness": pipeline_behind,
        "watermark_flat": (
            f"changes(wm_watermark_seconds[{flat}]) == 0\n"
            f"and on(pipeline, instance, job) "
            f"sum by (pipeline, instance, job) (increase(wm_events_accepted_total[{flat}])\n"
            f"  + increase(wm_events_dropped_late_total[{flat}])) > 0"),  # arrived: accepted or dropped (verdicts)
        "watermark_jump": (f"wm_watermark_seconds + wm_watermark_delay_seconds - time() > "
                           f"{_s(cfg.watermark_jump.ahead_ms)}"),
        "redis_unreachable": "wm_redis_up == 0",
        "redis_full": (f"wm_redis_used_memory_bytes * 100 / wm_redis_maxmemory_bytes >= {cfg.redis_full.percent!r}\n"
                       "and wm_redis_maxmemory_bytes > 0"),
    }


SUMMARIES = {
    "players_drop": "Players online on {{ $labels.server }} fell by more than the threshold",
    "region_players_drop": "Players online in region {{ $labels.region }} fell by more than the threshold",
    "server_silent": "{{ $value }} servers silent in {{ $labels.region }} with players online",
    "name_flood": "{{ $value | printf \"%.0f\" }} events of new server names refused by the flood guard",
    "clock_ahead": "The clock of {{ $labels.server }} runs {{ $value | humanizeDuration }} ahead",
    "late_drops": "{{ $value | printf \"%.0f\" }} events of {{ $labels.server }} dropped as late in a minute",
    "freshness": "The pipeline is behind: the oldest waiting entry is {{ $value | humanizeDuration }} over the trigger",
    "watermark_flat": "The watermark of {{ $labels.pipeline }} has not moved while events arrive",
    "watermark_jump": "The watermark of {{ $labels.pipeline }} is {{ $value | humanizeDuration }} ahead of the clock",
    "redis_unreachable": "The monitor cannot read Redis",
    "redis_full": "Redis uses {{ $value | printf \"%.0f\" }} % of its maxmemory: at 100 % it refuses writes",
}


def _rule(rule: str, expr: str, timing: Timing) -> Iterator[str]:
    name, severity = RULES[rule]
    yield f"      - alert: {name}"
    yield "        expr: |"
    yield from (f"          {line}" for line in expr.splitlines())
    if timing.for_ms:
        yield f"        for: {_d(timing.for_ms)}"
    if timing.clear_ms:
        yield f"        keep_firing_for: {_d(timing.clear_ms)}"
    yield "        labels:"
    yield f"          severity: {severity}"
    yield "        annotations:"
    yield f"          summary: '{SUMMARIES[rule]}'"


def prometheus_rules(cfg: AlertConfig) -> str:
    lines = ["# Generated by `wm-monitor --prometheus-rules` from the alerts' thresholds (ops/alerts.toml):",
             "# the product's own alerts, in PromQL. Edit alerts.toml and generate again rather than edit this.",
             "groups:", f"  - name: {GROUP}", "    rules:"]
    for rule, expr in expressions(cfg).items():
        lines.extend(_rule(rule, expr, cfg.timing(rule)))
    return "\n".join(lines) + "\n"
