"""Production mode (``DEMO=off ./run.sh``): one's own producers write the events, no generator runs.

The fast tests check the configuration, the status line and every page under Streamlit's AppTest: Lab
control is in the navigation only with ``LAB_CONTROL=on``, then offers only the delay, and no page speaks of
a generator. The end-to-end test starts ``DEMO=off ./run.sh`` itself (the real Procfile.production through
wm-stack: embedded Redis, Spark job, monitor, dashboard), writes events for servers of its own with plain
``XADD`` as an external producer would, and reads every page in Chromium.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis
from streamlit.testing.v1 import AppTest

from dashboard.app import shown_pages
from dashboard.status import assess
from dashboard.testing import page_test
from streaming.apps.redis_server import free_port
from streaming.schema.config import Config, ConfigError
from streaming.schema.keys import KeySchema
from streaming.store.report import wait_for_commit
from streaming.store.views.snapshot import Snapshot, read_snapshot
from tests.procs import ROOT, Proc

PAGES = ["ops", "alerts", "watermark", "lag", "events",
         "health", "lab", "delay"]
CONTROL = "control"
DEMO_WORDS = re.compile(r"generator|scenario|lab control", re.IGNORECASE)
MODE_VARS = ("DEMO", "LAB_CONTROL", "KNOWN_SERVERS", "LAB_LANES")


# --------------------------------------------------------------------------- configuration and status line


@pytest.mark.parametrize(("env", "demo", "lab_control"), [
    ({}, True, True),
    ({"DEMO": "on"}, True, True),
    ({"DEMO": "off"}, False, False),
    ({"DEMO": "OFF", "LAB_CONTROL": "on"}, False, True),
    ({"LAB_CONTROL": "off"}, True, False),
    ({"DEMO": " ", "LAB_CONTROL": ""}, True, True),
])
def test_demo_and_lab_control_are_read_from_the_environment(env: dict[str, str], demo: bool,
                                                            lab_control: bool) -> None:
    cfg = Config.from_env(env)
    assert (cfg.demo, cfg.lab_control) == (demo, lab_control)


@pytest.mark.parametrize("var", ["DEMO", "LAB_CONTROL"])
def test_a_switch_is_on_or_off(var: str) -> None:
    with pytest.raises(ConfigError, match=f"^{var}='yes' must be on or off$"):
        Config.from_env({var: "yes"})


def test_an_empty_namespace_waits_for_events_on_its_stream_in_production_mode(r: redis.Redis) -> None:
    keys = KeySchema(f"empty-{uuid.uuid4().hex[:8]}")
    snap: Snapshot = read_snapshot(r, keys, range_ms=900_000, now_ms=0)
    [production] = assess(snap, 0, demo=False)
    assert production.text.startswith(f"Waiting for events on `{keys.namespace}:events`")
    assert "docs/ingest.md" in production.text and "./run.sh" not in production.text
    [demo] = assess(snap, 0)
    assert "Start the pipeline with `./run.sh`" in demo.text


# --------------------------------------------------------------------------- every page under AppTest


@pytest.fixture()
def empty_ns(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> KeySchema:
    """A namespace nothing has written yet: every page shows its empty state."""
    for var in MODE_VARS:
        monkeypatch.delenv(var, raising=False)
    ns = f"prod-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", ns)
    return KeySchema(ns)


def texts(at: AppTest) -> list[str]:
    """Every piece of text the page shows: headings, words, statuses, labels, options, metrics."""
    out: list[str] = []
    for kind in ("title", "header", "subheader", "markdown", "caption", "text", "info", "warning", "error",
                 "success", "exception"):
        out += [str(e.value) for e in getattr(at, kind)]
    for kind in ("button", "text_input", "number_input", "toggle", "segmented_control", "metric"):
        out += [str(e.label) for e in getattr(at, kind)]
    for box in at.selectbox:
        out += [str(box.label), *(str(o) for o in box.options)]
    return out


def open_page(page: str) -> AppTest:
    at = page_test(page)
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_production_mode_hides_lab_control_and_never_speaks_of_a_generator(
        empty_ns: KeySchema, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEMO", "off")
    for page in PAGES:
        at = open_page(page)
        shown = texts(at)
        assert [t for t in shown if DEMO_WORDS.search(t)] == [], page
        if page != "alerts":  # the Alerts page speaks of the monitor
            assert any(t.startswith(f"Waiting for events on `{empty_ns.events}`") for t in shown), (page, shown)
    assert CONTROL not in shown_pages()  # not in the navigation


def test_lab_control_on_in_production_offers_the_delay_and_no_generator(
        empty_ns: KeySchema, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEMO", "off")
    monkeypatch.setenv("LAB_CONTROL", "on")
    at = open_page(CONTROL)
    assert [t.value for t in at.title] == ["Lab control"]
    assert [s.value for s in at.subheader] == ["Watermark delay"]
    assert [b.label for b in at.main.button] == ["Apply delay (restarts the query, history kept)"]
    assert not at.main.selectbox and not at.main.number_input
    assert [t for t in texts(at) if re.search(r"generator|scenario", t, re.IGNORECASE)] == []
    assert any(t.startswith(f"Waiting for events on `{empty_ns.events}`") for t in texts(at))


def test_the_demo_keeps_lab_control_with_its_generator(empty_ns: KeySchema) -> None:
    at = open_page(CONTROL)
    assert [s.value for s in at.subheader] == ["Generator", "Watermark delay"]
    assert any(t.startswith("No generator running") for t in texts(at))


def test_lab_control_off_hides_it_in_the_demo_too(empty_ns: KeySchema, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAB_CONTROL", "off")
    assert CONTROL not in shown_pages()  # not in the navigation


def test_the_production_procfile_is_the_demo_one_without_the_generator() -> None:
    def lines(name: str) -> dict[str, str]:
        return dict(line.split(":", 1) for line in (ROOT / name).read_text().splitlines()
                    if line and not line.startswith("#"))

    demo, production = lines("Procfile"), lines("Procfile.production")
    assert set(production) == set(demo) - {"generator"}
    # no list of servers in either: every server is counted from its first event, the default lanes follow
    assert "KNOWN_SERVERS" not in production["job"] and "KNOWN_SERVERS" not in demo["job"]
    # the demo runs the lab lanes; production runs none unless LAB_LANES asks (their alerts would page)
    assert "LAB_LANES=" in demo["job"] and production["job"].endswith(" exec wm-job")
    assert production["dashboard"].endswith(demo["dashboard"].replace(" exec ", " DEMO=off exec ", 1).strip())
    # each process as its own Redis user (issue 63): wm-redis url names the part the line runs
    for part in set(production) - {"redis"}:
        assert production[part].strip().startswith(f"url=$(wm-redis url {part}) && REDIS_URL=$url "), part


# --------------------------------------------------------------------------- DEMO=off ./run.sh, for real

CHROMIUM = "/usr/bin/chromium"
SERVERS = ("eu-west", "us-east")
PAGE_JS = """
() => {
  const names = [];
  for (const p of document.querySelectorAll('.js-plotly-plot')) {
    for (const t of (p.data || [])) {
      names.push(t.name || '');
      for (const v of [...(t.x || []), ...(t.y || [])]) if (typeof v === 'string') names.push(v);
    }
  }
  // A select box shows its choice in its input's value, which is not in the page's text.
  const chosen = Array.from(document.querySelectorAll('[data-testid="stSelectbox"] input')).map(e => e.value);
  return {text: document.body.innerText + '\\n' + chosen.join('\\n'), traces: names};
}
"""


def produce(client: redis.Redis, stream: str, seconds: float, rate: float = 40) -> str:
    """An external producer: plain XADD of login, heartbeat and logout events (docs/ingest.md), event time
    now; returns the last entry ID."""
    last = ""
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        server = SERVERS[n % len(SERVERS)]
        player = f"p{n % 12}"
        kind = "login" if n < 12 else "logout" if n % 29 == 0 else "heartbeat"
        now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        doc = {"event_id": f"{server}-{n}", "server": server, "player_id": player, "kind": kind, "event_time": now}
        last = client.xadd(stream, {"e": json.dumps(doc)}).decode()
        n += 1
        time.sleep(1 / rate)
    return last


NAMED = {path: SERVERS for path in ("/", "/ Windows", "/watermark", "/lag")}
"""The pages that show every server by name."""


def read_page(page: Any, names: Sequence[str]) -> dict:
    """The page's text and chart traces (``PAGE_JS``), once it shows every one of ``names`` or after 30 s.

    A fragment's rerun replaces its elements one by one: the page once read without two of its metrics, drawn a
    moment later. So the read waits for what it will check, and the check still fails if the names never come."""
    from playwright.sync_api import TimeoutError as NotShown

    if names:
        predicate = f"names => {{ const s = ({PAGE_JS})(); return names.every(n => s.text.includes(n) " \
                    "|| s.traces.includes(n)); }"
        try:
            page.wait_for_function(predicate, arg=list(names), timeout=30_000)
        except NotShown:
            pass  # the assertion on what was read says what is missing
    return page.evaluate(PAGE_JS)


def command_lines(pid: int) -> list[str]:
    """The command lines of everything ``pid`` started and still runs."""
    out = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            out.append(" ".join(child.cmdline()))
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            pass  # a shell line that has exec'd or ended
    return out


@contextmanager
def production_stack(tmp_path: Path, ns: str | None, **env: str) -> Iterator[dict]:
    """``DEMO=off ./run.sh`` with its own embedded Redis on a free port, as someone who only typed that would start
    it, on namespace ``ns`` (None: the default, ``wm``) with ``env`` besides; clients as an operator and as a game
    server (issue 63), the processes' own addresses for either (``wm-redis url``)."""
    redis_port, port, metrics_port = free_port(), free_port(), free_port()
    stack = {"DEMO": "off", "PORT": str(port), "REDIS_PORT": str(redis_port), "REDIS_DATA_DIR": str(tmp_path / "redis"),
             "REDIS_URL": "", "CHECKPOINT_DIR": str(tmp_path / "ck"), "METRICS_PORT": str(metrics_port),
             "SPARK_MASTER": "local[2]", "WINDOW": "10s", "WATERMARK_DELAY": "2s", "TRIGGER_INTERVAL": "1s",
             **({"PIPELINE_NAMESPACE": ns} if ns is not None else {}), **env}
    keys = KeySchema(ns or Config.namespace)
    run = Proc("run.sh", ["bash", str(ROOT / "run.sh")], stack, tmp_path)
    try:
        run.wait_for(r"production mode \(DEMO=off\)", timeout=60)
        run.wait_for(rf"query watermark-{keys.namespace} running", timeout=240)
        run.wait_for(r"You can now view", timeout=120)
        # a user per part (issue 63): the test reads as an operator, its producer writes as a game server
        passwords = json.loads((tmp_path / "redis" / "users.json").read_text())
        yield {"run": run, "keys": keys, "url": f"http://127.0.0.1:{port}", "env": stack,
               "metrics": f"http://127.0.0.1:{metrics_port}/metrics",
               "client": redis.Redis(port=redis_port, socket_timeout=130, username="wm-admin",
                                     password=passwords["admin"]),
               "producer": redis.Redis(port=redis_port, socket_timeout=130, username="wm-producer",
                                       password=passwords["producer"]),
               "anonymous": redis.Redis(port=redis_port, socket_timeout=5)}
    finally:
        run.stop()


@pytest.fixture()
def production(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    for var in MODE_VARS:  # unset, as for someone who only typed DEMO=off ./run.sh
        monkeypatch.delenv(var, raising=False)
    with production_stack(tmp_path, f"prod-{uuid.uuid4().hex[:6]}") as stack:
        yield stack


@pytest.mark.spark
@pytest.mark.browser
def test_demo_off_run_sh_runs_on_external_events_without_a_generator(production: dict) -> None:
    from playwright.sync_api import sync_playwright

    from tests.ui.test_dashboard_browser import CHROMIUM_ARGS, TAB_DRAWN

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: `apt-get install chromium` (.ci/run does)"
    run: Proc = production["run"]
    keys: KeySchema = production["keys"]
    client: redis.Redis = production["client"]
    commands = command_lines(run.popen.pid)
    assert any("wm-job" in c for c in commands) and any("streamlit" in c for c in commands), commands
    assert not [c for c in commands if "generator" in c], commands
    started = re.findall(r"\| (\S+)\.1 started", run.tail(10_000))
    # the stack's own account (wm-stack); online: wm-online, idle with ONLINE_GROUPS=0
    assert sorted(started) == ["dashboard", "job", "monitor", "online", "redis"], started
    # No lab lanes in production unless LAB_LANES asks for them: their alerts would page, their series add up
    run.wait_for(r"lanes none", timeout=1)

    # The embedded Redis has a user per part (issue 63): a game server's credential appends events and nothing
    # else; without one Redis answers nothing.
    run.wait_for(r"embedded Redis ready at .* a user per part", timeout=1)
    producer: redis.Redis = production["producer"]
    with pytest.raises(redis.exceptions.NoPermissionError):
        producer.hset(keys.control, mapping={"delay_ms": "1", "rev": "7"})
    with pytest.raises(redis.exceptions.AuthenticationError):
        production["anonymous"].ping()
    # Even an operator's write to the lab's control hash: production follows none of it.
    run.wait_for(r"lab control is off \(LAB_CONTROL, default: as DEMO\): the job keeps WATERMARK_DELAY 2s", timeout=1)
    client.hset(keys.control, mapping={"delay_ms": "1", "rev": "7"})
    last = produce(producer, keys.events, seconds=20)
    assert wait_for_commit(client, keys, last, timeout_s=180), f"the job did not commit up to {last}"
    assert json.loads(client.hget(keys.state, "params"))["delay_ms"] == 2_000  # WATERMARK_DELAY, not the hash's
    assert "asked for watermark delay" not in run.tail(10_000)
    totals = {k.decode(): int(v) for k, v in client.hgetall(keys.totals).items()}
    assert totals.get("quarantined", 0) == 0, totals  # no KNOWN_SERVERS: any server's events are taken
    assert client.hgetall(keys.lanes) == {}  # the dashboard is told of no lane

    seen: dict[str, dict] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1600})
        for path in ("/", "/alerts", "/watermark", "/lag", "/events", "/health", "/lab", "/delay"):
            page.goto(production["url"] + path)
            page.wait_for_selector('[data-testid="stAlert"]', timeout=60_000)
            page.wait_for_selector('[data-test-script-state="notRunning"]', timeout=60_000)
            if path == "/":  # Live ops' first tab: Vega-Lite
                page.wait_for_selector('[data-testid="stVegaLiteChart"] .marks', timeout=60_000)
            elif path not in ("/alerts", "/health"):
                page.wait_for_selector(".js-plotly-plot .main-svg", timeout=60_000)
            seen[path] = read_page(page, NAMED.get(path, ()))
            for tab in ("Servers", "Over time", "Windows") if path == "/" else ():  # each runs when opened
                page.get_by_role("tab", name=tab).click()
                page.wait_for_selector(TAB_DRAWN[tab], timeout=60_000)
                page.wait_for_selector('[data-test-script-state="notRunning"]', timeout=60_000)
                seen[f"/ {tab}"] = read_page(page, NAMED.get(f"/ {tab}", ()))
        page.goto(production["url"] + "/control")
        page.wait_for_selector('[data-test-script-state="notRunning"]', timeout=60_000)
        control_heading = page.get_by_role("heading", name="Lab control").count()
        nav = page.locator('[data-testid="stSidebarNav"]').inner_text()
        browser.close()
    client.close()

    assert "Lab control" not in nav and "Live ops" in nav, nav
    assert control_heading == 0, "the Lab control page must not be served in production mode"
    for path, shown in seen.items():
        words = DEMO_WORDS.findall(shown["text"] + "\n" + "\n".join(shown["traces"]))
        assert words == [], (path, words)
    def shows(path: str, server: str) -> bool:
        return server in seen[path]["traces"] or server in seen[path]["text"]

    for path in NAMED:
        assert all(shows(path, server) for server in SERVERS), (path, seen[path]["text"], seen[path]["traces"])
    assert any(shows("/events", server) for server in SERVERS), seen["/events"]["text"]  # it opens on one
