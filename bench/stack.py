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
import io
import json
import os
import platform
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import psutil
import redis

HERE = Path(__file__).resolve().parents[1]

from streaming.apps.redis_server import LocalCluster, free_port  # noqa: E402
from streaming.runtime.children import die_with_parent  # noqa: E402
from streaming.schema.keys import KeySchema  # noqa: E402
from streaming.schema.shards import Position  # noqa: E402
from streaming.spark.standalone import standalone  # noqa: E402
from streaming.store.redis_conn import nodes  # noqa: E402
from watermark_client.connection import open_client  # noqa: E402
from watermark_client.events import parse_entry_id  # noqa: E402

TARGET_MAIN_P95_MS = 1_500
TARGET_LANE_EXTRA_MS = 1_500
TARGET_ONLINE_AGE_P95_MS = 3_000


@dataclass
class Freshness:
    namespace: str
    trigger_ms: int
    entries: int
    uncommitted: int
    p50_ms: float | None
    p95_ms: float | None
    max_ms: float | None
    batches: int


@dataclass
class Result:
    code: str
    rate: int
    seconds: float
    achieved_rate: float
    freshness: list[Freshness]
    online_age_p95_ms: float | None
    online_age_max_ms: float | None
    online_samples: int
    job_cores: float
    job_peak_rss_mb: float
    generator_cores: float
    redis_cores: float
    backlog_at_end: int
    redis_peak_mb: float = 0.0
    phases: dict[str, tuple[float, float]] = field(default_factory=dict)  # main's batch phases: p50, p95 ms
    monitor_cores: float | None = None  # the alerts' monitor, scraped once a second (None: the code has none)
    job_cores_by_part: dict[str, float] = field(default_factory=dict)  # JOB_PARTS: driver, jvm, workers, planner
    scrape_p50_ms: float | None = None
    scrape_p95_ms: float | None = None
    master: str = "local[2]"  # where the executors ran: local mode, or "N workers x C cores" of a standalone cluster
    shards: int = 1  # STREAM_SHARDS
    executors: int = 0  # executor processes counted with the job (a standalone cluster's)
    redis_nodes: int = 1  # primaries of a Redis Cluster (1: one Redis)
    online_cores: float = 0.0  # wm-online's processes (0 with ONLINE_GROUPS=0: the job folds the view)
    online_groups: int = 0  # ONLINE_GROUPS
    scrapes: int = 0
    machine: str = field(default_factory=lambda: f"{os.cpu_count()} CPUs, {platform.machine()}, "
                                                    f"{platform.python_version()}")

    def meets_targets(self) -> bool:
        main = self.freshness[0]
        fresh_ok = all(f.uncommitted == 0 and f.p95_ms is not None
                       and f.p95_ms <= (TARGET_MAIN_P95_MS if f is main else f.trigger_ms + TARGET_LANE_EXTRA_MS)
                       for f in self.freshness)
        online_ok = self.online_age_p95_ms is not None and self.online_age_p95_ms <= TARGET_ONLINE_AGE_P95_MS
        return fresh_ok and online_ok


def procfile(code_root: Path) -> dict[str, str]:
    lines = (code_root / "Procfile").read_text().splitlines()
    return dict(line.split(":", 1) for line in lines if line.strip() and not line.startswith("#"))


def export(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "archive", "--format=tar", rev], cwd=HERE, check=True, capture_output=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


KEEP_OVERRIDE = int(os.environ.get("BENCH_KEEP_ENTRIES", "0"))
"""``STREAM_KEEP_ENTRIES`` for the stack (0: the bench's own, 200 s of input, so every entry of the window is
measured)."""


class Stack:
    """The Procfile's processes in their own process groups, logs in the scratch directory."""

    def __init__(self, code_root: Path, tmp: Path, rate: int, redis_nodes: int = 1) -> None:
        self.code_root, self.tmp = code_root, tmp
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.redis_nodes = redis_nodes
        self.ns = "{wm}" if redis_nodes > 1 else "wm"  # a cluster's pipeline keeps its keys in one slot (0018)
        self.redis_pids: list[int] = []  # a cluster's nodes (the Procfile's redis then only waits)
        venv_bin = str(Path(sys.executable).parent)
        self.env = {**os.environ, "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}",
                    "PYTHONPATH": str(code_root), "REDIS_PORT": str(self.port),
                    "REDIS_DATA_DIR": str(tmp / "redis"), "CHECKPOINT_DIR": str(tmp / "checkpoints" / "wm"),
                    "PIPELINE_NAMESPACE": self.ns, "SCENARIO": "steady", "RATE": str(rate),
                    # Freshness is measured per entry after the window (entry_keys): the trim must keep the
                    # window's entries until then, where it would keep about 20 s of them at 50,000 events/s.
                    # BENCH_KEEP_ENTRIES: keep what the product keeps instead (freshness then covers the entries
                    # still kept when the window ends, its last STREAM_KEEP_ENTRIES or so: Redis' AOF rewrites copy
                    # what is kept, a cost that 200 s of input inflates).
                    "STREAM_KEEP_ENTRIES": str(KEEP_OVERRIDE or max(1_000_000, rate * 200)),
                    # The writers' bound stays above what is kept (the configuration refuses it otherwise).
                    "STREAM_MAX_ENTRIES": str(2 * (KEEP_OVERRIDE or max(1_000_000, rate * 200))),
                    # A fleet's players follow the time of day; the load measured must not depend on the hour.
                    "DAILY_CURVE": "off",
                    "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
        for name in ("REDIS_URL", "KNOWN_SERVERS", "LAB_LANES", "PYSPARK_PYTHON"):
            self.env.pop(name, None)
        self.metrics_port = free_port()
        self.env["METRICS_PORT"] = str(self.metrics_port)
        self.shards = int(self.env.get("STREAM_SHARDS", "1"))  # the input's streams, as the stack reads them
        self.master = "local[2]"  # as ./run.sh runs the job here (local[*] on two cores)
        self.commands = procfile(code_root)
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(["bash", "-c", self.commands[name]], cwd=self.code_root, env=self.env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=die_with_parent())  # a bench killed leaves no stack behind
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")

    def stop(self, name: str, grace_s: float = 15.0) -> None:
        proc = self.procs.get(name)
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def stop_all(self) -> None:
        for name in ("dashboard", "generator", "monitor", "online", "job", "redis"):
            self.stop(name)


def tree_cpu_s(pid: int, named: str = "") -> float:
    """CPU seconds of a process and every descendant, reaped ones included; only the processes whose name holds
    ``named`` when given (``chrom``: a browser the process started, its renderers gone meanwhile included)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for p in procs:
        try:
            if named not in p.name():
                continue
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            pass
    return total


JOB_PARTS = ("driver", "jvm", "workers", "planner")
"""Where the job's CPU goes (:func:`job_cpu_parts`): the driver's Python (``wm-job``: the sink's sum, the online
view's fold and commits, the listener), the JVM (Spark's driver and, in local mode, its executors), the Python workers
(``pyspark.worker``: the source partitions' read, parse and pre-aggregation) and the planners (the streaming
source's runner: offsets and partitions; the data source look-ups)."""


def _job_part(cmdline: list[str], name: str) -> str:
    text = " ".join(cmdline)
    if name == "java" or text.split(" ", 1)[0].endswith("/java"):
        return "jvm"
    if "pyspark.worker" in text and "pyspark.daemon" in text and "sql.worker" not in text:
        return "workers"
    if "pyspark" in text:
        return "planner"
    return "driver"


def job_cpu_parts(pid: int) -> dict[str, float]:
    """CPU seconds of the job's process tree by part (:data:`JOB_PARTS`), reaped children counted with their
    parent (a Python worker's forks with the worker daemon)."""
    out = dict.fromkeys(JOB_PARTS, 0.0)
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return out
    for p in procs:
        try:
            t = p.cpu_times()
            out[_job_part(p.cmdline(), p.name())] += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            pass
    return out


def _sum_parts(pids: list[int]) -> dict[str, float]:
    out = dict.fromkeys(JOB_PARTS, 0.0)
    for pid in pids:
        for k, v in job_cpu_parts(pid).items():
            out[k] += v
    return out


def executor_pids() -> list[int]:
    """The executor JVMs a standalone cluster runs (``CoarseGrainedExecutorBackend``; their Python workers are
    their children); none in local mode, where the job's JVM is the executor."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        if "CoarseGrainedExecutorBackend" in " ".join(p.info["cmdline"] or ()):
            out.append(p.pid)
    return out


def tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and its descendants; one that ends while they are counted is left out (it
    made a whole sample read 0 before)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 2**20


def redis_ms(client: redis.Redis) -> int:
    secs, micros = client.time()
    return secs * 1000 + micros // 1000


class Scraper(threading.Thread):
    """Once a second, ``/metrics`` as a Prometheus would scrape it: how long each takes, whole stack running."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.took_ms: list[float] = []
        self.failed = 0
        self.done = threading.Event()

    def run(self) -> None:
        import urllib.request

        while not self.done.wait(1.0):
            t = time.perf_counter()
            try:
                with urllib.request.urlopen(self.url, timeout=10) as resp:
                    resp.read()
            except OSError:
                self.failed += 1
                continue
            self.took_ms.append((time.perf_counter() - t) * 1000)


class Sampler(threading.Thread):
    """Twice a second: the online view's age and the job tree's resident memory."""

    def __init__(self, url: str, job_pid: int, ns: str = "wm") -> None:
        super().__init__(daemon=True)
        self.client = open_client(url, socket_timeout=10)
        self.ns = ns
        self.job_pid = job_pid
        self.ages: list[int] = []
        self.peak_rss_mb = 0.0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.5):
            self.peak_rss_mb = max(self.peak_rss_mb, tree_rss_mb(self.job_pid))
            try:
                ts = self.client.hget(f"{self.ns}:online:state", "batch_ts_ms")
                now = redis_ms(self.client)
            except redis.RedisError:
                continue
            self.ages.append(now - int(ts) if ts else -1)


def wait_for(predicate, timeout_s: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


def namespaces(client: redis.Redis, ns: str = "wm") -> list[tuple[str, int]]:
    """The configured pipeline, then every lane the job registered, each with its trigger."""
    out = [(ns, int(client.hget(f"{ns}:state", "trigger_ms") or 1000))]
    for raw in client.hvals(f"{ns}:lanes"):
        ns = json.loads(raw)["namespace"]
        out.append((ns, int(client.hget(f"{ns}:state", "trigger_ms") or 1000)))
    return out


def _id_key(entry_id: str) -> int:
    ms, seq = parse_entry_id(entry_id)
    return ms * (1 << 20) + min(seq, (1 << 20) - 1)


def _entries_added(client: redis.Redis, stack: Stack) -> int:
    """Entries ever appended to the input's shards (``XINFO STREAM``'s ``entries-added``, Redis 7), trims or not."""
    return sum(int(client.xinfo_stream(KeySchema(stack.ns).input_shard(k))["entries-added"])
               for k in range(stack.shards)) if KEEP_OVERRIDE else 0


def freshness(client: redis.Redis, ns: str, trigger_ms: int, window: tuple[int, int], arrived: np.ndarray,
              ids: np.ndarray, shards: np.ndarray) -> Freshness:
    """Each arrival's latency to the first commit whose end (in the entry's shard) is at or above its entry."""
    commits = client.xrange(f"{ns}:commits")
    commit_ms = np.array([int(cid.decode().split("-")[0]) for cid, _ in commits], np.int64)
    ends = [Position.of(f[b"end_id"].decode()) for _, f in commits]
    idx = np.full(len(ids), len(commits), np.int64)
    for k in np.unique(shards):
        mine = shards == k
        end_key = np.array([_id_key(e.at(int(k))) for e in ends], np.int64)
        # commits are in order and their ends only grow: the first commit covering an entry is a binary search
        idx[mine] = np.searchsorted(end_key, ids[mine], side="left")
    covered = idx < len(commits)
    lat = (commit_ms[idx[covered]] - arrived[covered]).astype(float)
    in_window = sum(1 for ms in commit_ms if window[0] <= ms < window[1] + 60_000)
    q = (lambda p: float(np.percentile(lat, p))) if len(lat) else (lambda p: None)
    return Freshness(ns, trigger_ms, len(ids), int((~covered).sum()), q(50), q(95),
                     float(lat.max()) if len(lat) else None, in_window)


def entry_keys(client: redis.Redis, lo_ms: int, hi_ms: int, shards: int,
               ns: str = "wm") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival ms, a sortable key of the entry ID, its shard) of every entry in the window, in every shard."""
    ms_list, key_list, shard_list = [], [], []
    for k in range(shards):
        lo = f"{lo_ms}-0"
        while True:
            chunk = client.xrange(KeySchema(ns).input_shard(k), lo, f"{hi_ms - 1}-18446744073709551615", count=50_000)
            if not chunk:
                break
            parts = [eid.split(b"-") for eid, _ in chunk]
            ms = np.fromiter((int(a) for a, _ in parts), np.int64, len(parts))
            seq = np.fromiter((int(b) for _, b in parts), np.int64, len(parts))
            ms_list.append(ms)
            key_list.append(ms * (1 << 20) + np.minimum(seq, (1 << 20) - 1))
            shard_list.append(np.full(len(parts), k, np.int64))
            lo = "(" + chunk[-1][0].decode()
    if not ms_list:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(ms_list), np.concatenate(key_list), np.concatenate(shard_list)


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


def start_job(stack: Stack, client: redis.Redis) -> subprocess.Popen:
    """Redis, then the job, until its queries have all started."""
    def redis_up() -> bool:
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False

    redis_proc = stack.procs["redis"]
    wait_for(lambda: redis_up() or redis_proc.poll() is not None, 30, "the embedded Redis")
    if redis_proc.poll() is not None:  # a configuration error, a port taken: say what it said
        raise SystemExit(f"the embedded Redis exited ({redis_proc.returncode}):\n{stack.log('redis')[-2000:]}")
    job = stack.start("job")
    # Every query logs "query <name> running" once started; give the job until they stop coming.
    wait_for(lambda: "running" in stack.log("job") or job.poll() is not None, 120, "the job's first query")
    last, quiet_since = stack.log("job").count(" running"), time.monotonic()
    while time.monotonic() - quiet_since < 5:
        time.sleep(0.5)
        n = stack.log("job").count(" running")
        if n != last:
            last, quiet_since = n, time.monotonic()
    if job.poll() is not None:
        raise SystemExit("the job exited:\n" + stack.log("job")[-3000:])
    return job


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
    parts0 = _sum_parts([job.pid, *execs])
    t0, w0, added0 = time.monotonic(), redis_ms(client), _entries_added(client, stack)
    sampler.start()
    if scraper is not None:
        scraper.start()
    time.sleep(seconds)
    t1, w1, added1 = time.monotonic(), redis_ms(client), _entries_added(client, stack)
    cpu1 = {k: tree_cpu_s(p) for k, p in pids.items()}
    cpu1["job"] += sum(tree_cpu_s(p) for p in execs)
    cpu1["redis"] = sum(tree_cpu_s(p) for p in redis_pids)
    parts1 = _sum_parts([job.pid, *execs])
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


PROGRESS_PHASES = ("latestOffset", "walCommit", "addBatch", "commitOffsets", "triggerExecution")


def batch_phases(client: redis.Redis, ns: str, window: tuple[int, int]) -> dict[str, tuple[float, float]]:
    """p50 and p95 of each phase of the pipeline's batches that ran in the window: Spark's (from the
    listener's progress) and the sink's own steps (``phases``), in ms."""
    ids = [int(b) for b in client.zrange(f"{ns}:batches", 0, -1)]
    pipe = client.pipeline(transaction=False)
    for b in ids:
        pipe.hmget(f"{ns}:batch:{b}", ["sink", "progress", "phases"])
    samples: dict[str, list[float]] = {}
    for sink, progress, phases in pipe.execute():
        if not sink or not window[0] <= json.loads(sink)["batch_ts_ms"] <= window[1]:
            continue
        durations = json.loads(progress).get("durations_ms", {}) if progress else {}
        for name, ms in [*((k, durations[k]) for k in PROGRESS_PHASES if k in durations),
                         *(json.loads(phases).items() if phases else ())]:
            samples.setdefault(name, []).append(float(ms))
    return {k: (float(np.percentile(v, 50)), float(np.percentile(v, 95))) for k, v in samples.items()}


def committed_keys(client: redis.Redis, ns: str, shards: int) -> list[int]:
    """How far ``ns`` has committed each shard (sortable keys; -1 before its first commit)."""
    raw = client.hget(f"{ns}:state", "committed_id")
    if not raw:
        return [-1] * shards
    pos = Position.of(raw.decode())
    return [_id_key(pos.at(k)) for k in range(shards)]


def table(results: list[Result]) -> str:
    rows = ["| code | rate | achieved | query | freshness p50 / p95 / max | uncommitted | online age p95 / max "
            "| job cores | job peak RSS | generator cores | Redis cores | Redis peak memory |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def s(ms: float | None) -> str:
        return "-" if ms is None else f"{ms / 1000:.2f} s"

    for r in results:
        for i, f in enumerate(r.freshness):
            first = i == 0
            rows.append(
                f"| {where(r) if first else ''} | {f'{r.rate:,}' if first else ''} "
                f"| {f'{r.achieved_rate:,.0f}' if first else ''} | {f.namespace} (trigger {f.trigger_ms / 1000:g} s) "
                f"| {s(f.p50_ms)} / {s(f.p95_ms)} / {s(f.max_ms)} | {f.uncommitted:,} of {f.entries:,} "
                f"| {(s(r.online_age_p95_ms) + ' / ' + s(r.online_age_max_ms)) if first else ''} "
                f"| {r.job_cores if first else ''} | {f'{r.job_peak_rss_mb:,.0f} MB' if first else ''} "
                f"| {r.generator_cores if first else ''} | {r.redis_cores if first else ''} "
                f"| {f'{r.redis_peak_mb:,.0f} MB' if first else ''} |")
    return "\n".join(rows)


def where(r: Result) -> str:
    """The code and how it ran: ``302bf62 · local[2]``, ``fa136e0 · 2 workers x 1 core, 4 shards``."""
    return (f"{r.code} · {r.master}" + (f", {r.shards} shards" if r.shards > 1 else "")
            + (f", Redis Cluster of {r.redis_nodes}" if r.redis_nodes > 1 else ""))


def phases_line(r: Result) -> str:
    """``batch phases at 50,000/s (p50 / p95 ms): latestOffset 3 / 6 · ...``: where a batch's time went."""
    parts = [f"{k} {p50:.0f} / {p95:.0f}" for k, (p50, p95) in r.phases.items()]
    line = f"batch phases at {r.rate:,}/s (p50 / p95 ms): " + " · ".join(parts) if parts else ""
    if r.monitor_cores is not None:
        line += (f"\nmonitor: {r.monitor_cores} cores; /metrics scraped {r.scrapes} times, p50 "
                 f"{r.scrape_p50_ms or 0:.1f} ms, p95 {r.scrape_p95_ms or 0:.1f} ms")
    return line


COST_PARTS = ("driver", "jvm+planner", "workers", "redis", "generator", "monitor", "online")
"""The planners are short-lived processes the JVM starts: one that ends inside the window leaves the tree and its
CPU moves to the JVM (its parent reaps it), so the two are shown together, exact only as a sum."""


def cost_cores(r: Result) -> dict[str, float]:
    """Cores of every part (:data:`COST_PARTS`) over the measured window."""
    job = r.job_cores_by_part
    return {"driver": job["driver"], "jvm+planner": round(job["jvm"] + job["planner"], 3), "workers": job["workers"],
            "redis": r.redis_cores, "generator": r.generator_cores, "monitor": r.monitor_cores or 0.0,
            "online": r.online_cores}


def per_10k(r: Result) -> dict[str, float]:
    """Cores of every part per 10,000 events/s of the rate achieved."""
    return {k: round(v * 10_000 / r.achieved_rate, 3) for k, v in cost_cores(r).items()} if r.achieved_rate else {}


def costs_table(results: list[Result]) -> str:
    rows = ["cores (cores per 10,000 events/s)",
            "| rate (achieved) | main p95 | " + " | ".join(COST_PARTS) + " |", "| --- " * (len(COST_PARTS) + 2) + "|"]
    for r in results:
        c, u = cost_cores(r), per_10k(r)
        main = r.freshness[0].p95_ms
        rows.append(f"| {r.rate:,} ({r.achieved_rate:,.0f}) | {'-' if main is None else f'{main / 1000:.2f} s'} | "
                    + " | ".join(f"{c[k]:.2f} ({u.get(k, 0):.3f})" for k in COST_PARTS) + " |")
    return "\n".join(rows)


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


def describe(root: Path) -> str:
    proc = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=root, capture_output=True, text=True)
    return proc.stdout.strip() or str(root)


if __name__ == "__main__":
    sys.exit(main())
