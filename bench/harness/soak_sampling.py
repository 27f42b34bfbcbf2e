"""What the soak samples every few seconds (:class:`Soak`): Redis' memory, keys and stream, the job's checkpoint,
memory and CPU, each query's freshness over the interval (:class:`Commits`), the online view's age and what a
fleet must not grow; each a column of :data:`SERIES`."""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import redis

from bench.harness.live_ops_timer import LiveOpsTimer
from bench.harness.processes import Stack, tree_cpu_s, tree_rss_mb
from bench.harness.readings import redis_ms
from bench.harness.results import TARGET_LANE_EXTRA_MS, TARGET_MAIN_P95_MS, TARGET_ONLINE_AGE_P95_MS

SERIES = ("redis_used_mb", "redis_rss_mb", "keys", "stream_entries", "stream_span_s", "redis_dir_mb",
          "aof_rewrites", "checkpoint_mb", "job_rss_mb", "job_cores", "redis_cores", "generator_cores",
          "monitor_cores", "online_age_ms", "names_seen", "servers_in_view", "metrics_series", "scrape_ms",
          "idle_markers_per_min", "monitor_rss_mb", "live_ops_first_chart_s")
"""Every sampled series but freshness (one column per query: ``fresh_p95_ms:{ns}``)."""


@dataclass
class Sample:
    t_s: float
    lo_ms: int  # the interval of arrivals (Redis' clock) whose freshness it holds
    hi_ms: int
    values: dict[str, float] = field(default_factory=dict)


def dir_mb(path: Path) -> float:
    total = 0
    for p in path.rglob("*"):
        try:
            if p.is_file():
                total += p.stat().st_size
        except OSError:  # a file renamed or removed under us (AOF rewrite, checkpoint cleanup)
            pass
    return total / 2**20


def _id_ms(raw: bytes | str) -> int:
    return int((raw.decode() if isinstance(raw, bytes) else raw).split("-")[0])


class Commits:
    """A query's ``{ns}:commits`` read on as it grows: (commit ms, end entry ms) in order."""

    def __init__(self, ns: str) -> None:
        self.key, self.last = f"{ns}:commits", "-"
        self.commit_ms: list[int] = []
        self.end_ms: list[int] = []

    def read(self, client: redis.Redis) -> None:
        while True:
            chunk = client.xrange(self.key, self.last, "+", count=10_000)
            chunk = [c for c in chunk if c[0].decode() != self.last]
            if not chunk:
                return
            for cid, f in chunk:
                self.commit_ms.append(_id_ms(cid))
                self.end_ms.append(_id_ms(f[b"end_id"]))
            self.last = chunk[-1][0].decode()

    def freshness_p95(self, lo_ms: int, hi_ms: int) -> float | None:
        """p95 of (first commit covering t) - t over arrivals t uniform on [lo, hi) (None: none covered yet)."""
        if not self.end_ms or hi_ms <= lo_ms:
            return None
        t = np.arange(lo_ms, hi_ms, dtype=np.int64)
        ends = np.maximum.accumulate(np.array(self.end_ms, np.int64))
        idx = np.searchsorted(ends, t, side="left")
        covered = idx < len(ends)
        if not covered.all():
            return None  # the interval is not all committed yet: judged at the next sample
        return float(np.percentile(np.array(self.commit_ms, np.int64)[idx] - t, 95))


def key_families(client: redis.Redis) -> dict[str, int]:
    """Every key by family: a server's name becomes S, digits N (``wm:batch:N``, ``wm:win:N:N:S``)."""
    servers = {m.decode(errors="replace") for m in client.smembers("wm:servers")}
    out: dict[str, int] = {}
    for key in client.scan_iter(count=10_000):
        parts = ["S" if p in servers else p for p in key.decode(errors="replace").split(":")]
        family = re.sub(r"\d+", "N", ":".join(parts))
        out[family] = out.get(family, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def slope_per_hour(ts: np.ndarray, ys: np.ndarray) -> float | None:
    ok = ~np.isnan(ys)
    if ok.sum() < 3:
        return None
    return float(np.polyfit(ts[ok], ys[ok], 1)[0] * 3600)


class Soak:
    def __init__(self, stack: Stack, client: redis.Redis, pids: dict[str, int], every_s: float) -> None:
        self.stack, self.client, self.pids, self.every_s = stack, client, pids, every_s
        self.samples: list[Sample] = []
        self.queries = ["wm", *(json.loads(v)["namespace"] for v in client.hvals("wm:lanes"))]
        self.triggers = {ns: int(client.hget(f"{ns}:state", "trigger_ms") or 1000) for ns in self.queries}
        self.commits = {ns: Commits(ns) for ns in self.queries}
        self.ages: list[int] = []
        self.pending: list[int] = []
        self.done = threading.Event()
        self.markers: int | None = None
        self.pages_every_s, self.pages_at, self.timer = 0.0, 0.0, LiveOpsTimer("")
        self.t0: float | None = None  # the first run's start: a second run's samples go on from there

    def _ages(self) -> None:
        """Twice a second, as bench/stack.py: now minus the newest online batch's trigger time (Redis' clock)."""
        c = redis.Redis.from_url(self.stack.url, socket_timeout=10)
        while not self.done.wait(0.5):
            try:
                ts, now = c.hget("wm:online:state", "batch_ts_ms"), redis_ms(c)
            except redis.RedisError:
                continue
            if ts:
                self.ages.append(now - int(ts))

    def run(self, seconds: float) -> None:
        self.done.clear()
        ages = threading.Thread(target=self._ages, daemon=True)
        ages.start()
        until = time.monotonic() + seconds
        start = self.t0 = self.t0 if self.t0 is not None else time.monotonic()
        cpu = {k: tree_cpu_s(p) for k, p in self.pids.items()}
        pending = self.pending  # samples whose intervals are not all committed yet
        lo_ms = redis_ms(self.client)
        while time.monotonic() < until:
            time.sleep(self.every_s)
            now = time.monotonic()
            cpu_now = {k: tree_cpu_s(p) for k, p in self.pids.items()}
            dt = now - start - self.samples[-1].t_s if self.samples else self.every_s
            hi_ms = redis_ms(self.client)
            s = Sample(round(now - start, 1), lo_ms, hi_ms)
            lo_ms = hi_ms
            s.values.update({f"{k}_cores": round((cpu_now[k] - cpu[k]) / dt, 3) for k in self.pids})
            cpu = cpu_now
            s.values.update(self._redis())
            s.values["checkpoint_mb"] = dir_mb(self.stack.tmp / "checkpoints")
            s.values["job_rss_mb"] = tree_rss_mb(self.pids["job"])
            recent, self.ages = self.ages, []
            s.values["online_age_ms"] = float(np.percentile(recent, 95)) if recent else float("nan")
            s.values.update(self._fleet(dt))
            s.values["monitor_rss_mb"] = tree_rss_mb(self.pids["monitor"])
            if self.pages_every_s and now - self.pages_at >= self.pages_every_s:
                self.pages_at = now
                s.values["live_ops_first_chart_s"] = self.timer.first_chart_s()
            self.samples.append(s)
            pending = self._freshness([*pending, len(self.samples) - 1])
            print(self._line(s), flush=True)
        self.done.set()
        self.pending = pending

    def finish(self, drain_s: float = 60.0) -> None:
        """The last intervals' freshness, once their entries are committed (the generator stopped)."""
        deadline = time.monotonic() + drain_s
        while self.pending and time.monotonic() < deadline:
            time.sleep(1)
            self.pending = self._freshness(self.pending)

    def _freshness(self, pending: list[int]) -> list[int]:
        for c in self.commits.values():
            c.read(self.client)
        left = []
        for i in pending:
            s = self.samples[i]
            for ns, c in self.commits.items():
                col = f"fresh_p95_ms:{ns}"
                if col not in s.values and (p95 := c.freshness_p95(s.lo_ms, s.hi_ms)) is not None:
                    s.values[col] = p95
            if any(f"fresh_p95_ms:{ns}" not in s.values for ns in self.queries):
                left.append(i)
        return left

    def _fleet(self, dt: float) -> dict[str, float]:
        """What grows with every name a fleet ever used unless it is bounded by the live one."""
        import urllib.request

        c = self.client
        t0 = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{self.stack.metrics_port}/metrics", timeout=30) as resp:
            text = resp.read().decode()
        scrape_ms = (time.perf_counter() - t0) * 1000
        series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        in_view = next((float(line.split()[-1]) for line in text.splitlines()
                        if line.startswith('wm_servers{state="live"}')), float("nan"))
        markers = int(c.xinfo_stream("wm:idleness")["entries-added"]) if c.exists("wm:idleness") else 0
        per_min = (markers - self.markers) * 60 / dt if self.markers is not None else float("nan")
        self.markers = markers
        return {"names_seen": float(c.hlen("wm:seen")), "servers_in_view": in_view, "metrics_series": float(series),
                "scrape_ms": scrape_ms, "idle_markers_per_min": per_min}

    def _redis(self) -> dict[str, float]:
        c = self.client
        mem, persistence = c.info("memory"), c.info("persistence")
        first = c.xrange("wm:events", count=1)
        last = c.xrevrange("wm:events", count=1)
        span = (_id_ms(last[0][0]) - _id_ms(first[0][0])) / 1000 if first and last else 0.0
        return {"redis_used_mb": mem["used_memory"] / 2**20, "redis_rss_mb": mem["used_memory_rss"] / 2**20,
                "keys": float(c.dbsize()), "stream_entries": float(c.xlen("wm:events")), "stream_span_s": span,
                "redis_dir_mb": dir_mb(self.stack.tmp / "redis"),
                # Redis' count of append-only-file rewrites so far: each forks and writes the whole data set, so
                # their rate (the series' slope) is a share of a core the pipeline does not get.
                "aof_rewrites": float(persistence.get("aof_rewrites", 0))}

    def _line(self, s: Sample) -> str:
        v = s.values
        done = [x for x in self.samples if x.values.keys() >= {f"fresh_p95_ms:{ns}" for ns in self.queries}]
        fresh = " ".join(f"{ns.rsplit('.', 1)[-1]}={done[-1].values[f'fresh_p95_ms:{ns}'] / 1000:.2f}s"
                         for ns in self.queries) + f" (at {done[-1].t_s:.0f}s)" if done else "-"
        return (f"{s.t_s:7.0f}s redis {v['redis_used_mb']:.0f} MB keys {v['keys']:.0f}"
                f" stream {v['stream_entries']:,.0f}"
                f" ({v['stream_span_s']:.0f} s) dir {v['redis_dir_mb']:.0f} MB ckpt {v['checkpoint_mb']:.1f} MB"
                f" job {v['job_rss_mb']:.0f} MB {v['job_cores']:.2f} cores | p95 {fresh}")

    def columns(self) -> list[str]:
        return [*SERIES, *(f"fresh_p95_ms:{ns}" for ns in self.queries)]

    def target_ms(self, column: str) -> float | None:
        if column == "online_age_ms":
            return TARGET_ONLINE_AGE_P95_MS
        if column.startswith("fresh_p95_ms:"):
            ns = column.split(":", 1)[1]
            return TARGET_MAIN_P95_MS if ns == "wm" else self.triggers[ns] + TARGET_LANE_EXTRA_MS
        return None
