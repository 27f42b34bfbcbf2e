"""The alerts in Redis: what stands (``{ns}:alerts``), what happened (``{ns}:alerts:history``, the newest 20,000) and
what the webhook still owes (``{ns}:alerts:outbox``); the monitor writes them, the Alerts page reads them.

:func:`apply_decision` writes one round of :func:`streaming.alerting.lifecycle.step_all` in one transaction, so
a notice is in the history and in the outbox exactly when its alert changed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import redis

from streaming.alerting.config import AlertConfig, to_toml
from streaming.alerting.health import Health
from streaming.alerting.lifecycle import AlertState, Decision, Notice
from streaming.schema.config import ConfigError
from streaming.schema.keys import KeySchema
from streaming.schema.records import ControlChange, RecordError
from streaming.store.control_store import control_changes
from watermark_client.connection import home

DAY_MS = 86_400_000
NOTICE_FIELD = "n"
HISTORY_READ = 2_000
"""Notices the page reads back (the newest); a day of alerts is far fewer unless they flap by the thousand."""
HISTORY_KEEP = 20_000
"""Notices kept in the history stream at most (the Alerts page shows the last day of them, the time charts draw a
week: an outage of all 300 servers is 600 notices; past this many alerts flap by the thousand, and then the
newest are the ones to see). About 6 MB at most; the entries' IDs are Redis' clock, the notices' times the
monitor's, so the bound is a count, not an age."""
OUTBOX_KEEP = 10_000
"""Notices the webhook may owe at most (about 3 MB): past it, while a receiver refuses for days, the oldest owed
leave the outbox unsent and are counted (``dropped`` in ``{ns}:alerts:webhook``, shown on the Alerts page and in
the log); they stay in the history. A receiver back after such an outage gets the newest 10,000 changes, oldest
first, which is what an on-call person can still act on."""

# The trim's count is what leaves: exact, so "dropped" plus "delivered" plus what is owed is every notice.
_TRIM_OUTBOX_LUA = """
local dropped = redis.call('XTRIM', KEYS[1], 'MAXLEN', ARGV[1])
if dropped > 0 then redis.call('HINCRBY', KEYS[2], 'dropped', dropped) end
return dropped
"""


OnBad = Callable[[str], None]
THRESHOLDS_FIELD = "thresholds"
HEALTH_FIELD = "health"
"""In ``{ns}:alerts:monitor``: each pipeline's health state in the monitor's last round, JSON."""
"""In ``{ns}:alerts:monitor``: the running monitor's thresholds (``ops/alerts.toml`` without the receivers'
URLs), so the dashboard's status line judges with them (:mod:`streaming.alerting.verdicts`)."""


def publish_thresholds(pipe: redis.client.Pipeline, keys: KeySchema, cfg: AlertConfig) -> None:
    pipe.hset(keys.alerts_monitor, THRESHOLDS_FIELD, to_toml(cfg.without_urls()))


def thresholds_from(raw: bytes | None) -> AlertConfig:
    """The published thresholds; the defaults (those of a monitor without ``ops/alerts.toml``) when no monitor
    has published any, or a monitor of another version wrote what this one cannot read."""
    if not raw:
        return AlertConfig()
    try:
        return AlertConfig.from_toml(raw.decode(), "the monitor's published thresholds")
    except (ConfigError, UnicodeDecodeError):
        return AlertConfig()


def _skip(on_bad: OnBad | None) -> OnBad:
    def raise_it(error: str) -> None:
        raise RecordError(error)
    return on_bad or raise_it


def read_alerts(client: redis.Redis, keys: KeySchema, on_bad: OnBad | None = None) -> dict[str, AlertState]:
    """The alerts as they stand; a malformed one is passed to ``on_bad`` and left out (raised without it)."""
    out = {}
    for k, v in client.hgetall(keys.alerts).items():
        try:
            out[k.decode()] = AlertState.decode(v, f"alert {k.decode()!r} in {keys.alerts}")
        except RecordError as exc:
            _skip(on_bad)(f"{exc}: left out")
    return out


def apply_decision(client: redis.Redis, keys: KeySchema, d: Decision, now_ms: int, *, outbox: bool,
                   history_only: int = 0, interval_ms: int = 1_000, outbox_keep: int = OUTBOX_KEEP,
                   health: Mapping[str, Health] | None = None,
                   paged: Callable[[Notice], bool] = lambda n: True) -> list[tuple[str, Notice]]:
    """The round's alerts (the whole hash, so what changed while Redis was away is right too), history and,
    with a webhook, outbox (at most ``outbox_keep``, the oldest dropped and counted), in one MULTI; the outbox
    entries' IDs with their notices. The first ``history_only`` notices were decided while Redis was unreachable
    and already handed to the webhook. ``health``: each pipeline's state this round, for the Alerts page.
    ``paged``: which notices the outbox takes (the others are kept in the history only)."""
    owed = [n for n in d.notices[history_only:] if paged(n)] if outbox else ()
    with home(client, keys.alerts).pipeline(transaction=True) as pipe:
        states = json.dumps({k: str(v) for k, v in (health or {}).items()})
        pipe.hset(keys.alerts_monitor, mapping={"round_ms": now_ms, "interval_ms": interval_ms, HEALTH_FIELD: states})
        pipe.delete(keys.alerts)
        if d.states:
            pipe.hset(keys.alerts, mapping={k: s.encode() for k, s in d.states.items()})
        for n in d.notices:
            pipe.xadd(keys.alerts_history, {NOTICE_FIELD: n.encode()}, maxlen=HISTORY_KEEP, approximate=True)
        for n in owed:
            pipe.xadd(keys.alerts_outbox, {NOTICE_FIELD: n.encode()})
        if owed:
            pipe.eval(_TRIM_OUTBOX_LUA, 2, keys.alerts_outbox, keys.alerts_webhook, outbox_keep)
        replies = pipe.execute()
    if not owed:
        return []
    added = replies[len(replies) - len(owed) - 1:-1]
    return [(r.decode() if isinstance(r, bytes) else r, n) for r, n in zip(added, owed, strict=True)]


def still_owed(client: redis.Redis, keys: KeySchema, entry_ids: list[str]) -> list[bool]:
    """For each outbox entry, whether it is still there: one trimmed away was counted as dropped, and is not sent
    after all (it would then be both)."""
    pipe = client.pipeline(transaction=False)
    for eid in entry_ids:
        pipe.xrange(keys.alerts_outbox, eid, eid)
    return [bool(r) for r in pipe.execute()]


def read_outbox(client: redis.Redis, keys: KeySchema, on_bad: OnBad | None = None) -> list[tuple[str, Notice]]:
    """Notices not delivered yet, oldest first: what a restarted monitor sends before anything new. A malformed
    entry is passed to ``on_bad`` and left in the stream, where it can be looked at (raised without it)."""
    out = []
    for eid, f in client.xrange(keys.alerts_outbox):
        where = f"{keys.alerts_outbox} entry {eid.decode()}"
        try:
            out.append((eid.decode(), Notice.decode(f.get(NOTICE_FIELD.encode(), b""), where)))
        except RecordError as exc:
            _skip(on_bad)(f"{exc}: not sent")
    return out


def notices_since(entries: list, since_ms: int, where: str) -> list[Notice]:
    """Oldest first, those at or after ``since_ms`` by the notice's own time (the monitor's clock, not the
    entry IDs' Redis clock)."""
    out = [Notice.decode(f[NOTICE_FIELD.encode()], f"{where} entry {eid.decode()}") for eid, f in reversed(entries)]
    return [n for n in out if n.at_ms >= since_ms]


@dataclass(frozen=True)
class WebhookStatus:
    url: str = ""
    delivered: int = 0
    failures: int = 0
    last_ok_ms: int | None = None
    last_error: str | None = None
    last_error_ms: int | None = None
    waiting: int = 0
    dropped: int = 0
    """Notices the outbox could not hold while the receiver refused (:data:`OUTBOX_KEEP`): never sent."""

    @classmethod
    def from_hash(cls, h: dict[bytes, bytes], waiting: int) -> WebhookStatus:
        s = {k.decode(): v.decode() for k, v in h.items()}
        return cls(url=s.get("url", ""), delivered=int(s.get("delivered", 0)), failures=int(s.get("failures", 0)),
                   last_ok_ms=int(s["last_ok_ms"]) if s.get("last_ok_ms") else None,
                   last_error=s.get("last_error") or None,
                   last_error_ms=int(s["last_error_ms"]) if s.get("last_error_ms") else None, waiting=waiting,
                   dropped=int(s.get("dropped", 0)))


DELIVERED_KEEP_MS = 7 * DAY_MS


def acknowledge(client: redis.Redis, keys: KeySchema, entry_id: str | None, notice_id: str, now_ms: int,
                delivered: bool = True) -> None:
    """A notice delivered (``delivered``: remembered by its id, counted) or rejected for good: out of the
    outbox either way."""
    with home(client, keys.alerts_outbox).pipeline(transaction=True) as pipe:
        if entry_id is not None:
            pipe.xdel(keys.alerts_outbox, entry_id)
        if delivered:
            pipe.zadd(keys.alerts_delivered, {notice_id: now_ms})
            pipe.zremrangebyscore(keys.alerts_delivered, "-inf", now_ms - DELIVERED_KEEP_MS)
            pipe.hincrby(keys.alerts_webhook, "delivered", 1)
            pipe.hset(keys.alerts_webhook, "last_ok_ms", now_ms)
        pipe.execute()


def was_delivered(client: redis.Redis, keys: KeySchema, notice_id: str) -> bool:
    return client.zscore(keys.alerts_delivered, notice_id) is not None


def record_failure(client: redis.Redis, keys: KeySchema, error: str, now_ms: int) -> None:
    with home(client, keys.alerts_webhook).pipeline(transaction=True) as pipe:
        pipe.hincrby(keys.alerts_webhook, "failures", 1)
        pipe.hset(keys.alerts_webhook, mapping={"last_error": error[:500], "last_error_ms": now_ms})
        pipe.execute()


@dataclass(frozen=True)
class AlertView:
    """What the Alerts page shows."""

    alerts: dict[str, AlertState]
    history: list[Notice]
    webhook: WebhookStatus
    round_ms: int | None
    """The monitor's last round; None: no monitor has run against this namespace."""
    interval_ms: int
    watching: str = ""
    """The monitor's thresholds in one line."""
    health: dict[str, Health] = field(default_factory=dict)
    """Each pipeline's state in the monitor's last round (``streaming.alerting.health``)."""
    control_changes: list[ControlChange] = field(default_factory=list)
    """Who changed the lab's control settings, newest first (``{ns}:control:audit``), beside the alerts."""


CONTROL_CHANGES_SHOWN = 20


def read_alert_view(client: redis.Redis, keys: KeySchema, now_ms: int) -> AlertView:
    """In one round trip: the alerts, the last day's history, the webhook, the monitor's last round, and who
    changed the lab's control settings."""
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.alerts)
    pipe.xrevrange(keys.alerts_history, count=HISTORY_READ)
    pipe.hgetall(keys.alerts_webhook)
    pipe.xlen(keys.alerts_outbox)
    pipe.hmget(keys.alerts_monitor, ["round_ms", "interval_ms", "watching", HEALTH_FIELD])
    pipe.xrevrange(keys.control_audit, count=CONTROL_CHANGES_SHOWN)
    alerts, history, webhook, waiting, (round_ms, interval_ms, watching, health), audit = pipe.execute()
    return AlertView(
        alerts={k.decode(): AlertState.decode(v, f"alert {k.decode()!r}") for k, v in alerts.items()},
        history=notices_since(history, now_ms - DAY_MS, keys.alerts_history),
        webhook=WebhookStatus.from_hash(webhook, int(waiting)), round_ms=int(round_ms) if round_ms else None,
        interval_ms=int(interval_ms) if interval_ms else 1_000, watching=watching.decode() if watching else "",
        health=health_from(health), control_changes=control_changes(audit))


def health_from(raw: bytes | None) -> dict[str, Health]:
    """The monitor's published states; one it does not know (a newer monitor's) or a malformed field is left out:
    the page then says nothing of it rather than something wrong."""
    try:
        doc = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    if not isinstance(doc, dict):
        return {}
    return {str(k): Health(v) for k, v in doc.items() if v in Health.__members__.values()}
