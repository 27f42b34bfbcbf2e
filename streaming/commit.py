"""Merging one batch's summary into Redis: one MULTI/EXEC, guarded by the batch id.

This is the exactly-once step. The guard (``state.last_batch``) is read under
WATCH; a batch at or below it is already in Redis (Spark replays a batch whose
commit it did not record before a crash) and is skipped. Everything a batch
changes goes in one transaction, so a crash leaves Redis at a batch boundary.
No pyspark here: the Spark side only builds a :class:`BatchSummary`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

import redis

from streaming.events import parse_entry_id
from streaming.keys import KeySchema, WindowKey, total_field
from streaming.windows import event_ms


@dataclass(frozen=True)
class Params:
    """The semantics a namespace was built with; a restart must not change them."""

    window_ms: int
    slide_ms: int
    delay_ms: int
    retention_ms: int = 86_400_000
    progress_history: int = 5_000
    stream_keep_ms: int = 600_000
    ttl_ms: int | None = None  # key TTL; defaults to retention_ms
    trigger_ms: int = 1_000  # not semantic: the dashboard judges batch health against it

    def semantic(self) -> dict[str, int]:
        return {"window_ms": self.window_ms, "slide_ms": self.slide_ms, "delay_ms": self.delay_ms}


@dataclass
class WindowAgg:
    start_ms: int
    end_ms: int
    server: str
    events: int = 0
    dropped: int = 0
    late: int = 0
    players: set[str] = field(default_factory=set)

    @property
    def key(self) -> WindowKey:
        return WindowKey(self.start_ms, self.end_ms, self.server)


@dataclass(frozen=True)
class Lag:
    p50: float
    p95: float
    max: float


@dataclass
class ServerStats:
    rows: int = 0
    events: int = 0
    dropped: int = 0
    late: int = 0
    min_event_us: int | None = None
    max_event_us: int | None = None
    ingest_lag_ms: Lag | None = None
    processing_lag_ms: Lag | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> ServerStats:
        """Inverse of ``asdict`` as stored in the batch record (``servers``)."""
        lags = {k: Lag(**d[k]) if d.get(k) else None for k in ("ingest_lag_ms", "processing_lag_ms")}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in d.items() if k not in lags}, **lags)  # type: ignore[arg-type]


@dataclass(frozen=True)
class BadRow:
    entry_id: str
    reason: str
    detail: str
    raw: str


@dataclass
class BatchSummary:
    batch_id: int
    watermark_ms: int
    batch_ts_ms: int
    start_id: str
    end_id: str
    windows: list[WindowAgg]
    servers: dict[str, ServerStats]
    bad: list[BadRow]

    @property
    def parsed(self) -> int:
        return sum(s.rows for s in self.servers.values())

    @property
    def input(self) -> int:
        return self.parsed + len(self.bad)

    @property
    def max_event_us(self) -> int | None:
        return max((s.max_event_us for s in self.servers.values() if s.max_event_us is not None), default=None)

    @property
    def min_event_us(self) -> int | None:
        return min((s.min_event_us for s in self.servers.values() if s.min_event_us is not None), default=None)


def next_watermark(watermark_ms: int, running_max_us: int | None, delay_ms: int) -> int:
    if running_max_us is None:
        return watermark_ms
    return max(watermark_ms, event_ms(running_max_us) - delay_ms)


class ParamsMismatch(RuntimeError):
    pass


def check_params(client: redis.Redis, keys: KeySchema, params: Params) -> None:
    """Refuse to continue a namespace with different window/slide/delay: its numbers would mix."""
    stored = client.hget(keys.state, "params")
    if stored is None:
        return
    old = json.loads(stored)
    if old != params.semantic():
        raise ParamsMismatch(
            f"namespace {keys.namespace!r} was built with {old}, the job now has {params.semantic()}: "
            "use a fresh PIPELINE_NAMESPACE and CHECKPOINT_DIR to change window, slide or delay"
        )


def batch_record(s: BatchSummary, next_wm_ms: int, running_max_us: int | None) -> dict:
    """The deterministic per-batch record stored at ``{ns}:batch:{id}`` field ``sink``."""
    return {
        "batch": s.batch_id,
        "watermark_ms": s.watermark_ms,
        "next_watermark_ms": next_wm_ms,
        "batch_ts_ms": s.batch_ts_ms,
        "start_id": s.start_id,
        "end_id": s.end_id,
        "input": s.input,
        "parsed": s.parsed,
        "quarantined": len(s.bad),
        "events": sum(w.events for w in s.windows),
        "dropped": sum(w.dropped for w in s.windows),
        "late": sum(w.late for w in s.windows),
        "min_event_us": s.min_event_us,
        "max_event_us": s.max_event_us,
        "running_max_event_us": running_max_us,
        "servers": {name: asdict(st) for name, st in sorted(s.servers.items())},
        "bad": _count_reasons(s.bad),
    }


def _count_reasons(bad: list[BadRow]) -> dict[str, int]:
    out: dict[str, int] = {}
    for b in bad:
        out[b.reason] = out.get(b.reason, 0) + 1
    return dict(sorted(out.items()))


def commit_batch(client: redis.Redis, keys: KeySchema, s: BatchSummary, params: Params,
                 now_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> bool:
    """Apply the batch once. Returns False when it was already committed."""
    ttl_s = max(1, (params.ttl_ms or params.retention_ms) // 1000)
    with client.pipeline(transaction=True) as pipe:
        pipe.watch(keys.state)
        last, prev_max = pipe.hmget(keys.state, ["last_batch", "max_event_us"])
        if last is not None and int(last) >= s.batch_id:
            pipe.unwatch()
            return False
        batch_max = s.max_event_us
        known = [v for v in (batch_max, int(prev_max) if prev_max else None) if v is not None]
        running_max = max(known) if known else None
        next_wm = next_watermark(s.watermark_ms, running_max, params.delay_ms)
        record = batch_record(s, next_wm, running_max)

        pipe.multi()
        totals: dict[str, int] = {"input": s.input, "parsed": s.parsed, "quarantined": len(s.bad),
                                  "events": record["events"], "dropped": record["dropped"], "late": record["late"]}
        for name, st in s.servers.items():
            totals[total_field("events", name)] = st.events
            totals[total_field("dropped", name)] = st.dropped
            totals[total_field("late", name)] = st.late
            totals[total_field("rows", name)] = st.rows
        for reason, n in record["bad"].items():
            totals[total_field("bad", reason)] = n
        for f, n in totals.items():
            if n:
                pipe.hincrby(keys.totals, f, n)
        if s.servers:
            pipe.sadd(keys.servers, *s.servers)
            pipe.expire(keys.servers, ttl_s)

        index: dict[str, int] = {}
        for w in s.windows:
            wk = w.key
            hkey = keys.window(wk)
            for f, n in (("events", w.events), ("dropped", w.dropped), ("late", w.late)):
                if n:
                    pipe.hincrby(hkey, f, n)
            pipe.expire(hkey, ttl_s)
            if w.players:
                pkey = keys.players(wk)
                pipe.sadd(pkey, *sorted(w.players))
                pipe.expire(pkey, ttl_s)
            index[wk.member()] = wk.start_ms
        if index:
            pipe.zadd(keys.windows, index)
        # Windows that ended a whole retention before the watermark leave the index.
        pipe.zremrangebyscore(keys.windows, "-inf", f"({next_wm - params.retention_ms - params.window_ms}")
        pipe.expire(keys.windows, ttl_s)

        for b in s.bad:
            pipe.xadd(keys.dead, {"reason": b.reason, "detail": b.detail, "raw": b.raw, "batch": s.batch_id},
                      id=b.entry_id)
        if s.bad:
            pipe.expire(keys.dead, ttl_s)

        bkey = keys.batch(s.batch_id)
        pipe.hset(bkey, "sink", json.dumps(record, separators=(",", ":")))
        pipe.expire(bkey, ttl_s)
        pipe.zadd(keys.batches, {str(s.batch_id): s.batch_id})
        pipe.zremrangebyscore(keys.batches, "-inf", f"({s.batch_id - params.progress_history + 1}")
        pipe.expire(keys.batches, ttl_s)

        pipe.hset(keys.state, mapping={
            "last_batch": s.batch_id,
            "watermark_ms": s.watermark_ms,
            "next_watermark_ms": next_wm,
            "max_event_us": running_max if running_max is not None else "",
            "committed_id": s.end_id,
            "params": json.dumps(params.semantic(), sort_keys=True),
            "trigger_ms": params.trigger_ms,
            "updated_ms": now_ms(),
        })
        # Entries before this batch's start are in a batch Spark has committed: safe to trim.
        keep_from = min(parse_entry_id(s.start_id), (s.batch_ts_ms - params.stream_keep_ms, 0))
        if keep_from > (0, 0):
            pipe.xtrim(keys.events, minid=f"{keep_from[0]}-{keep_from[1]}", approximate=True)
        pipe.xadd(keys.commits, {"batch": s.batch_id, "end_id": s.end_id}, maxlen=1000, approximate=True)
        pipe.execute()
    return True

