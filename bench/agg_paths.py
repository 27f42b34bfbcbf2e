"""The sink's two aggregation paths side by side, on the same rows in one run: Spark's hash aggregation
(``SummaryQuery.run``: a shuffle and a second stage) and Arrow's on the driver (``local_agg.aggregate`` after
``toArrow``).

    python bench/agg_paths.py [--events 50000,1000000] [--rounds 8]

Each round runs both paths on a batch read of the same entries (the source's Python reader included, as in a
micro-batch), alternating, and prints the median and minimum per path and their ratio. Both results are
checked to be the same table first.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import redis  # noqa: E402
from run import cfg_for, preload, scratch_redis  # noqa: E402

from streaming import local_agg  # noqa: E402
from streaming.keys import KeySchema  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", default="50000,1000000")
    p.add_argument("--rounds", type=int, default=8)
    args = p.parse_args(argv)
    from streaming.query import build_session
    from streaming.sink import SummaryQuery

    sizes = [int(n) for n in args.events.split(",") if n]
    with scratch_redis() as (tmp, server):
        spark = None
        for n in sizes:
            cfg = cfg_for(server.url, tmp, f"paths-{n}-{uuid.uuid4().hex[:6]}")
            keys = KeySchema(cfg.namespace)
            preload(redis.Redis.from_url(server.url), keys, n)
            spark = spark or build_session(cfg, app_name="bench-agg-paths", ui=False)
            df = (spark.read.format("redis_stream").option("url", server.url).option("stream", keys.events)
                  .option("partitions", str(cfg.source_partitions)).option("preAggregate", "true")
                  .option("windowMs", str(cfg.window_ms)).option("slideMs", str(cfg.slide_ms)).load())
            query = SummaryQuery.build()
            paths = {
                "spark": lambda df=df, query=query: query.run(df),
                "driver": lambda df=df: local_agg.aggregate(df.select(*local_agg.COLUMNS).toArrow()),
            }
            first = {name: f() for name, f in paths.items()}  # also the warm-up
            keys_ = ["tag", "server", "a", "b"]
            a, b = (t.select(local_agg.NAMES).cast(first["driver"].schema).sort_by([(k, "ascending") for k in keys_])
                    for t in (first["spark"], first["driver"]))
            assert a.equals(b), "the two paths disagree"
            times: dict[str, list[float]] = {name: [] for name in paths}
            for _ in range(args.rounds):
                for name, f in paths.items():
                    t = time.perf_counter()
                    f()
                    times[name].append(time.perf_counter() - t)
            med = {name: statistics.median(v) for name, v in times.items()}
            print(f"{n:>9,} events ({first['driver'].num_rows:,} groups, same table from both paths):")
            for name, v in times.items():
                print(f"  {name:6s} median {1000 * med[name]:7.0f} ms   min {1000 * min(v):7.0f} ms")
            print(f"  spark / driver: {med['spark'] / med['driver']:.2f}x", flush=True)
        if spark is not None:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
