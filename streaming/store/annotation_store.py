"""Annotations in Redis (``{ns}:annotations``, a zset of JSON :class:`streaming.schema.records.Annotation` scored by
their start): added by ``wm-annotate`` or ``POST /annotations``, read with the alerts' history by every time chart
(:func:`read_happenings`).

Bounded: each add drops those that started more than ``keep_days`` (``HISTORY_DAYS``) + 1 days ago and keeps the
newest :data:`ANNOTATIONS_KEEP`; a chart reads at most :data:`READ_LIMIT` (the newest starting before its end), one
command whatever the range.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import redis

from streaming.alerting.lifecycle import Notice
from streaming.rules.online.rollup import DAY_MS
from streaming.schema.keys import KeySchema
from streaming.schema.records import Annotation, RecordError
from streaming.store.alert_store import notices_since
from watermark_client.connection import home
from watermark_client.timeutil import parse_duration_ms, parse_iso_us

ANNOTATIONS_KEEP = 10_000
READ_LIMIT = 500
ALERTS_READ = 5_000
"""Notices a time chart reads back (the newest): a week of alerts unless they flap by the thousand."""


def _time_ms(value: object, name: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return parse_iso_us(value) // 1000
        except (ValueError, OverflowError):
            pass
    raise ValueError(f"{name} must be an ISO-8601 time (2026-11-26T21:40:00Z) or Unix milliseconds, got {value!r}")


MAX_PAST_MS = 400 * DAY_MS
"""How far back an annotation may start: the longest ``HISTORY_DAYS`` a chart can show."""
MAX_AHEAD_MS = 7 * DAY_MS
"""How far ahead an annotation may start (a maintenance announced for next week): no further, so a note dated
years ahead cannot push the real ones out of the newest :data:`ANNOTATIONS_KEEP`."""
MAX_SPAN_MS = 31 * DAY_MS
"""The longest an annotation may last."""


def annotation_from(doc: Mapping[str, Any], now_ms: int) -> Annotation:
    """An annotation from what a person gave (the command's options or the HTTP body), or ValueError saying why:
    its times within :data:`MAX_PAST_MS` before and :data:`MAX_AHEAD_MS` after now, at most :data:`MAX_SPAN_MS`
    long."""
    start = _time_ms(doc["start"], "start") if doc.get("start") is not None else now_ms
    end = _time_ms(doc["end"], "end") if doc.get("end") is not None else None
    if doc.get("for") is not None:
        end = start + parse_duration_ms(str(doc["for"]))
    if not now_ms - MAX_PAST_MS <= start <= now_ms + MAX_AHEAD_MS:
        raise ValueError("start must be within 400 days before and 7 days after now")
    if end is not None and end - start > MAX_SPAN_MS:
        raise ValueError("an annotation lasts at most 31 days")
    try:
        return Annotation(id=uuid.uuid4().hex[:12], text=str(doc.get("text") or ""),
                          kind=str(doc.get("kind") or "note"), start_ms=start, end_ms=end,
                          region=str(doc["region"]) if doc.get("region") else None, created_ms=now_ms)
    except msgspec.ValidationError as exc:
        raise ValueError(str(exc)) from None


def add_annotation(client: redis.Redis, keys: KeySchema, a: Annotation, keep_days: int, now_ms: int) -> None:
    with home(client, keys.annotations).pipeline(transaction=True) as pipe:
        pipe.zadd(keys.annotations, {a.encode(): a.start_ms})
        pipe.zremrangebyscore(keys.annotations, "-inf", f"({now_ms - (keep_days + 1) * DAY_MS}")
        pipe.zremrangebyrank(keys.annotations, 0, -ANNOTATIONS_KEEP - 1)
        pipe.execute()


def queue_annotation_reads(pipe: redis.client.Pipeline, keys: KeySchema, end_ms: int) -> None:
    """One reply, for :func:`annotations_in`."""
    pipe.zrevrangebyscore(keys.annotations, end_ms, "-inf", start=0, num=READ_LIMIT)


def annotations_in(reply: list[bytes], start_ms: int) -> list[Annotation]:
    """Those of the reply still running at ``start_ms`` or later, oldest first; a malformed one is left out."""
    out = []
    for raw in reply:
        try:
            a = Annotation.decode(raw, "a member of the annotations")
        except RecordError:
            continue
        if a.until_ms >= start_ms:
            out.append(a)
    return sorted(out, key=lambda a: (a.start_ms, a.id))


def read_annotations(client: redis.Redis, keys: KeySchema, start_ms: int, end_ms: int) -> list[Annotation]:
    pipe = client.pipeline(transaction=False)
    queue_annotation_reads(pipe, keys, end_ms)
    return annotations_in(pipe.execute()[0], start_ms)


@dataclass(frozen=True)
class Happenings:
    """What the time charts draw over their data: the annotations and the alerts' notices since ``since_ms``."""

    since_ms: int
    annotations: list[Annotation]
    notices: list[Notice]


def read_happenings(client: redis.Redis, keys: KeySchema, since_ms: int, until_ms: int) -> Happenings:
    """Two commands, whatever the range: the annotations (at most :data:`READ_LIMIT`) and the newest
    :data:`ALERTS_READ` notices, those at or after ``since_ms`` kept."""
    pipe = client.pipeline(transaction=False)
    queue_annotation_reads(pipe, keys, until_ms)
    pipe.xrevrange(keys.alerts_history, count=ALERTS_READ)
    notes, alerts = pipe.execute()
    return Happenings(since_ms, annotations_in(notes, since_ms), notices_since(alerts, since_ms, keys.alerts_history))
