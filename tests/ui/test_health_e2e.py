"""One verdict, end to end: the real stack (embedded Redis, the job, the monitor serving /metrics, events written
by the producer library) is driven through each health state, and at each the dashboard's status line (the
Pipeline health page rendered), the Alerts page (the monitor's verdict as it wrote it) and ``/metrics``
(``wm_pipeline_health``) name the same state, with the alert that pages for it firing.

The thresholds are short (``[job_quiet] after`` 8 s, behind beyond the 1 s trigger + 2 s, a stall after 4 s) so the
whole walk takes a few minutes; the states come in an order that needs one job start."""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest
import redis
from streamlit.testing.v1 import AppTest

from dashboard import loaders
from dashboard.testing import page_test
from streaming.alerting.health import Health
from streaming.apps.redis_server import RedisServer, free_port
from streaming.schema.keys import KeySchema
from streaming.store.alert_store import read_alerts
from tests.procs import Proc, until
from watermark_client import Producer

pytestmark = [pytest.mark.spark, pytest.mark.long]

ROOT = Path(__file__).resolve().parents[2]
CONFIG = """
[job_quiet]
after = "8s"
triggers = 1
first_batch = "8s"
[freshness]
above_trigger = "2s"
for = "0s"
clear = "1s"
[watermark_flat]
after = "4s"
clear = "1s"
[watermark_jump]
ahead = "1h"
[server_silent]
after = "1h"
[late_drops]
per_minute = 1000000
[redis_full]
clear = "1s"
"""
PHRASE = {Health.EMPTY: "Nothing in namespace", Health.STARTING: "Starting:", Health.DOWN: "Down:",
          Health.LIVE: "Live:", Health.BEHIND: "ehind", Health.STALLED: "Stalled:", Health.IDLE: "Idle:",
          Health.REDIS_FULL: "Redis is full", Health.STOPPED: "Stopped:", Health.REDIS_UNREACHABLE: "is unreachable"}
"""How the status line's first message says each state ("Behind:" or "Falling behind:")."""


class Game(threading.Thread):
    """Three servers' heartbeats, 30 events/s, through the producer; ``shift_s`` moves their clocks, ``paused``
    stops them."""

    def __init__(self, url: str, ns: str) -> None:
        super().__init__(name="game", daemon=True)
        self.producer = Producer(url, namespace=ns, linger_s=0.01, max_stream_entries=None)
        self.shift_s = 0.0
        self.paused = False
        self.stopped = threading.Event()
        self.n = 0

    def send(self, server: str, at_s: float) -> None:
        self.n += 1
        self.producer.send({"server": server, "player_id": f"{server}-p{self.n % 5}", "kind": "heartbeat",
                            "event_time": datetime.fromtimestamp(at_s, UTC).isoformat(), "event_id": f"e{self.n}"})

    def run(self) -> None:
        while not self.stopped.wait(0.1):
            if not self.paused:
                for server in "ABC":
                    self.send(server, time.time() + self.shift_s)

    def close(self) -> None:
        self.stopped.set()
        self.join()
        self.producer.close(timeout=5)


@dataclass
class Seen:
    metric: str | None
    status: str
    alerts_page: str
    firing: set[str]

    def says(self, h: Health, page: bool = True) -> bool:
        return (self.metric == h.value and PHRASE[h] in self.status
                and (not page or f"**main** {h.value.replace('_', ' ')}" in self.alerts_page))


class Stack:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.server = RedisServer(data_dir=str(tmp / "redis"), port=free_port())
        self.server.start()
        self.ns = f"health-{uuid.uuid4().hex[:6]}"
        self.keys = KeySchema(self.ns)
        self.client = redis.Redis.from_url(self.server.url, socket_timeout=10)
        self.env = {"REDIS_URL": self.server.url, "PIPELINE_NAMESPACE": self.ns, "WINDOW": "10s",
                    "WATERMARK_DELAY": "2s", "TRIGGER_INTERVAL": "1s", "CHECKPOINT_DIR": str(tmp / "ck"),
                    "SPARK_MASTER": "local[2]", "LAB_LANES": "", "MAX_EVENTS_PER_BATCH": "100"}
        (tmp / "alerts.toml").write_text(CONFIG)
        self.metrics_port = free_port()
        self.monitor = Proc.python("monitor", ["streaming.apps.monitor", "--config", str(tmp / "alerts.toml"),
                                               "--port", str(self.metrics_port), "--interval", "0.25"], self.env, tmp)
        self.monitor.wait_for("monitor: /metrics on", timeout=60)
        self.job: Proc | None = None

    def start_job(self) -> None:
        self.job = Proc.python("job", ["streaming.apps.job"], self.env, self.tmp)

    def signal_job(self, sig: int) -> None:
        assert self.job is not None
        os.killpg(self.job.popen.pid, sig)

    def metric(self) -> str | None:
        """The state ``wm_pipeline_health`` gives the pipeline (the one series at 1)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        for line in text.splitlines():
            if line.startswith('wm_pipeline_health{pipeline="main"') and line.endswith(" 1.0"):
                return line.split('state="')[1].split('"')[0]
        return None

    def page(self, name: str) -> AppTest:
        loaders.forget()  # a read cached for this refresh tick by the previous render would be a moment old
        return page_test(name)

    def seen(self) -> Seen:
        metric = self.metric()
        health = self.page("health")
        status = [e.value for e in (*health.error, *health.warning, *health.info, *health.success)]
        alerts = self.page("alerts")
        try:
            firing = {a.alertname for a in read_alerts(self.client, self.keys).values() if a.status == "firing"}
        except redis.RedisError:
            firing = set()
        return Seen(metric, status[0] if status else "", " ".join(m.value for m in alerts.markdown), firing)

    def agree(self, h: Health, timeout: float, alert: str | None = None, page: bool = True) -> Seen:
        """Polls the three views (live processes: nothing to block on) until each names ``h``."""
        last: list[Seen] = []

        def agreed() -> Seen | None:
            last[:] = [self.seen()]
            return last[0] if last[0].says(h, page) and (alert is None or alert in last[0].firing) else None

        return cast(Seen, until(agreed, timeout, lambda: f"{h.value} (alert {alert}): {last[-1]}\n"
                                + (self.job.tail(15) if self.job else "")))

    def close(self) -> None:
        for p in (self.job, self.monitor):
            if p is not None:
                p.stop()
        self.server.stop()


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    s = Stack(tmp_path)
    for k, v in s.env.items():
        monkeypatch.setenv(k, v)
    try:
        yield s
    finally:
        s.close()


def test_the_status_line_the_alerts_page_and_metrics_name_each_state_alike(stack: Stack) -> None:
    stack.agree(Health.EMPTY, 30)
    game = Game(stack.server.url, stack.ns)
    game.start()
    try:
        stack.agree(Health.STARTING, 8)  # events wait, no job yet, the oldest under 8 s
        stack.agree(Health.DOWN, 30, alert="PipelineBehind")
        stack.start_job()
        stack.agree(Health.LIVE, 300)
        # a burst of 1,500 against a cap of 100 a batch: behind for ~15 s, then caught up
        for i in range(1_500):
            game.send("ABC"[i % 3], time.time())
        stack.agree(Health.BEHIND, 30, alert="PipelineBehind")
        stack.agree(Health.LIVE, 60)
        # one event of A two minutes ahead: every later event is older than it, the watermark stays
        game.send("A", time.time() + 120)
        stack.agree(Health.STALLED, 30, alert="WatermarkFlat")
        game.shift_s = 240  # every clock jumps past it: the watermark moves again
        stack.agree(Health.LIVE, 30)
        game.paused = True
        stack.agree(Health.IDLE, 30)
        game.paused = False
        stack.agree(Health.LIVE, 30)
        stack.signal_job(signal.SIGSTOP)  # frozen: entries wait and nothing commits
        try:
            stack.agree(Health.DOWN, 30, alert="PipelineBehind")
        finally:
            stack.signal_job(signal.SIGCONT)
        stack.agree(Health.LIVE, 60)
        used = int(stack.client.info("memory")["used_memory"])
        stack.client.config_set("maxmemory", used // 2)  # Redis refuses writes: the monitor's too, so the
        try:  # Alerts page shows what it last wrote; the status line and /metrics say full
            stack.agree(Health.REDIS_FULL, 30, page=False)
        finally:
            stack.client.config_set("maxmemory", 0)
        stack.agree(Health.LIVE, 60)
        assert stack.job is not None
        stack.job.stop()  # stopped on request: said as such, not as down
        stack.agree(Health.STOPPED, 30)
    finally:
        game.close()
    stack.server.stop()
    stack.agree(Health.REDIS_UNREACHABLE, 30, page=False)  # the Alerts page cannot read Redis either
