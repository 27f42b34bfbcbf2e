"""The webhook's message and its retry schedule (pure; ``streaming.apps.monitor.notify`` sends).

The message is Alertmanager's webhook JSON (version 4), the notices of one alert name and status decided within
the webhook's ``group_wait`` in one message (:func:`group_payload`), so anything that takes
Alertmanager's webhooks (a chat bridge, an incident tool, Alertmanager's own ``webhook_config`` receivers)
takes ours. ``startsAt`` is when the alert fired and stays the same in its resolve, so a receiver can pair
them; a firing alert's ``endsAt`` is Alertmanager's zero time.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from streaming.alerting.conditions import RULES, one_server
from streaming.alerting.lifecycle import Notice, fingerprint

ZERO_TIME = "0001-01-01T00:00:00Z"
RECEIVER = "watermark"


def rfc3339(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def payload(n: Notice, namespace: str, external_url: str) -> dict[str, object]:
    """One notice as a message of its own."""
    return group_payload([n], namespace, external_url)


def group_key(n: Notice) -> tuple[str, str]:
    """Notices sent in one message: the same alert name and status (Alertmanager's ``group_by: [alertname]``)."""
    return RULES[n.rule][0], n.status


def group_payload(notices: Sequence[Notice], namespace: str, external_url: str) -> dict[str, object]:
    """Notices of one :func:`group_key` as one message listing each alert: an input outage on 300 servers is one
    message with 300 alerts, not 300 messages. ``commonLabels`` and ``commonAnnotations`` hold what they all
    share, as Alertmanager's do."""
    alerts = [_alert(n, namespace, external_url) for n in notices]
    labels = [a["labels"] for a in alerts]
    annotations = [a["annotations"] for a in alerts]
    common_labels = {k: v for k, v in labels[0].items() if all(x.get(k) == v for x in labels[1:])}
    common_annotations = {k: v for k, v in annotations[0].items() if all(x.get(k) == v for x in annotations[1:])}
    name = str(labels[0]["alertname"])
    return {
        "version": "4", "groupKey": '{}:{alertname="' + name + '"}', "truncatedAlerts": 0,
        "status": notices[0].status, "receiver": RECEIVER, "groupLabels": {"alertname": name},
        "commonLabels": common_labels, "commonAnnotations": common_annotations, "externalURL": external_url,
        "alerts": alerts,
    }


def _alert(n: Notice, namespace: str, external_url: str) -> dict[str, Any]:
    labels = n.labels(namespace)
    annotations = {"summary": n.summary, "notice_id": f"{namespace}:{n.id}"}
    if server := one_server(n.servers):
        annotations["server"] = server
    if n.value is not None:
        annotations["value"] = f"{n.value:g}"
    return {
        "status": n.status, "labels": labels, "annotations": annotations, "startsAt": rfc3339(n.starts_at_ms),
        "endsAt": rfc3339(n.ends_at_ms) if n.ends_at_ms is not None else ZERO_TIME,
        "generatorURL": f"{external_url.rstrip('/')}/alerts",
        "fingerprint": fingerprint(n.rule, n.subject, namespace),
    }


def backoff_ms(attempt: int, max_ms: int, base_ms: int = 500) -> int:
    """Wait before retry ``attempt`` (1, 2, ...): doubling from ``base_ms``, at most ``max_ms``."""
    return min(max_ms, base_ms << min(attempt - 1, 30))
