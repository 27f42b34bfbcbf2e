"""A run's result (:class:`Result`), the targets it is held to, and the tables it is printed as: freshness
and cost per query, and the cost split by part per 10,000 events/s."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field

from bench.harness.readings import Freshness

TARGET_MAIN_P95_MS = 1_500
TARGET_LANE_EXTRA_MS = 1_500
TARGET_ONLINE_AGE_P95_MS = 3_000


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
