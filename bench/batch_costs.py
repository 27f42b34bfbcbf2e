"""Where a micro-batch's time goes, at the size a 1 s trigger sees at 50,000 events/s.

    python bench/batch_costs.py [--events 300000] [--batch 50000]

Pre-loads events, runs the pipeline's query with batches capped at ``--batch``
(back to back, after a warm-up) and prints the median of Spark's per-batch
phases (``durationMs``: latestOffset, walCommit, addBatch = the sink,
commitOffsets, triggerExecution = the whole batch). Profile first, then
optimise: this is how the per-batch fixed costs of docs/benchmarks.md were
found.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid

import redis  # noqa: E402

from bench.run import cfg_for, preload, scratch_redis, warm_up  # noqa: E402
from streaming.schema.keys import KeySchema  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=300_000)
    p.add_argument("--batch", type=int, default=50_000)
    args = p.parse_args(argv)
    from streaming.spark.query import build_session, start_query

    with scratch_redis() as (tmp, server):
        run = uuid.uuid4().hex[:6]
        cfg = cfg_for(server.url, tmp, f"costs-{run}", max_events_per_batch=args.batch)
        preload(redis.Redis.from_url(server.url), KeySchema(cfg.namespace), args.events)
        spark = build_session(cfg, app_name="bench-costs", ui=False)
        warm_up(spark, cfg_for(server.url, tmp, f"warm-{run}"))
        t = time.perf_counter()
        query = start_query(spark, cfg, trigger_ms=0)
        query.processAllAvailable()
        elapsed = time.perf_counter() - t
        progress = [p for p in query.recentProgress if p.numInputRows > 0][1:]  # the first pays the start
        query.stop()
        spark.stop()
    print(f"{args.events:,} events in batches of {args.batch:,}: {elapsed:.1f} s; median per batch "
          f"over {len(progress)} batches:")
    for phase in ("latestOffset", "walCommit", "queryPlanning", "addBatch", "commitOffsets", "triggerExecution"):
        values = [p.durationMs.get(phase, 0) for p in progress]
        print(f"  {phase:17s} {statistics.median(values):6.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
