"""After the soak: how long the stack took to drain, whether every entry was counted once, each series' figures
and slope (:func:`summarize`), written as ``samples.csv`` and ``summary.json`` and drawn as ``soak.html``
(``soak.png`` with Chromium)."""

from __future__ import annotations

import csv
import json
import math
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import redis

from bench.harness.readings import committed_keys, namespaces
from bench.harness.soak_sampling import Soak, slope_per_hour


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
