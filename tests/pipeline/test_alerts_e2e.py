"""Alerts end to end with real parts: the job, the following generator, the monitor, a real HTTP receiver for
the webhook and Debian's Prometheus scraping /metrics with the equivalent rules. Scenarios switched on the lab's
control fire the right alert on the Alerts page, at the webhook and in Prometheus, and resolve when they end;
a server whose events stop is never taken for players leaving.

The scenarios run on a faster clock (``--timeline-scale``): an outage 6 s after the switch, for 18 s."""

from __future__ import annotations

import json
import shutil
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from streamlit.testing.v1 import AppTest

from dashboard.testing import page_test
from streaming.alerting.config import AlertConfig
from streaming.alerting.promrules import prometheus_rules
from streaming.apps.monitor import read_config
from streaming.apps.redis_server import RedisServer, free_port
from streaming.schema.keys import KeySchema
from streaming.store.alert_store import read_alerts
from streaming.store.control_store import write_control
from tests.procs import Proc, until
from tests.receiver import Receiver, alert_lines, receiving

WHO = {"by": "test", "role": "operator"}  # who the control changes' audit records

pytestmark = [pytest.mark.spark, pytest.mark.long]

ROOT = Path(__file__).resolve().parents[2]
CONFIG = """
[players_drop]
within = "20s"
min_players = 10
quiet = "3s"
lag = "6s"
settle = "6s"
for = "2s"
clear = "4s"
[server_silent]
after = "4s"
clear = "2s"
[clock_ahead]
clear = "3s"
[late_drops]
per_minute = 20
clear = "2s"
[freshness]
above_trigger = "30s"
[watermark_flat]
after = "1m"
[watermark_jump]
ahead = "1m"
[webhook]
url = "{url}"
max_backoff = "2s"
"""


def prom_alerts(port: int) -> list[tuple[str, str, str]]:
    """(state, alertname, subject) of every alert Prometheus has pending or firing."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/alerts", timeout=5) as resp:
        doc = json.load(resp)
    return [(a["state"], a["labels"]["alertname"],
             a["labels"].get("server") or a["labels"].get("pipeline") or a["labels"].get("region", ""))
            for a in doc["data"]["alerts"]]


def prometheus(tmp: Path, metrics_port: int, cfg: AlertConfig, log_dir: Path) -> tuple[Proc, int]:
    assert shutil.which("prometheus"), "Debian's prometheus is missing: `apt-get install prometheus` (.ci/run does)"
    rules = tmp / "rules.yml"
    rules.write_text(prometheus_rules(cfg))
    conf = tmp / "prometheus.yml"
    conf.write_text(f"global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [{rules}]\n"
                    f"scrape_configs:\n  - job_name: watermark\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{metrics_port}']\n")
    port = free_port()
    proc = Proc("prometheus", ["prometheus", f"--config.file={conf}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                               f"--web.listen-address=127.0.0.1:{port}"], {}, log_dir)
    proc.wait_for("Server is ready to receive web requests", timeout=60)
    return proc, port


class Stack:
    def __init__(self, tmp: Path, hook: Receiver) -> None:
        self.tmp = tmp
        self.server = RedisServer(data_dir=str(tmp / "redis"), port=free_port())
        self.server.start()
        self.ns = f"alerts-{uuid.uuid4().hex[:6]}"
        self.keys = KeySchema(self.ns)
        self.client = redis.Redis.from_url(self.server.url, socket_timeout=30)
        env = {"REDIS_URL": self.server.url, "PIPELINE_NAMESPACE": self.ns, "WINDOW": "10s",
               "WATERMARK_DELAY": "2s", "TRIGGER_INTERVAL": "1s", "ONLINE_TIMEOUT": "8s",
               "CHECKPOINT_DIR": str(tmp / "ck"), "SPARK_MASTER": "local[2]", "KNOWN_SERVERS": "A,B,C",
               "LAB_LANES": ""}
        self.env = env
        (tmp / "alerts.toml").write_text(CONFIG.format(url=hook.url))
        self.cfg = read_config(str(tmp / "alerts.toml"))
        self.metrics_port = free_port()
        self.procs = [Proc.python("job", ["streaming.apps.job"], env, tmp)]
        self.procs[0].wait_for(rf"query watermark-{self.ns} running", timeout=240)
        write_control(self.client, self.keys, **WHO, scenario="steady", rate=200, running=True, now_ms=_now())
        self.procs.append(Proc.python("generator", ["streaming.apps.generator", "--follow", "--timeline-scale", "0.2"],
                                      env, tmp))
        self.procs.append(Proc.python("monitor", ["streaming.apps.monitor", "--config", str(tmp / "alerts.toml"),
                                                  "--port", str(self.metrics_port), "--interval", "0.5"], env, tmp))
        self.procs[-1].wait_for("monitor: /metrics on", timeout=60)
        prom, self.prom_port = prometheus(tmp, self.metrics_port, self.cfg, tmp)
        self.procs.append(prom)

    def switch(self, scenario: str) -> None:
        write_control(self.client, self.keys, **WHO, scenario=scenario, now_ms=_now())

    def alert(self, key: str) -> str | None:
        state = read_alerts(self.client, self.keys).get(key)
        return None if state is None else state.status

    def page(self) -> AppTest:
        return page_test("alerts")

    def close(self) -> None:
        for p in reversed(self.procs):
            p.stop()
        self.server.stop()


def _now() -> int:
    return int(time.time() * 1000)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, Receiver]]:
    with receiving() as hook:
        s = Stack(tmp_path_factory.mktemp("alerts-e2e"), hook)
        try:
            client = s.client
            assert client.xread({s.keys.online_commits: "0-0"}, block=180_000), "the online view committed nothing"
            yield s, hook
        finally:
            s.close()


def page_rows(s: Stack, monkeypatch: pytest.MonkeyPatch, table: str) -> list[tuple[str, str, str]]:
    """The Alerts page's rows of one table (``firing`` or ``history``) as (alert, about, event or since)."""
    monkeypatch.setenv("REDIS_URL", s.server.url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", s.ns)
    at = s.page()
    assert not at.exception, at.exception
    column = "Severity" if table == "firing" else "Event"  # the column only that table has
    rows = [r for df in at.dataframe if column in df.value.columns for r in df.value.to_dict("records")]
    return [(r["Alert"], r["About"], r.get("Event") or "firing") for r in rows]


def on_page(s: Stack, monkeypatch: pytest.MonkeyPatch, table: str, row: tuple[str, str, str]) -> None:
    until(lambda: any(r[:2] == row[:2] and r[2].startswith(row[2]) for r in page_rows(s, monkeypatch, table)),
          30, f"{row} on the Alerts page ({table})")


def sent(bodies: list[dict]) -> list[tuple[str, str, str]]:
    """Every alert of every message, as (status, alertname, subject)."""
    return [line for b in bodies for line in alert_lines(b)]


def alerts_like(hook: Receiver, line: tuple[str, str, str]) -> list[dict]:
    """Every alert sent as ``line`` (status, alertname, subject), whichever message it was in."""
    return [a for b in hook.bodies for a, x in zip(b["alerts"], alert_lines(b), strict=True) if x == line]


def fired(hook: Receiver, status: str, name: str, subject: str, timeout: float) -> None:
    hook.wait_for(lambda bodies: (status, name, subject) in sent(bodies), timeout,
                  f"{status} {name} {subject}")


def test_a_silent_server_fires_server_silent_everywhere_and_never_a_players_drop(
        stack: tuple[Stack, Receiver], monkeypatch: pytest.MonkeyPatch) -> None:
    s, hook = stack
    s.switch("idle-server")  # B produces nothing from 6 s to 24 s
    # one ServerSilent for the servers without a region, naming B (streaming.rules.fleet: silent with players)
    hook.wait_for(lambda bodies: any(a["status"] == "firing" and a["labels"]["alertname"] == "ServerSilent" and
                                     "silent with players online" in a["annotations"]["summary"] and
                                     ": B (" in a["annotations"]["summary"] for b in bodies for a in b["alerts"]),
                  90, "firing ServerSilent naming B")
    until(lambda: ("firing", "ServerSilent", "") in prom_alerts(s.prom_port), 30, "Prometheus fires ServerSilent")
    on_page(s, monkeypatch, "firing", ("ServerSilent", "servers without a region", "firing"))
    # B's players time out behind the watermark A and C move: held, said so, not a page
    until(lambda: s.alert("players_drop|B") == "held", 30, "players_drop on B held while B is silent")
    fired(hook, "resolved", "ServerSilent", "", timeout=60)
    until(lambda: ("firing", "ServerSilent", "") not in prom_alerts(s.prom_port), 30, "Prometheus resolves it")
    s.switch("steady")
    assert ("firing", "PlayersDrop", "B") not in sent(hook.bodies), hook.bodies
    on_page(s, monkeypatch, "history", ("ServerSilent", "servers without a region", "resolved after"))


def test_a_fast_clock_fires_clock_ahead_and_never_a_players_drop(
        stack: tuple[Stack, Receiver], monkeypatch: pytest.MonkeyPatch) -> None:
    s, hook = stack
    s.switch("clock-skew")  # A's clock runs 20 s ahead (inside MAX_FUTURE_SKEW)
    fired(hook, "firing", "ClockAhead", "A", timeout=90)
    until(lambda: ("firing", "ClockAhead", "A") in prom_alerts(s.prom_port), 30, "Prometheus fires ClockAhead")
    on_page(s, monkeypatch, "firing", ("ClockAhead", "server A", "firing"))
    (firing,) = alerts_like(hook, ("firing", "ClockAhead", "A"))
    notes = firing["annotations"]
    assert "A's clock runs" in notes["summary"] and 19.0 < float(notes["value"]) <= 20.0, firing  # less the network
    s.switch("steady")  # A's clock set right: it steps back, and its players stay
    fired(hook, "resolved", "ClockAhead", "A", timeout=60)
    until(lambda: ("firing", "ClockAhead", "A") not in prom_alerts(s.prom_port), 30, "Prometheus resolves it")
    # B's and C's players are judged by their own clocks, and A's step is not players leaving
    lines = sent(hook.bodies)
    assert not [x for x in lines if x[1] == "PlayersDrop"], lines
    # and a switch keeps the players online (the follower carries them over), so none time out after it
    assert not [a for a in prom_alerts(s.prom_port) if a[:2] == ("firing", "PlayersDrop")]


def test_players_leaving_fire_players_drop_and_resolve_when_they_return(
        stack: tuple[Stack, Receiver], monkeypatch: pytest.MonkeyPatch) -> None:
    s, hook = stack
    s.switch("players-leave")  # 80 % of B's players log out from 6 s to 24 s
    fired(hook, "firing", "PlayersDrop", "B", timeout=90)
    until(lambda: ("firing", "PlayersDrop", "B") in prom_alerts(s.prom_port), 30, "Prometheus fires PlayersDrop")
    on_page(s, monkeypatch, "firing", ("PlayersDrop", "server B", "firing"))
    (firing,) = alerts_like(hook, ("firing", "PlayersDrop", "B"))
    assert "logged out" in firing["annotations"]["summary"], firing
    fired(hook, "resolved", "PlayersDrop", "B", timeout=90)
    on_page(s, monkeypatch, "history", ("PlayersDrop", "server B", "resolved after"))
    until(lambda: ("firing", "PlayersDrop", "B") not in prom_alerts(s.prom_port), 60, "Prometheus resolves it")
    s.switch("steady")
    assert len(alerts_like(hook, ("firing", "PlayersDrop", "B"))) == 1, "one firing, one notice"


def test_a_late_burst_fires_late_drops_and_resolves_after_it(stack: tuple[Stack, Receiver],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    s, hook = stack
    s.switch("late-burst")  # C's events partly 24-60 s late: behind the 2 s delay, every 10 s window closed
    fired(hook, "firing", "LateDrops", "C", timeout=150)
    until(lambda: ("firing", "LateDrops", "C") in prom_alerts(s.prom_port), 60, "Prometheus fires LateDrops")
    on_page(s, monkeypatch, "firing", ("LateDrops", "server C", "firing"))
    s.switch("steady")
    fired(hook, "resolved", "LateDrops", "C", timeout=150)
    on_page(s, monkeypatch, "history", ("LateDrops", "server C", "resolved after"))
    # C's players timing out behind its late events were never taken for players leaving
    assert ("firing", "PlayersDrop", "C") not in sent(hook.bodies), hook.bodies
    until(lambda: ("firing", "LateDrops", "C") not in prom_alerts(s.prom_port), 60, "Prometheus resolves it")
