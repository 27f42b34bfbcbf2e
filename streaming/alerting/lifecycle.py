"""From findings to alerts: pending, firing, held, resolved; and the notices a change sends.

One alert per (rule, subject). A condition that holds becomes *pending*, and *firing* once it has held for the
rule's ``for``; a firing alert *resolves* once its condition has been gone for ``clear`` (so a value flapping
at its threshold pages once). A condition the rule cannot judge now (``active is None``) changes nothing, so a
monitor restart neither fires nor resolves by itself: the alerts are read back from Redis as they were. A
*held* finding (the data it judges is delayed) never starts an alert; it is shown as held with its reason
instead, and a firing alert stays firing while held.

Each fire and each resolve is one :class:`Notice` with a stable id (fingerprint, start, status): the webhook
sends it once; a receiver seeing the same id twice (a crash between delivery and acknowledgement) can tell.
Decide-then-apply: :func:`step_all` is pure; ``streaming.store.alert_store`` writes what it decided.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import msgspec

from streaming.alerting.conditions import RULES, Finding, subject_labels
from streaming.alerting.config import Timing
from streaming.schema.records import decode_json

Status = Literal["pending", "firing", "held"]


class AlertState(msgspec.Struct, frozen=True, kw_only=True):
    """One alert as it stands, a field of ``{ns}:alerts`` (key: :attr:`key`)."""

    rule: str
    subject: str
    status: Status
    since_ms: int
    """Pending, held: since when the condition holds. Firing: when it fired (the notices' ``startsAt``)."""
    active_since_ms: int
    clear_since_ms: int | None = None
    """Firing, condition gone since then: resolves at ``clear_since_ms + clear``."""
    value: float | None = None
    summary: str = ""
    held: str | None = None
    updated_ms: int = 0
    servers: tuple[str, ...] = ()
    """A fleet alert's servers (:attr:`streaming.alerting.conditions.Finding.servers`)."""

    @property
    def key(self) -> str:
        return alert_key(self.rule, self.subject)

    @property
    def alertname(self) -> str:
        return RULES[self.rule][0]

    def encode(self) -> bytes:
        return _ENCODER.encode(self)

    @classmethod
    def decode(cls, raw: bytes | str, where: str) -> AlertState:
        return decode_json(raw, cls, where)


class Notice(msgspec.Struct, frozen=True, kw_only=True):
    """An alert fired or resolved: what the webhook sends and the history keeps."""

    status: Literal["firing", "resolved"]
    rule: str
    subject: str
    starts_at_ms: int
    ends_at_ms: int | None = None
    at_ms: int
    value: float | None = None
    summary: str = ""
    servers: tuple[str, ...] = ()

    @property
    def alertname(self) -> str:
        return RULES[self.rule][0]

    @property
    def severity(self) -> str:
        return RULES[self.rule][1]

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.rule, self.subject)

    @property
    def id(self) -> str:
        return f"{self.fingerprint}:{self.starts_at_ms}:{self.status}"

    def labels(self, namespace: str) -> dict[str, str]:
        return {"alertname": self.alertname, "severity": self.severity, "namespace": namespace,
                **subject_labels(self.rule, self.subject)}

    def encode(self) -> bytes:
        return _ENCODER.encode(self)

    @classmethod
    def decode(cls, raw: bytes | str, where: str) -> Notice:
        return decode_json(raw, cls, where)


_ENCODER = msgspec.json.Encoder()


def alert_key(rule: str, subject: str) -> str:
    return f"{rule}|{subject}"


def fingerprint(rule: str, subject: str, namespace: str = "") -> str:
    """Stable per alert (rule, subject and the pipeline's namespace), as Alertmanager's is per label set."""
    return hashlib.sha256(f"{namespace}|{alert_key(rule, subject)}".encode()).hexdigest()[:16]


def step(prev: AlertState | None, f: Finding, now_ms: int, timing: Timing) -> tuple[AlertState | None, Notice | None]:
    """One alert's next state and what to send, from its previous state and this round's finding."""
    if f.active is None:
        return prev, None
    base = dict(rule=f.rule, subject=f.subject, value=f.value, summary=f.summary, held=f.held, updated_ms=now_ms,
                servers=f.servers)
    if prev is not None and prev.status == "firing":
        return _firing(prev, f, now_ms, timing, base)
    if not f.active:
        return None, None
    since = prev.active_since_ms if prev is not None else now_ms
    if f.held is not None:
        return AlertState(status="held", since_ms=since, active_since_ms=since, **base), None  # type: ignore[arg-type]
    since = since if prev is not None and prev.status == "pending" else now_ms
    if now_ms - since >= timing.for_ms:
        fired = AlertState(status="firing", since_ms=now_ms, active_since_ms=since, **base)  # type: ignore[arg-type]
        return fired, _notice(fired, "firing", now_ms)
    return AlertState(status="pending", since_ms=since, active_since_ms=since, **base), None  # type: ignore[arg-type]


def _firing(prev: AlertState, f: Finding, now_ms: int, timing: Timing,
            base: Mapping[str, object]) -> tuple[AlertState | None, Notice | None]:
    if f.active or f.held is not None:
        return AlertState(status="firing", since_ms=prev.since_ms, active_since_ms=prev.active_since_ms,
                          **base), None  # type: ignore[arg-type]
    clear_since = prev.clear_since_ms if prev.clear_since_ms is not None else now_ms
    if now_ms - clear_since >= timing.clear_ms:
        return None, _notice(prev, "resolved", now_ms, f)
    return AlertState(status="firing", since_ms=prev.since_ms, active_since_ms=prev.active_since_ms,
                      clear_since_ms=clear_since, **base), None  # type: ignore[arg-type]


def _notice(s: AlertState, status: Literal["firing", "resolved"], now_ms: int, f: Finding | None = None) -> Notice:
    return Notice(status=status, rule=s.rule, subject=s.subject, starts_at_ms=s.since_ms,
                  ends_at_ms=now_ms if status == "resolved" else None, at_ms=now_ms,
                  value=f.value if f is not None else s.value, summary=f.summary if f is not None else s.summary,
                  servers=f.servers if f is not None else s.servers)


@dataclass(frozen=True)
class Decision:
    """What one round changes: alerts to write, alerts to delete, notices to send and keep."""

    states: dict[str, AlertState]
    removed: tuple[str, ...]
    notices: tuple[Notice, ...]


def step_all(prev: Mapping[str, AlertState], findings: Iterable[Finding], now_ms: int,
             timing: Mapping[str, Timing], complete: bool = True) -> Decision:
    """Every alert with a finding this round steps. ``complete``: the findings cover everything there is (the
    observation read all of the stack), so an alert without one lost its subject (a lane removed, a server's
    keys expired) and clears like a condition gone; otherwise (Redis away) such alerts stay as they are."""
    findings = list(findings)
    if complete:
        seen = {alert_key(f.rule, f.subject) for f in findings}
        findings += [Finding(s.rule, s.subject, False, None, f"{s.subject or s.rule} is no longer reported")
                     for key, s in prev.items() if key not in seen]
    states = dict(prev)
    removed: list[str] = []
    notices: list[Notice] = []
    for f in findings:
        key = alert_key(f.rule, f.subject)
        new, notice = step(prev.get(key), f, now_ms, timing[f.rule])
        if new is None:
            if key in states:
                del states[key]
                removed.append(key)
        else:
            states[key] = new
        if notice is not None:
            notices.append(notice)
    return Decision(states, tuple(removed), tuple(notices))
