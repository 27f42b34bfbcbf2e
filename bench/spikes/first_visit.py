"""Where a visit to a page goes, in Chromium: opened in a new tab of a running browser, as an operator's is.

    python -m bench.spikes.first_visit --url http://127.0.0.1:8501 [--url http://127.0.0.1:8502 ...] [--path /alerts]
        [--visits 8] [--nice -10]

Against a dashboard already running (``./run.sh``, or a stack ``bench/soak.py --pages`` started). Per visit, seconds
from asking for the page: its document loaded (the scripts cached after the first), the websocket open, the status
line drawn (the dashboard has read the snapshot), and the first chart drawn (Vega-Lite's marks or plotly's SVG);
and the CPU seconds the browser's processes spent meanwhile (the page's cost to a browser, which wall time mixes
with the machine's load). Several ``--url`` (dashboards of different code on one stack) are visited in turn, a
visit each per round, so each is measured under the same load.
Live ops is the default page, at the root: Streamlit knows no ``/ops`` (it shows "Page not found" over the
default page, after a second round of routing), so the visit asks for ``/`` as an operator's browser does.
``--nice`` below 0 (root) gives the browser the cores when it draws, as an operator's own machine would.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from bench.stack import tree_cpu_s

FIRST_CHART = '.js-plotly-plot .main-svg, [data-testid="stVegaLiteChart"] .marks'


def visits(urls: list[str], path: str, n: int, nice: int, pause_s: float) -> dict[str, list[dict[str, float]]]:
    from playwright.sync_api import sync_playwright

    os.setpriority(os.PRIO_PROCESS, 0, nice)  # the browser inherits it
    out: dict[str, list[dict[str, float]]] = {url: [] for url in urls}
    with tempfile.TemporaryDirectory(prefix="first-visit-") as profile, sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(profile, executable_path=shutil.which("chromium"),
                                                    args=["--no-sandbox", "--disable-gpu"],
                                                    viewport={"width": 1280, "height": 800})
        for _ in range(n):
            for url in urls:
                page = ctx.new_page()
                seen: dict[str, float] = {}
                cpu0, t0 = tree_cpu_s(os.getpid(), "chrom"), time.perf_counter()
                page.on("load", lambda _, seen=seen, t0=t0: seen.setdefault("loaded", time.perf_counter() - t0))
                page.on("websocket", lambda _, seen=seen, t0=t0: seen.setdefault("websocket",
                                                                                  time.perf_counter() - t0))
                page.goto(url + path, wait_until="commit")
                page.wait_for_selector('[data-testid="stAlert"]', timeout=60_000)
                seen["status"] = time.perf_counter() - t0
                page.wait_for_selector(FIRST_CHART, timeout=60_000)
                seen["chart"] = time.perf_counter() - t0
                seen["cpu"] = tree_cpu_s(os.getpid(), "chrom") - cpu0
                out[url].append(seen)
                print(url, "  ".join(f"{k} {v:.2f}" for k, v in sorted(seen.items(), key=lambda kv: kv[1])),
                      flush=True)
                page.close()
                time.sleep(pause_s)  # between visits, as a person comes back, not a synchronisation
        ctx.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True, action="append", help="a dashboard; again for another, visited in turn")
    p.add_argument("--path", default="/", help="default: the root, where Live ops is")
    p.add_argument("--visits", type=int, default=8)
    p.add_argument("--nice", type=int, default=0)
    p.add_argument("--pause", type=float, default=4.0, help="seconds between visits (default 4)")
    args = p.parse_args(argv)
    for url, seen in visits(args.url, args.path, args.visits, args.nice, args.pause).items():
        got, cpu = sorted(v["chart"] for v in seen), sorted(v["cpu"] for v in seen)
        within = sum(1 for c in got if c <= 3.0)
        print(f"{url}: first chart {got[0]:.2f}-{got[-1]:.2f} s, median {got[len(got) // 2]:.2f} s, {within} of "
              f"{len(got)} within 3 s; the browser's CPU median {cpu[len(cpu) // 2]:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
