"""What the online view's fold would cost in the task that reads a shard (issue 29, docs/scaling.md plan step 1):
the fold with the shard's state already in the worker (warm), with it loaded from Redis first (cold: a worker that
did not fold the shard's last batch), and a worker catching up on one batch folded elsewhere (the batch's changed
players applied to its copy), for one shard's batch of ``--events`` heartbeats among ``--players`` online.

    python -m bench.spikes.online_fold_shard [--players 30000,125000] [--events 25000] [--servers 3] [--repeat 5]

Spark's local scheduler gives a shard's task to whichever Python worker is free: in a 200-batch run with two
shards on ``local[2]``, a shard's batch went to the worker that read its previous batch 218 times in 404, as by
chance. A copy of the state in the worker is therefore stale about half the time. Each step runs the real code
(``streaming.rules.online``, ``streaming.store.online.commit``) on a scratch Redis, one process, no Spark.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import redis

from bench.run import scratch_redis
from streaming.rules.online.fold import Prior, fold
from streaming.rules.online.table import OnlineBatch, OnlineEvents, PlayerTable
from streaming.schema.config import Config
from streaming.schema.keys import KeySchema
from streaming.schema.params import params_for
from streaming.store.batch.arrow_pack import queue_packed
from streaming.store.online.commit import OnlineMirror, commit_online

TIMEOUT_MS = 30_000
START_US = 1_767_225_600_000_000


def batch(batch_id: int, players: int, events: int, servers: int, rng: np.random.Generator) -> OnlineBatch:
    """``events`` heartbeats (all players at once for batch 0: their logins) half a second after the last."""
    n = players if batch_id == 0 else events
    who = np.arange(players) if batch_id == 0 else rng.choice(players, n, replace=False)
    at_us = START_US + batch_id * 500_000 + rng.integers(0, 500_000, n)
    ev = OnlineEvents(server=np.array([f"S{w % servers}" for w in who.tolist()], object),
                        player=np.array([f"player-{w:07d}" for w in who.tolist()], object),
                        event_us=at_us.astype(np.int64), entry=np.arange(n, dtype=np.int64),
                        kind=np.full(n, 1 if batch_id == 0 else 2, np.int8), ingest_ms=at_us // 1000 + 50)
    end_ms = (START_US + (batch_id + 1) * 500_000) // 1000 + 50
    return OnlineBatch(batch_id, (START_US + batch_id * 500_000) // 1000 - 5_000, end_ms, f"{end_ms}-0", ev, 5_000)


def catch_up(table: PlayerTable, b: OnlineBatch) -> None:
    """A worker's copy brought up to a batch another worker folded: each changed player's new time set in its slot
    (what a log of the batch's changes would carry; the expiries would be a list of slots more)."""
    ev = b.events
    for server, rows in ev.by_server().items():
        slots = table.slots_of(server, ev.player[rows])
        table.known[slots], table.online[slots], table.last_us[slots] = True, True, ev.event_us[rows]


def in_redis(client: redis.Redis, ns: str, b: OnlineBatch, prev_watermark_ms: int) -> float:
    """The state read from and written to Redis for the batch's players only, no copy anywhere: each player's prior
    (HMGET), the fold, their new times (HSET) and a list per (server, second) of who was heard then (RPUSH), from
    which expiry reads the second the next watermark passed (LRANGE, then HMGET of those players' times: a player
    heard since is not expired). Every command O(1) an event, all under one MULTI per shard (what a per-(batch,
    shard) guard would wrap). Seconds, from the reads' start to the writes' end."""
    t = time.perf_counter()
    ev = b.events
    shares = ev.by_server()
    pipe = client.pipeline(transaction=False)
    due_s = range((prev_watermark_ms - TIMEOUT_MS) // 1000, (b.watermark_ms - TIMEOUT_MS) // 1000)
    for server, rows in shares.items():
        pipe.hmget(f"{ns}:on:{server}", ev.player[rows].tolist())
        pipe.eval(GATHER_LUA, len(due_s), *(f"{ns}:seen:{server}:{sec}" for sec in due_s))
    replies = iter(pipe.execute())
    pipe = client.pipeline(transaction=True)
    for server, rows in shares.items():
        prior_raw, due = next(replies), next(replies)
        known = np.array([v is not None for v in prior_raw], bool)
        last_us = np.array([int(v) if v is not None else 0 for v in prior_raw], np.int64)
        n = len(rows)
        f = fold(np.arange(n), ev.event_us[rows], ev.entry[rows], ev.kind[rows], Prior(known, known.copy(), last_us),
                 b.watermark_ms, b.watermark_ms, TIMEOUT_MS)
        names = ev.player[rows][f.player]
        queue_packed(pipe, "HSET", f"{ns}:on:{server}", names, f.last_us)
        for sec, part in _by_second(names, f.last_us):
            queue_packed(pipe, "RPUSH", f"{ns}:seen:{server}:{sec}", part)
        if due:
            pipe.hmget(f"{ns}:on:{server}", due)  # (decided in a script in a real design: read here to cost it)
        for sec in due_s:
            pipe.delete(f"{ns}:seen:{server}:{sec}")
    pipe.execute()
    return time.perf_counter() - t


GATHER_LUA = """local out = {}
for _, k in ipairs(KEYS) do for _, v in ipairs(redis.call('LRANGE', k, 0, -1)) do out[#out + 1] = v end end
return out"""


def _by_second(names: np.ndarray, us: np.ndarray) -> list[tuple[int, np.ndarray]]:
    sec = us // 1_000_000
    order = np.argsort(sec, kind="stable")
    sec, names = sec[order], names[order]
    cut = np.flatnonzero(sec[1:] != sec[:-1]) + 1
    return [(int(s[0]), part) for s, part in zip(np.split(sec, cut), np.split(names, cut), strict=True) if len(s)]


def measure(url: str, players: int, events: int, servers: int, repeat: int) -> dict[str, list[float]]:
    ns = f"fold-{players}"
    cfg = Config(redis_url=url, embedded_redis=False, namespace=ns, checkpoint_dir=f"/tmp/{ns}",
                 online_timeout_ms=TIMEOUT_MS)
    client, keys, params = redis.Redis.from_url(url), KeySchema(ns), params_for(cfg)
    rng = np.random.default_rng(1)
    warm, other = OnlineMirror(), OnlineMirror()  # other: a second worker's copy, caught up
    commit_online(client, keys, batch(0, players, events, servers, rng), params, TIMEOUT_MS, warm)
    out: dict[str, list[float]] = {"warm fold + write": [], "cold load": [], "cold fold + write": [],
                                   "catch up one batch": [], "state in Redis, batch's players only": []}
    for i in range(1, 2 * repeat + 1):
        b = batch(i, players, events, servers, rng)
        if i <= repeat:  # the same worker folds every batch: its copy is current
            t = time.perf_counter()
            commit_online(client, keys, b, params, TIMEOUT_MS, warm)
            out["warm fold + write"].append(1e3 * (time.perf_counter() - t))
            t = time.perf_counter()
            catch_up(other.players, b)
            out["catch up one batch"].append(1e3 * (time.perf_counter() - t))
        else:  # a worker without the state folds it: load, fold, write
            cold = OnlineMirror()
            t = time.perf_counter()
            cold.load(client, keys, [f"S{s}" for s in range(servers)], i - 1)
            loaded = time.perf_counter()
            commit_online(client, keys, b, params, TIMEOUT_MS, cold)
            out["cold load"].append(1e3 * (loaded - t))
            out["cold fold + write"].append(1e3 * (time.perf_counter() - loaded))
    # 40 s of batches first, so the seconds the watermark passes hold the players heard then: each event is listed
    # once and checked once, as in a steady game
    prev = 0
    for i in range(80 + 2 * repeat):
        b = batch(i, players, events, servers, rng)
        took = in_redis(client, ns, b, prev if i else b.watermark_ms)
        prev = b.watermark_ms
        if i >= 80:
            out["state in Redis, batch's players only"].append(1e3 * took)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--players", default="30000,125000")
    p.add_argument("--events", type=int, default=25_000)
    p.add_argument("--servers", type=int, default=3)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    with scratch_redis() as (_, server):
        for players in (int(x) for x in args.players.split(",")):
            costs = measure(server.url, players, args.events, args.servers, args.repeat)
            print(f"{players:,} players online, {args.events:,} events a batch, ms p50 (max): " + "; ".join(
                f"{k} {statistics.median(v):.1f} ({max(v):.1f})" for k, v in costs.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
