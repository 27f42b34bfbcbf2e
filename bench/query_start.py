"""What starting the query costs, with Spark's workers importing pyspark from its zip and from the package.

    python bench/query_start.py [--rounds 3] [--starts 3]

Each round runs two fresh processes, one per setting, alternating: one with
``PYSPARK_PYTHON`` set to this interpreter (Spark's own default: workers import
pyspark from ``$SPARK_HOME/python/lib/pyspark.zip``, compiled from source in
every new process), one with the session's default (``streaming/spark/spark-worker-python``:
the installed package and its bytecode). Each process builds a session, runs a
warm-up query, then starts the query ``--starts`` times over 1,000 pre-loaded
events and records the time from ``start()`` to the first trigger (Spark's
progress timestamp) and to the batch being committed. Prints the medians and
their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(starts: int) -> None:
    import redis

    from bench.run import cfg_for, preload, scratch_redis, warm_up
    from streaming.schema.keys import KeySchema
    from streaming.spark.query import build_session, start_query

    out: list[dict[str, float]] = []
    with scratch_redis() as (tmp, server):
        run = uuid.uuid4().hex[:6]
        spark = build_session(cfg_for(server.url, tmp, f"s-{run}"), app_name="bench-start", ui=False)
        warm_up(spark, cfg_for(server.url, tmp, f"warm-{run}"), n=1_000)
        for k in range(starts):
            cfg = cfg_for(server.url, tmp, f"q{k}-{run}")
            preload(redis.Redis.from_url(server.url), KeySchema(cfg.namespace), 1_000)
            wall, t = time.time(), time.perf_counter()
            query = start_query(spark, cfg, trigger_ms=0)
            query.processAllAvailable()
            done = time.perf_counter() - t
            first = min(datetime.fromisoformat(p.timestamp.replace("Z", "+00:00")).timestamp()
                        for p in query.recentProgress)
            query.stop()
            out.append({"first_trigger_s": first - wall, "committed_s": done})
        spark.stop()
    print("RESULT " + json.dumps(out), flush=True)


def measure(setting: str, starts: int) -> list[dict[str, float]]:
    env = dict(os.environ)
    env.pop("PYSPARK_PYTHON", None)
    if setting == "zip":
        env["PYSPARK_PYTHON"] = sys.executable
    proc = subprocess.run([sys.executable, __file__, "--child", str(starts)], env=env, capture_output=True, text=True,
                          check=True)
    line = next(s for s in proc.stdout.splitlines() if s.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--starts", type=int, default=3)
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child)
        return 0
    runs: dict[str, list[dict[str, float]]] = {"zip": [], "package": []}
    for r in range(args.rounds):
        for setting in runs:
            got = measure(setting, args.starts)
            runs[setting].extend(got)
            print(f"round {r + 1} {setting:8s} first trigger "
                  + ", ".join(f"{g['first_trigger_s']:.2f}" for g in got) + " s; committed "
                  + ", ".join(f"{g['committed_s']:.2f}" for g in got) + " s", flush=True)
    med = {s: {k: statistics.median(g[k] for g in v) for k in ("first_trigger_s", "committed_s")}
           for s, v in runs.items()}
    for s, m in med.items():
        print(f"{s:8s} median: first trigger {m['first_trigger_s']:.2f} s, batch committed {m['committed_s']:.2f} s")
    zip_, pkg = med["zip"], med["package"]
    print(f"start to first trigger, zip/package: {zip_['first_trigger_s'] / pkg['first_trigger_s']:.2f}x; "
          f"start to committed: {zip_['committed_s'] / pkg['committed_s']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
