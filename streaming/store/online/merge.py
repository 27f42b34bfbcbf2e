"""The online view's merge: every group's part of a batch folded into the view, once all are in.

A merge writes the batch's record, the minute it closes, the peaks it raises, every server's count and the view's
state (decision 0020). One transaction a batch, guarded by the view's own ``last_batch``: any group may merge, and a
merge raced or repeated is applied once. Batches merge in order. :mod:`streaming.store.online.commit` calls it after
each group's commit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import redis

from streaming.rules.online.rollup import (
    DAY_MS,
    Minute,
    arrival_ms,
    day_of,
    expire_in_s,
    format_peak,
    parse_peaks,
    raise_peaks,
    roll,
)
from streaming.rules.online.view import merge, merge_step
from streaming.schema.keys import KeySchema
from streaming.schema.params import Params
from streaming.schema.records import CommitEntry, OnlinePart, OnlineRecord, OnlineStateRecord
from streaming.store import redis_conn
from streaming.store.history_store import queue_minute
from streaming.store.online.forget import queue_erase, read_minutes
from watermark_client import connection


@dataclass
class _Rollups:
    """What one batch adds to the online view over time, at its arrival (decision 0012): the minute it closes
    (into the last day's minutes and every series' day record, ``streaming.store.history_store``), the day's
    peaks and the highest ever it raises, per server, region and in total. Read while the commit WATCHes, queued
    in its transaction."""

    at_ms: int
    peaks: dict[str, tuple[int, int]]
    ever: dict[str, tuple[int, int]]
    regions: dict[str, str]
    closed: Minute | None = None
    raised: dict[str, tuple[int, int]] = field(default_factory=dict)
    raised_ever: dict[str, tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def read(cls, pipe: redis.client.Pipeline, keys: KeySchema, at_ms: int) -> _Rollups:
        return cls(at_ms, parse_peaks(pipe.hgetall(keys.online_peak(day_of(at_ms)))),
                   parse_peaks(pipe.hgetall(keys.online_peak_ever)),
                   {k.decode(): v.decode() for k, v in pipe.hgetall(keys.regions).items()})

    def add(self, prior_minute: str | None, counts: Mapping[str, int],
            causes: Mapping[str, Mapping[str, int]]) -> Minute:
        """The batch into the open minute and the peaks; the open minute after it."""
        self.closed, open_minute = roll(Minute.from_json(prior_minute) if prior_minute else None, self.at_ms,
                                        counts, causes, self.regions)
        self.raised = raise_peaks(self.peaks, counts, self.at_ms, self.regions)
        self.raised_ever = raise_peaks(self.ever, counts, self.at_ms, self.regions)
        return open_minute

    def queue(self, pipe: redis.client.Pipeline, keys: KeySchema, params: Params, record: OnlineRecord,
              now_ms: int) -> None:
        """The batch's history record, the minute it closed, the peaks it raised."""
        closed, day = self.closed, day_of(self.at_ms)
        if closed is not None:
            pipe.zadd(keys.online_minutes, {closed.to_json(): closed.minute_ms})
            pipe.zremrangebyscore(keys.online_minutes, "-inf", f"({closed.minute_ms - DAY_MS}")
            pipe.expire(keys.online_minutes, params.ttl_s)
            queue_minute(pipe, keys, closed, self.regions,
                         expire_in_s(day_of(closed.minute_ms), params.history_days, now_ms, params.ttl_s))
            # the highest ever outlives every day it could come from; a namespace no job writes goes in the end
            pipe.expire(keys.online_peak_ever, max(params.ttl_s, (params.history_days + 1) * DAY_MS // 1000))
        if self.raised:
            pipe.hset(keys.online_peak(day), mapping={k: format_peak(*v) for k, v in self.raised.items()})
            pipe.expire(keys.online_peak(day), expire_in_s(day, params.history_days, now_ms, params.ttl_s))
        if self.raised_ever:
            pipe.hset(keys.online_peak_ever, mapping={k: format_peak(*v) for k, v in self.raised_ever.items()})
        batch_id = record.batch
        encoded = record.encode()
        pipe.zadd(keys.online_history, {encoded: batch_id})
        pipe.zremrangebyscore(keys.online_history, "-inf", batch_id - params.records_kept(len(encoded)))
        pipe.expire(keys.online_history, params.ttl_s)


def merge_ready(client: redis.Redis, keys: KeySchema, groups: int, params: Params,
                now_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> list[int]:
    """Merge into the online view, in batch order, every batch whose parts all ``groups`` have committed: its record,
    its minute, its peaks, the counts of every server and the view's state, in one transaction guarded by the view's
    own ``last_batch`` (so any group may merge, and a merge raced or repeated is applied once). Batch ``N`` is
    merged only once every group has committed it, and so ``N - 1`` too: merges go in order. Returns the batches
    merged."""
    merged: list[int] = []
    while (batch_id := _merge_next(client, keys, groups, params, now_ms)) is not None:
        merged.append(batch_id)
    return merged


_VIEW_FIELDS = ("last_batch", "max_event_us", "lost_at_batch", "minute", "partial_until_ms")


def _merge_next(client: redis.Redis, keys: KeySchema, groups: int, params: Params,
                now_ms: Callable[[], int]) -> int | None:
    """Merge the lowest batch with parts, if every group's is in; None when it is not (or there is none)."""
    home = connection.home(client, keys.online_state)
    while True:
        lowest = home.zrange(keys.online_parts_index, 0, 0, withscores=True)
        if not lowest:
            return None
        member, batch_id = lowest[0][0], int(lowest[0][1])
        parts_key = keys.online_parts(batch_id)
        try:
            with redis_conn.Transaction(home) as pipe:
                pipe.watch(keys.online_state, parts_key)
                # parts of groups past the number now: a number changed under a batch not merged (not counted)
                raw = {k: v for k, v in pipe.hgetall(parts_key).items() if int(k) < groups}
                prior = OnlineStateRecord.from_hash(
                    dict(zip(_VIEW_FIELDS, pipe.hmget(keys.online_state, _VIEW_FIELDS), strict=True)),
                    keys.online_state)
                have = {int(k) for k in raw}
                missing = [g for g in range(groups) if g not in have]
                step = merge_step(batch_id, prior.last_batch, groups, have, _groups_last(pipe, keys, groups, missing))
                if step == "wait":
                    pipe.unwatch()
                    return None
                merge = step == "merge"
                if merge:
                    parts = sorted((OnlinePart.decode(v, f"{parts_key} {k.decode()}") for k, v in raw.items()),
                                   key=lambda p: p.group)
                    _merge(pipe, keys, parts, prior, params, now_ms)
                else:  # merged already, or never whole: its parts go
                    pipe.multi()
                pipe.delete(parts_key)
                pipe.zrem(keys.online_parts_index, member)
                redis_conn.execute(pipe)
        except redis.WatchError:
            continue  # another group merged it, or added its part: look again
        if merge:
            return batch_id


def _groups_last(pipe: redis.client.Pipeline, keys: KeySchema, groups: int, missing: Sequence[int]
                 ) -> dict[int, int | None]:
    """The last batch each group in ``missing`` committed (read while watched, for :func:`merge_step`)."""
    out: dict[int, int | None] = {}
    for g in missing:
        last = pipe.hget(keys.online_group(g, groups), "last_batch")
        out[g] = None if last is None else int(last)
    return out


def _merge(pipe: redis.client.Pipeline, keys: KeySchema, parts: Sequence[OnlinePart], prior: OnlineStateRecord,
           params: Params, now_ms: Callable[[], int]) -> None:
    """Queue the merge of one batch's parts (the pipeline is in ``multi()`` after this call's reads)."""
    first = parts[0].of  # the batch's own record is the same in every part
    rollups = _Rollups.read(pipe, keys, arrival_ms(first.end_id, first.batch_ts_ms))
    m = merge(parts, prior.max_event_us, prior.lost_at_batch, prior.partial_until_ms)
    minutes = read_minutes(pipe, keys) if m.erased else []
    open_minute = rollups.add(prior.minute, m.record.counts, m.record.causes)
    if m.erased:
        open_minute = open_minute.without(m.erased)
        rollups.closed = rollups.closed.without(m.erased) if rollups.closed is not None else None
    pipe.multi()
    if m.forgotten:  # its highest ever stays: a long-lived server empty
        pipe.hdel(keys.online_counts, *m.forgotten)  # at night is forgotten too, and keeps its record
    if m.record.counts:
        pipe.hset(keys.online_counts, mapping=m.record.counts)
        pipe.expire(keys.online_counts, params.ttl_s)
    rollups.queue(pipe, keys, params, m.record, now_ms())
    if m.erased:
        queue_erase(pipe, keys, m.erased, rollups.at_ms, params.history_days, minutes)
    pipe.hset(keys.online_state, mapping=OnlineStateRecord(
        last_batch=first.batch, watermark_ms=m.record.watermark_ms, in_force_ms=first.watermark_ms,
        batch_ts_ms=first.batch_ts_ms, timeout_ms=first.timeout_ms, updated_ms=now_ms(), max_event_us=m.running_us,
        committed_id=first.end_id, lost_at_batch=m.lost_at_batch, minute=open_minute.to_json(),
        partial_until_ms=m.partial_until_ms, clocks=m.clocks).to_hash())
    pipe.xadd(keys.online_commits, CommitEntry(first.batch, first.end_id).fields(), maxlen=1000, approximate=True)
