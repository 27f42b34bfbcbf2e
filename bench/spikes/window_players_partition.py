"""Where a partition's time for its windows' players goes (decision 0019): putting them in windows, making them
distinct, packing the script call, and Redis' script, for one partition of ``--events`` events.

    python -m bench.spikes.window_players_partition [--events 25000] [--repeat 5] [--pool 500000]

Each repeat is a new batch of the same shape (3 servers, one-minute windows, players drawn from ``--pool``), on a
scratch Redis; Redis' time is ``INFO commandstats``' microseconds per ``EVAL`` call (one call a partition).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow as pa
import redis

from bench.run import scratch_redis
from streaming.schema.keys import KeySchema
from streaming.spark.window_players import PartitionPlayers
from streaming.store.batch.window_players import write_partition_players

CHUNK = 10_000  # the source's READ_CHUNK: a partition's events come in chunks this size


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=25_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--pool", type=int, default=500_000)
    args = p.parse_args(argv)
    rng = np.random.default_rng(1)
    with scratch_redis() as (_, server):
        client = redis.Redis.from_url(server.url)
        keys = KeySchema("spike")
        for rep in range(args.repeat):
            n = args.events
            servers = pa.array(rng.choice(["A", "B", "C"], n).tolist())
            players = pa.array([f"player-{i:07d}" for i in rng.integers(0, args.pool, n)])
            event_us = pa.array((1_767_225_600_000_000 + rep * 500_000 + rng.integers(0, 500_000, n)).astype(np.int64))
            t0 = time.perf_counter()
            part = PartitionPlayers(60_000, 60_000)
            for i in range(0, n, CHUNK):
                part.add(servers[i:i + CHUNK], players[i:i + CHUNK], event_us[i:i + CHUNK])
            t1 = time.perf_counter()
            part.windows()
            t2 = time.perf_counter()
            client.config_resetstat()
            # makes the windows again, then packs and sends
            write_partition_players(client, keys, f"{rep + 1}-0", part.windows(), 3_600)
            t3 = time.perf_counter()
            redis_ms = client.info("commandstats")["cmdstat_eval"]["usec"] / 1000
            print(f"batch {rep + 1}: in windows {1e3 * (t1 - t0):.1f} ms, distinct {1e3 * (t2 - t1):.1f} ms, "
                  f"write {1e3 * (t3 - t2):.1f} ms of which Redis' script {redis_ms:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
