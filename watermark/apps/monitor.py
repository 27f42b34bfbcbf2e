"""``wm-monitor``: the alerts, evaluated once a second, and ``/metrics`` for Prometheus.

Each round reads the stack (``watermark.store.observe``), steps every alert (``watermark.alerting``), writes
the alerts, their history and the webhook's outbox in one transaction, and hands new notices to the webhook's
thread. ``/metrics`` is served by prometheus_client's own thread and reads Redis at each scrape. Redis
unreachable is itself an alert: it is decided in memory, sent, and written to the history once Redis answers.

    wm-monitor                       # METRICS_PORT (9108), ALERTS_CONFIG (ops/alerts.toml if present)
    wm-monitor --prometheus-rules    # the equivalent Prometheus alerting rules, for teams with their own stack
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import redis
from prometheus_client import start_http_server
from prometheus_client.registry import CollectorRegistry
from redis.backoff import NoBackoff
from redis.retry import Retry

from watermark.alerting.conditions import RULES, evaluate
from watermark.alerting.config import AlertConfig
from watermark.alerting.lifecycle import AlertState, Decision, Notice, step_all
from watermark.alerting.observation import Memory, Observation
from watermark.alerting.promrules import prometheus_rules
from watermark.apps.metrics import StackCollector
from watermark.apps.notify import Notifier, Outgoing
from watermark.schema.config import Config, ConfigError, redact_url
from watermark.schema.keys import KeySchema
from watermark.store.alert_store import apply_decision, read_alerts, read_outbox
from watermark.store.observe import StackReading, lane_keys, read_stack

log = logging.getLogger("wm-monitor")

DEFAULT_METRICS_PORT = 9108
DEFAULT_CONFIG = "ops/alerts.toml"
ONLINE_REACH = 2_000
"""Online view batches read back at start (enough for the players-drop window at a sub-second trigger)."""


def monitor_client(url: str, timeout_s: float = 5.0) -> redis.Redis:
    """Fails fast when Redis is away: one quick retry, so a round says "unreachable" within its interval
    rather than after redis-py's default backoff."""
    return redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=min(timeout_s, 2.0),
                                retry=Retry(NoBackoff(), 1))


def wall_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Monitor:
    """One pipeline's alerts; :meth:`round` is one evaluation, with time passed in."""

    client: redis.Redis
    keys: KeySchema
    cfg: AlertConfig
    started_ms: int
    notifier: Notifier | None = None
    interval_ms: int = 1_000
    states: dict[str, AlertState] = field(default_factory=dict)
    unsaved: list[Notice] = field(default_factory=list)
    resumed: bool = False
    memory: Memory = field(init=False)

    def __post_init__(self) -> None:
        pd = self.cfg.players_drop
        reach = max(pd.within_ms, pd.settle_ms + pd.quiet_ms, self.cfg.watermark_flat.after_ms, 60_000) + 10_000
        self.memory = Memory(started_ms=self.started_ms, reach_ms=reach)

    def resume(self) -> None:
        """The alerts as they stood, and the notices still owed, from Redis (a restart changes neither); what
        was decided before Redis first answered (its being unreachable) is kept beside them."""
        stored = read_alerts(self.client, self.keys)
        owed = read_outbox(self.client, self.keys)
        self.client.hset(self.keys.alerts_webhook, "url", shown_url(self.cfg.webhook.url))
        self.states = {**self.states, **stored}
        self.resumed = True
        if self.notifier is not None:
            for oid, n in owed:
                self.notifier.offer(Outgoing(n, oid))

    def observe(self, now_ms: int) -> Observation:
        try:
            lanes = lane_keys(self.client, self.keys)
            return read_stack(self.client, self.keys, lanes, now_ms, self.memory.last_online_batch(),
                              ONLINE_REACH).obs
        except redis.RedisError as exc:
            return Observation(at_ms=now_ms, redis_error=f"{type(exc).__name__}: {exc}")

    def round(self, now_ms: int) -> Decision:
        if not self.resumed:
            try:
                self.resume()
            except redis.RedisError:
                pass  # this round finds Redis unreachable too, and says so
        obs = self.observe(now_ms)
        self.memory.remember(obs)
        findings = evaluate(obs, self.memory, self.cfg)
        d = step_all(self.states, findings, now_ms, {r: self.cfg.timing(r) for r in RULES})
        self.states = d.states
        for n in d.notices:
            log.info("%s %s%s: %s", n.status, n.alertname, f" {n.subject}" if n.subject else "", n.summary)
        self.save(d, now_ms)
        return d

    def save(self, d: Decision, now_ms: int) -> None:
        outbox = self.notifier is not None
        owed = Decision(d.states, d.removed, (*self.unsaved, *d.notices))
        try:
            sent = apply_decision(self.client, self.keys, owed, now_ms, outbox=outbox, history_only=len(self.unsaved),
                                  interval_ms=self.interval_ms)
        except redis.RedisError:
            self.unsaved.extend(d.notices)
            if self.notifier is not None:
                for n in d.notices:
                    self.notifier.offer(Outgoing(n, None))
            return
        self.unsaved.clear()
        if self.notifier is not None:
            for oid, n in sent:
                self.notifier.offer(Outgoing(n, oid))


def shown_url(url: str) -> str:
    """A receiver's address without what may be a secret (user, password, query)."""
    if not url:
        return ""
    u = urlsplit(url)
    return f"{u.scheme}://{u.hostname}{f':{u.port}' if u.port else ''}{u.path}"


def scrape_reader(url: str, keys: KeySchema, monitor: Monitor) -> StackCollector:
    """Reads for ``/metrics`` through their own connection, with a short timeout."""
    client = monitor_client(url, timeout_s=2.0)

    def read() -> tuple[StackReading, Mapping[str, AlertState]]:
        return read_stack(client, keys, lane_keys(client, keys), wall_ms(), None, 0), dict(monitor.states)
    return StackCollector(read)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="wm-monitor", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=os.environ.get("ALERTS_CONFIG"),
                   help=f"alerts' thresholds (TOML); default: ALERTS_CONFIG, else {DEFAULT_CONFIG} if present")
    p.add_argument("--port", type=_port, default=None,
                   help=f"/metrics port (METRICS_PORT, default {DEFAULT_METRICS_PORT}; 0: no endpoint)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between evaluations")
    p.add_argument("--prometheus-rules", action="store_true", help="print the equivalent Prometheus rules, exit")
    args = p.parse_args(argv)
    if args.port is None:
        try:
            args.port = _port(os.environ.get("METRICS_PORT") or str(DEFAULT_METRICS_PORT))
        except argparse.ArgumentTypeError as exc:
            p.error(f"METRICS_PORT: {exc}")
    return args


def _port(text: str) -> int:
    if not text.strip().isdigit() or int(text) > 65_535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0-65535)")
    return int(text)


def load_config(path: str | None) -> AlertConfig:
    if path is None:
        path = DEFAULT_CONFIG if os.path.exists(DEFAULT_CONFIG) else None
    cfg = AlertConfig.load(path) if path else AlertConfig()
    url = os.environ.get("ALERT_WEBHOOK_URL")
    return cfg if url is None else cfg.with_webhook_url(url, "ALERT_WEBHOOK_URL")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    args = parse_args(argv)
    try:
        cfg = load_config(args.config)
        env = Config.from_env()
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.prometheus_rules:
        sys.stdout.write(prometheus_rules(cfg))
        return 0
    return run(cfg, env, args.port, args.interval)


def run(cfg: AlertConfig, env: Config, port: int, interval_s: float) -> int:
    keys = KeySchema(env.namespace)
    client = monitor_client(env.redis_url)
    notifier = None
    if cfg.webhook.url:
        notifier = Notifier(cfg.webhook.url, client, keys, external_url=os.environ.get("DASHBOARD_URL", ""),
                            timeout_ms=cfg.webhook.timeout_ms, max_backoff_ms=cfg.webhook.max_backoff_ms)
    monitor = Monitor(client, keys, cfg, wall_ms(), notifier, int(interval_s * 1000))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if port:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(scrape_reader(env.redis_url, keys, monitor))
        try:
            start_http_server(port, addr="127.0.0.1", registry=registry)
        except OSError as exc:
            print(f"error: /metrics cannot listen on 127.0.0.1:{port}: {exc.strerror} (set METRICS_PORT)",
                  file=sys.stderr)
            return 2
    print(f"monitor: /metrics on http://127.0.0.1:{port}/metrics" if port else "monitor: no /metrics (port 0)",
          f"; Redis {redact_url(env.redis_url)}, namespace {env.namespace}; webhook {cfg.webhook.url or 'none'}",
          sep="", flush=True)
    if notifier is not None:
        notifier.start()
    while not stop.is_set():
        monitor.round(wall_ms())
        stop.wait(interval_s)
    if notifier is not None:
        notifier.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
