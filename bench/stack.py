"""The whole stack as ``./run.sh`` starts it, at a fixed generator rate: freshness per query, online view age, cost.

    python bench/stack.py --rate 10000 [--seconds 60] [--warmup 20] [--code-root DIR | --base REV]
    python bench/stack.py --search [--low 5000] [--high 100000] [--seconds 40]
    python bench/stack.py --rates 10000,25000,50000 [--seconds 60]     # where one event's cost goes

Starts the ``Procfile``'s ``redis``, ``job``, ``generator``, ``monitor`` and ``online`` lines (the dashboard's is
left out: it costs nothing without a browser) with their defaults (``ONLINE_GROUPS=N`` in the environment: the
online view folded by ``wm-online``'s N groups, decision 0020), ``/metrics`` scraped once a second, in a
scratch directory, with ``SCENARIO=steady`` and ``RATE`` set: the job with its default lab lanes and the
online-players query, the generator in follow mode.
The generator starts once the job has started its queries; after ``--warmup`` seconds a window of
``--seconds`` is measured. Then the generator stops and the job gets up to ``--drain`` seconds to commit
what arrived in the window.

Per committing query (the configured pipeline and every lane: each namespace's ``{ns}:commits`` stream,
written in its commit transaction): **freshness** of every entry that arrived in the window, from its arrival
(its ID's ms, Redis' clock) to the first commit that covers it (the commit entry's ID, Redis' clock), p50, p95
and max; entries never committed are counted apart. The **online view age**, sampled twice a second on Redis'
clock: now minus the trigger time of the newest committed online batch (it read everything that had arrived
by then). **Cost**: CPU seconds per wall second of the job's whole process tree (driver, JVM, Python
workers), the generator's and Redis', the job tree's peak resident memory and Redis' peak memory. The
**generator's achieved rate**: entries that arrived in the window per second.

``--search`` runs the stack at rising rates and bisects for the highest that meets the targets (main p95
<= 1.5 s, each lane's p95 <= its trigger + 1.5 s, online age p95 <= 3 s, everything committed).

``--rates`` runs the stack at each rate, one after the other (a fresh scratch directory each), and adds the **cost
split**: the job's CPU by part (:data:`JOB_PARTS`), Redis', the generator's and the monitor's, in cores and in cores
per 10,000 events/s of the rate achieved (:func:`costs_table`), beside the main query's batch phases. A part whose
cost per 10,000 events/s stays flat as the rate rises grows with the events; one whose cost falls is paid per batch.

``--base REV`` measures the tree at a git revision (exported to a scratch directory) instead of this checkout.

``--redis-nodes N`` (N > 1) runs Redis as a Redis Cluster of N primaries on this machine
(:class:`streaming.apps.redis_server.LocalCluster`, decision 0018) with the namespace ``{wm}``; Redis' CPU and peak
memory are the nodes' sums. With ``STREAM_SHARDS`` in the environment the input's shards spread over the nodes.

The stack keeps 200 s of input (``STREAM_KEEP_ENTRIES``) so that every entry of the window can be timed after it;
``BENCH_KEEP_ENTRIES=N`` in the environment keeps what the product would instead (Redis' AOF rewrites copy what is
kept): freshness then covers the entries still kept when the window ends, and the achieved rate counts the entries
appended in the window (``XINFO STREAM``'s ``entries-added``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path

import numpy as np

from bench.harness.processes import (
    HERE,
    JOB_PARTS,
    Stack,
    describe,
    executor_pids,
    export,
    start_job,
    sum_parts,
    tree_cpu_s,
    tree_rss_mb,
    wait_for,
)
from bench.harness.readings import (
    Sampler,
    Scraper,
    batch_phases,
    committed_keys,
    entries_added,
    entry_keys,
    freshness,
    namespaces,
    redis_ms,
)
from bench.harness.results import (
    TARGET_LANE_EXTRA_MS,
    TARGET_MAIN_P95_MS,
    TARGET_ONLINE_AGE_P95_MS,
    Result,
    costs_table,
    per_10k,
    phases_line,
    table,
)
from streaming.apps.redis_server import LocalCluster, free_port
from streaming.schema.keys import KeySchema
from streaming.spark.standalone import standalone
from streaming.store.redis_conn import nodes
from watermark_client.connection import open_client

__all__ = ["HERE", "TARGET_LANE_EXTRA_MS", "TARGET_MAIN_P95_MS", "TARGET_ONLINE_AGE_P95_MS", "Result", "Stack",
           "committed_keys", "describe", "export", "free_port", "main", "namespaces", "redis_ms", "run", "start_job",
           "tree_cpu_s", "tree_rss_mb", "wait_for"]
"""What the other benchmarks import from here: the harness (``bench.harness``) and the targets."""
def run(code_root: Path, rate: int, seconds: float, warmup: float, drain: float, label: str,
        workers: int = 0, worker_cores: int = 1, redis_nodes: int = 1) -> Result:
    """One run; with ``workers``, the job's executors on a Spark standalone cluster of that many workers of
    ``worker_cores`` cores each on this machine (``streaming.spark.standalone``), the driver in the job; with
    ``redis_nodes`` > 1, Redis as a Redis Cluster of that many primaries."""
    with tempfile.TemporaryDirectory(prefix="stack-bench-") as tmpdir, ExitStack() as daemons:
        tmp = Path(tmpdir)
        stack = Stack(code_root, tmp, rate, redis_nodes)
        if redis_nodes > 1:
            cluster_nodes = LocalCluster(str(tmp / "cluster"), redis_nodes)
            daemons.callback(cluster_nodes.stop)
            cluster_nodes.start()
            stack.url = stack.env["REDIS_URL"] = cluster_nodes.url
            stack.redis_pids = [s.proc.pid for s in cluster_nodes.servers if s.proc is not None]
        if workers:
            cluster = daemons.enter_context(standalone(tmp / "spark", workers=workers, cores=worker_cores))
            stack.env["SPARK_MASTER"] = cluster.master_url
            stack.master = (f"{workers} worker{'s' if workers > 1 else ''} x {worker_cores} "
                            f"core{'s' if worker_cores > 1 else ''}")
        try:
            return _measure(stack, rate, seconds, warmup, drain, label)
        finally:
            stack.stop_all()

def _start_the_rest(stack: Stack, job: subprocess.Popen) -> dict[str, int]:
    """The monitor and ``wm-online`` (where the code has them: ONLINE_GROUPS decides whether it folds), then the
    generator; every process measured, by pid."""
    pids = {"job": job.pid}
    for name in ("monitor", "online", "generator"):
        if name in stack.commands:
            pids[name] = stack.start(name).pid
    return pids


def _measure(stack: Stack, rate: int, seconds: float, warmup: float, drain: float, label: str) -> Result:
    stack.start("redis")
    client = open_client(stack.url, socket_timeout=60)
    job = start_job(stack, client)
    pids = _start_the_rest(stack, job)
    time.sleep(warmup)
    sampler = Sampler(stack.url, job.pid, stack.ns)
    scraper = Scraper(stack.metrics_port) if "monitor" in pids else None
    redis_pids = stack.redis_pids or [stack.procs["redis"].pid]
    execs = executor_pids()  # on a standalone cluster the executors are the workers' children, not the job's
    cpu0 = {k: tree_cpu_s(p) for k, p in pids.items()}
    cpu0["job"] += sum(tree_cpu_s(p) for p in execs)
    cpu0["redis"] = sum(tree_cpu_s(p) for p in redis_pids)
    parts0 = sum_parts([job.pid, *execs])
    t0, w0, added0 = time.monotonic(), redis_ms(client), entries_added(client, stack)
    sampler.start()
    if scraper is not None:
        scraper.start()
    time.sleep(seconds)
    t1, w1, added1 = time.monotonic(), redis_ms(client), entries_added(client, stack)
    cpu1 = {k: tree_cpu_s(p) for k, p in pids.items()}
    cpu1["job"] += sum(tree_cpu_s(p) for p in execs)
    cpu1["redis"] = sum(tree_cpu_s(p) for p in redis_pids)
    parts1 = sum_parts([job.pid, *execs])
    sampler.done.set()
    sampler.join()
    if scraper is not None:
        scraper.done.set()
        scraper.join()
    stack.stop("generator")
    wall = t1 - t0
    arrived, ids, shard_of_entry = entry_keys(client, w0, w1, stack.shards, stack.ns)
    lanes = namespaces(client, stack.ns)
    newest = [int(ids[shard_of_entry == k].max()) if (shard_of_entry == k).any() else 0 for k in range(stack.shards)]

    def all_committed() -> bool:
        return all(committed_keys(client, ns, stack.shards) >= newest for ns, _ in lanes)

    deadline = time.monotonic() + drain
    while not all_committed() and time.monotonic() < deadline:
        time.sleep(0.5)
    fresh = [freshness(client, ns, trig, (w0, w1), arrived, ids, shard_of_entry) for ns, trig in lanes]
    backlog = sum(int(client.xlen(KeySchema(stack.ns).input_shard(k))) for k in range(stack.shards))
    phases = batch_phases(client, lanes[0][0], (w0, w1))
    redis_peak_mb = sum(int(node.info("memory")["used_memory_peak"]) for node in nodes(client)) / 2**20
    ages = np.array([a for a in sampler.ages if a >= 0], float)
    return Result(
        code=label, rate=rate, seconds=round(wall, 1), achieved_rate=round(((added1 - added0) or len(ids)) / wall, 1),
        online_age_p95_ms=float(np.percentile(ages, 95)) if len(ages) else None,
        online_age_max_ms=float(ages.max()) if len(ages) else None, online_samples=len(sampler.ages),
        job_cores=round((cpu1["job"] - cpu0["job"]) / wall, 2), job_peak_rss_mb=round(sampler.peak_rss_mb, 1),
        generator_cores=round((cpu1["generator"] - cpu0["generator"]) / wall, 2),
        redis_cores=round((cpu1["redis"] - cpu0["redis"]) / wall, 2), backlog_at_end=backlog,
        redis_peak_mb=round(redis_peak_mb, 1), phases=phases, freshness=fresh,
        job_cores_by_part={k: round((parts1[k] - parts0[k]) / wall, 3) for k in JOB_PARTS},
        master=stack.master, shards=stack.shards, executors=len(execs), redis_nodes=stack.redis_nodes,
        online_cores=round((cpu1.get("online", 0.0) - cpu0.get("online", 0.0)) / wall, 3),
        online_groups=int(stack.env.get("ONLINE_GROUPS", "0") or 0),
        **_monitor_figures(cpu1.get("monitor", 0.0) - cpu0.get("monitor", 0.0), wall, scraper),
    )


def _monitor_figures(cpu_s: float, wall: float, scraper: Scraper | None) -> dict[str, object]:
    if scraper is None:
        return {}
    took = np.array(scraper.took_ms, float)
    return {"monitor_cores": round(cpu_s / wall, 3), "scrapes": len(took),
            "scrape_p50_ms": float(np.percentile(took, 50)) if len(took) else None,
            "scrape_p95_ms": float(np.percentile(took, 95)) if len(took) else None}
def search(code_root: Path, low: int, high: int, seconds: float, warmup: float, drain: float,
           label: str, workers: int = 0, worker_cores: int = 1,
           redis_nodes: int = 1) -> tuple[int | None, list[Result]]:
    """Bisect for the highest rate that meets the targets (a rate that fails bounds it from above)."""
    results: list[Result] = []
    best: int | None = None
    lo, hi = low, high
    while hi - lo > max(1_000, lo // 10):
        mid = (lo + hi) // 2 if best is not None or results else lo
        r = run(code_root, mid, seconds, warmup, drain, label, workers, worker_cores, redis_nodes)
        results.append(r)
        print(table([r]), phases_line(r), sep="\n", flush=True)
        if r.meets_targets():
            best, lo = mid, mid
            if mid == low:
                continue
        else:
            hi = mid
            if mid == low:
                break
    return best, results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=int, default=10_000)
    p.add_argument("--seconds", type=float, default=60.0, help="measured window (default 60)")
    p.add_argument("--warmup", type=float, default=20.0, help="seconds of generator before the window (default 20)")
    p.add_argument("--drain", type=float, default=90.0, help="seconds the job may take to commit the window")
    p.add_argument("--search", action="store_true", help="bisect for the highest sustained rate")
    p.add_argument("--rates", default=None, help="comma-separated rates, one run each, with the cost split")
    p.add_argument("--workers", type=int, default=0,
                   help="run the executors on a Spark standalone cluster of this many workers (default: local mode)")
    p.add_argument("--worker-cores", type=int, default=1, help="cores of each worker (default 1)")
    p.add_argument("--redis-nodes", type=int, default=1,
                   help="run Redis as a Redis Cluster of this many primaries (default 1: one Redis)")
    p.add_argument("--low", type=int, default=5_000)
    p.add_argument("--high", type=int, default=100_000)
    where = p.add_mutually_exclusive_group()
    where.add_argument("--code-root", type=Path, default=None, help="measure the tree here (default: this checkout)")
    where.add_argument("--base", default=None, help="measure the tree at this git revision")
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="stack-code-") as codedir:
        if args.base:
            root, label = export(args.base, Path(codedir)), args.base
        else:
            root = (args.code_root or HERE).resolve()
            label = describe(root)
        if args.search:
            best, results = search(root, args.low, args.high, args.seconds, args.warmup, args.drain, label,
                                   args.workers, args.worker_cores, args.redis_nodes)
            print(f"highest sustained rate: {best:,} events/s" if best else "no rate tried met the targets")
        else:
            results, best = [], None
            for rate in [int(x) for x in args.rates.split(",")] if args.rates else [args.rate]:
                results.append(run(root, rate, args.seconds, args.warmup, args.drain, label, args.workers,
                                   args.worker_cores, args.redis_nodes))
                if args.rates:
                    print(costs_table(results[-1:]), phases_line(results[-1]), sep="\n", flush=True)
        print(table(results))
        if args.rates:
            print(costs_table(results))
        for r in results:
            print(phases_line(r))
        if args.out:
            args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                            "highest_sustained": best,
                                            **({"per_10k": [per_10k(r) for r in results]} if args.rates else {}),
                                            "results": [asdict(r) for r in results]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
