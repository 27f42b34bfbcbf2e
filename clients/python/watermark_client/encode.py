"""An event as a game server sends it, checked before it leaves: the fields of the event contract
(:data:`FIELDS`) and :func:`encode_event`, the payload checked by the pipeline's own parser. Called by
``Producer.send`` on each event, and by anyone who builds payloads of their own (the Node.js producer's test)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

import orjson

from watermark_client.events import IDLE_KIND, KINDS, BadEntry, Event, parse_payload

FIELDS = ("event_id", "server", "player_id", "kind", "event_time", "region")
"""The fields of the event contract (docs/ingest.md); the producer refuses others, which are typos more often
than not (the pipeline itself ignores fields it does not know)."""


def encode_event(event: Mapping[str, Any] | Event) -> bytes:
    """The payload of one event as the pipeline reads it, checked by the pipeline's own parser
    (:func:`~watermark_client.events.parse_payload`); a ``ValueError`` that names the field otherwise.

    ``event_time`` may be an ISO-8601 string (UTC; an offset is converted, a time without one is taken as
    UTC) or a timezone-aware ``datetime``; it is sent as UTC with ``Z``. ``player_id`` and ``event_id`` may be
    integers; they are sent as strings."""
    if isinstance(event, Event):
        payload = event.payload()
        has_id = event.event_id is not None
    else:
        unknown = [k for k in event if k not in FIELDS]
        if unknown:
            raise ValueError(f"invalid event: {unknown[0]!r} is not a field of the event contract "
                             f"(fields: {', '.join(FIELDS)})")
        doc = dict(event)
        ts = doc.get("event_time")
        if isinstance(ts, datetime):
            if ts.tzinfo is None:
                raise ValueError("invalid event: event_time is a datetime without a timezone; use an aware "
                                 "datetime (e.g. datetime.now(UTC)) or an ISO-8601 string")
            doc["event_time"] = ts.isoformat()
        try:
            payload = orjson.dumps(doc)
        except TypeError as exc:  # orjson.JSONEncodeError: a value JSON cannot hold
            raise ValueError(f"invalid event: {exc}") from None
        has_id = doc.get("event_id") is not None
    parsed = parse_payload(payload, "0-0")
    if isinstance(parsed, BadEntry):
        raise ValueError(f"invalid event: {parsed.detail}")
    if parsed.kind == IDLE_KIND:
        raise ValueError(f"invalid event: kind must be one of {', '.join(KINDS)}, got 'idle' (idle markers are "
                         "the job's own)")
    return (parsed if has_id else replace(parsed, event_id=None)).payload()
