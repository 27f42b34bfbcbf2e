"""One churning stack, and dashboards of different code on its Redis: a page's change measured side by side.

    python -m bench.spikes.ab_dashboards --code /tmp/a:8601 --code /tmp/b:8602 [--day-minutes 18] [--scale 7.2]
    python -m bench.spikes.first_visit --url http://127.0.0.1:8601 --url http://127.0.0.1:8602 --pause 2 --nice -10

Each ``--code DIR:PORT`` is a tree of the repository (``git archive REV | tar -x -C DIR``) whose dashboard serves on
PORT; the first tree's job, generator and monitor run the stack, as ``bench/soak.py --churn matches`` starts them:
300 servers in 6 regions, 5,000 events/s. ``--day-minutes`` first plays a day of matches compressed (timeline
scale 0.1, ``RETENTION`` 600 s) for that long, then goes on at the real pace (``--scale``). Runs until stopped
(Ctrl-C, SIGTERM); everything it started stops with it.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from bench.soak import churn_env
from bench.soak import parse_args as soak_args
from bench.stack import Stack, start_job
from streaming.runtime.children import die_with_parent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--code", action="append", required=True, help="DIR:PORT, a tree and its dashboard's port")
    p.add_argument("--day-minutes", type=float, default=0, help="a compressed day first, this long (default none)")
    p.add_argument("--scale", type=float, default=7.2, help="the real pace's timeline scale (default 7.2)")
    args = p.parse_args(argv)
    trees = [(Path(code), port) for code, port in (c.rsplit(":", 1) for c in args.code)]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = Path(tempfile.mkdtemp(prefix="ab-dashboards-"))
    stack = Stack(trees[0][0], tmp, 5000)
    for name in ("STREAM_KEEP_ENTRIES", "STREAM_MAX_ENTRIES"):
        stack.env.pop(name)
    # as bench/soak.py's --churn matches: its servers, regions, RETIRE_AFTER and flood limit for the scale
    scale = 0.1 if args.day_minutes else args.scale
    retention = ["--retention", "600"] if args.day_minutes else []
    stack.env.update(churn_env(soak_args(["--churn", "matches", "--timeline-scale", f"{scale:g}", *retention])))
    dashboards: list[subprocess.Popen] = []
    try:
        stack.start("redis")
        start_job(stack, redis.Redis.from_url(stack.url, socket_timeout=60))
        stack.start("monitor")
        stack.start("generator")
        for code, port in trees:
            env = {**stack.env, "PYTHONPATH": str(code), "DASHBOARD_PORT": port}
            with open(tmp / f"dashboard-{port}.log", "w") as log:
                dashboards.append(subprocess.Popen(["bash", "-c", stack.commands["dashboard"]], cwd=code, env=env,
                                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                                   preexec_fn=die_with_parent()))
        print(f"ready: logs in {tmp}", flush=True)
        if args.day_minutes:
            time.sleep(args.day_minutes * 60)  # the day's pace, not a synchronisation
            stack.stop("generator")
            stack.env["TIMELINE_SCALE"] = f"{args.scale:g}"  # RETIRE_AFTER stays the day's, as bench/soak.py
            stack.start("generator")
            print(f"the real pace from {time.strftime('%H:%M:%S')}", flush=True)
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        for proc in dashboards:
            os.killpg(proc.pid, signal.SIGTERM)
        stack.stop_all()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
