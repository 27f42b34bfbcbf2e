"""What the monitor pushes to a Prometheus Alertmanager (pure; ``streaming.apps.monitor.alertmanager`` sends it).

Alertmanager's v2 API takes ``POST /api/v2/alerts`` with a list of alerts, each its labels, annotations,
``startsAt``, ``endsAt`` and ``generatorURL``; an alert is known by its labels. Prometheus pushes every firing
alert again each ``resend_delay`` with an ``endsAt`` a few of those ahead, and a resolved one once with the time
it resolved: Alertmanager then groups them (an outage of 300 servers is one notification), de-duplicates,
silences, inhibits and routes, and an alert whose sender stopped resolves by itself when its ``endsAt`` passes.
The monitor does the same, with the labels and annotations its own webhook sends (decision 0013).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from streaming.alerting.conditions import one_server
from streaming.alerting.lifecycle import AlertState, Notice
from streaming.alerting.webhook import rfc3339

VALID_FOR_RESENDS = 4
"""A pushed firing alert is valid for this many resend intervals (Prometheus' own choice): a push or three may
fail without the alert resolving in Alertmanager."""


def postable_alerts(firing: Iterable[AlertState], resolved: Iterable[Notice], namespace: str, external_url: str,
                    now_ms: int, resend_ms: int) -> list[dict[str, Any]]:
    """The body of one ``POST /api/v2/alerts``: every firing alert, valid until ``now + 4 x resend``, and every
    notice of an alert resolved since the last push that Alertmanager took, ended when it resolved."""
    source = f"{external_url.rstrip('/')}/alerts"
    out = []
    for s in firing:
        n = Notice(status="firing", rule=s.rule, subject=s.subject, starts_at_ms=s.since_ms, at_ms=now_ms,
                   value=s.value, summary=s.summary, servers=s.servers)
        out.append(_alert(n, namespace, source, now_ms + VALID_FOR_RESENDS * resend_ms))
    for n in resolved:
        out.append(_alert(n, namespace, source, n.ends_at_ms if n.ends_at_ms is not None else n.at_ms))
    return out


def _alert(n: Notice, namespace: str, source: str, ends_at_ms: int) -> dict[str, Any]:
    annotations = {"summary": n.summary}
    if server := one_server(n.servers):
        annotations["server"] = server
    if n.value is not None:
        annotations["value"] = f"{n.value:g}"
    return {"labels": n.labels(namespace), "annotations": annotations, "startsAt": rfc3339(n.starts_at_ms),
            "endsAt": rfc3339(ends_at_ms), "generatorURL": source}
