"""Where the source's read time goes in one Python worker, side by side in one run.

    python bench/read_costs.py [--events 500000] [--rounds 3]

Pre-loads events and reads them as one source partition does (XRANGE in
chunks of ``READ_CHUNK``, each chunk parsed into an Arrow record batch),
timing the XRANGE replies and the parsing apart. The XRANGE is timed twice
per round, alternating: with the cyclic garbage collector running (how
redis-py is normally called) and paused (``streaming.spark.source.xrange_entries``), so the
ratio between them is measured on the same machine in the same minute.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import uuid

import redis  # noqa: E402

from bench.run import preload, scratch_redis  # noqa: E402
from streaming.schema.keys import KeySchema  # noqa: E402
from streaming.spark.rows import to_record_batch  # noqa: E402
from streaming.spark.source import READ_CHUNK, stream_client, xrange_entries  # noqa: E402


def read_all(client: redis.Redis, stream: str, paused: bool) -> tuple[float, float, int]:
    """Seconds spent in XRANGE and in parsing, and the entries read."""
    lo, n, in_xrange, in_parse = "-", 0, 0.0, 0.0
    while True:
        t = time.perf_counter()
        if paused:
            entries = xrange_entries(client, stream, lo, "+", READ_CHUNK)
        else:
            entries = client.xrange(stream, lo, "+", count=READ_CHUNK)
        in_xrange += time.perf_counter() - t
        if not entries:
            return in_xrange, in_parse, n
        t = time.perf_counter()
        to_record_batch(entries)
        in_parse += time.perf_counter() - t
        n += len(entries)
        lo = "(" + entries[-1][0].decode()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=500_000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    assert gc.isenabled()
    with scratch_redis() as (_, server):
        keys = KeySchema(f"read-{uuid.uuid4().hex[:6]}")
        preload(redis.Redis.from_url(server.url), keys, args.events)
        client = stream_client(server.url, keys.events)
        read_all(client, keys.events, paused=True)  # warm-up: imports, connection, caches
        runs: dict[bool, list[tuple[float, float, int]]] = {False: [], True: []}
        for _ in range(args.rounds):
            for paused in (False, True):
                runs[paused].append(read_all(client, keys.events, paused))
    print(f"{args.events:,} events, one client, chunks of {READ_CHUNK:,}; median of {args.rounds} rounds, "
          "microseconds per event:")
    med: dict[bool, float] = {}
    for paused, label in ((False, "XRANGE, collector running"), (True, "XRANGE, collector paused")):
        med[paused] = statistics.median(x / n for x, _, n in runs[paused]) * 1e6
        print(f"  {label:28s} {med[paused]:6.2f}")
    parse = statistics.median(y / n for _, y, n in runs[False] + runs[True]) * 1e6
    print(f"  {'parse into Arrow':28s} {parse:6.2f}")
    print(f"XRANGE running/paused: {med[False] / med[True]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
