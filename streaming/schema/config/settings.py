"""The settings every process reads (:class:`Config`): each with its default, checked together when built, and read
from an environment mapping by :meth:`Config.from_env` alone.

Invalid values fail at construction with a message naming the variable, so a
typo stops the pipeline at start rather than producing wrong numbers later.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from streaming.schema.config.lanes import LANES
from streaming.schema.config.parse import (
    ConfigError,
    check,
    env_duration,
    env_float,
    env_int,
    env_lane_list,
    env_name_set,
    env_optional_duration,
    env_port,
    env_positive,
    env_switch,
)
from streaming.schema.config.signin import Operators, SignIn
from streaming.schema.config.urls import redact_url
from watermark_client.sentinel import is_sentinel, parse_sentinel_url, sentinel_url
from watermark_client.stream import DEFAULT_STREAM_MAX_ENTRIES
from watermark_client.timeutil import format_duration_ms

DEFAULT_LATE_KEEP = 200_000
"""Late events kept per pipeline (``LATE_EVENTS_KEEP``): about 30 MB of Redis at most."""

DEFAULT_HISTORY_DAYS = 8
"""Whole days a minute of players online is kept after its day (``HISTORY_DAYS``): a week back from any moment of
today, and the week-ago overlay. About 32 MB of Redis at 300 servers (docs/operations.md)."""

DEFAULT_EMBEDDED_PORT = 6379
MAX_WAIT_TIMEOUT_MS = 30_000
"""``REDIS_WAIT_TIMEOUT`` at most: well within the job's read timeout on Redis (60 s), so a WAIT that times out is
answered, never taken for Redis gone."""
WATERMARK_MODES = ("global", "per-server")
WATERMARK_POLICIES = ("min", "max")
_NAMESPACE = re.compile(r"^(?=.{1,64}$)(\{[A-Za-z0-9_.-]+\})?[A-Za-z0-9_.-]*$")
"""1-64 letters, digits, ``_ - .``; it may begin with one braced group, ``{wm}``: the hash tag that keeps a
pipeline's keys in one slot of a Redis Cluster (decision 0018)."""


def path_safe(namespace: str) -> str:
    """The namespace as a directory name: a braced one (``{wm}``) as ``wm-tag``, since braces are not legal in the
    URIs Spark and Hadoop make of a checkpoint path."""
    if namespace.startswith("{"):
        tag, _, rest = namespace[1:].partition("}")
        return f"{tag}-tag{rest}"
    return namespace


REMOVED = {
    "DRIVER_AGG_MAX_SPAN": "every batch is counted on the driver (the source packs its partial rows), and "
                           "MAX_EVENTS_PER_BATCH bounds a batch",
    "LAB_TRIGGER": "the lab lanes and the online players are committed with every batch of the pipeline, on "
                   "TRIGGER_INTERVAL",
}
"""Variables earlier versions read: set, they would silently do nothing, so they are refused with the reason."""


@dataclass(frozen=True)
class Config:
    redis_url: str = f"redis://127.0.0.1:{DEFAULT_EMBEDDED_PORT}/0"
    embedded_redis: bool = True
    redis_data_dir: str = "data/redis"
    redis_maxmemory_mb: int = 0  # the embedded Redis' maxmemory (noeviction: at it, writes wait); 0: none
    wait_replicas: int = 0  # REDIS_WAIT_REPLICAS: a commit is done once this many replicas have it (WAIT); 0: off
    wait_timeout_ms: int = 1_000  # REDIS_WAIT_TIMEOUT: how long a commit waits for them before it fails
    namespace: str = "wm"
    window_ms: int = 60_000
    slide_ms: int = 60_000
    delay_ms: int = 30_000
    trigger_ms: int = 500  # waiting for the next trigger is most of a fresh entry's age: keep it short
    checkpoint_dir: str = "data/checkpoints/wm"
    spark_master: str = "local[*]"
    max_events_per_batch: int = 200_000  # admission control: a backlog is read in batches of at most this
    source_partitions: int = 2
    stream_shards: int = 1  # the input as this many streams (streaming.schema.shards); 1: the one {ns}:events
    stream_keep_entries: int = 1_000_000  # committed input kept to look back at: about this many entries at most
    stream_max_entries: int = DEFAULT_STREAM_MAX_ENTRIES  # the input's bound for its writers: at it they wait (0: none)
    late_events_keep: int = DEFAULT_LATE_KEEP  # late events kept for the Events page (streaming.rules.late)
    retention_ms: int = 86_400_000
    progress_history: int = 10_000  # an hour and more of batches at the default trigger
    progress_mb: int = 128  # ... and at most about this many MB of them per query (300 servers: ~100 KB a batch)
    key_ttl_ms: int | None = None  # how long keys outlive their last write; None = RETENTION
    max_future_skew_ms: int | None = 300_000  # events further ahead of their ingest time are quarantined
    known_servers: frozenset[str] | None = None  # None: any server name is accepted
    watermark_mode: str = "global"  # "per-server": each known server is its own input with its own watermark
    watermark_policy: str = "min"  # how Spark combines per-server watermarks (multipleWatermarkPolicy)
    idle_timeout_ms: int | None = None  # per-server mode: a server silent this long stops holding the watermark
    input_namespace: str | None = None  # read another namespace's input stream (lab lanes); None: our own
    lanes: tuple[str, ...] = ()  # lab lanes run beside this pipeline over the same input (see :class:`Lane`)
    online_timeout_ms: int = 30_000  # event time without an event after which a player is offline
    online_groups: int = 0  # 0: the job folds the online view; N: wm-online processes, one per group (decision 0020)
    history_days: int = DEFAULT_HISTORY_DAYS  # days of per-minute players online kept (streaming.rules.online.rollup)
    retire_after_ms: int = 600_000  # a server silent this long (arrival time) leaves the live views until it speaks
    new_servers_per_minute: int = 1_000  # the flood guard: new server names a minute admits (0: no guard)
    demo: bool = True  # DEMO: the demo's event generator runs (./run.sh); off: your own producers write the events
    lab_control: bool = True  # LAB_CONTROL: Lab control is offered and the job follows {ns}:control (default: as DEMO)
    lab_alerts: bool = True  # LAB_ALERTS: the lab lanes' alerts reach the webhook and Alertmanager (default: as DEMO)
    # The commands' own settings (wm-monitor, wm-annotate, wm-generator, the stack): read here like every other.
    alerts_config: str | None = None  # ALERTS_CONFIG: the alerts' thresholds (TOML); None: ops/alerts.toml if present
    alert_webhook_url: str | None = None  # ALERT_WEBHOOK_URL: overrides [webhook] url; None: the file's
    alertmanager_url: str | None = None  # ALERTMANAGER_URL: overrides [alertmanager] url; None: the file's
    dashboard_url: str = ""  # DASHBOARD_URL: where a notice's generatorURL points
    metrics_port: int | None = None  # METRICS_PORT: wm-monitor's /metrics (0: none); None: unset, its 9108
    metrics_address: str = "127.0.0.1"  # METRICS_ADDRESS: where /metrics and /annotations listen
    metrics_hosts: frozenset[str] = frozenset()  # METRICS_HOSTS: Host names served beside addresses and localhost
    annotations_url: str | None = None  # ANNOTATIONS_URL: wm-annotate's monitor; None: straight to Redis
    dashboard_port: int | None = None  # DASHBOARD_PORT: the dashboard's port, as ./run.sh sets it; None: unset
    timeline_scale: float = 1.0  # TIMELINE_SCALE: the generator plays its scenario's timeline this many times slower
    generator_servers: int | None = None  # SERVERS: the generator's steady game on this many servers; None: 3
    generator_regions: int | None = None  # REGIONS: ... dealt over this many regions; None: 6
    daily_curve: bool = True  # DAILY_CURVE: with SERVERS, players follow each region's evening (off: a full house)
    sign_in: SignIn | None = field(default=None, repr=False)
    """The dashboard's sign-in provider (``DASHBOARD_OIDC_*``: :meth:`sign_in_from`); None: sign-in off."""
    operators: Operators = Operators()
    """Who is an operator on the dashboard (``DASHBOARD_OPERATORS_*``: :meth:`operators_from`)."""

    def __post_init__(self) -> None:
        check(self.window_ms > 0, "WINDOW", "must be positive")
        check(self.slide_ms > 0, "SLIDE", "must be positive")
        check(
            self.slide_ms <= self.window_ms,
            "SLIDE",
            f"({format_duration_ms(self.slide_ms)}) must not exceed WINDOW ({format_duration_ms(self.window_ms)})",
        )
        check(self.delay_ms >= 0, "WATERMARK_DELAY", "must not be negative")
        check(self.trigger_ms > 0, "TRIGGER_INTERVAL", "must be positive")
        check(self.max_events_per_batch >= 0, "MAX_EVENTS_PER_BATCH", "must be 0 (no cap) or positive")
        check(1 <= self.source_partitions <= 256, "SOURCE_PARTITIONS", "must be between 1 and 256")
        check(1 <= self.stream_shards <= 256, "STREAM_SHARDS", "must be between 1 and 256")
        check(0 <= self.online_groups <= 256, "ONLINE_GROUPS",
               "must be between 0 (the job folds the online view) and 256")
        self._check_bounds()
        check(bool(self.checkpoint_dir.strip()), "CHECKPOINT_DIR", "must not be empty")
        check(bool(_NAMESPACE.match(self.namespace)), "PIPELINE_NAMESPACE",
               f"{self.namespace!r} must be 1-64 characters of letters, digits, '_', '-', '.', "
               "optionally in braces at its start ('{wm}', for a Redis Cluster)")
        self._check_redis()
        check(bool(self.spark_master), "SPARK_MASTER", "must not be empty")
        check(self.max_future_skew_ms is None or self.max_future_skew_ms >= 0, "MAX_FUTURE_SKEW",
               "must not be negative")
        check(self.known_servers is None or (len(self.known_servers) > 0 and all(self.known_servers)),
               "KNOWN_SERVERS", "must list at least one server name")
        check(self.watermark_mode in WATERMARK_MODES, "WATERMARK_MODE",
               f"{self.watermark_mode!r} must be one of {', '.join(WATERMARK_MODES)}")
        check(self.watermark_policy in WATERMARK_POLICIES, "WATERMARK_POLICY",
               f"{self.watermark_policy!r} must be one of {', '.join(WATERMARK_POLICIES)}")
        # A lab lane (input_namespace set) keeps its per-server watermarks in the sink and follows every server
        # from its first event; the pipeline's own per-server mode is Spark's, with inputs fixed at start.
        check(self.watermark_mode != "per-server" or self.known_servers is not None
               or self.input_namespace is not None, "WATERMARK_MODE",
               "per-server needs KNOWN_SERVERS: Spark needs one input per server when the query starts, so it "
               "cannot follow servers that appear later; for servers that come and go keep WATERMARK_MODE=global "
               "and use the lab lanes (LAB_LANES=per-server-min,per-server-min-idle), which follow every server "
               "from its first event")
        check(self.idle_timeout_ms is None or self.idle_timeout_ms > 0, "IDLE_TIMEOUT", "must be positive or off")
        check(all(lane in LANES for lane in self.lanes), "LAB_LANES",
               f"{','.join(self.lanes)!r}: choose from {', '.join(LANES)}")
        check(self.idle_timeout_ms is None or self.watermark_mode == "per-server"
               or any(LANES[lane].idle for lane in self.lanes), "IDLE_TIMEOUT",
               "only applies with WATERMARK_MODE=per-server or an idle lane in LAB_LANES "
               "(one global watermark is never held back by a single server)")
        check(self.online_timeout_ms > 0, "ONLINE_TIMEOUT",
               f"({format_duration_ms(max(0, self.online_timeout_ms))}) must be positive: how long a player stays "
               "online without an event, on their server's clock")

        check(1 <= self.history_days <= 400, "HISTORY_DAYS",
               f"({self.history_days}) must be between 1 and 400 days (7 or more for the week-ago overlay)")
        check(self.retire_after_ms > 0, "RETIRE_AFTER",
               f"({format_duration_ms(max(0, self.retire_after_ms))}) must be positive: a server silent this long "
               "leaves the live views until its next event")
        check(self.new_servers_per_minute >= 0, "NEW_SERVERS_PER_MINUTE",
               f"({self.new_servers_per_minute}) must be 0 (no guard) or more: new server names a minute admits")

    def _check_redis(self) -> None:
        """Where Redis is, and how long a commit waits for its replicas."""
        scheme = urlsplit(self.redis_url).scheme
        check(scheme in ("redis", "rediss", "unix") or is_sentinel(self.redis_url), "REDIS_URL",
               f"{redact_url(self.redis_url)!r} must start with redis://, rediss://, unix:// or redis+sentinel://")
        if is_sentinel(self.redis_url):
            try:
                parse_sentinel_url(self.redis_url)
            except ValueError as exc:
                raise ConfigError(f"REDIS_URL {redact_url(self.redis_url)!r} {exc}") from None
        check(self.wait_replicas >= 0, "REDIS_WAIT_REPLICAS", "must be 0 (off) or more")
        check(0 < self.wait_timeout_ms <= MAX_WAIT_TIMEOUT_MS, "REDIS_WAIT_TIMEOUT",
               f"({format_duration_ms(max(0, self.wait_timeout_ms))}) must be positive and at most "
               f"{format_duration_ms(MAX_WAIT_TIMEOUT_MS)}")

    def _check_bounds(self) -> None:
        """What Redis may hold: each bound checked."""
        check(self.retention_ms >= self.window_ms, "RETENTION", "must be at least one WINDOW")
        check(self.progress_history >= 10, "PROGRESS_HISTORY", "must be at least 10")
        check(self.progress_mb >= 1, "PROGRESS_MB", "must be at least 1")
        check(self.redis_maxmemory_mb == 0 or self.redis_maxmemory_mb >= 64, "REDIS_MAXMEMORY_MB",
               "must be 0 (none) or at least 64")
        check(self.stream_keep_entries >= 0, "STREAM_KEEP_ENTRIES", "must not be negative")
        check(self.stream_max_entries == 0 or self.stream_max_entries > self.stream_keep_entries,
               "STREAM_MAX_ENTRIES", "must be 0 (no bound) or above STREAM_KEEP_ENTRIES: the kept input alone would "
               "hold the writers back")
        check(self.late_events_keep >= 1, "LATE_EVENTS_KEEP", "must be at least 1")

    @property
    def input_stream(self) -> str:
        """The stream key this pipeline reads (a lab lane reads its parent's)."""
        return f"{self.input_namespace or self.namespace}:events"

    def lane_configs(self) -> list[Config]:
        """The configuration of each lab lane this pipeline runs (``LAB_LANES``), in its order."""
        return [LANES[lane].config(self) for lane in self.lanes]

    def with_(self, **changes: Any) -> Config:  # noqa: ANN401 - any field of the dataclass, checked again
        return replace(self, **changes)

    @staticmethod
    def sign_in_from(env: Mapping[str, str]) -> SignIn | None:
        """The dashboard's sign-in provider in ``env`` (part of :meth:`from_env`; alone, the dashboard decides who
        may look even while another setting is invalid, which every page then names)."""
        return SignIn.from_env(env)

    @staticmethod
    def operators_from(env: Mapping[str, str]) -> Operators:
        """The dashboard's operator rule in ``env`` (part of :meth:`from_env`, and alone as :meth:`sign_in_from`)."""
        return Operators.from_env(env)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Config:
        """The settings in ``env``: a command passes ``os.environ`` (the schema reads no environment itself)."""
        for name, why in REMOVED.items():
            if name in env:
                raise ConfigError(f"{name} is no longer used: {why}; unset it")
        ns = env.get("PIPELINE_NAMESPACE", cls.namespace)
        demo = env_switch(env, "DEMO", cls.demo)
        window = env_duration(env, "WINDOW", cls.window_ms)
        url = _redis_url(env)
        port = env_int(env, "REDIS_PORT", DEFAULT_EMBEDDED_PORT)
        return cls(
            redis_url=url or f"redis://127.0.0.1:{port}/0",
            embedded_redis=not url,
            redis_data_dir=env.get("REDIS_DATA_DIR", cls.redis_data_dir),
            redis_maxmemory_mb=env_int(env, "REDIS_MAXMEMORY_MB", cls.redis_maxmemory_mb),
            wait_replicas=env_int(env, "REDIS_WAIT_REPLICAS", cls.wait_replicas),
            wait_timeout_ms=env_duration(env, "REDIS_WAIT_TIMEOUT", cls.wait_timeout_ms),
            namespace=ns,
            window_ms=window,
            slide_ms=env_duration(env, "SLIDE", window),
            delay_ms=env_duration(env, "WATERMARK_DELAY", cls.delay_ms),
            trigger_ms=env_duration(env, "TRIGGER_INTERVAL", cls.trigger_ms),
            checkpoint_dir=env.get("CHECKPOINT_DIR", f"data/checkpoints/{path_safe(ns)}"),
            spark_master=env.get("SPARK_MASTER", cls.spark_master),
            max_events_per_batch=env_int(env, "MAX_EVENTS_PER_BATCH", cls.max_events_per_batch),
            source_partitions=env_int(env, "SOURCE_PARTITIONS", cls.source_partitions),
            stream_shards=env_int(env, "STREAM_SHARDS", cls.stream_shards),
            retention_ms=env_duration(env, "RETENTION", cls.retention_ms),
            progress_history=env_int(env, "PROGRESS_HISTORY", cls.progress_history),
            progress_mb=env_int(env, "PROGRESS_MB", cls.progress_mb),
            stream_keep_entries=env_int(env, "STREAM_KEEP_ENTRIES", cls.stream_keep_entries),
            stream_max_entries=env_int(env, "STREAM_MAX_ENTRIES", cls.stream_max_entries),
            late_events_keep=env_int(env, "LATE_EVENTS_KEEP", cls.late_events_keep),
            max_future_skew_ms=env_optional_duration(env, "MAX_FUTURE_SKEW", cls.max_future_skew_ms),
            known_servers=env_name_set(env, "KNOWN_SERVERS"),
            watermark_mode=env.get("WATERMARK_MODE", cls.watermark_mode).strip(),
            watermark_policy=env.get("WATERMARK_POLICY", cls.watermark_policy).strip(),
            idle_timeout_ms=env_optional_duration(env, "IDLE_TIMEOUT", cls.idle_timeout_ms),
            lanes=env_lane_list(env, "LAB_LANES"),
            online_timeout_ms=env_duration(env, "ONLINE_TIMEOUT", cls.online_timeout_ms),
            online_groups=env_int(env, "ONLINE_GROUPS", cls.online_groups),
            retire_after_ms=env_duration(env, "RETIRE_AFTER", cls.retire_after_ms),
            new_servers_per_minute=env_int(env, "NEW_SERVERS_PER_MINUTE", cls.new_servers_per_minute),
            history_days=env_int(env, "HISTORY_DAYS", cls.history_days),
            demo=demo,
            lab_control=env_switch(env, "LAB_CONTROL", demo),
            lab_alerts=env_switch(env, "LAB_ALERTS", demo),
            **_commands(env),
        )


def _commands(env: Mapping[str, str]) -> dict[str, Any]:
    """The commands' own settings (:class:`Config`'s last fields), as ``from_env`` reads them."""
    return dict(
        alerts_config=env.get("ALERTS_CONFIG"),
        alert_webhook_url=env.get("ALERT_WEBHOOK_URL"),
        alertmanager_url=env.get("ALERTMANAGER_URL"),
        dashboard_url=env.get("DASHBOARD_URL", ""),
        metrics_port=env_port(env, "METRICS_PORT"),
        metrics_address=env.get("METRICS_ADDRESS") or Config.metrics_address,
        metrics_hosts=frozenset(h.strip().lower().rstrip(".") for h in (env.get("METRICS_HOSTS") or "").split(",")
                                if h.strip()),
        annotations_url=env.get("ANNOTATIONS_URL") or None,
        dashboard_port=env_port(env, "DASHBOARD_PORT"),
        timeline_scale=env_float(env, "TIMELINE_SCALE", Config.timeline_scale),
        generator_servers=env_positive(env, "SERVERS"),
        generator_regions=env_positive(env, "REGIONS"),
        daily_curve=env_switch(env, "DAILY_CURVE", Config.daily_curve),
        sign_in=Config.sign_in_from(env),
        operators=Config.operators_from(env),
    )


def _redis_url(env: Mapping[str, str]) -> str:
    """``REDIS_URL``; with ``REDIS_SENTINELS`` and ``REDIS_SENTINEL_MASTER`` the ``redis+sentinel://`` URL they name
    (:mod:`watermark_client.sentinel`), ``REDIS_URL`` then giving only its credentials, database, TLS and options.
    Empty: neither is set (the embedded Redis)."""
    url = env.get("REDIS_URL", "").strip()
    sentinels = env.get("REDIS_SENTINELS", "").strip()
    master = env.get("REDIS_SENTINEL_MASTER", "").strip()
    if not sentinels:
        check(not master, "REDIS_SENTINEL_MASTER", "is set without REDIS_SENTINELS (the Sentinels to ask for it)")
        return url
    check(bool(master), "REDIS_SENTINEL_MASTER",
           "must be set with REDIS_SENTINELS: the name the Sentinels monitor the primary under")
    check(not is_sentinel(url), "REDIS_SENTINELS",
           "and a redis+sentinel:// REDIS_URL are both set; set one")
    try:
        return sentinel_url(sentinels, master, url or None)
    except ValueError as exc:
        if url and str(exc).startswith("must be"):
            raise ConfigError(f"REDIS_URL {redact_url(url)!r} {exc}") from None
        raise ConfigError(f"REDIS_SENTINELS={sentinels!r}: {exc}") from None
