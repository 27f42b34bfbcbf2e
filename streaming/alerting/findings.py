"""The alert rules' names, severities and subjects (what Prometheus, Alertmanager, the webhook and the Alerts
page call them), which alerts page, the thresholds in one line, and :class:`Finding`, what every rule returns
(``streaming.alerting.conditions``)."""

from __future__ import annotations

from dataclasses import dataclass

from streaming.alerting.config import AlertConfig
from streaming.alerting.observation import MAIN
from watermark_client.timeutil import human_ms

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
