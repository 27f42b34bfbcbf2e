"""The online players in Redis: one batch of transitions merged once, and read back for the dashboard.

The online query's own guard (``{ns}:presence:state`` ``last_batch``) makes a
replayed batch a no-op, as :func:`streaming.commit.commit_batch` does for the
main query; everything a batch changes goes in one MULTI/EXEC. Counts follow
from the transitions: Spark's state says who was online before, so an online
transition is +1 and an offline one -1. No pyspark: the dashboard imports this.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import redis

from streaming.commit import Params, guarded
from streaming.keys import KeySchema


@dataclass(frozen=True, slots=True)
class PlayerTransition:
    server: str
    player_id: str
    online: bool
    at_us: int  # event time it happened at
    cause: str
    seq: int  # order among this player's transitions in the batch


@dataclass(frozen=True)
class OnlineBatch:
    batch_id: int
    watermark_ms: int
    batch_ts_ms: int
    transitions: list[PlayerTransition]


def net_changes(transitions: Sequence[PlayerTransition]) -> dict[tuple[str, str], int]:
    """Per (server, player) that changed: +1 came online, -1 went offline (0s left out).

    The first transition says what the player was before the batch, the last what they are after."""
    first: dict[tuple[str, str], PlayerTransition] = {}
    last: dict[tuple[str, str], PlayerTransition] = {}
    for t in sorted(transitions, key=lambda t: t.seq):
        key = (t.server, t.player_id)
        first.setdefault(key, t)
        last[key] = t
    out = {}
    for key, t in last.items():
        delta = int(t.online) - int(not first[key].online)
        if delta:
            out[key] = delta
    return out


def commit_online(client: redis.Redis, keys: KeySchema, b: OnlineBatch, params: Params, timeout_ms: int,
                  now_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> bool:
    """Apply the batch once. Returns False when it was already committed."""
    with guarded(client, keys.presence_state, b.batch_id, keys.presence_counts) as pipe:
        if pipe is None:
            return False
        counts = {k.decode(): int(v) for k, v in pipe.hgetall(keys.presence_counts).items()}
        changes = net_changes(b.transitions)
        for (server, _), delta in changes.items():
            counts[server] = counts.get(server, 0) + delta
        record = {"batch": b.batch_id, "watermark_ms": b.watermark_ms, "batch_ts_ms": b.batch_ts_ms,
                  "counts": dict(sorted(counts.items())),
                  "online": sum(t.online for t in b.transitions),
                  "offline": sum(not t.online for t in b.transitions)}

        pipe.multi()
        ttl_s = params.ttl_s
        for (server, player), delta in sorted(changes.items()):
            (pipe.sadd if delta > 0 else pipe.srem)(keys.online(server), player)
        for server in counts:
            pipe.expire(keys.online(server), ttl_s)
        if counts:
            pipe.hset(keys.presence_counts, mapping=counts)
            pipe.expire(keys.presence_counts, ttl_s)
        pipe.zadd(keys.presence_history, {json.dumps(record, separators=(",", ":")): b.batch_id})
        pipe.zremrangebyscore(keys.presence_history, "-inf", f"({b.batch_id - params.progress_history + 1}")
        pipe.expire(keys.presence_history, ttl_s)
        pipe.hset(keys.presence_state, mapping={
            "last_batch": b.batch_id, "watermark_ms": b.watermark_ms, "batch_ts_ms": b.batch_ts_ms,
            "timeout_ms": timeout_ms, "updated_ms": now_ms(),
        })
        pipe.execute()
    return True


@dataclass(frozen=True)
class OnlinePoint:
    """Online counts per server after one batch of the online query."""

    batch: int
    watermark_ms: int
    batch_ts_ms: int
    counts: dict[str, int]
    online: int  # transitions to online in the batch
    offline: int

    @classmethod
    def from_json(cls, raw: str | bytes) -> OnlinePoint:
        d = json.loads(raw)
        return cls(batch=int(d["batch"]), watermark_ms=int(d["watermark_ms"]), batch_ts_ms=int(d["batch_ts_ms"]),
                   counts={str(k): int(v) for k, v in d["counts"].items()}, online=int(d["online"]),
                   offline=int(d["offline"]))


@dataclass(frozen=True)
class OnlineView:
    last_batch: int
    watermark_ms: int
    timeout_ms: int
    updated_ms: int
    counts: dict[str, int]
    history: tuple[OnlinePoint, ...]


def queue_online_reads(pipe: redis.client.Pipeline, keys: KeySchema, last: int) -> None:
    """Three replies, parsed by :func:`online_view`; lets a caller share one round trip."""
    pipe.hgetall(keys.presence_state)
    pipe.hgetall(keys.presence_counts)
    pipe.zrange(keys.presence_history, -last, -1)


def online_view(state: Mapping[bytes, bytes], counts: Mapping[bytes, bytes],
                history: Sequence[bytes]) -> OnlineView | None:
    """None until the online query has committed a batch."""
    h = {k.decode(): v.decode() for k, v in state.items()}
    if not h.get("last_batch"):
        return None
    return OnlineView(
        last_batch=int(h["last_batch"]), watermark_ms=int(h.get("watermark_ms") or 0),
        timeout_ms=int(h.get("timeout_ms") or 0), updated_ms=int(h.get("updated_ms") or 0),
        counts={k.decode(): int(v) for k, v in sorted(counts.items())},
        history=tuple(OnlinePoint.from_json(m) for m in history),
    )


def read_online(client: redis.Redis, keys: KeySchema, last: int = 1_000) -> OnlineView | None:
    pipe = client.pipeline(transaction=False)
    queue_online_reads(pipe, keys, last)
    return online_view(*pipe.execute())
