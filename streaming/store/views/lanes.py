"""Which pipelines the dashboard can show: the configured one and the lab lanes the job runs beside it.

Read commands only. The job registers its lanes in ``{ns}:lanes``
(``streaming.apps.job.register_lanes``); each lane is a whole pipeline in its own
namespace reading the parent's input stream, so every page can show it.
"""

from __future__ import annotations

import redis

from streaming.rules.fleet import IdleDecision
from streaming.rules.tradeoff import Tradeoff
from streaming.schema.config import Lane
from streaming.schema.keys import KeySchema
from streaming.schema.records import decode_json


def read_lanes(client: redis.Redis, namespace: str) -> list[Lane]:
    """The configured pipeline first, then its lanes in name order; raises ``redis.RedisError``."""
    raw = client.hgetall(KeySchema(namespace).lanes)
    lanes = [Lane.main(namespace)]
    for name, raw_doc in sorted((k.decode(), v) for k, v in raw.items()):
        lanes.append(decode_json(raw_doc, Lane, f"lane {name} in {KeySchema(namespace).lanes}"))
    return lanes


def read_tradeoff(client: redis.Redis, keys: KeySchema) -> Tradeoff:
    return Tradeoff.from_hash(client.hgetall(keys.tradeoff))


def read_seen(client: redis.Redis, keys: KeySchema) -> dict[str, int]:
    """Server -> ingest ms of its newest event, as the sink last recorded it."""
    return {k.decode(): int(v) for k, v in client.hgetall(keys.seen).items()}


def read_idleness(client: redis.Redis, keys: KeySchema, count: int) -> list[tuple[str, IdleDecision]]:
    """The job's newest ``count`` idle decisions, newest first, each with its marker's entry ID."""
    return [(f[b"marker_id"].decode(), IdleDecision.from_record(f))
            for _, f in client.xrevrange(keys.idleness, count=count)]
