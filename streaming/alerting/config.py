"""The alerts' thresholds: one TOML file (``ops/alerts.toml`` ships the defaults), read once at start.

The command (``wm-monitor``) reads the file; this module parses its text. Every threshold has a default, so a
file only names what it changes; a misspelt section or key, a value of the wrong type or out of range fails at
start with the file, the section and the key in the message, never later.
Durations are written as the rest of the configuration writes them (``30s``, ``5m``, ``1h30m``).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any
from urllib.parse import urlsplit

from streaming.rules.server_clock import NOTICEABLE_AHEAD_MS
from streaming.schema.config import ConfigError, hidden_url
from watermark_client.timeutil import format_duration_ms, parse_duration_ms


@dataclass(frozen=True)
class Timing:
    """How long a condition must hold before its alert fires (``for``) and be gone before it resolves
    (``clear``): the second keeps a condition that flaps at its threshold from paging twice."""

    for_ms: int = 0
    clear_ms: int = 0


MAX_WITHIN_MS = 3_600_000
"""The players-drop window's longest: the monitor keeps its samples in memory, and reads them back at start."""


@dataclass(frozen=True)
class PlayersDrop:
    percent: float = 50.0
    """Fires when players online on a server fall by more than this share of their peak within ``within_ms``."""
    within_ms: int = 300_000
    min_players: int = 20
    """A peak below this is too small to judge (one player leaving a server of three is 33 %)."""
    quiet_ms: int = 15_000
    """A server with no event for this long is delayed, not emptied: the alert is held, and says so."""
    lag_ms: int = 15_000
    """A server whose events arrive this late (p95 of arrival minus event time in the last batch), or whose
    newest event time trails the newest of all servers by this much, is delayed too: its events arrive, but
    late, and its players time out behind the watermark the others move."""
    settle_ms: int = 30_000
    """Held this long after the server's events (or the pipeline) catch up: players come back with their
    next event, not at once."""
    timing: Timing = Timing(for_ms=10_000, clear_ms=30_000)


@dataclass(frozen=True)
class ServerSilent:
    after_ms: int = 60_000
    timing: Timing = Timing(for_ms=0, clear_ms=10_000)


@dataclass(frozen=True)
class NameFlood:
    """Fires when the flood guard refused new server names (NEW_SERVERS_PER_MINUTE, ``streaming.rules.fleet.admit``)
    in this minute or the one before: one alert for the burst, with its count and a few of its names."""

    timing: Timing = Timing(for_ms=0, clear_ms=60_000)


@dataclass(frozen=True)
class ClockAhead:
    ahead_ms: int = NOTICEABLE_AHEAD_MS
    """Fires when a server's events arrived further than this ahead of their own time in the online view's last
    batch with its events: its clock runs fast. Its players are judged by its own clock, so no other server's
    players are affected; the windowed pipeline's watermark is (WatermarkJump says how far)."""
    timing: Timing = Timing(for_ms=0, clear_ms=60_000)


@dataclass(frozen=True)
class LateDrops:
    per_minute: int = 100
    """Fires when more events than this were dropped as late on a server within the last minute."""
    timing: Timing = Timing(for_ms=0, clear_ms=60_000)


@dataclass(frozen=True)
class Freshness:
    above_trigger_ms: int = 5_000
    """Fires when the oldest entry not committed yet has waited longer than the trigger plus this."""
    timing: Timing = Timing(for_ms=10_000, clear_ms=30_000)


@dataclass(frozen=True)
class WatermarkFlat:
    after_ms: int = 60_000
    """Fires when a pipeline's watermark has not moved for this long while events kept arriving (accepted or
    dropped as late; :mod:`.verdicts`)."""
    timing: Timing = Timing(for_ms=0, clear_ms=10_000)


@dataclass(frozen=True)
class WatermarkJump:
    ahead_ms: int = 30_000
    """Fires when a watermark is further than this ahead of where the clock puts it (now minus the delay):
    future-dated events pushed it, and on-time events of every other server now look late."""
    timing: Timing = Timing(for_ms=0, clear_ms=10_000)


@dataclass(frozen=True)
class RedisFull:
    percent: float = 95.0
    """Fires when Redis' used memory reaches this share of its ``maxmemory`` (none set: never). At 100 % it refuses
    writes: the job's commits and the producers wait (nothing accepted is lost, nothing moves) until memory is
    freed."""
    timing: Timing = Timing(for_ms=0, clear_ms=30_000)


@dataclass(frozen=True)
class JobQuiet:
    after_ms: int = 10_000
    triggers: int = 5
    """No batch committed for ``triggers`` trigger intervals, and for at least ``after``: the job is down when entries
    wait, idle when none does (:mod:`.health`). Not an alert of its own: PipelineBehind pages when entries wait."""
    first_batch_ms: int = 120_000
    """Before its first batch the job is starting, not down, until the oldest entry has waited this long: a Spark
    session takes 20-40 s to start here, and its first batch reads up to MAX_EVENTS_PER_BATCH entries."""


@dataclass(frozen=True)
class RedisUnreachable:
    timing: Timing = Timing(for_ms=5_000, clear_ms=5_000)


@dataclass(frozen=True)
class Webhook:
    url: str = ""
    """An Alertmanager-compatible receiver (``POST`` of its webhook JSON); empty: no webhook."""
    timeout_ms: int = 5_000
    max_backoff_ms: int = 60_000
    group_wait_ms: int = 5_000
    """Notices of one alert name and status decided within this of each other go in one message (an outage of
    300 servers is one message listing them, not 300); 0 s: what is queued at once."""


@dataclass(frozen=True)
class Alertmanager:
    url: str = ""
    """A Prometheus Alertmanager (``http://host:9093``): every firing alert is pushed to its v2 API, as Prometheus
    does, for it to group, de-duplicate, silence, inhibit and route (decision 0013); empty: none."""
    resend_ms: int = 60_000
    """Firing alerts are pushed again this often (Prometheus' ``resend_delay``), each valid for four times it: an
    alert whose monitor stopped resolves in Alertmanager on its own."""
    timeout_ms: int = 5_000


@dataclass(frozen=True)
class AlertConfig:
    players_drop: PlayersDrop = field(default_factory=PlayersDrop)
    server_silent: ServerSilent = field(default_factory=ServerSilent)
    name_flood: NameFlood = field(default_factory=NameFlood)
    clock_ahead: ClockAhead = field(default_factory=ClockAhead)
    late_drops: LateDrops = field(default_factory=LateDrops)
    freshness: Freshness = field(default_factory=Freshness)
    watermark_flat: WatermarkFlat = field(default_factory=WatermarkFlat)
    watermark_jump: WatermarkJump = field(default_factory=WatermarkJump)
    job_quiet: JobQuiet = field(default_factory=JobQuiet)
    redis_unreachable: RedisUnreachable = field(default_factory=RedisUnreachable)
    redis_full: RedisFull = field(default_factory=RedisFull)
    webhook: Webhook = field(default_factory=Webhook)
    alertmanager: Alertmanager = field(default_factory=Alertmanager)

    def with_alertmanager_url(self, url: str, where: str) -> AlertConfig:
        """Another Alertmanager (``ALERTMANAGER_URL`` overrides the file's), checked as the file's would be."""
        am = replace(self.alertmanager, url=url.strip())
        _check_section(am, where)
        return replace(self, alertmanager=am)

    def with_webhook_url(self, url: str, where: str) -> AlertConfig:
        """Another receiver (``ALERT_WEBHOOK_URL`` overrides the file's), checked as the file's would be."""
        webhook = replace(self.webhook, url=url.strip())
        _check_section(webhook, where)
        return replace(self, webhook=webhook)

    def without_urls(self) -> AlertConfig:
        """The thresholds alone, for others to judge with (:mod:`.verdicts`): the receivers' URLs may hold
        credentials."""
        return replace(self, webhook=replace(self.webhook, url=""), alertmanager=replace(self.alertmanager, url=""))

    def timing(self, rule: str) -> Timing:
        t: Timing = getattr(self, _SECTION_OF.get(rule, rule)).timing
        return t

    @classmethod
    def from_toml(cls, text: str, where: str = "alerts.toml") -> AlertConfig:
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{where}: not TOML: {exc}") from None
        return cls.from_mapping(doc, where)

    @classmethod
    def from_mapping(cls, doc: Mapping[str, Any], where: str) -> AlertConfig:
        sections = {f.name: f for f in fields(cls)}
        unknown = sorted(set(doc) - set(sections))
        if unknown:
            raise ConfigError(f"{where}: unknown section [{unknown[0]}]; the sections are: {', '.join(sections)}")
        parsed = {name: _section(getattr(cls(), name), doc[name], f"{where} [{name}]") for name in doc}
        return cls(**parsed)


_SECTION_OF = {"region_players_drop": "players_drop"}
"""Rules judged by another's thresholds: a region's players drop is a server's, summed over the region."""
_DURATION_SUFFIX = "_ms"
_TIMING_KEYS = {"for": "for_ms", "clear": "clear_ms"}


def _section(default: Any, raw: object, where: str) -> Any:  # noqa: ANN401 - one of the section dataclasses
    """One section: its keys as written (``within``, ``for``), checked against the section's defaults."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be a table of keys, got {raw!r}")
    known = _keys_of(default)
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; the keys are: {', '.join(known)}")
    values = {k: _value(k, raw[k], known[k], where) for k in raw}
    timing = {_TIMING_KEYS[k]: values.pop(k) for k in list(values) if k in _TIMING_KEYS}
    changes = {known[k][0]: v for k, v in values.items()}
    if timing:
        changes["timing"] = Timing(**{**vars(default.timing), **timing})
    out = type(default)(**{**{f.name: getattr(default, f.name) for f in fields(default)}, **changes})
    _check_section(out, where)
    return out


def _keys_of(section: Any) -> dict[str, tuple[str, object]]:  # noqa: ANN401
    """The keys a file writes for a section: ``within`` for ``within_ms``, ``for`` and ``clear`` for its
    timing; each with its field name and default."""
    keys: dict[str, tuple[str, object]] = {}
    for f in fields(section):
        value = getattr(section, f.name)
        if isinstance(value, Timing):
            keys["for"] = ("for_ms", value.for_ms)
            keys["clear"] = ("clear_ms", value.clear_ms)
        else:
            keys[f.name.removesuffix(_DURATION_SUFFIX)] = (f.name, value)
    return keys


def _value(key: str, raw: object, known: tuple[str, object], where: str) -> object:
    name, default = known
    if name.endswith(_DURATION_SUFFIX):
        if not isinstance(raw, str):
            raise ConfigError(f"{where} {key} must be a duration such as \"30s\" or \"5m\", got {raw!r}")
        try:
            return parse_duration_ms(raw)
        except ValueError as exc:
            raise ConfigError(f"{where} {key}: {exc}") from None
    if isinstance(default, str):
        if not isinstance(raw, str):
            raise ConfigError(f"{where} {key} must be a string, got {raw!r}")
        return raw
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise ConfigError(f"{where} {key} must be a number, got {raw!r}")
    if isinstance(default, int) and not isinstance(raw, int):
        raise ConfigError(f"{where} {key} must be a whole number, got {raw!r}")
    return float(raw) if isinstance(default, float) else raw  # `percent = 95` is 95.0, as the defaults' rules say


def _check_section(s: Any, where: str) -> None:  # noqa: ANN401
    """Ranges: what makes no sense as a threshold."""
    if isinstance(s, PlayersDrop):
        _require(0 < s.percent < 100, where, f"percent must be above 0 and below 100, got {s.percent}")
        _require(s.min_players >= 1, where, f"min_players must be at least 1, got {s.min_players}")
        _require(0 < s.within_ms <= MAX_WITHIN_MS, where, f"within must be longer than 0s and at most "
                                                          f"{format_duration_ms(MAX_WITHIN_MS)}")
        _require(s.quiet_ms > 0, where, "quiet must be longer than 0s")
        _require(s.lag_ms > 0, where, "lag must be longer than 0s")
    for name in ("after_ms", "above_trigger_ms", "ahead_ms", "timeout_ms", "max_backoff_ms", "resend_ms",
                 "first_batch_ms"):
        if getattr(s, name, 1) <= 0:
            _require(False, where, f"{name.removesuffix(_DURATION_SUFFIX)} must be longer than 0s, got "
                                   f"{format_duration_ms(getattr(s, name))}")
    if isinstance(s, JobQuiet):
        _require(s.triggers >= 1, where, f"triggers must be at least 1, got {s.triggers}")
    if isinstance(s, LateDrops):
        _require(s.per_minute >= 0, where, f"per_minute must not be negative, got {s.per_minute}")
    if isinstance(s, Webhook | Alertmanager) and s.url:
        _require(s.url.startswith(("http://", "https://")), where, f"url must start with http:// or https://, "
                                                                   f"got {hidden_url(s.url)!r}")
        try:
            ok = bool(urlsplit(s.url).hostname) and (urlsplit(s.url).port or 0) >= 0
        except ValueError:
            ok = False
        _require(ok, where, f"url {hidden_url(s.url)!r} has no host, or a port that is not a number")


def _require(ok: bool, where: str, message: str) -> None:
    if not ok:
        raise ConfigError(f"{where} {message}")


def to_toml(cfg: AlertConfig) -> str:
    """The file that gives ``cfg``: how ``ops/alerts.toml`` is kept equal to the defaults (a test compares)."""
    lines: list[str] = []
    for section in fields(cfg):
        value = getattr(cfg, section.name)
        lines.append(f"[{section.name}]")
        for key, (name, _default) in _keys_of(value).items():
            v = getattr(value.timing, name) if key in _TIMING_KEYS else getattr(value, name)
            lines.append(f"{key} = {_toml_value(name, v)}")
        lines.append("")
    return "\n".join(lines)


def _toml_value(name: str, v: object) -> str:
    if name.endswith(_DURATION_SUFFIX):
        return f'"{format_duration_ms(int(v))}"'  # type: ignore[call-overload]
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(v)
