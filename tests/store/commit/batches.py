"""Batches for the commit's tests: a summary of a batch, the params, and Redis dumped to compare."""

from __future__ import annotations

import redis

from streaming.rules.commit.batch import BadRow, BatchSummary, WindowAgg
from streaming.schema.keys import KeySchema
from streaming.schema.records import ServerRecord
from tests.schema.params import built_params

PARAMS = built_params(600_000, 600_000, 300_000)


T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z in ms


def summary(batch_id: int, watermark_ms: int, max_event_ms: int, events: int = 2, dropped: int = 0) -> BatchSummary:
    players = (2 if batch_id == 0 else 1) if events else 0  # p1 and p2, then a new player a batch
    w = WindowAgg(T0, T0 + 600_000, "A", events=events, dropped=dropped, players=players)
    st = ServerRecord(rows=events + dropped, events=events, dropped=dropped, min_event_us=T0 * 1000,
                      max_event_us=max_event_ms * 1000)
    return BatchSummary(batch_id, watermark_ms, T0, f"{batch_id}-0", f"{batch_id + 1}-0", [w], {"A": st},
                        [BadRow(f"{batch_id + 1}-0", "malformed_json", "x", "{")])


def dump(r: redis.Redis, keys: KeySchema) -> dict:
    out = {}
    for key in sorted(r.keys(keys.namespace + ":*")):
        kind = r.type(key)
        if kind == b"hash":
            out[key] = {f: v for f, v in r.hgetall(key).items() if f != b"updated_ms"}
        elif kind == b"set":
            out[key] = r.smembers(key)
        elif kind == b"zset":
            out[key] = r.zrange(key, 0, -1, withscores=True)
        elif kind == b"stream":
            out[key] = r.xrange(key)
    return out
