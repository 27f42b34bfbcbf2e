"""End to end in a real browser: generator -> Redis -> Spark job -> Redis -> Streamlit -> Chromium.

Debian's chromium, driven by Playwright, loads the served dashboard while the
real job processes a running generator. The test checks that the plotly charts
draw and grow while events arrive, and that, once the generator is done and the
job has committed everything, the dropped-late total on the page equals the
pipeline's total in Redis and an independent oracle's count over the raw stream
cut at the job's own batch boundaries.

Set ``DASHBOARD_SCREENSHOTS=docs`` to refresh the screenshots in docs/
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from streaming.apps.redis_server import free_port
from streaming.schema.keys import KeySchema
from streaming.store.report import wait_for_commit
from tests.oracle import oracle
from tests.procs import ROOT, Proc

pytestmark = [pytest.mark.spark, pytest.mark.browser, pytest.mark.long]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
WINDOW_MS, DELAY_MS = 10_000, 2_000

METRIC_JS = """
([label]) => {
  for (const m of document.querySelectorAll('[data-testid="stMetric"]')) {
    const l = m.querySelector('[data-testid="stMetricLabel"]');
    const v = m.querySelector('[data-testid="stMetricValue"]');
    if (l && v && l.innerText.trim() === label) return v.innerText.trim();
  }
  return null;
}
"""
VEGA_DRAWN = '[data-testid="stVegaLiteChart"] .marks'
"""A Vega-Lite chart drawn (Live ops' first tab): Vega's element of marks, an SVG or a canvas."""
VEGA_ALL_DRAWN = ("() => Array.from(document.querySelectorAll('[data-testid=\"stVegaLiteChart\"]'))"
                  ".every(c => c.querySelector('.marks'))")
"""Every Vega-Lite chart on the page drawn, not its placeholder."""
POINTS_JS = """
([trace]) => {
  for (const p of document.querySelectorAll('.js-plotly-plot')) {
    for (const t of (p.data || [])) if (t.name === trace) return t.x.length;
  }
  return -1;
}
"""


@pytest.fixture()
def stack(redis_url: str, tmp_path: Path) -> Iterator[dict]:
    ns = f"e2e-{uuid.uuid4().hex[:8]}"
    env = {"REDIS_URL": redis_url, "PIPELINE_NAMESPACE": ns, "WINDOW": f"{WINDOW_MS}ms",
           "WATERMARK_DELAY": f"{DELAY_MS}ms", "TRIGGER_INTERVAL": "1s", "CHECKPOINT_DIR": str(tmp_path / "ck"),
           "SPARK_MASTER": "local[2]", "KNOWN_SERVERS": "A,B,C", "LAB_LANES": "per-server-min,per-server-max"}
    port = free_port()
    procs: dict[str, Proc] = {}
    try:
        procs["job"] = Proc.python("job", ["streaming.apps.job"], env, tmp_path)
        procs["dashboard"] = Proc.python("dashboard", [
            "streamlit", "run", str(ROOT / "dashboard" / "app.py"), "--server.port", str(port),
            "--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false",
        ], env, tmp_path)
        # The monitor, with a short silence and a low late rate: the Alerts page has something to show.
        (tmp_path / "alerts.toml").write_text('[server_silent]\nafter = "5s"\n[late_drops]\nper_minute = 20\n')
        procs["monitor"] = Proc.python("monitor", ["streaming.apps.monitor", "--config", str(tmp_path / "alerts.toml"),
                                                   "--port", "0"], env, tmp_path)
        procs["dashboard"].wait_for(r"You can now view", timeout=60)
        procs["job"].wait_for(r"query \S+ running", timeout=180)
        yield {"env": env, "url": f"http://127.0.0.1:{port}", "procs": procs, "keys": KeySchema(ns),
               "redis_url": redis_url, "log_dir": tmp_path}
    finally:
        for p in procs.values():
            p.stop()


def oracle_dropped(client: redis.Redis, keys: KeySchema) -> int:
    """Dropped-late events by the late rule alone, over the raw stream cut at the job's batch boundaries."""
    lines = []
    for bid in client.zrange(keys.batches, 0, -1):
        rec = json.loads(client.hget(keys.batch(int(bid)), "sink"))
        start = "-" if rec["start_id"] == "0-0" else "(" + rec["start_id"]
        for _id, fields in client.xrange(keys.events, start, rec["end_id"]):
            ev = json.loads(fields[b"e"])
            lines.append({"batch": rec["batch"], "server": ev["server"], "player_id": ev["player_id"],
                          "event_time": ev["event_time"][:23] + "Z"})
    doc = oracle(lines, WINDOW_MS, WINDOW_MS, DELAY_MS)
    return sum(w["dropped"] for w in doc["windows"])


def test_dashboard_in_a_real_browser_follows_the_live_pipeline(stack: dict) -> None:
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: `apt-get install chromium` (.ci/run does)"
    keys: KeySchema = stack["keys"]
    client = redis.Redis.from_url(stack["redis_url"], socket_timeout=30)
    shots = Path(os.environ.get("DASHBOARD_SCREENSHOTS") or stack["log_dir"])
    if not shots.is_absolute():
        shots = ROOT / shots
    # 40 s of overseas-lag traffic: C's 0.5-25 s delays against a 2 s watermark delay drop some of its events.
    gen = Proc.python("generator", ["streaming.apps.generator", "--scenario", "overseas-lag", "--rate", "200",
                                    "--count", "8000", "--seed", "11", "--log-every", "2"],
                      stack["env"], stack["log_dir"])
    stack["procs"]["generator"] = gen
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1800})
        page.goto(stack["url"] + "/watermark")
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=120_000)
        # The charts grow while the generator runs: wait for a batch to be drawn, then for a later one.
        page.wait_for_function(f"() => ({POINTS_JS})(['max event time']) > 0", timeout=120_000)
        first = page.evaluate(POINTS_JS, ["max event time"])
        page.wait_for_function(f"() => ({POINTS_JS})(['max event time']) > {first}", timeout=60_000)
        assert gen.running(), "the chart must update while the generator is still writing"
        assert page.evaluate(METRIC_JS, ["Dropped late (total)"]) is not None

        page.goto(stack["url"] + "/")
        page.wait_for_selector(VEGA_DRAWN, timeout=60_000)  # the first tab's charts, drawn on arrival
        page.screenshot(path=str(shots / "dashboard-live-ops.png"), full_page=True)
        page.get_by_role("tab", name="Windows").click()  # the others run when opened
        page.wait_for_function(f"() => ({POINTS_JS})(['A']) > 0", timeout=60_000)
        # Every page audited while the generator writes, as an operator's screen is: live.
        problems = audit_pages(page, stack["url"], shots)

        assert gen.popen.wait(timeout=180) == 0, gen.tail()
        last_id = client.xinfo_stream(keys.events)["last-generated-id"].decode()
        assert wait_for_commit(client, keys, last_id, timeout_s=180), f"the job did not commit up to {last_id}"
        total = int(client.hget(keys.totals, "dropped") or 0)
        assert total > 0, "the scenario must drop some late events"
        assert total == oracle_dropped(client, keys)
        assert int(client.hget(keys.totals, "input")) == 8000

        page.goto(stack["url"] + "/watermark")
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=60_000)
        want = f"{total:,}"
        try:
            page.wait_for_function(f"() => ({METRIC_JS})(['Dropped late (total)']) === {json.dumps(want)}",
                                   timeout=30_000)
        finally:
            page.screenshot(path=str(shots / "dashboard-watermark.png"), full_page=True)
        assert page.evaluate(METRIC_JS, ["Dropped late (total)"]) == want

        # The lab lanes ran beside it over the same events: the lab page compares them.
        for lane in ("per-server-min", "per-server-max"):
            assert wait_for_commit(client, KeySchema(f"{keys.namespace}.{lane}"), last_id, timeout_s=180), lane
        page.goto(stack["url"] + "/lab")
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot .main-svg').length >= 3",
                               timeout=60_000)
        page.get_by_text("per-server-max: the fastest server").wait_for(timeout=30_000)
        page.get_by_text("per-server-min:").first.wait_for(timeout=30_000)
        page.screenshot(path=str(shots / "dashboard-lab.png"), full_page=True)
        page.goto(stack["url"] + "/delay")
        page.get_by_text("Recommended delay for 99.9%").wait_for(timeout=60_000)
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=60_000)
        page.screenshot(path=str(shots / "dashboard-delay.png"), full_page=True)

        # Who changed the lab's control, beside the annotations, as an operator reads it (issue 63, item 2)
        from streaming.store.control_store import write_control

        write_control(client, keys, by="ana@studio.example", role="operator", scenario="steady")
        page.goto(stack["url"] + "/alerts")
        page.wait_for_function("() => document.body.innerText.replace(/\\u2060/g, '')"
                               ".includes('Last: {\"scenario\": \"steady\"} by ana@studio.example (operator) at')",
                               timeout=60_000)

        # The wall once everything is committed: its totals hold still to be compared with Redis'.
        problems += check_wall(page, stack["url"], client, keys, shots / "page-wall.png")
        browser.close()
    client.close()
    assert problems == [], "\n".join(problems)


PAGES = (("/", "Live ops", "ops"), ("/", "Live ops", "ops-servers"), ("/", "Live ops", "ops-over-time"),
         ("/", "Live ops", "ops-windows"),
         ("/alerts", "Alerts", "alerts"), ("/watermark", "Watermark", "watermark"), ("/lag", "Event-time lag", "lag"),
         ("/events", "Events", "events"), ("/health", "Pipeline health", "health"), ("/lab", "Watermark lab", "lab"),
         ("/delay", "Choosing the delay", "delay"), ("/control", "Lab control", "control"))
TAB_DRAWN = {"Servers": '[data-testid="stDataFrame"]', "Over time": ".js-plotly-plot .main-svg",
             "Windows": ".js-plotly-plot .main-svg"}
"""What each of Live ops' tabs after the first draws once opened (each runs only then)."""
TABS = {"ops-servers": "Servers", "ops-over-time": "Over time", "ops-windows": "Windows"}
"""Live ops' tabs after the first, each audited as a page of its own."""
FIGURES_JS = r"""
() => Array.from(document.querySelectorAll('.js-plotly-plot')).filter(p => p._fullLayout).map(p => {
  const box = p.getBoundingClientRect();
  const rect = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const title = p.querySelector('.gtitle');
  const legend = p.querySelector('.legend');
  return {
    data: p.data.map(t => ({name: t.name || '', x: t.x || [], y: t.y || [], showlegend: t.showlegend})),
    // as we sent it: nothing in the browser may change it (Streamlit's theme wrapped it in <b> at each drawing)
    layout: {title: {text: (p.layout.title && p.layout.title.text) || ''},
             xaxis: {range: p._fullLayout.xaxis && p._fullLayout.xaxis.type === 'date' ? p._fullLayout.xaxis.range
                            : null},
             yaxis: {range: p._fullLayout.yaxis ? p._fullLayout.yaxis.range : null,
                     type: p._fullLayout.yaxis ? p._fullLayout.yaxis.type : null}},
    width: box.width, box: [box.left, box.top, box.right, box.bottom],
    title: title ? rect(title) : null, legend: legend ? rect(legend) : null,
    ticks: Array.from(p.querySelectorAll('.xtick text')).map(rect),
  };
})
"""


FOLD_JS = """
() => {
  const chart = document.querySelector('[data-testid="stVegaLiteChart"]');
  const total = document.querySelector('[data-testid="stMetric"]');
  const top = chart ? chart.getBoundingClientRect().top : null;
  const boxes = Array.from(document.querySelectorAll('[data-testid="stMain"] [data-testid="stAlert"]'))
    .filter(b => top === null || b.getBoundingClientRect().top < top);
  return {chart: top, total: total ? total.getBoundingClientRect().bottom : null, boxes: boxes.length,
          said: boxes.map(b => b.innerText.slice(0, 160))};
}
"""


def overlaps(a: list[float], b: list[float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_every_page_at_300_servers_in_a_real_browser(redis_url: str, tmp_path: Path) -> None:
    """The page audit again with 300 servers in 6 regions (seeded through the real pipeline, regions from the
    events, a monitor beside it): every page renders at 1280x800 with every chart within the rules (no more than
    about ten traces) and its title and legend in place; screenshots ``page-300-*.png`` in the test's own folder
    (``DASHBOARD_SCREENSHOTS_300`` to keep them): its fleet was seeded minutes ago and has stopped, so they are the
    audit's, never the docs' pictures of 300 servers (``docs/live-*.png``, from a running fleet:
    scripts/screenshots.py). The fleet has about 50 players a server (the generator's fleet at
    6,000 events/s, 30 s of it: 15,000 players); a page slower than its refresh interval (Events, 20,000 points) is
    paced (``dashboard.ui.paced_s``), so every page comes to rest, which the audit waits for."""
    from playwright.sync_api import sync_playwright

    from streaming.rules.scenarios import fleet
    from tests.seed import seed_pipeline

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: `apt-get install chromium` (.ci/run does)"
    seeded = seed_pipeline(redis_url, tmp_path, scenario=fleet(300, 6), rate=6_000, count=180_000,
                           batch_arrival_ms=5_000, minutes_ago=9)
    online = redis.Redis.from_url(redis_url).hgetall(KeySchema(seeded.cfg.namespace).online_counts)
    assert len(online) == 300 and 40 * 300 <= sum(int(v) for v in online.values()) <= 60 * 300, online
    env = {"REDIS_URL": redis_url, "PIPELINE_NAMESPACE": seeded.cfg.namespace}
    shots = Path(os.environ.get("DASHBOARD_SCREENSHOTS_300") or tmp_path)  # to look at them: never docs/
    port = free_port()
    procs = [Proc.python("dashboard", ["streamlit", "run", str(ROOT / "dashboard" / "app.py"), "--server.port",
                                       str(port), "--server.address", "127.0.0.1", "--server.headless", "true",
                                       "--browser.gatherUsageStats", "false"], env, tmp_path),
             Proc.python("monitor", ["streaming.apps.monitor", "--port", "0"], env, tmp_path)]
    try:
        procs[0].wait_for(r"You can now view", timeout=60)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page()
            # A deep link is this dashboard process's first session, as a wall screen reloading after a restart is
            page.goto(f"http://127.0.0.1:{port}/alerts")
            page.get_by_role("heading", name="Alerts").first.wait_for(timeout=60_000)
            page.wait_for_selector('[data-test-script-state="notRunning"]', timeout=60_000)
            problems = ["the first visit said: Page not found"] if page.get_by_text("Page not found").count() else []
            problems += audit_pages(page, f"http://127.0.0.1:{port}", shots, prefix="page-300-")
            problems += check_wall(page, f"http://127.0.0.1:{port}", redis.Redis.from_url(redis_url),
                                   KeySchema(seeded.cfg.namespace), shots / "page-300-wall.png")
            browser.close()
    finally:
        for p in procs:
            p.stop()
    assert problems == [], "\n".join(problems)


def audit_pages(page, url: str, shots: Path, prefix: str = "page-") -> list[str]:  # noqa: ANN001 - playwright's Page
    """Every page at 1280x800, as an operator's screen shows it: a status line, and every chart within the
    rules (tests/figure_audit.py) with its title inside its box and its legend off the tick labels; a
    screenshot of each page."""
    from tests.figure_audit import audit

    page.set_viewport_size({"width": 1280, "height": 800})
    problems: list[str] = []
    for path, title, name in PAGES:
        page.goto(url + path)
        page.get_by_role("heading", name=title).first.wait_for(timeout=60_000)
        page.wait_for_selector('[data-testid="stAlert"]', timeout=60_000)  # the status line, or its message
        page.wait_for_selector('[data-test-script-state="notRunning"]', timeout=60_000)
        if name in TABS:
            page.get_by_role("tab", name=TABS[name]).click()
            page.wait_for_selector(TAB_DRAWN[TABS[name]], timeout=60_000)
            page.wait_for_selector('[data-test-script-state="notRunning"]', timeout=60_000)
        page.wait_for_function(VEGA_ALL_DRAWN, timeout=60_000)  # a chart that cannot draw its rows fails here
        if name == "ops":  # data before prose: the total and the first chart above a laptop's fold
            # both drawn first: a refresh of the page's fragment may be replacing them as the script stops
            page.wait_for_selector('[data-testid="stVegaLiteChart"]', timeout=60_000)
            page.wait_for_selector('[data-testid="stMetric"]', timeout=60_000)
            fold = page.evaluate(FOLD_JS)
            if fold["chart"] is None or fold["chart"] >= 800 or fold["total"] is None or fold["total"] >= 800:
                problems.append(f"ops: the total at {fold['total']} px, the first chart at {fold['chart']} px: "
                                f"not both above the fold at 1280x800; the boxes said {fold['said']}")
            if fold["boxes"] > 2:
                problems.append(f"ops: {fold['boxes']} boxes above the first chart, more than a status and an alert")
        for fig in page.evaluate(FIGURES_JS):
            label = f"{name}: {fig['layout']['title']['text'] or 'untitled chart'}"
            # Titles are measured here rather than counted: the page's own boxes say whether they fit.
            problems += audit(fig["data"], fig["layout"], range_ms=15 * 60_000, half_width=False, name=label)
            if fig["layout"]["title"]["text"].startswith("<b>"):
                problems.append(f"{label}: a title the browser changed after we sent it")
            if fig["title"] and fig["title"][2] > fig["box"][2] + 1:
                problems.append(f"{label}: title cut at the right edge")
            if fig["legend"] and any(overlaps(fig["legend"], t) for t in fig["ticks"]):
                problems.append(f"{label}: legend on the tick labels")
        # The page scrolls inside Streamlit's main block: a window as tall as its content shows all of it.
        height = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
        page.set_viewport_size({"width": 1280, "height": max(800, min(int(height), 6000))})
        page.wait_for_selector('[data-test-script-state="notRunning"]', timeout=60_000)
        page.wait_for_function(VEGA_ALL_DRAWN, timeout=60_000)  # a new size draws a Vega-Lite chart again
        page.screenshot(path=str(shots / f"{prefix}{name}.png"))
        page.set_viewport_size({"width": 1280, "height": 800})
    return problems


WALL = {"width": 1920, "height": 1080}


WALL_JS = """
() => {
  const px = (el) => el ? el.getBoundingClientRect() : null;
  const total = document.querySelector('.wall-total-n');
  const numbers = {};
  for (const el of document.querySelectorAll('[data-label]')) numbers[el.dataset.label] = el.innerText.trim();
  const cut = [];  // a one-line element that wraps or is cut short
  for (const el of document.querySelectorAll('.wall-word, .wall-detail, .wall-alert, .wall-region-name, '
                                             + '.wall-change, .wall-fleet, .wall-label')) {
    const line = parseFloat(getComputedStyle(el).lineHeight) || parseFloat(getComputedStyle(el).fontSize) * 1.3;
    if (el.scrollWidth > el.clientWidth + 1 || el.getBoundingClientRect().height > 1.6 * line) cut.push(el.innerText);
  }
  const main = document.querySelector('[data-testid="stMain"]');
  const wall = document.querySelector('.wall');
  return {numbers, cut, scroll: main.scrollHeight, wall: px(wall) && px(wall).bottom,
          totalFont: total && parseFloat(getComputedStyle(total).fontSize),
          totalDigits: total && px(total).height,
          background: getComputedStyle(document.querySelector('.stApp')).backgroundColor,
          status: document.querySelector('.wall-status') && document.querySelector('.wall-status').innerText,
          statusWidth: px(document.querySelector('.wall-status')) && px(document.querySelector('.wall-status')).width,
          regionColors: Array.from(document.querySelectorAll('.wall-region-n')).map(e => getComputedStyle(e).color),
          side: Array.from(document.querySelectorAll('.wall-alerts, .wall-servers')).map(e => e.innerText).join('\\n')};
}
"""


def check_wall(page, url: str, client: redis.Redis, keys: KeySchema, shot: Path) -> list[str]:  # noqa: ANN001
    """The wall screen on a TV, measured: one 1920x1080 screen without scrolling, dark; the total's digits at least
    120 px tall; a full-width status tile in words; no line that wraps or is cut; each region's number in its own
    colour; the players online in total and per region equal to Redis' per-server counts summed; what fires (or
    that nothing does) and the servers by state shown; a screenshot."""
    page.set_viewport_size(WALL)
    page.goto(url + "/wall")
    page.wait_for_selector(".wall-total-n", timeout=60_000)
    page.wait_for_selector('[data-test-script-state="notRunning"]', timeout=60_000)
    seen = page.evaluate(WALL_JS)
    problems = []
    if seen["scroll"] > WALL["height"] or (seen["wall"] or 0) > WALL["height"]:
        problems.append(f"wall: {seen['scroll']} px tall, more than the screen's {WALL['height']}")
    if (seen["totalFont"] or 0) < 170 or (seen["totalDigits"] or 0) < 120:  # digits are ~0.72 of the font size
        problems.append(f"wall: the total at {seen['totalFont']} px ({seen['totalDigits']} px box), under 120 px")
    if seen["background"] not in ("rgb(11, 15, 20)",):
        problems.append(f"wall: background {seen['background']}, not the dark theme")
    if seen["cut"]:
        problems.append(f"wall: lines that wrap or are cut: {seen['cut']}")
    if not seen["status"] or (seen["statusWidth"] or 0) < WALL["width"] - 100:
        problems.append(f"wall: no full-width status tile ({seen['status']!r}, {seen['statusWidth']} px)")
    if len(set(seen["regionColors"])) != len(seen["regionColors"]):
        problems.append(f"wall: regions share a colour: {seen['regionColors']}")
    counts = {k.decode(): int(v) for k, v in client.hgetall(keys.online_counts).items()}
    regions = {k.decode(): v.decode() for k, v in client.hgetall(keys.regions).items()}
    want = {"All servers": f"{sum(counts.values()):,}"}
    if len(set(regions.values())) > 1:
        for server, n in counts.items():
            want[regions[server]] = want.get(regions[server], 0) + n  # type: ignore[operator]
        want = {k: v if isinstance(v, str) else f"{v:,}" for k, v in want.items()}
    got = {label: seen["numbers"].get(label) for label in want}
    if got != want:
        problems.append(f"wall: players online {got}, Redis says {want}")
    side = (seen["side"] or "").lower()  # innerText as shown: the labels are upper case
    if "nothing firing" not in side and " firing" not in side:
        problems.append("wall: nothing says what fires")
    if " live · " not in side:
        problems.append("wall: no servers by state")
    page.screenshot(path=str(shot))
    page.set_viewport_size({"width": 1280, "height": 800})
    return problems
