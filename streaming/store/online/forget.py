"""A server forgotten at an operator's request (``wm-control forget``): a test server's traces gone before it retires.

The job forgets a server by itself once it has retired (``streaming.rules.fleet``): the pipeline's per-server fields
(:func:`streaming.store.commit.forget_servers`), then, once no player of it is kept, the online view's clock and
count. A request takes the same two steps at once, by the same code:

* :func:`ask` records the request in ``{ns}:forget`` (server -> Redis' clock) and forgets the pipeline's and each
  lab lane's per-server fields with the job's own script: its count of events, region, trade-off buckets (added to
  the retired servers', so the delay advice stays exact) and its name among the servers seen; and its windows, which
  the job leaves to age out (a server once forgotten is in no live view, and its windows would be);
* the online view's next batch forgets the server as if it had retired (:func:`streaming.rules.fleet.forgotten`:
  none of its events in the batch, no player kept, nothing heard from it since the request), and the merge of that
  batch erases what the view kept of it besides: its peaks (each day kept, and the highest ever), its per-minute
  series and its place in the last day's minute records (:func:`queue_erase`).

Its players stay in its region's and the total's figures of the minutes they were online (they were counted, as the
totals keep every event). A server that speaks after the request is kept, and the request dropped. A server with
players online is not forgotten (the view keeps a server while it keeps a player): :func:`players_online` says who
to log out first.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import redis

from streaming.rules.online.rollup import DAY_MS, Minute, day_of
from streaming.schema.keys import KeySchema, WindowKey
from streaming.store.commit import forget_named
from streaming.store.views.lanes import read_lanes


def players_online(client: redis.Redis, keys: KeySchema, servers: Sequence[str]) -> dict[str, int]:
    """How many players the online view keeps online on each of ``servers`` (its count, or its players' hash if that
    holds more: a batch being merged)."""
    pipe = client.pipeline(transaction=False)
    for server in servers:
        pipe.hget(keys.online_counts, server)
        pipe.hlen(keys.online(server))
    replies = pipe.execute()
    return {s: max(int(replies[2 * i] or 0), int(replies[2 * i + 1])) for i, s in enumerate(servers)}


def known(client: redis.Redis, keys: KeySchema, servers: Sequence[str]) -> dict[str, bool]:
    """Whether the pipeline or the online view holds anything of each server (seen, counted or online)."""
    pipe = client.pipeline(transaction=False)
    for server in servers:
        pipe.hexists(keys.seen, server)
        pipe.sismember(keys.servers, server)
        pipe.hexists(keys.online_counts, server)
    replies = pipe.execute()
    return {s: any(replies[3 * i:3 * i + 3]) for i, s in enumerate(servers)}


def ask(client: redis.Redis, keys: KeySchema, servers: Sequence[str], ttl_s: int) -> int:
    """Record the request for ``servers`` (kept ``ttl_s``, as the job's keys are) and forget their per-server fields in
    the pipeline and each of its lab lanes now (a server that spoke meanwhile keeps them). Returns when (Redis' clock,
    ms) the request was made."""
    secs, micros = client.time()
    asked_ms = secs * 1000 + micros // 1000
    pipe = client.pipeline(transaction=False)  # a Redis Cluster client too: one slot, no MULTI
    pipe.hset(keys.forget, mapping=dict.fromkeys(servers, asked_ms))
    pipe.expire(keys.forget, ttl_s)
    pipe.execute()
    params = json.loads(client.hget(keys.state, "params") or "{}")
    follows = params.get("mode") == "per-server" and not params.get("servers")
    forget_named(client, keys, servers, follows)
    forget_windows(client, keys, servers)
    for lane in read_lanes(client, keys.namespace)[1:]:
        forget_named(client, KeySchema(lane.namespace), servers, lane.mode == "per-server")
        forget_windows(client, KeySchema(lane.namespace), servers)
    return asked_ms


def forget_windows(client: redis.Redis, keys: KeySchema, servers: Sequence[str]) -> int:
    """Drop ``servers``' windows from the namespace's index and their counts; the totals keep their events. Returns
    how many went."""
    gone = 0
    for server in servers:
        pattern = "*:" + re.sub(r"([*?\[\]\\])", r"\\\1", server)
        members = [m for m, _score in client.zscan_iter(keys.windows, match=pattern, count=1_000)
                   if WindowKey.parse(m).server == server]
        for i in range(0, len(members), 500):
            chunk = [WindowKey.parse(m) for m in members[i:i + 500]]
            pipe = client.pipeline(transaction=False)  # a Redis Cluster client too: one slot, no MULTI
            pipe.zrem(keys.windows, *(w.member() for w in chunk))
            pipe.delete(*(keys.window(w) for w in chunk))
            pipe.execute()
        gone += len(members)
    return gone


def read_asked(reader: redis.Redis | redis.client.Pipeline, keys: KeySchema) -> dict[str, int]:
    """The servers an operator asked to forget, with when (``{ns}:forget``)."""
    return {k.decode(): int(v) for k, v in reader.hgetall(keys.forget).items()}


def read_minutes(reader: redis.Redis | redis.client.Pipeline, keys: KeySchema) -> list[tuple[bytes, float]]:
    """The last day's minute records with their scores, for :func:`queue_erase` (read before its transaction)."""
    return [(raw, score) for raw, score in reader.zrange(keys.online_minutes, 0, -1, withscores=True)]


def queue_erase(pipe: redis.client.Pipeline, keys: KeySchema, servers: Sequence[str], at_ms: int, history_days: int,
                minutes: Sequence[tuple[bytes, float]]) -> None:
    """Queue the erasure of ``servers``' own history (forgotten at a request, in the merge's transaction): their
    peaks in every day kept up to ``at_ms`` and the highest ever, their per-minute series, and their entries in
    ``minutes`` (:func:`read_minutes`)."""
    gone = set(servers)
    for k in range(history_days + 2):
        day = day_of(at_ms) - k * DAY_MS
        pipe.hdel(keys.online_peak(day), *servers)
        pipe.delete(*(keys.history(day, s) for s in servers))
    pipe.hdel(keys.online_peak_ever, *servers)
    for raw, score in minutes:
        m = Minute.from_json(raw)
        if gone & {*m.last, *m.peak, *m.causes}:
            pipe.zrem(keys.online_minutes, raw)
            pipe.zadd(keys.online_minutes, {m.without(gone).to_json(): score})
