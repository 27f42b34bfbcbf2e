"""The webhook's message and its retry schedule (pure; ``watermark.apps.notify`` sends).

The message is Alertmanager's webhook JSON (version 4), one alert per message, so anything that takes
Alertmanager's webhooks (a chat bridge, an incident tool, Alertmanager's own ``webhook_config`` receivers)
takes ours. ``startsAt`` is when the alert fired and stays the same in its resolve, so a receiver can pair
them; a firing alert's ``endsAt`` is Alertmanager's zero time.
"""

from __future__ import annotations

from datetime import UTC, datetime

from watermark.alerting.lifecycle import Notice, fingerprint

ZERO_TIME = "0001-01-01T00:00:00Z"
RECEIVER = "watermark"


def rfc3339(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def payload(n: Notice, namespace: str, external_url: str) -> dict[str, object]:
    labels = n.labels(namespace)
    annotations = {"summary": n.summary, "notice_id": f"{namespace}:{n.id}"}
    if n.value is not None:
        annotations["value"] = f"{n.value:g}"
    alert = {
        "status": n.status, "labels": labels, "annotations": annotations, "startsAt": rfc3339(n.starts_at_ms),
        "endsAt": rfc3339(n.ends_at_ms) if n.ends_at_ms is not None else ZERO_TIME,
        "generatorURL": f"{external_url.rstrip('/')}/alerts",
        "fingerprint": fingerprint(n.rule, n.subject, namespace),
    }
    group = {"alertname": labels["alertname"]}
    return {
        "version": "4", "groupKey": '{}:{alertname="' + labels["alertname"] + '"}', "truncatedAlerts": 0,
        "status": n.status, "receiver": RECEIVER, "groupLabels": group, "commonLabels": labels,
        "commonAnnotations": annotations, "externalURL": external_url, "alerts": [alert],
    }


def backoff_ms(attempt: int, max_ms: int, base_ms: int = 500) -> int:
    """Wait before retry ``attempt`` (1, 2, ...): doubling from ``base_ms``, at most ``max_ms``."""
    return min(max_ms, base_ms << min(attempt - 1, 30))
