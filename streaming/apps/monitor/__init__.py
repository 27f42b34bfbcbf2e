"""``wm-monitor``: the alerts, evaluated once a second, and ``/metrics`` for Prometheus.

Each round reads the stack (``streaming.store.observe``), steps every alert (``streaming.alerting``), writes
the alerts, their history and the webhook's outbox in one transaction, and hands new notices to the webhook's
thread. ``/metrics`` is served by prometheus_client's own thread and reads Redis at each scrape. Redis
unreachable is itself an alert: it is decided in memory, sent, and written to the history once Redis answers.

    wm-monitor                       # METRICS_PORT (9108), ALERTS_CONFIG (ops/alerts.toml if present)
    wm-monitor --prometheus-rules    # the equivalent Prometheus alerting rules, for teams with their own stack

The command is this package's module; its threads are modules of their own: ``/metrics`` (:mod:`.metrics`), the
webhook's sender (:mod:`.notify`), the Alertmanager pusher (:mod:`.alertmanager`).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import redis
from prometheus_client import make_wsgi_app
from prometheus_client.registry import CollectorRegistry
from redis.backoff import NoBackoff
from redis.retry import Retry

from streaming.alerting.conditions import RULES, evaluate, pages, watching
from streaming.alerting.config import AlertConfig
from streaming.alerting.health import Verdict, judge_all
from streaming.alerting.lifecycle import AlertState, Decision, Notice, step_all
from streaming.alerting.observation import Memory, Observation
from streaming.alerting.promrules import prometheus_rules
from streaming.apps import config_or_exit
from streaming.apps.annotate import annotations_app, beside
from streaming.apps.monitor.alertmanager import AlertmanagerPusher
from streaming.apps.monitor.http import REFUSED_WITHOUT_TOKEN, Gate, Server, serve
from streaming.apps.monitor.metrics import StackCollector
from streaming.apps.monitor.notify import Notifier, Outgoing
from streaming.runtime.clock import wall_ms
from streaming.runtime.signals import on_stop_signals
from streaming.schema.config import (
    DEFAULT_HISTORY_DAYS,
    Config,
    ConfigError,
    annotations_token,
    is_loopback,
    redact_url,
    shown_url,
)
from streaming.schema.keys import KeySchema
from streaming.store.alert_store import apply_decision, publish_thresholds, read_alerts, read_outbox
from streaming.store.observe import StackReading, lane_keys, read_stack
from watermark_client.connection import open_client

log = logging.getLogger("wm-monitor")

DEFAULT_METRICS_PORT = 9108
DEFAULT_CONFIG = "ops/alerts.toml"
ONLINE_REACH = 8_000
"""Online view batches read back at start: the longest players-drop window (an hour) at a 500 ms trigger."""
REDIS_TIMEOUT_S = 2.0
START_WAIT_S = 30.0
"""How long a starting monitor waits for Redis before its rounds begin (and find it unreachable)."""


def monitor_client(url: str, timeout_s: float = REDIS_TIMEOUT_S) -> redis.Redis:
    """Fails fast when Redis is away or hangs, and never retries: a round says "unreachable" within a few
    seconds, and a transaction whose reply was lost is not sent a second time (its notices would be twice in
    the history and the outbox)."""
    return open_client(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry=Retry(NoBackoff(), 0))


@dataclass
class Monitor:
    """One pipeline's alerts; :meth:`round` is one evaluation, with time passed in."""

    client: redis.Redis
    keys: KeySchema
    cfg: AlertConfig
    started_ms: int
    notifier: Notifier | None = None
    pusher: AlertmanagerPusher | None = None
    interval_ms: int = 1_000
    retire_after_ms: int = Config.retire_after_ms
    states: dict[str, AlertState] = field(default_factory=dict)
    unsaved: list[Notice] = field(default_factory=list)
    resumed: bool = False
    last_ms: int = 0
    """The latest ``now`` seen: the wall clock stepping back must not re-time pending and clearing alerts."""
    last_error: str = ""
    health: dict[str, Verdict] = field(default_factory=dict)
    """Each pipeline's health after the last round (``streaming.alerting.health``): ``/metrics`` serves it."""
    lab_alerts: bool = True
    """Whether the lab lanes' alerts reach the webhook and Alertmanager (``LAB_ALERTS``; :func:`pages`)."""
    memory: Memory = field(init=False)

    def __post_init__(self) -> None:
        pd = self.cfg.players_drop
        reach = max(pd.within_ms, pd.settle_ms + pd.quiet_ms, self.cfg.watermark_flat.after_ms, 60_000) + 10_000
        self.memory = Memory(started_ms=self.started_ms, reach_ms=reach)

    def resume(self) -> None:
        """The alerts as they stood, and the notices still owed, from Redis (a restart changes neither); what
        was decided before Redis first answered (its being unreachable) is kept beside them."""
        stored = read_alerts(self.client, self.keys, on_bad=self.say)
        owed = read_outbox(self.client, self.keys, on_bad=self.say)
        with self.client.pipeline(transaction=False) as pipe:  # what the page shows of this monitor
            pipe.hset(self.keys.alerts_webhook, "url", shown_url(self.cfg.webhook.url))
            pipe.hset(self.keys.alerts_monitor, "watching", watching(self.cfg))
            publish_thresholds(pipe, self.keys, self.cfg)
            pipe.execute()
        self.states = {**stored, **self.states}
        self.resumed = True
        if self.notifier is not None:
            for oid, n in owed:
                self.notifier.offer(Outgoing(n, oid))

    def say(self, error: str) -> None:
        """A problem with what Redis holds, logged once until it changes (a round a second would flood)."""
        if error != self.last_error:
            log.warning("%s", error)
            self.last_error = error

    def observe(self, now_ms: int) -> Observation:
        try:
            if not self.resumed:
                self.resume()
            lanes = lane_keys(self.client, self.keys)
            return read_stack(self.client, self.keys, lanes, now_ms, self.memory.last_online_batch(),
                              ONLINE_REACH, self.retire_after_ms).obs
        except redis.RedisError as exc:
            return Observation(at_ms=now_ms, redis_error=f"{type(exc).__name__}: {exc}")
        except ValueError as exc:  # a malformed record (RecordError): judge nothing this round, say what
            self.say(f"cannot read the stack: {exc}")
            return Observation(at_ms=now_ms, data_error=str(exc))

    def round(self, now_ms: int) -> Decision:
        now_ms = self.last_ms = max(now_ms, self.last_ms)
        obs = self.observe(now_ms)
        self.memory.remember(obs)
        findings = evaluate(obs, self.memory, self.cfg)
        self.health = judge_all(obs, self.memory, self.cfg, self.health)
        complete = obs.redis_error is None and obs.data_error is None
        d = step_all(self.states, findings, now_ms, {r: self.cfg.timing(r) for r in RULES}, complete=complete)
        self.states = d.states
        for n in d.notices:
            log.info("%s %s%s: %s", n.status, n.alertname, f" {n.subject}" if n.subject else "", n.summary)
        self.save(d, now_ms, redis_ok=obs.redis_error is None)
        if self.pusher is not None:
            self.pusher.update({k: s for k, s in d.states.items() if self.pages(s)},
                               [n for n in d.notices if self.pages(n)])
        return d

    def pages(self, a: AlertState | Notice) -> bool:
        return pages(a.rule, a.subject, self.lab_alerts)

    def save(self, d: Decision, now_ms: int, redis_ok: bool = True) -> None:
        outbox = self.notifier is not None
        owed = Decision(d.states, d.removed, (*self.unsaved, *d.notices))
        try:
            if not redis_ok:  # not tried again within the round that found Redis away (it may hang)
                raise redis.ConnectionError("Redis was unreachable this round")
            sent = apply_decision(self.client, self.keys, owed, now_ms, outbox=outbox, history_only=len(self.unsaved),
                                  interval_ms=self.interval_ms, health={k: v.health for k, v in self.health.items()},
                                  paged=self.pages)
        except redis.RedisError:
            self.unsaved.extend(d.notices)
            if self.notifier is not None:
                for n in d.notices:
                    if self.pages(n):
                        self.notifier.offer(Outgoing(n, None))
            return
        self.unsaved.clear()
        if self.notifier is not None:
            for oid, n in sent:
                self.notifier.offer(Outgoing(n, oid))


def scrape_reader(url: str, keys: KeySchema, monitor: Monitor) -> StackCollector:
    """Reads for ``/metrics`` through their own connection, with a short timeout."""
    client = monitor_client(url, timeout_s=2.0)

    def read() -> tuple[StackReading, Mapping[str, AlertState]]:
        return (read_stack(client, keys, lane_keys(client, keys), wall_ms(), None, 0, monitor.retire_after_ms),
                dict(monitor.states))
    return StackCollector(read, lambda: dict(monitor.health))


def parse_args(argv: list[str] | None, settings: Config | None = None) -> argparse.Namespace:
    """The command line; its defaults are the environment's, as ``settings`` (:class:`Config`) read it."""
    settings = settings or Config()
    p = argparse.ArgumentParser(prog="wm-monitor", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=settings.alerts_config,
                   help=f"alerts' thresholds (TOML); default: ALERTS_CONFIG, else {DEFAULT_CONFIG} if present")
    p.add_argument("--port", type=_port,
                   default=DEFAULT_METRICS_PORT if settings.metrics_port is None else settings.metrics_port,
                   help=f"/metrics port (METRICS_PORT, default {DEFAULT_METRICS_PORT}; 0: no endpoint)")
    p.add_argument("--address", default=settings.metrics_address,
                   help="/metrics address (METRICS_ADDRESS, default 127.0.0.1; 0.0.0.0 for a Prometheus elsewhere)")
    p.add_argument("--hosts", type=_hosts, default=settings.metrics_hosts,
                   help="the Host names served beside IP addresses and localhost, comma-separated (METRICS_HOSTS; "
                        "e.g. the Kubernetes service Prometheus scrapes): any other is refused (421)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between evaluations")
    p.add_argument("--prometheus-rules", action="store_true", help="print the equivalent Prometheus rules, exit")
    return p.parse_args(argv)


def _hosts(text: str) -> frozenset[str]:
    return frozenset(h.strip().lower().rstrip(".") for h in text.split(",") if h.strip())


def _port(text: str) -> int:
    if not text.strip().isdigit() or int(text) > 65_535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0-65535)")
    return int(text)


def read_config(path: str) -> AlertConfig:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError(f"alerts configuration {path}: {exc.strerror or exc}") from None
    return AlertConfig.from_toml(text, path)


def load_config(path: str | None, settings: Config) -> AlertConfig:
    """The alerts' configuration: the file at ``path`` (else the default file, if present), with the webhook's and
    Alertmanager's addresses the environment gives (``settings``) in place of the file's."""
    if path is None:
        path = DEFAULT_CONFIG if os.path.exists(DEFAULT_CONFIG) else None
    cfg = read_config(path) if path else AlertConfig()
    url = settings.alert_webhook_url
    cfg = cfg if url is None else cfg.with_webhook_url(url, "ALERT_WEBHOOK_URL")
    am = settings.alertmanager_url
    return cfg if am is None else cfg.with_alertmanager_url(am, "ALERTMANAGER_URL")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    env = config_or_exit("monitor")
    args = parse_args(argv, env)
    try:
        cfg = load_config(args.config, env)
        token = annotations_token(os.environ)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.prometheus_rules:
        sys.stdout.write(prometheus_rules(cfg))
        return 0
    return run(cfg, env, args, token)


def serve_metrics(address: str, port: int, url: str, keys: KeySchema, monitor: Monitor,
                  history_days: int = DEFAULT_HISTORY_DAYS, token: str | None = None,
                  hosts: frozenset[str] = frozenset()) -> Server | str:
    """``/metrics`` and ``/annotations`` (:mod:`streaming.apps.annotate`) on one port, served by
    :mod:`.http` on its own thread; an error message when it cannot listen. ``/metrics`` is open, as exporters
    are; ``POST /annotations`` writes to Redis, so it needs ``token``, and without one is refused beyond loopback.
    ``hosts``: the ``Host`` names served beside IP addresses and ``localhost`` (``METRICS_HOSTS``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(scrape_reader(url, keys, monitor))
    notes = annotations_app(monitor_client(url), keys, history_days)
    gate = Gate(token=token, loopback=is_loopback(address), hosts=hosts)
    try:
        return serve(address, port, beside(make_wsgi_app(registry), notes), gate)
    except OSError as exc:
        return f"/metrics cannot listen on {address}:{port}: {exc.strerror or exc} (set METRICS_PORT)"


def wait_for_redis(client: redis.Redis, stop: threading.Event, limit_s: float = START_WAIT_S) -> None:
    """Started beside the embedded Redis: give it a moment before a round could call it unreachable."""
    deadline = time.monotonic() + limit_s
    while not stop.is_set() and time.monotonic() < deadline:
        try:
            client.ping()
            return
        except redis.RedisError:
            stop.wait(0.25)


def posting(address: str, token: str | None) -> str:
    """Who may ``POST /annotations``, for the line the monitor prints at start."""
    if token is not None:
        return "with the token"
    return "open (loopback, no token)" if is_loopback(address) else "refused (beyond loopback, no token)"


def run(cfg: AlertConfig, env: Config, args: argparse.Namespace, token: str | None = None) -> int:
    keys = KeySchema(env.namespace)
    client = monitor_client(env.redis_url)
    notifier = None
    if cfg.webhook.url:
        notifier = Notifier(cfg.webhook.url, client, keys, external_url=env.dashboard_url,
                            timeout_ms=cfg.webhook.timeout_ms, max_backoff_ms=cfg.webhook.max_backoff_ms,
                            group_wait_ms=cfg.webhook.group_wait_ms)
    pusher = None
    if cfg.alertmanager.url:
        pusher = AlertmanagerPusher(cfg.alertmanager.url, keys.namespace,
                                    external_url=env.dashboard_url,
                                    resend_ms=cfg.alertmanager.resend_ms, timeout_ms=cfg.alertmanager.timeout_ms)
    monitor = Monitor(client, keys, cfg, wall_ms(), notifier, pusher, int(args.interval * 1000), env.retire_after_ms,
                      lab_alerts=env.lab_alerts)
    stop = on_stop_signals().event
    if args.port:
        served = serve_metrics(args.address, args.port, env.redis_url, keys, monitor, env.history_days, token,
                               args.hosts)
        if isinstance(served, str):
            print(f"error: {served}", file=sys.stderr)
            return 2
    where = f"http://{args.address}:{args.port}/metrics" if args.port else "none (port 0)"
    notes = f"; POST /annotations {posting(args.address, token)}" if args.port else ""
    print(f"monitor: /metrics on {where}{notes}; Redis {redact_url(env.redis_url)}, namespace {env.namespace}; "
          f"webhook {shown_url(cfg.webhook.url) or 'none'}; alertmanager {shown_url(cfg.alertmanager.url) or 'none'}",
          flush=True)
    if args.port and token is None and not is_loopback(args.address):
        log.warning("%s (it listens on %s)", REFUSED_WITHOUT_TOKEN, args.address)
    wait_for_redis(client, stop)
    for thread in (notifier, pusher):
        if thread is not None:
            thread.start()
    while not stop.is_set():
        monitor.round(wall_ms())
        stop.wait(args.interval)
    for thread in (notifier, pusher):
        if thread is not None:
            thread.close()
    return 0

