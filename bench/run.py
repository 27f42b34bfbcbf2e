"""End-to-end figures, all measured in one run on this machine: throughput, freshness, dashboard load.

    python bench/run.py [--events 1000000] [--runs 3] [--rates 10000,50000] [--seconds 20] [--out bench/results.json]

1. throughput: events/s through source -> query -> Redis for N pre-loaded
   events (query start included), against one plain Python client draining
   the same stream with XRANGE (the bus's own limit), and their ratio. The
   first run in the process (JIT still compiling) is reported beside the
   median of ``--runs`` runs after it; the drain is the median of ``--runs``
   drains;
2. freshness: p50/p95 of XADD -> the event's window updated in Redis, with the
   generator (its own process) at each rate and a 1 s trigger. Both ends are
   Redis' clock: the entry ID's ms and the ID of the batch's entry in
   ``{ns}:commits``, written in the same transaction as the windows;
3. dashboard load: Redis commands per refresh tick and server-side render
   time with 1 and 20 concurrent sessions (Streamlit AppTest sessions sharing
   one process and its cache, as browser tabs of one server do).

Prints a table and writes JSON. Uses its own embedded Redis.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# The code measured: this checkout, or another one (bench/compare.py measures two side by side).
ROOT = Path(os.environ.get("BENCH_CODE_ROOT") or Path(__file__).resolve().parents[1]).resolve()
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import redis  # noqa: E402

from streaming.apps.redis_server import RedisServer  # noqa: E402
from streaming.rules.simulate import Simulator  # noqa: E402
from streaming.schema.config import Config  # noqa: E402
from streaming.schema.keys import KeySchema  # noqa: E402
from streaming.store.report import read_batches, wait_for_commit  # noqa: E402
from streaming.store.stream_writer import write  # noqa: E402
from watermark_client.events import parse_entry_id  # noqa: E402


@contextmanager
def scratch_redis() -> Iterator[tuple[Path, RedisServer]]:
    """A temporary directory and an embedded Redis in it, both gone afterwards."""
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        server = RedisServer(data_dir=str(tmp / "redis"), port=0)
        server.start()
        try:
            yield tmp, server
        finally:
            server.stop()


def cfg_for(url: str, tmp: Path, ns: str, **kw: object) -> Config:
    return Config(redis_url=url, embedded_redis=False, namespace=ns, checkpoint_dir=str(tmp / ns),
                  spark_master="local[*]", **kw)  # type: ignore[arg-type]


def preload(client: redis.Redis, keys: KeySchema, n: int) -> None:
    sim = Simulator("overseas-lag", seed=1, start_us=int(time.time() * 1e6) - 600_000_000, rate=0, count=n)
    write(client, keys.events, sim)
    assert client.xlen(keys.events) == n


def drain_rate(url: str, keys: KeySchema, chunk: int = 10_000) -> tuple[int, float]:
    client = redis.Redis.from_url(url)
    n, lo = 0, "-"
    t = time.perf_counter()
    while True:
        entries = client.xrange(keys.events, lo, "+", count=chunk)
        if not entries:
            break
        n += len(entries)
        lo = "(" + entries[-1][0].decode()
    return n, time.perf_counter() - t


def warm_up(spark, cfg: Config, n: int = 20_000) -> None:  # noqa: ANN001
    """A short run first, as a long-lived job would have had: Python workers started, the JVM's JIT warm."""
    from streaming.spark.query import start_query

    preload(redis.Redis.from_url(cfg.redis_url), KeySchema(cfg.namespace), n)
    query = start_query(spark, cfg, trigger_ms=0)
    query.processAllAvailable()
    query.stop()


def throughput(spark, cfg: Config, n: int) -> tuple[float, list[str]]:  # noqa: ANN001
    """Seconds from starting the query to all ``n`` events committed, and where each batch was aggregated."""
    from streaming.spark.query import start_query

    t = time.perf_counter()
    query = start_query(spark, cfg, trigger_ms=0)
    query.processAllAvailable()
    elapsed = time.perf_counter() - t
    query.stop()
    client = redis.Redis.from_url(cfg.redis_url)
    keys = KeySchema(cfg.namespace)
    assert int(client.hget(keys.totals, "input")) == n
    return elapsed, [b["aggregation"] for b in read_batches(client, keys)]


def freshness(spark, cfg: Config, rate: int, seconds: int) -> dict:  # noqa: ANN001
    from streaming.spark.query import start_query

    keys = KeySchema(cfg.namespace)
    client = redis.Redis.from_url(cfg.redis_url, socket_timeout=120)
    query = start_query(spark, cfg)  # the live trigger
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REDIS_URL": cfg.redis_url, "PIPELINE_NAMESPACE": cfg.namespace}
    gen = subprocess.run([sys.executable, "-m", "streaming.apps.generator", "--scenario", "steady", "--rate", str(rate),
                          "--count", str(rate * seconds), "--seed", "3", "--log-every", "60"],
                         env=env, cwd=ROOT, capture_output=True, text=True)
    assert gen.returncode == 0, gen.stderr
    last = client.xinfo_stream(keys.events)["last-generated-id"].decode()
    assert wait_for_commit(client, keys, last, timeout_s=600), "the query stopped committing"
    query.stop()
    lat: list[int] = []
    prev = "0-0"
    for cid, fields in client.xrange(keys.commits):
        commit_ms = parse_entry_id(cid)[0]
        end = fields[b"end_id"].decode()
        lo = "-" if prev == "0-0" else "(" + prev
        lat.extend(commit_ms - parse_entry_id(eid)[0] for eid, _ in client.xrange(keys.events, lo, end))
        prev = end
    lat.sort()
    records = read_batches(client, keys)
    paths = dict(sorted(Counter(r["aggregation"] for r in records).items()))
    return {"rate": rate, "events": len(lat), "batches": len(records), "p50_ms": lat[len(lat) // 2],
            "p95_ms": lat[int(len(lat) * 0.95)], "max_ms": lat[-1], "aggregation": paths}


def dashboard_load(cfg: Config, sessions: int) -> dict:
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    os.environ["REDIS_URL"], os.environ["PIPELINE_NAMESPACE"] = cfg.redis_url, cfg.namespace
    client = redis.Redis.from_url(cfg.redis_url)

    def commands() -> int:
        return int(client.info("stats")["total_commands_processed"])

    st.cache_data.clear()
    now = int(time.time() * 1000) // 2_000 * 2_000
    before = commands()
    renders = []
    for _ in range(sessions):
        at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=120)
        at.session_state["now_ms"] = now
        t = time.perf_counter()
        at.run()
        renders.append(time.perf_counter() - t)
        assert not at.exception
    used = commands() - before - 1  # less the INFO that read the counter
    return {"sessions": sessions, "redis_commands_per_tick": used, "render_ms_mean": 1000 * statistics.mean(renders),
            "render_ms_max": 1000 * max(renders)}


def print_table(results: dict) -> None:
    """The figures as a Markdown table."""
    tp = results["throughput"]
    print("\n| measure | figure |\n| --- | --- |")
    print(f"| throughput, {tp['events']:,} pre-loaded events, first run (JIT compiling) | "
          f"{tp['cold_events_per_s']:,.0f} events/s ({tp['cold_pipeline_s']:.1f} s) |")
    runs = ", ".join(f"{r:,.0f}" for r in tp["runs_events_per_s"])
    print(f"| throughput, {tp['events']:,} pre-loaded events, median of the next {len(tp['runs_events_per_s'])} runs | "
          f"{tp['pipeline_events_per_s']:,.0f} events/s ({tp['pipeline_s']:.1f} s; runs {runs}; "
          f"{len(tp['aggregation'])} batch(es) aggregated by {'/'.join(sorted(set(tp['aggregation'])))}) |")
    drains = ", ".join(f"{r:,.0f}" for r in tp["drains_events_per_s"])
    print(f"| plain XRANGE drain, one Python client, median of {len(tp['drains_events_per_s'])} | "
          f"{tp['drain_events_per_s']:,.0f} events/s (drains {drains}) |")
    print(f"| pipeline / drain | {tp['ratio']:.2f} |")
    for f in results.get("freshness", []):
        print(f"| freshness at {f['rate']:,} events/s, 1 s trigger | p50 {f['p50_ms'] / 1000:.2f} s, "
              f"p95 {f['p95_ms'] / 1000:.2f} s, max {f['max_ms'] / 1000:.2f} s ({f['batches']} batches: "
              f"{', '.join(f'{k} on {p}' for p, k in f['aggregation'].items())}) |")
    for d in results.get("dashboard", []):
        print(f"| dashboard, {d['sessions']} session(s) in one tick | {d['redis_commands_per_tick']} Redis commands, "
              f"render {d['render_ms_mean']:.0f} ms mean / {d['render_ms_max']:.0f} ms max |")


def after_throughput(spark: object, url: str, tmp: Path, run: str, args: argparse.Namespace) -> dict:
    """Freshness at each rate and the dashboard's load, as ``--only`` asks."""
    out: dict = {}
    if args.only != "throughput":
        out["freshness"] = []
        for rate in [int(r) for r in args.rates.split(",") if r]:
            fresh = freshness(spark, cfg_for(url, tmp, f"fresh-{rate}-{run}"), rate, args.seconds)
            out["freshness"].append(fresh)
            print(json.dumps(fresh), flush=True)
    if args.only == "all":
        dash_cfg = cfg_for(url, tmp, f"fresh-{args.rates.split(',')[0]}-{run}")
        out["dashboard"] = [dashboard_load(dash_cfg, k) for k in (1, 20)]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--rates", default="10000,50000")
    p.add_argument("--seconds", type=int, default=20)
    p.add_argument("--runs", type=int, default=3, help="throughput runs after the first (their median is reported)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results.json"))
    p.add_argument("--only", choices=("all", "throughput", "freshness"), default="all",
                   help="one measure alone, without the dashboard load (bench/compare.py uses it)")
    args = p.parse_args(argv)
    from streaming.spark.query import build_session

    results: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                 "platform": platform.platform(), "when": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                                        time.gmtime())}}
    with scratch_redis() as (tmp, server):
        run = uuid.uuid4().hex[:6]
        base = cfg_for(server.url, tmp, f"bench-{run}")
        keys = KeySchema(base.namespace)
        client = redis.Redis.from_url(server.url)
        t = time.perf_counter()
        preload(client, keys, args.events)
        print(f"preloaded {args.events:,} events in {time.perf_counter() - t:.1f} s", flush=True)
        # The drain swings from run to run as much as the pipeline does (442k-618k events/s within an hour
        # here), so it gets the pipeline's treatment: the median of --runs drains of the same stream.
        drains = [drain_rate(server.url, keys) for _ in range(max(1, args.runs))]
        n, drain_s = sorted(drains, key=lambda d: d[1])[len(drains) // 2]
        spark = build_session(base, app_name="bench", ui=False)
        # The first run is the process's first large batch: the JVM's JIT compiler is still at work in it
        # (1.4-3.9 s of compiler-thread CPU during a 1M batch after a 20,000-event warm-up, on two cores), and
        # it keeps compiling through the next run or two. What a running job sustains is the median of the
        # runs after it, each over its own freshly pre-loaded stream (the sink trims what it committed).
        cold = cfg_for(server.url, tmp, f"cold-{run}")
        preload(client, KeySchema(cold.namespace), args.events)
        cold_s, _ = throughput(spark, cold, args.events)
        warm: list[float] = []
        for k in range(args.runs):
            cfg = base if k == 0 else cfg_for(server.url, tmp, f"warm{k}-{run}")
            if k:
                preload(client, KeySchema(cfg.namespace), args.events)
            seconds, aggregation = throughput(spark, cfg, args.events)
            warm.append(seconds)
            print(f"run {k + 2}: {args.events / seconds:,.0f} events/s", flush=True)
        query_s = statistics.median(warm)
        results["throughput"] = {"events": args.events, "pipeline_s": query_s,
                                 "pipeline_events_per_s": args.events / query_s,
                                 "runs_events_per_s": [args.events / s for s in warm],
                                 "cold_pipeline_s": cold_s, "cold_events_per_s": args.events / cold_s,
                                 "drain_s": drain_s, "drain_events_per_s": n / drain_s,
                                 "drains_events_per_s": [k / sec for k, sec in drains],
                                 "ratio": (args.events / query_s) / (n / drain_s), "aggregation": aggregation}
        print(json.dumps(results["throughput"]), flush=True)
        # After the throughput run, as in a long-running job: the JVM's JIT has compiled the hot paths.
        results.update(after_throughput(spark, server.url, tmp, run, args))
        spark.stop()

    print_table(results)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwritten: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
