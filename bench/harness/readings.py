"""What is read while the stack runs: Redis' clock, ``/metrics`` scraped as Prometheus would (:class:`Scraper`),
the online view's age (:class:`Sampler`), and after a window each query's freshness per entry, its batches' phases
and how far it committed."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

import numpy as np
import redis

from bench.harness.processes import KEEP_OVERRIDE, Stack, tree_rss_mb
from streaming.schema.keys import KeySchema
from streaming.schema.shards import Position
from watermark_client.connection import open_client
from watermark_client.events import parse_entry_id


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


def entries_added(client: redis.Redis, stack: Stack) -> int:
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
