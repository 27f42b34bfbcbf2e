"""Every dashboard page's render time in Chromium at 1280x800, with the whole stack at rate, at 3 and at 300 servers.

    python -m bench.pages [--rate 50000] [--servers 3,300] [--warmup 60] [--base REV] [--out FILE]

For each server count: the ``Procfile``'s ``redis``, ``job``, ``monitor``, ``online``, ``generator`` and
``dashboard`` lines as ``bench/stack.py`` starts them (``SCENARIO=steady``, ``SERVERS`` and ``REGIONS`` set;
``ONLINE_GROUPS`` as the environment says), ``--warmup`` seconds of
input, then Debian's Chromium opens every page twice: **cold** (the first visit of a fresh dashboard process: its
imports, the first reads) and **warm** (the same page again, as a wall screen or an operator switching pages sees
it). Per visit, from ``goto``:

- **status**: the status line (the first message box) is drawn;
- **chart**: the first chart is drawn, plotly's or Vega-Lite's (``-``: none, 3 s after the run finished);
- **done**: the page's script has finished its run (Streamlit's ``notRunning``; ``-``: not within 60 s);
- **charts**: how many charts the page shows then.

The dashboard process's CPU seconds over the visits are reported too (its share of two cores).

    python -m bench.pages --servers 300 --rate 10000 --viewers 1,5,10 [--path /wall]

measures instead what viewers cost: the dashboard's cores while 1, 5 and 10 sessions (each a browser context of
its own) keep one page open, refreshing by itself; one stack, the counts in turn.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
import redis

from bench.stack import HERE, Stack, describe, export, free_port, start_job, tree_cpu_s, wait_for

CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1280, "height": 800}
PAGES = [("/", "Live ops"), ("/alerts", "Alerts"), ("/watermark", "Watermark"), ("/lag", "Lag"),
         ("/events", "Events"), ("/health", "Pipeline health"), ("/lab", "Watermark lab"),
         ("/delay", "Choosing the delay"), ("/control", "Lab control")]
CHART_AFTER_DONE_S = 3.0
DONE_TIMEOUT_MS = 60_000


@dataclass
class Visit:
    servers: int
    page: str
    visit: str  # cold or warm
    status_s: float
    chart_s: float | None
    done_s: float | None
    charts: int


_PROBE = """() => [document.querySelectorAll('.js-plotly-plot .main-svg, [data-testid="stVegaLiteChart"] .marks')
                      .length,
                    !!document.querySelector('[data-test-script-state="notRunning"]')]"""


def visit(page, url: str, title: str, servers: int, which: str) -> Visit:  # noqa: ANN001 - playwright's Page
    t0 = time.perf_counter()
    page.goto(url)
    page.get_by_role("heading", name=title).first.wait_for(timeout=DONE_TIMEOUT_MS)
    page.wait_for_selector('[data-testid="stAlert"]', timeout=DONE_TIMEOUT_MS)
    status = time.perf_counter() - t0
    chart = done = None
    # Polled (the page is a live app: nothing to block on for "finished, whether or not it drew a chart"); after
    # the run has finished, plotly gets CHART_AFTER_DONE_S to draw what the script sent.
    while (now := time.perf_counter() - t0) < DONE_TIMEOUT_MS / 1000:
        charts, finished = page.evaluate(_PROBE)
        if charts and chart is None:
            chart = now
        if finished and done is None:
            done = now
        if done is not None and (chart is not None or now - done > CHART_AFTER_DONE_S):
            break
        time.sleep(0.05)
    charts = page.locator('.js-plotly-plot, [data-testid="stVegaLiteChart"]').count()
    return Visit(servers, title, which, round(status, 2), None if chart is None else round(chart, 2),
                 None if done is None else round(done, 2), charts)


def measure(code_root: Path, servers: int, rate: int, warmup: float) -> tuple[list[Visit], float]:
    from playwright.sync_api import sync_playwright

    with running_stack(code_root, servers, rate, warmup) as (stack, port):
        dash = psutil.Process(stack.procs["dashboard"].pid)
        cpu0, t0 = tree_cpu_s(dash.pid), time.monotonic()
        visits = []
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport=VIEWPORT)
            for which in ("cold", "warm"):
                for path, title in PAGES:
                    v = visit(page, f"http://127.0.0.1:{port}{path}", title, servers, which)
                    print(f"{servers:>4} servers {which} {title:<20} status {v.status_s:5.1f} s  chart "
                          f"{_s(v.chart_s)}  done {_s(v.done_s)}  charts {v.charts}", flush=True)
                    visits.append(v)
            browser.close()
        cpu = (tree_cpu_s(dash.pid) - cpu0) / (time.monotonic() - t0)
        return visits, round(cpu, 2)


@contextmanager
def running_stack(code_root: Path, servers: int, rate: int, warmup: float) -> Iterator[tuple[Stack, int]]:
    """The stack with its dashboard, ``warmup`` seconds of input at ``rate`` past (what the pages show is a running
    game's); yields it and the dashboard's port, and stops it all after."""
    with tempfile.TemporaryDirectory(prefix="pages-bench-") as tmp:
        stack = Stack(code_root, Path(tmp), rate)
        stack.env.update({"SERVERS": str(servers), "REGIONS": str(min(6, servers)),
                          "DASHBOARD_PORT": str(port := free_port())})
        try:
            stack.start("redis")
            client = redis.Redis.from_url(stack.url, socket_timeout=60)
            start_job(stack, client)
            for name in ("monitor", "online", "generator", "dashboard"):
                stack.start(name)
            wait_for(lambda: "You can now view" in stack.log("dashboard"), 60, "the dashboard")
            time.sleep(warmup)
            yield stack, port
        finally:
            stack.stop_all()


VIEWER_SETTLE_S = 20.0
VIEWER_WINDOW_S = 60.0


def viewers_cost(code_root: Path, servers: int, rate: int, warmup: float, counts: list[int],
                 path: str = "/") -> dict[int, float]:
    """The dashboard's cores while ``n`` viewers keep ``path`` open (each its own browser context: a session of its
    own, refreshing by itself), for each ``n`` in turn on one stack: ``VIEWER_SETTLE_S`` for the sessions to start,
    then ``VIEWER_WINDOW_S`` measured."""
    from playwright.sync_api import sync_playwright

    with running_stack(code_root, servers, rate, warmup) as (stack, port):
        out = {}
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            for n in counts:
                contexts = [browser.new_context(viewport=VIEWPORT) for _ in range(n)]
                for ctx in contexts:
                    ctx.new_page().goto(f"http://127.0.0.1:{port}{path}")
                time.sleep(VIEWER_SETTLE_S)
                cpu0, t0 = tree_cpu_s(stack.procs["dashboard"].pid), time.monotonic()
                time.sleep(VIEWER_WINDOW_S)
                out[n] = round((tree_cpu_s(stack.procs["dashboard"].pid) - cpu0) / (time.monotonic() - t0), 3)
                print(f"{servers} servers, {n:>2} viewers of {path}: dashboard {out[n]} cores", flush=True)
                for ctx in contexts:
                    ctx.close()
            browser.close()
        return out


def _s(x: float | None) -> str:
    return "    -  " if x is None else f"{x:5.1f} s"


def table(visits: list[Visit], servers: list[int]) -> str:
    """One row per page: warm status, chart and done at each server count (cold in brackets)."""
    head = "| page | " + " | ".join(f"{n} servers: status / first chart / done (cold)" for n in servers) + " |"
    rows = [head, "|---" * (1 + len(servers)) + "|"]
    for _, title in PAGES:
        cells = []
        for n in servers:
            warm = next(v for v in visits if (v.servers, v.page, v.visit) == (n, title, "warm"))
            cold = next(v for v in visits if (v.servers, v.page, v.visit) == (n, title, "cold"))
            cells.append(f"{_s(warm.status_s).strip()} / {_s(warm.chart_s).strip()} / {_s(warm.done_s).strip()} "
                         f"({_s(cold.done_s).strip()})")
        rows.append(f"| {title} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=int, default=50_000)
    p.add_argument("--servers", default="3,300", help="server counts, comma-separated (default 3,300)")
    p.add_argument("--warmup", type=float, default=60.0, help="seconds of input before the first visit")
    p.add_argument("--base", default=None, help="measure the tree at this git revision")
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    p.add_argument("--viewers", default=None,
                   help="viewer counts, comma-separated (e.g. 1,5,10): the dashboard's cores with that many sessions "
                        "on --path, at the first of --servers, instead of the page visits")
    p.add_argument("--path", default="/", help="with --viewers: the page each viewer keeps open (default Live ops)")
    args = p.parse_args(argv)
    counts = [int(x) for x in args.servers.split(",")]
    with tempfile.TemporaryDirectory(prefix="pages-code-") as codedir:
        root, label = (export(args.base, Path(codedir)), args.base) if args.base else (HERE, describe(HERE))
        if args.viewers:
            cost = viewers_cost(root, counts[0], args.rate, args.warmup, [int(x) for x in args.viewers.split(",")],
                                args.path)
            if args.out:
                args.out.write_text(json.dumps({
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "code": label, "rate": args.rate,
                    "servers": counts[0], "path": args.path, "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                    "dashboard_cores_by_viewers": cost}, indent=1))
            return 0
        visits, cpu = [], {}
        for n in counts:
            got, cpu[n] = measure(root, n, args.rate, args.warmup)
            visits += got
        print(table(visits, counts))
        print("dashboard CPU (cores) while visiting: " + ", ".join(f"{n} servers {c}" for n, c in cpu.items()))
        if args.out:
            args.out.write_text(json.dumps({
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "code": label, "rate": args.rate,
                "machine": f"{platform.machine()}, {os.cpu_count()} cores", "dashboard_cpu_cores": cpu,
                "visits": [asdict(v) for v in visits]}, indent=1))
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the stack's finally stops the processes
    sys.exit(main())
