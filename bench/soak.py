"""The whole stack for a long time at one rate: does anything grow? Sampled every few seconds, written and drawn.

    python -m bench.soak --rate 50000 --minutes 60 [--every 5] [--warmup-minutes 5] [--out bench/soak-out]
    python -m bench.soak --rate 10000 --minutes 20 --churn matches --servers 300 --timeline-scale 0.1 --pages 60

``--churn matches`` (or ``rolling-deploy``) plays a fleet whose servers are replaced as they play
(``streaming.rules.scenarios.Churn``) on ``--servers`` slots: with ``--timeline-scale 0.1`` a match lasts 18 s,
so 300 slots name about 20,000 servers in 20 minutes, an Agones day compressed; RETIRE_AFTER is scaled the same
way (``--retire-after``, default 10 min times the scale). It also samples what a fleet must not grow: the names the
pipeline has seen, the servers in the live views, ``/metrics``' series and scrape time, idle markers a minute,
and with ``--pages N`` the time Live ops takes to draw its first chart in Chromium, every N seconds.

Starts the ``Procfile``'s ``redis``, ``job``, ``generator`` and ``monitor`` lines as ``bench/stack.py`` does (scratch
directory, ``SCENARIO=steady``, the default lanes, a full house all day), but with the stream's default bound
(``STREAM_KEEP_ENTRIES`` as ``./run.sh`` leaves it: the soak checks what a user's stack keeps). Every
``--every`` seconds it records:

- Redis: ``used_memory`` and its RSS, the number of keys, the input stream's length and its span (newest minus
  oldest entry, seconds of input), the data directory's size (the append-only file and its rewrites) and the
  number of rewrites so far;
- the job: the checkpoint directory's size, its process tree's resident memory and CPU (cores over the interval);
  the generator's, Redis' and the monitor's CPU;
- freshness over the interval, per query: of every entry that arrived in it, the time from its arrival to the
  first commit covering it, from the query's ``{ns}:commits`` (commit time and end entry ID, both Redis'
  clock). Arrivals are taken as uniform over the interval (the generator's rate is constant; a 1 ms grid): the
  percentiles are those of the entries, within a millisecond, without reading 250,000 IDs a sample.

At the end: a census of Redis' keys by family (the namespace, then each key's name with its numbers as ``N``),
the slope of every series after the warm-up (a least-squares line, per hour), and how many intervals met the
freshness targets. Written to ``--out``: ``samples.csv``, ``summary.json`` and ``soak.html`` (every series
drawn, plotly), and ``soak.png`` when Chromium is on the PATH (a headless screenshot of the page).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import redis

from bench.stack import (
    HERE,
    TARGET_LANE_EXTRA_MS,
    TARGET_MAIN_P95_MS,
    TARGET_ONLINE_AGE_P95_MS,
    Stack,
    committed_keys,
    export,
    free_port,
    namespaces,
    redis_ms,
    start_job,
    tree_cpu_s,
    tree_rss_mb,
)
from streaming.schema.config import Config

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


def drained(client: redis.Redis, timeout_s: float) -> float:
    """Seconds until every query has committed the stream's last entry (the generator stopped); -1: not within
    ``timeout_s``. An overloaded run ends with a backlog of up to ``STREAM_MAX_ENTRIES``."""
    last = client.xinfo_stream("wm:events")["last-generated-id"]
    ms, seq = map(int, (last.decode() if isinstance(last, bytes) else last).split("-"))
    end = ms * (1 << 20) + min(seq, (1 << 20) - 1)
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if all(committed_keys(client, ns, 1)[0] >= end for ns, _ in namespaces(client)):  # one stream: wm:events
            return round(time.monotonic() - t0, 1)
        time.sleep(0.5)
    return -1.0


def accounting(client: redis.Redis) -> dict:
    """Every entry the stream ever took (Redis' own ``entries-added``) up to the pipeline's last commit against
    what each query counted as its input once drained: equal when nothing was lost, doubled, or trimmed before it
    was read. The job's idle markers go on after the generator stops: those after its last commit are not due."""
    committed = (client.hget("wm:state", "committed_id") or b"0-0").decode()
    after = len(client.xrange("wm:events", f"({committed}", "+"))
    added = int(client.xinfo_stream("wm:events")["entries-added"]) - after
    counted = {ns: int(client.hget(f"{ns}:totals", "input") or 0) for ns, _ in namespaces(client)[:1]}
    return {"entries_added": added, "input_counted": counted, "exact": all(v == added for v in counted.values())}


def summarize(soak: Soak, warmup_s: float, rate: int, label: str, families: dict[str, int],
              until_s: float = math.inf) -> dict:
    """Each series' figures over the samples from ``warmup_s`` to ``until_s``."""
    cols = soak.columns()
    ts = np.array([s.t_s for s in soak.samples])
    after = (ts >= warmup_s) & (ts < until_s)
    out: dict = {"code": label, "rate": rate, "samples": len(ts), "warmup_s": warmup_s,
                 "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "series": {}, "key_families": families}
    for col in cols:
        ys = np.array([s.values.get(col, np.nan) for s in soak.samples], float)
        seen = ys[after & ~np.isnan(ys)]
        entry = {"slope_per_hour": slope_per_hour(ts[after], ys[after]),
                 "min": float(seen.min()) if len(seen) else None, "max": float(seen.max()) if len(seen) else None,
                 "mean": float(seen.mean()) if len(seen) else None}
        if (target := soak.target_ms(col)) is not None:
            entry["target_ms"] = target
            entry["intervals_within_target"] = int((seen <= target).sum())
            entry["intervals"] = len(seen)
        out["series"][col] = entry
    return out


def write(out: Path, soak: Soak, summary: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    cols = soak.columns()
    with (out / "samples.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_s", *cols])
        for s in soak.samples:
            w.writerow([s.t_s, *(s.values.get(c, "") for c in cols)])
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    _draw(out, soak, summary)


def _draw(out: Path, soak: Soak, summary: dict) -> None:
    from plotly.subplots import make_subplots

    panels = [("Redis memory (MB)", ["redis_used_mb", "redis_rss_mb"]), ("Redis keys", ["keys"]),
              ("Input stream (entries)", ["stream_entries"]), ("Input stream span (s)", ["stream_span_s"]),
              ("Redis data dir, AOF (MB)", ["redis_dir_mb"]), ("Checkpoint (MB)", ["checkpoint_mb"]),
              ("Job tree memory (MB)", ["job_rss_mb"]),
              ("CPU (cores)", ["job_cores", "redis_cores", "generator_cores", "monitor_cores"]),
              ("Freshness p95 (ms)", [c for c in soak.columns() if c.startswith("fresh_p95_ms:")]),
              ("Online view age p95 (ms)", ["online_age_ms"]),
              ("Server names seen, servers in the live views", ["names_seen", "servers_in_view"]),
              ("/metrics series", ["metrics_series"]), ("/metrics scrape (ms)", ["scrape_ms"]),
              ("Idle markers a minute", ["idle_markers_per_min"]), ("Monitor memory (MB)", ["monitor_rss_mb"]),
              ("Live ops: first chart (s)", ["live_ops_first_chart_s"])]
    fig = make_subplots(rows=8, cols=2, subplot_titles=[t for t, _ in panels], vertical_spacing=0.04)
    minutes = [s.t_s / 60 for s in soak.samples]
    for i, (_, cols) in enumerate(panels):
        row, col = i // 2 + 1, i % 2 + 1
        for c in cols:  # only the samples that have the series (Live ops is timed every --pages seconds)
            xs = [m for m, s in zip(minutes, soak.samples, strict=True) if s.values.get(c) is not None]
            fig.add_scatter(x=xs, y=[s.values[c] for s in soak.samples if s.values.get(c) is not None], mode="lines",
                            name=c.replace("fresh_p95_ms:", ""), row=row, col=col, showlegend=len(cols) > 1)
            if (target := soak.target_ms(c)) is not None and c == cols[0]:
                fig.add_hline(y=target, line_dash="dot", line_color="red", row=row, col=col)
        fig.update_xaxes(title_text="minutes", row=row, col=col)
    fig.update_layout(height=2600, width=1200, margin={"b": 170}, legend={"orientation": "h", "y": -0.04},
                      title=f"Soak: {summary['code']}, {summary['rate']:,} events/s, {summary['date']}")
    html = out / "soak.html"
    fig.write_html(html, include_plotlyjs=True)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium:
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--screenshot={out / 'soak.png'}", "--window-size=1200,2600", "--virtual-time-budget=5000",
                        html.as_uri()], capture_output=True, timeout=120, check=False)


class LiveOpsTimer:
    """Live ops opened in a new tab of one running browser, timed to its first chart drawn: as an operator's browser
    is, started once and its scripts cached; a session of its own each time."""

    def __init__(self, url: str, nice: int = 0) -> None:
        self.url = url
        self.nice = nice
        self._pw: Any = None
        self._context: Any = None

    def first_chart_s(self) -> float:
        """Seconds from opening the tab to the first chart drawn (NaN: none in 60 s)."""
        if self._context is None:
            from playwright.sync_api import sync_playwright

            own = os.getpriority(os.PRIO_PROCESS, 0)
            os.setpriority(os.PRIO_PROCESS, 0, self.nice)  # the browser inherits it: an operator's own machine
            try:
                self._pw = sync_playwright().start()
                self._context = self._pw.chromium.launch_persistent_context(
                    str(CACHE), executable_path=shutil.which("chromium"), args=["--no-sandbox", "--disable-gpu"],
                    viewport={"width": 1280, "height": 800})
            finally:
                os.setpriority(os.PRIO_PROCESS, 0, own)
        page = self._context.new_page()
        try:
            t0 = time.perf_counter()
            page.goto(self.url + "/")  # Live ops is the default page: the root, as an operator opens it
            page.wait_for_selector(FIRST_CHART, timeout=60_000)
            return round(time.perf_counter() - t0, 2)
        except Exception:  # noqa: BLE001 - a page that never draws is the figure, not a crash
            return float("nan")
        finally:
            page.close()

    def close(self) -> None:
        if self._context is not None:
            self._context.close()
            self._pw.stop()


FIRST_CHART = '.js-plotly-plot .main-svg, [data-testid="stVegaLiteChart"] .marks'
"""A chart drawn: plotly's SVG, or Vega-Lite's marks (Live ops' first tab)."""
CACHE = Path(tempfile.gettempdir()) / "soak-browser-profile"
"""The browser's profile between samples: its cache of the dashboard's scripts."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=int, default=50_000)
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--every", type=float, default=5.0, help="seconds between samples (default 5)")
    p.add_argument("--warmup-minutes", type=float, default=5.0, help="left out of the slopes (default 5)")
    p.add_argument("--out", type=Path, default=HERE / "bench" / "soak-out")
    p.add_argument("--base", default="HEAD", help="the git revision measured, exported (default HEAD): an hour's "
                   "run must not pick up files edited meanwhile (Spark's workers import as they start)")
    p.add_argument("--churn", choices=("rolling-deploy", "matches"), default=None,
                   help="a fleet replaced as it plays (default: the steady game on A, B, C)")
    p.add_argument("--servers", type=int, default=300, help="with --churn: the fleet's slots (default 300)")
    p.add_argument("--regions", type=int, default=6, help="with --churn: its regions (default 6)")
    p.add_argument("--timeline-scale", type=float, default=1.0, help="with --churn: how fast the matches pass")
    p.add_argument("--retire-after", type=float, default=None,
                   help="RETIRE_AFTER in seconds (default 600 times the timeline scale)")
    p.add_argument("--then-minutes", type=float, default=0.0,
                   help="with --churn: then as many minutes with the matches at --then-scale (the day's names seen)")
    p.add_argument("--then-scale", type=float, default=7.2,
                   help="the timeline scale after the compressed day (default 7.2: matches of 21.6 minutes, an "
                        "Agones day's pace at 300 servers)")
    p.add_argument("--pages", type=float, default=0.0, help="time Live ops in Chromium every N seconds (0: never)")
    p.add_argument("--browser-nice", type=int, default=0,
                   help="the browser's nice value (root for below 0): -10 gives it the cores when it draws, as an "
                        "operator's own machine would, while the stack keeps the rest")
    p.add_argument("--retention", type=float, default=None,
                   help="RETENTION in seconds (windows kept; default the product's day): a compressed day keeps a "
                        "compressed retention, so the windows' plateau shows within the run")
    return p.parse_args(argv)


def churn_env(args: argparse.Namespace) -> dict[str, str]:
    """The stack's environment for a fleet that churns, its compressed RETIRE_AFTER and RETENTION."""
    env = {}
    if args.churn:
        env.update({"SCENARIO": args.churn, "SERVERS": str(args.servers), "REGIONS": str(args.regions),
                    "TIMELINE_SCALE": str(args.timeline_scale),
                    "RETIRE_AFTER": f"{args.retire_after or 600 * args.timeline_scale:g}s",
                    # names come 1/scale times as fast as in the day compressed: the flood guard's limit too
                    "NEW_SERVERS_PER_MINUTE": str(math.ceil(Config.new_servers_per_minute / args.timeline_scale))})
    if args.retention:
        env["RETENTION"] = f"{args.retention:g}s"
    return env


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: the stack is stopped with it (finally)
    label = subprocess.run(["git", "rev-parse", "--short", args.base], cwd=HERE, capture_output=True, text=True,
                           check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="soak-") as tmpdir, \
            tempfile.TemporaryDirectory(prefix="soak-code-") as code:
        stack = Stack(export(args.base, Path(code)), Path(tmpdir), args.rate)
        for name in ("STREAM_KEEP_ENTRIES", "STREAM_MAX_ENTRIES"):  # the default bounds, as ./run.sh runs
            stack.env.pop(name)
        stack.env.update(churn_env(args))
        dash_port = free_port()
        try:
            stack.start("redis")
            client = redis.Redis.from_url(stack.url, socket_timeout=60)
            job = start_job(stack, client)
            monitor = stack.start("monitor")
            if args.pages:
                stack.env["DASHBOARD_PORT"] = str(dash_port)
                stack.start("dashboard")
            gen = stack.start("generator")
            pids = {"job": job.pid, "redis": stack.procs["redis"].pid, "generator": gen.pid, "monitor": monitor.pid}
            soak = Soak(stack, client, pids, args.every)
            soak.pages_every_s = args.pages
            soak.timer = LiveOpsTimer(f"http://127.0.0.1:{dash_port}", args.browser_nice)
            soak.run(args.minutes * 60)
            if args.then_minutes:  # the day's names seen, the fleet goes on at its real pace
                stack.stop("generator")
                stack.env["TIMELINE_SCALE"] = f"{args.then_scale:g}"
                soak.pids["generator"] = stack.start("generator").pid
                soak.run(args.then_minutes * 60)
            stack.stop("generator")
            drain_s = drained(client, 600)
            soak.timer.close()
            soak.finish()
            families = key_families(client)
            counts = accounting(client)
        finally:
            stack.stop_all()
    day_s = args.minutes * 60
    summary = {**summarize(soak, args.warmup_minutes * 60, args.rate, label, families, until_s=day_s),
               "drain_s": drain_s, "accounting": counts}
    if args.then_minutes:  # after RETIRE_AFTER twice over: the day's drained servers retired and forgotten
        settle_s = 2 * float(churn_env(args)["RETIRE_AFTER"].rstrip("s"))
        summary["then"] = {**summarize(soak, day_s + settle_s, args.rate, label, families),
                           "timeline_scale": args.then_scale, "from_s": day_s + settle_s}
    write(args.out.resolve(), soak, summary)
    print(f"drained in {drain_s} s; entries added {counts['entries_added']:,}, counted {counts['input_counted']}: "
          f"{'exact' if counts['exact'] else 'NOT EXACT'}")
    for col, s in summary["series"].items():
        slope = "-" if s["slope_per_hour"] is None else f"{s['slope_per_hour']:+.2f}/h"
        within = f", {s['intervals_within_target']} of {s['intervals']} within {s['target_ms']:.0f}" \
            if "target_ms" in s else ""
        print(f"{col}: {s['min']} .. {s['max']} slope {slope}{within}")
    for col, s in summary.get("then", {}).get("series", {}).items():
        print(f"then, {col}: {s['min']} .. {s['max']} mean {s['mean']}")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
