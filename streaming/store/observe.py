"""One observation of the running stack for the monitor: the pipeline and each lab lane, the servers, the
online view; a fixed number of Redis commands per pipeline plus O(servers) fields, whatever the data's size.

The same figures the dashboard reads, read the same way (``streaming.store.pipeline_status``), so ``/metrics`` and
the pages agree to the event.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import redis

from streaming.alerting.observation import MAIN, Observation, OnlineSample, PipelineObs, ServerObs
from streaming.rules.fleet import heard, retired
from streaming.schema.config import Config
from streaming.schema.keys import KeySchema
from streaming.schema.records import (
    BatchRecord,
    ClockRecord,
    OnlineRecord,
    OnlineStateRecord,
    ServerRecord,
)
from streaming.store.pipeline_status import PipelineStatus, first_after, read_memory, read_pipeline
from streaming.store.views.lanes import read_lanes
from watermark_client.events import parse_entry_id


@dataclass(frozen=True)
class StackReading:
    """An observation, and what only the metrics show (they do not alert on it)."""

    obs: Observation
    quarantined: Mapping[str, int] = field(default_factory=dict)
    input_entries: int = 0
    online_age_ms: int | None = None
    batch_seconds: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Per pipeline, the ``{ns}:batch_seconds`` hash (``streaming.schema.keys.parse_buckets``)."""
    last_batch: Mapping[str, int] = field(default_factory=dict)
    server_totals: Mapping[str, Mapping[str, tuple[int, int, int]]] = field(default_factory=dict)
    """Per pipeline and server: events accepted, dropped as late, accepted late."""


def lane_keys(client: redis.Redis, keys: KeySchema) -> dict[str, KeySchema]:
    """The lab lanes the job runs, by name (``{ns}:lanes``)."""
    return {lane.name: KeySchema(lane.namespace) for lane in read_lanes(client, keys.namespace) if lane.name != MAIN}


def pipeline_obs(name: str, status: PipelineStatus, now_ms: int) -> PipelineObs:
    """The pipeline as the rules judge it (:mod:`streaming.alerting.health`); the dashboard builds its own from a
    snapshot through this too."""
    st = status.state
    return PipelineObs(
        name=name, watermark_ms=st.next_watermark_ms if st else None, max_event_ms=st.head_ms if st else None,
        delay_ms=st.delay_ms if st else 0, trigger_ms=st.trigger_ms if st else 1_000,
        accepted=status.totals.events, waiting=status.stream.waiting, behind_ms=status.stream.behind_ms(now_ms),
        last_batch=st.last_batch if st else None, dropped=status.totals.dropped,
        committed_ms=st.updated_ms if st else None, stopped_ms=st.stopped_ms if st else None,
        lost_at_batch=st.lost_at_batch if st else None, name_guard=st.name_guard if st else None,
        lost_batches=st.lost_batches if st else None)


def read_stack(client: redis.Redis, keys: KeySchema, lanes: Mapping[str, KeySchema], now_ms: int,
               after_online_batch: int | None, online_reach: int,
               retire_after_ms: int = Config.retire_after_ms) -> StackReading:
    """Raises ``redis.RedisError``. ``after_online_batch``: the online view batches already seen (None at start:
    the last ``online_reach`` are read; none with 0); ``retire_after_ms``: RETIRE_AFTER
    (``streaming.rules.fleet.retired``)."""
    statuses = {MAIN: read_pipeline(client, keys)}
    statuses.update({name: read_pipeline(client, k, keys) for name, k in lanes.items()})
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.online_counts)
    pipe.hmget(keys.online_state, ["batch_ts_ms", "committed_id", "clocks"])
    if after_online_batch is not None:
        pipe.zrangebyscore(keys.online_history, f"({after_online_batch}", "+inf")
    elif online_reach > 0:
        pipe.zrange(keys.online_history, -online_reach, -1)
    else:  # the metrics need no history: a placeholder reply (keyed: a cluster's pipeline refuses ECHO)
        pipe.exists(keys.online_history)
    for name in statuses:
        pipe.hgetall((keys if name == MAIN else lanes[name]).batch_seconds)
    last = statuses[MAIN].state
    pipe.hget(keys.batch(last.last_batch if last else -1), "sink")
    counts, (batch_ts, online_committed, clocks), history, *buckets, sink = pipe.execute()
    online_behind = _online_behind_ms(client, keys, online_committed, now_ms)
    main = statuses[MAIN]
    pipelines = tuple(pipeline_obs(n, s, now_ms) for n, s in statuses.items())
    on_clock = _clocks(clocks)
    seen = heard(main.seen, {s: c.heard_ms for s, c in on_clock.items()})
    servers = _servers(main, _ints(counts), _last_batch(sink), on_clock, seen, set(retired(seen, now_ms,
                                                                                            retire_after_ms)))
    used, maxmemory = read_memory(client)
    obs = Observation(
        at_ms=now_ms, pipelines=pipelines, servers=servers,
        online=tuple(_online(history)) if isinstance(history, list) else (), online_behind_ms=online_behind,
        redis_used_bytes=used, redis_maxmemory_bytes=maxmemory)
    return StackReading(
        obs=obs, quarantined=dict(main.totals.bad),
        input_entries=main.stream.waiting + (main.totals.input if main.state else 0),
        online_age_ms=now_ms - int(batch_ts) if batch_ts else None,
        batch_seconds={n: {k.decode(): v.decode() for k, v in b.items()}
                       for n, b in zip(statuses, buckets, strict=True)},
        last_batch={n: s.state.last_batch for n, s in statuses.items() if s.state is not None},
        server_totals={n: {srv: (t.events, t.dropped, t.late) for srv, t in s.totals.servers.items()}
                       for n, s in statuses.items()})


def _online_behind_ms(client: redis.Redis, keys: KeySchema, committed: bytes | None, now_ms: int) -> int:
    """How long the oldest entry the online view has not committed has waited."""
    oldest = first_after(client, keys.events, committed.decode()) if committed is not None else None
    return max(0, now_ms - parse_entry_id(oldest.decode())[0]) if oldest is not None else 0


def _ints(h: Mapping[bytes, bytes]) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in h.items()}


def _last_batch(sink: bytes | None) -> dict[str, ServerRecord]:
    """Each server's figures in the last batch (its record may have expired: then none)."""
    return {} if sink is None else BatchRecord.decode(sink, "the last batch's record").servers


def _clocks(clocks: bytes | None) -> dict[str, ClockRecord]:
    """Each server's clock in the online view: how far its events ran ahead of their arrival in its last batch with
    any, and whether it drained."""
    if clocks is None:
        return {}
    return dict(OnlineStateRecord.from_hash({"clocks": clocks}, "the online view's clocks").clocks)


def _servers(main: PipelineStatus, counts: Mapping[str, int], last: Mapping[str, ServerRecord],
             clocks: Mapping[str, ClockRecord], seen: Mapping[str, int], gone: set[str]) -> tuple[ServerObs, ...]:
    names = sorted({*main.servers, *main.totals.servers, *seen, *counts, *clocks})
    out = []
    for s in names:
        t, b = main.totals.servers.get(s), last.get(s)
        lag = b.ingest_lag_ms if b is not None else None
        out.append(ServerObs(name=s, last_arrival_ms=seen.get(s), accepted=t.events if t else 0,
                             dropped=t.dropped if t else 0, late=t.late if t else 0, players=counts.get(s),
                             newest_event_ms=b.max_event_us // 1000 if b and b.max_event_us is not None else None,
                             lag_p95_ms=lag.p95 if lag is not None else None,
                             clock_ahead_ms=clocks[s].ahead_ms if s in clocks else None,
                             retired=s in gone, region=main.regions.get(s),
                             drained_ms=clocks[s].drained_ms if s in clocks else 0))
    return tuple(out)


def _online(history: list[bytes]) -> list[OnlineSample]:
    out = []
    for raw in history:
        r = OnlineRecord.decode(raw, "an online view batch record")
        out.append(OnlineSample(batch=r.batch, at_ms=r.batch_ts_ms, counts=r.counts, causes=r.causes))
    return out
