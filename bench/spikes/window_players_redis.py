"""Redis' own CPU for a batch's window players: today's three SADDs (one per namespace: the pipeline and its two
default lanes) against the designed one SADD in a script that also records how many members it added
(docs/scaling.md, "A plan for 1,000,000 events/s", step 1).

    python -m bench.spikes.window_players_redis [--batches 40] [--players 50000]

Each batch adds ``--players`` players to one window of one server (a window lasts 20 batches; 30 % of a batch's
players are new to the window), in chunks of 7,000 members, on a scratch Redis. Redis' main-thread CPU
(``INFO cpu``) is read before and after each way; the wall time includes this process' own packing.
"""

from __future__ import annotations

import argparse
import time

import redis

from bench.run import scratch_redis

ADD_AND_COUNT = """local n = redis.call('SADD', KEYS[1], unpack(ARGV, 2))
redis.call('HINCRBY', KEYS[2], ARGV[1], n)
return n"""
CHUNK = 7_000  # under Lua's unpack limit (8,000)
NAMESPACES = ("wm", "wm.per-server-min", "wm.per-server-min-idle")


def _cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user_main_thread"]) + float(info["used_cpu_sys_main_thread"])


def measure(client: redis.Redis, batches: int, players: int, scripted: bool) -> tuple[float, float]:
    """Redis' main-thread seconds and wall seconds for ``batches`` batches one way."""
    client.flushall()
    sha = client.script_load(ADD_AND_COUNT)
    pool = [f"player-{i:07d}" for i in range(4 * players)]
    cpu0, wall0 = _cpu(client), time.perf_counter()
    for b in range(batches):
        window = b // 20
        batch = [pool[(b * players * 3 // 10 + i) % len(pool)] for i in range(players)]
        pipe = client.pipeline(transaction=False)
        for i in range(0, players, CHUNK):
            chunk = batch[i:i + CHUNK]
            if scripted:
                pipe.evalsha(sha, 2, f"wm:seen:{window}:A", f"wm:added:0:{b}", f"{window}:A", *chunk)
            else:
                for ns in NAMESPACES:
                    pipe.sadd(f"{ns}:players:{window}:A", *chunk)
        pipe.execute()
    return _cpu(client) - cpu0, time.perf_counter() - wall0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--players", type=int, default=50_000)
    args = p.parse_args(argv)
    with scratch_redis() as (_, server):
        client = redis.Redis.from_url(server.url)
        for name, scripted in (("three SADDs (today)", False), ("one SADD and its count, scripted", True)):
            cpu, wall = measure(client, args.batches, args.players, scripted)
            per = cpu / (args.batches * args.players) * 1e6
            print(f"{name}: Redis {cpu:.2f} s of main thread for {args.batches} batches of {args.players:,} "
                  f"players ({per:.2f} us a player), {wall:.1f} s wall")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
