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
import math
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import redis

from bench.harness.live_ops_timer import LiveOpsTimer
from bench.harness.processes import HERE, Stack, export, start_job
from bench.harness.soak_report import accounting, drained, summarize, write
from bench.harness.soak_sampling import Soak, key_families
from streaming.apps.redis_server import free_port
from streaming.schema.config import Config


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
