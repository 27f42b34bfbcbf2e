"""Names are text: servers and regions whose names carry links, images, raw HTML, LaTeX and a heading go through
the real pipeline and the monitor, and every page in Chromium shows them as text. No page links to, or requests,
anything a name carries: a web server on loopback stands where the names point and must get no request."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import redis
from pyspark.sql import SparkSession

from dashboard.text import JOINER
from streaming.apps.redis_server import free_port
from streaming.rules.scenarios import fleet
from streaming.schema.keys import KeySchema
from streaming.store.alert_store import read_alerts
from streaming.store.views.snapshot import read_snapshot
from tests.procs import ROOT, Proc, until
from tests.seed import Seeded, seed_pipeline
from tests.ui.test_dashboard_browser import CHROMIUM, CHROMIUM_ARGS, TAB_DRAWN

pytestmark = [pytest.mark.spark, pytest.mark.browser]

PAGES = ("/", "/alerts", "/watermark", "/lag", "/events", "/health", "/lab", "/delay", "/wall")


class Trap:
    """A web server the names point at: every request it gets is one a page should not have made."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        hits = self.hits

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                hits.append(self.path)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def trap() -> Iterator[Trap]:
    t = Trap()
    yield t
    t.server.shutdown()


def hostile(base: str) -> dict[str, tuple[str, str | None]]:
    """The fleet's servers renamed as a producer with markup in its names would name them."""
    return {
        "eu-001": (f"![p]({base}/image)", "eu"),
        "na-001": (f"eu-[login here]({base}/link)", f"[na]({base}/region)"),
        "eu-002": (f'<img src="{base}/raw-html">', "eu"),
        "na-002": (f'<a href="{base}/plotly">x</a>', f"<b>na</b><img src={base}/region-html>"),
        "eu-003": (f"$\\href{{{base}/latex}}{{x}}$", "eu"),
        "na-003": ("ok\n# a heading from a name", "na"),  # a line break: quarantined at ingest (bad_name)
    }


@pytest.fixture(scope="module")
def seeded(spark: SparkSession, redis_url: str, trap: Trap, tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    # Ending about two minutes ago: every server is silent (ServerSilent fires) and none retired yet.
    return seed_pipeline(redis_url, tmp_path_factory.mktemp("names"), scenario=fleet(6, 2, daily=False), rate=20,
                         count=6_000, batch_arrival_ms=20_000, minutes_ago=7, rename=hostile(trap.base))


@pytest.fixture(scope="module")
def served(seeded: Seeded, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("names-stack")
    env = {"REDIS_URL": seeded.cfg.redis_url, "PIPELINE_NAMESPACE": seeded.cfg.namespace}
    (tmp / "alerts.toml").write_text('[server_silent]\nafter = "5s"\n')
    port = free_port()
    procs = [Proc.python("monitor", ["streaming.apps.monitor", "--config", str(tmp / "alerts.toml"), "--port", "0"],
                         env, tmp),
             Proc.python("dashboard", ["streamlit", "run", str(ROOT / "dashboard" / "app.py"), "--server.port",
                                       str(port), "--server.address", "127.0.0.1", "--server.headless", "true",
                                       "--browser.gatherUsageStats", "false"], env, tmp)]
    try:
        procs[1].wait_for(r"You can now view", timeout=60)
        client = redis.Redis.from_url(seeded.cfg.redis_url)
        keys = KeySchema(seeded.cfg.namespace)
        # the monitor's first round has the silent servers firing: the notices carry the names too
        until(lambda: any(a.rule == "server_silent" and a.status == "firing"
                          for a in read_alerts(client, keys).values()), 60, "ServerSilent firing")
        yield f"http://127.0.0.1:{port}"
    finally:
        for p in procs:
            p.stop()


SEEN_JS = """
() => {
  const attr = (sel, name) => Array.from(document.querySelectorAll(sel)).map(e => e.getAttribute(name) || '');
  return {
    text: document.body.innerText,
    links: [...attr('a[href]', 'href'), ...attr('a', 'xlink:href')],
    images: [...attr('img[src]', 'src'), ...attr('image', 'href')],
    headings: Array.from(document.querySelectorAll('h1,h2,h3,h4,h5,h6')).map(e => e.innerText),
    latex: document.querySelectorAll('.katex').length,
    traces: Array.from(document.querySelectorAll('.js-plotly-plot')).flatMap(p => (p.data || []).flatMap(
      t => [t.name || '', ...[...(t.x || []), ...(t.y || [])].filter(v => typeof v === 'string')])),
    bold: Array.from(document.querySelectorAll('[data-testid="stMarkdownContainer"] b')).map(e => e.innerText),
    // what stands above the page's title in the main area (Streamlit's magic writes a bare string out)
    above_title: (() => {
      const main = document.querySelector('[data-testid="stMain"]');
      const h1 = main && main.querySelector('h1');
      return h1 ? main.innerText.slice(0, main.innerText.indexOf(h1.innerText)).trim() : null;
    })(),
    // a number shown cut short: its text wider than its box
    cut: Array.from(document.querySelectorAll('[data-testid="stMetricValue"] div, [data-testid="stMetricValue"]'))
      .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.innerText),
  };
}
"""


def _seen(page) -> dict:  # noqa: ANN001 - playwright's Page
    shown = page.evaluate(SEEN_JS)
    shown["text"] = shown["text"].replace(JOINER, "")  # what a reader sees: it is invisible
    return shown


@pytest.fixture(scope="module")
def visited(served: str) -> dict:
    """Every page as Chromium shows it at 1280 px wide, and every URL it requested."""
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: `apt-get install chromium` (.ci/run does)"
    requested: list[str] = []
    seen: dict[str, dict] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 2400})
        page.on("request", lambda r: requested.append(r.url))
        for path in PAGES:
            page.goto(served + path)
            # the status line (the wall's is its status tile)
            page.wait_for_selector(".wall-status" if path == "/wall" else '[data-testid="stAlert"]', timeout=60_000)
            page.wait_for_selector('[data-test-script-state="notRunning"]', timeout=60_000)
            if path == "/":  # Live ops' first tab: Vega-Lite, its names drawn as text, never markup
                page.wait_for_selector('[data-testid="stVegaLiteChart"] .marks', timeout=60_000)
            elif path not in ("/alerts", "/health", "/wall"):
                page.wait_for_selector(".js-plotly-plot .main-svg", timeout=60_000)
            seen[path] = _seen(page)
            if path == "/":  # and every other tab of it, as it runs when opened
                for tab in ("Servers", "Over time", "Windows"):
                    page.get_by_role("tab", name=tab).click()
                    page.wait_for_selector(TAB_DRAWN[tab], timeout=60_000)
                    page.wait_for_selector('[data-test-script-state="notRunning"]', timeout=60_000)
                    seen[f"/ {tab}"] = _seen(page)
        browser.close()
    return {"seen": seen, "requested": requested}


def test_every_page_shows_hostile_names_as_text_and_requests_nothing_they_carry(visited: dict, trap: Trap,
                                                                               seeded: Seeded) -> None:
    seen, requested = visited["seen"], visited["requested"]

    assert trap.hits == [], trap.hits
    assert not [u for u in requested if u.startswith(trap.base)], requested
    for path, shown in seen.items():
        assert not [u for u in shown["links"] + shown["images"] if trap.base in u], (path, shown["links"])
        assert not [h for h in shown["headings"] if "heading" in h or "login" in h], (path, shown["headings"])
        assert shown["latex"] == 0, path
        assert "na" not in shown["bold"], path  # a region's <b> stays text
    # shown, as written: not dropped, not rewritten
    ops = "\n".join(seen[p]["text"] for p in ("/", "/ Over time", "/ Windows"))  # Live ops, every tab
    for name in (f"eu-[login here]({trap.base}/link)", f"![p]({trap.base}/image)", f'<img src="{trap.base}/raw-html">',
                 f"$\\href{{{trap.base}/latex}}{{x}}$"):
        assert name in ops, name
    # the firing line counts silent servers by region: the regions' markup is text there too
    assert any("ServerSilent" in t and f"in [na]({trap.base}/region)" in t and "<b>na</b>" in t
               for t in seen["/alerts"]["text"].splitlines()), seen["/alerts"]["text"]
    # and on the wall screen's lines of what fires, by region, a region's one silent server named
    assert any("ServerSilent" in t and f" in [na]({trap.base}/region) · since" in t
               for t in seen["/wall"]["text"].splitlines()), seen["/wall"]["text"]
    snap = read_snapshot(redis.Redis.from_url(seeded.cfg.redis_url), KeySchema(seeded.cfg.namespace),
                         range_ms=3_600_000, now_ms=int(time.time() * 1000))
    assert snap.totals.bad.get("bad_name", 0) > 0, snap.totals.bad  # the name with a line break, with its reason
    assert "ok\n# a heading from a name" not in snap.servers
    # in the charts, as text too (plotly's labels take <a> and <b>: escaped as entities, shown as written)
    escaped = f'&lt;a href="{trap.base}/plotly"&gt;x&lt;/a&gt;'
    drawn = [path for path, shown in seen.items() if escaped in shown["traces"]]
    assert {"/ Windows", "/lag"} <= set(drawn), {path: shown["traces"][:40] for path, shown in seen.items()}


def test_nothing_stands_above_a_page_title_and_no_number_is_cut_short(visited: dict) -> None:
    for path, shown in visited["seen"].items():
        assert shown["above_title"] == "", (path, shown["above_title"])
        assert shown["cut"] == [], (path, shown["cut"])
