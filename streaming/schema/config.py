"""One configuration object, read from environment variables.

Invalid values fail at construction with a message naming the variable, so a
typo stops the pipeline at start rather than producing wrong numbers later.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import msgspec

from watermark_client.sentinel import is_sentinel, parse_sentinel_url, sentinel_url
from watermark_client.stream import DEFAULT_STREAM_MAX_ENTRIES
from watermark_client.timeutil import format_duration_ms, parse_duration_ms

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


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the variable."""


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

    def __post_init__(self) -> None:
        _check(self.window_ms > 0, "WINDOW", "must be positive")
        _check(self.slide_ms > 0, "SLIDE", "must be positive")
        _check(
            self.slide_ms <= self.window_ms,
            "SLIDE",
            f"({format_duration_ms(self.slide_ms)}) must not exceed WINDOW ({format_duration_ms(self.window_ms)})",
        )
        _check(self.delay_ms >= 0, "WATERMARK_DELAY", "must not be negative")
        _check(self.trigger_ms > 0, "TRIGGER_INTERVAL", "must be positive")
        _check(self.max_events_per_batch >= 0, "MAX_EVENTS_PER_BATCH", "must be 0 (no cap) or positive")
        _check(1 <= self.source_partitions <= 256, "SOURCE_PARTITIONS", "must be between 1 and 256")
        _check(1 <= self.stream_shards <= 256, "STREAM_SHARDS", "must be between 1 and 256")
        _check(0 <= self.online_groups <= 256, "ONLINE_GROUPS",
               "must be between 0 (the job folds the online view) and 256")
        self._check_bounds()
        _check(bool(self.checkpoint_dir.strip()), "CHECKPOINT_DIR", "must not be empty")
        _check(bool(_NAMESPACE.match(self.namespace)), "PIPELINE_NAMESPACE",
               f"{self.namespace!r} must be 1-64 characters of letters, digits, '_', '-', '.', "
               "optionally in braces at its start ('{wm}', for a Redis Cluster)")
        self._check_redis()
        _check(bool(self.spark_master), "SPARK_MASTER", "must not be empty")
        _check(self.max_future_skew_ms is None or self.max_future_skew_ms >= 0, "MAX_FUTURE_SKEW",
               "must not be negative")
        _check(self.known_servers is None or (len(self.known_servers) > 0 and all(self.known_servers)),
               "KNOWN_SERVERS", "must list at least one server name")
        _check(self.watermark_mode in WATERMARK_MODES, "WATERMARK_MODE",
               f"{self.watermark_mode!r} must be one of {', '.join(WATERMARK_MODES)}")
        _check(self.watermark_policy in WATERMARK_POLICIES, "WATERMARK_POLICY",
               f"{self.watermark_policy!r} must be one of {', '.join(WATERMARK_POLICIES)}")
        # A lab lane (input_namespace set) keeps its per-server watermarks in the sink and follows every server
        # from its first event; the pipeline's own per-server mode is Spark's, with inputs fixed at start.
        _check(self.watermark_mode != "per-server" or self.known_servers is not None
               or self.input_namespace is not None, "WATERMARK_MODE",
               "per-server needs KNOWN_SERVERS: Spark needs one input per server when the query starts, so it "
               "cannot follow servers that appear later; for servers that come and go keep WATERMARK_MODE=global "
               "and use the lab lanes (LAB_LANES=per-server-min,per-server-min-idle), which follow every server "
               "from its first event")
        _check(self.idle_timeout_ms is None or self.idle_timeout_ms > 0, "IDLE_TIMEOUT", "must be positive or off")
        _check(all(lane in LANES for lane in self.lanes), "LAB_LANES",
               f"{','.join(self.lanes)!r}: choose from {', '.join(LANES)}")
        _check(self.idle_timeout_ms is None or self.watermark_mode == "per-server"
               or any(LANES[lane].idle for lane in self.lanes), "IDLE_TIMEOUT",
               "only applies with WATERMARK_MODE=per-server or an idle lane in LAB_LANES "
               "(one global watermark is never held back by a single server)")
        _check(self.online_timeout_ms > 0, "ONLINE_TIMEOUT",
               f"({format_duration_ms(max(0, self.online_timeout_ms))}) must be positive: how long a player stays "
               "online without an event, on their server's clock")

        _check(1 <= self.history_days <= 400, "HISTORY_DAYS",
               f"({self.history_days}) must be between 1 and 400 days (7 or more for the week-ago overlay)")
        _check(self.retire_after_ms > 0, "RETIRE_AFTER",
               f"({format_duration_ms(max(0, self.retire_after_ms))}) must be positive: a server silent this long "
               "leaves the live views until its next event")
        _check(self.new_servers_per_minute >= 0, "NEW_SERVERS_PER_MINUTE",
               f"({self.new_servers_per_minute}) must be 0 (no guard) or more: new server names a minute admits")

    def _check_redis(self) -> None:
        """Where Redis is, and how long a commit waits for its replicas."""
        scheme = urlsplit(self.redis_url).scheme
        _check(scheme in ("redis", "rediss", "unix") or is_sentinel(self.redis_url), "REDIS_URL",
               f"{redact_url(self.redis_url)!r} must start with redis://, rediss://, unix:// or redis+sentinel://")
        if is_sentinel(self.redis_url):
            try:
                parse_sentinel_url(self.redis_url)
            except ValueError as exc:
                raise ConfigError(f"REDIS_URL {redact_url(self.redis_url)!r} {exc}") from None
        _check(self.wait_replicas >= 0, "REDIS_WAIT_REPLICAS", "must be 0 (off) or more")
        _check(0 < self.wait_timeout_ms <= MAX_WAIT_TIMEOUT_MS, "REDIS_WAIT_TIMEOUT",
               f"({format_duration_ms(max(0, self.wait_timeout_ms))}) must be positive and at most "
               f"{format_duration_ms(MAX_WAIT_TIMEOUT_MS)}")

    def _check_bounds(self) -> None:
        """What Redis may hold: each bound checked."""
        _check(self.retention_ms >= self.window_ms, "RETENTION", "must be at least one WINDOW")
        _check(self.progress_history >= 10, "PROGRESS_HISTORY", "must be at least 10")
        _check(self.progress_mb >= 1, "PROGRESS_MB", "must be at least 1")
        _check(self.redis_maxmemory_mb == 0 or self.redis_maxmemory_mb >= 64, "REDIS_MAXMEMORY_MB",
               "must be 0 (none) or at least 64")
        _check(self.stream_keep_entries >= 0, "STREAM_KEEP_ENTRIES", "must not be negative")
        _check(self.stream_max_entries == 0 or self.stream_max_entries > self.stream_keep_entries,
               "STREAM_MAX_ENTRIES", "must be 0 (no bound) or above STREAM_KEEP_ENTRIES: the kept input alone would "
               "hold the writers back")
        _check(self.late_events_keep >= 1, "LATE_EVENTS_KEEP", "must be at least 1")

    @property
    def input_stream(self) -> str:
        """The stream key this pipeline reads (a lab lane reads its parent's)."""
        return f"{self.input_namespace or self.namespace}:events"

    def lane_configs(self) -> list[Config]:
        """The configuration of each lab lane this pipeline runs (``LAB_LANES``), in its order."""
        return [LANES[lane].config(self) for lane in self.lanes]

    def with_(self, **changes: Any) -> Config:  # noqa: ANN401 - any field of the dataclass, checked again
        return replace(self, **changes)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Config:
        """The settings in ``env``: a command passes ``os.environ`` (the schema reads no environment itself)."""
        for name, why in REMOVED.items():
            if name in env:
                raise ConfigError(f"{name} is no longer used: {why}; unset it")
        ns = env.get("PIPELINE_NAMESPACE", cls.namespace)
        demo = _switch(env, "DEMO", cls.demo)
        window = _duration(env, "WINDOW", cls.window_ms)
        url = _redis_url(env)
        port = _int(env, "REDIS_PORT", DEFAULT_EMBEDDED_PORT)
        return cls(
            redis_url=url or f"redis://127.0.0.1:{port}/0",
            embedded_redis=not url,
            redis_data_dir=env.get("REDIS_DATA_DIR", cls.redis_data_dir),
            redis_maxmemory_mb=_int(env, "REDIS_MAXMEMORY_MB", cls.redis_maxmemory_mb),
            wait_replicas=_int(env, "REDIS_WAIT_REPLICAS", cls.wait_replicas),
            wait_timeout_ms=_duration(env, "REDIS_WAIT_TIMEOUT", cls.wait_timeout_ms),
            namespace=ns,
            window_ms=window,
            slide_ms=_duration(env, "SLIDE", window),
            delay_ms=_duration(env, "WATERMARK_DELAY", cls.delay_ms),
            trigger_ms=_duration(env, "TRIGGER_INTERVAL", cls.trigger_ms),
            checkpoint_dir=env.get("CHECKPOINT_DIR", f"data/checkpoints/{path_safe(ns)}"),
            spark_master=env.get("SPARK_MASTER", cls.spark_master),
            max_events_per_batch=_int(env, "MAX_EVENTS_PER_BATCH", cls.max_events_per_batch),
            source_partitions=_int(env, "SOURCE_PARTITIONS", cls.source_partitions),
            stream_shards=_int(env, "STREAM_SHARDS", cls.stream_shards),
            retention_ms=_duration(env, "RETENTION", cls.retention_ms),
            progress_history=_int(env, "PROGRESS_HISTORY", cls.progress_history),
            progress_mb=_int(env, "PROGRESS_MB", cls.progress_mb),
            stream_keep_entries=_int(env, "STREAM_KEEP_ENTRIES", cls.stream_keep_entries),
            stream_max_entries=_int(env, "STREAM_MAX_ENTRIES", cls.stream_max_entries),
            late_events_keep=_int(env, "LATE_EVENTS_KEEP", cls.late_events_keep),
            max_future_skew_ms=_optional_duration(env, "MAX_FUTURE_SKEW", cls.max_future_skew_ms),
            known_servers=_name_set(env, "KNOWN_SERVERS"),
            watermark_mode=env.get("WATERMARK_MODE", cls.watermark_mode).strip(),
            watermark_policy=env.get("WATERMARK_POLICY", cls.watermark_policy).strip(),
            idle_timeout_ms=_optional_duration(env, "IDLE_TIMEOUT", cls.idle_timeout_ms),
            lanes=_lane_list(env, "LAB_LANES"),
            online_timeout_ms=_duration(env, "ONLINE_TIMEOUT", cls.online_timeout_ms),
            online_groups=_int(env, "ONLINE_GROUPS", cls.online_groups),
            retire_after_ms=_duration(env, "RETIRE_AFTER", cls.retire_after_ms),
            new_servers_per_minute=_int(env, "NEW_SERVERS_PER_MINUTE", cls.new_servers_per_minute),
            history_days=_int(env, "HISTORY_DAYS", cls.history_days),
            demo=demo,
            lab_control=_switch(env, "LAB_CONTROL", demo),
            lab_alerts=_switch(env, "LAB_ALERTS", demo),
            **_commands(env),
        )


def _commands(env: Mapping[str, str]) -> dict[str, Any]:
    """The commands' own settings (:class:`Config`'s last fields), as ``from_env`` reads them."""
    return dict(
        alerts_config=env.get("ALERTS_CONFIG"),
        alert_webhook_url=env.get("ALERT_WEBHOOK_URL"),
        alertmanager_url=env.get("ALERTMANAGER_URL"),
        dashboard_url=env.get("DASHBOARD_URL", ""),
        metrics_port=_port(env, "METRICS_PORT"),
        metrics_address=env.get("METRICS_ADDRESS") or Config.metrics_address,
        metrics_hosts=frozenset(h.strip().lower().rstrip(".") for h in (env.get("METRICS_HOSTS") or "").split(",")
                                if h.strip()),
        annotations_url=env.get("ANNOTATIONS_URL") or None,
        dashboard_port=_port(env, "DASHBOARD_PORT"),
        timeline_scale=_float(env, "TIMELINE_SCALE", Config.timeline_scale),
        generator_servers=_positive(env, "SERVERS"),
        generator_regions=_positive(env, "REGIONS"),
        daily_curve=_switch(env, "DAILY_CURVE", Config.daily_curve),
    )


# --------------------------------------------------------------------------- lab lanes

DEFAULT_IDLE_TIMEOUT_MS = 20_000


class Lane(msgspec.Struct, frozen=True, kw_only=True):
    """A lab lane: an extra pipeline over the same input with a watermark strategy of its own; or, named
    :data:`MAIN`, the configured pipeline itself. The one lane type: the catalogue's entries (:data:`LANES`), what
    the job registers in ``{ns}:lanes`` and what the dashboard reads back.

    A lane's output is a whole pipeline's (its keys in ``{ns}.{lane}``), so every page can show it. It reads
    nothing itself: the job's sink judges each batch's aggregate against the lane's own watermark
    (``streaming.spark.sink.LaneSink``), so a lane adds no read of the input."""

    name: str
    mode: str = "global"
    policy: str = "min"
    idle: bool = False
    description: str = ""
    namespace: str = ""
    """Where its output goes: ``{parent}.{name}``; empty in the catalogue (:meth:`under` fills it)."""
    input_namespace: str = ""
    """The namespace whose input stream it reads: its parent's."""
    idle_timeout_ms: int | None = None
    """With ``idle``: how long a server is silent before the job's markers stop it holding the watermark (the
    job's ``IDLE_TIMEOUT``, as it registered the lane: pages show the job's, never their own)."""

    @classmethod
    def main(cls, namespace: str) -> Lane:
        """The configured pipeline, as the dashboard shows it beside its lanes."""
        return cls(name=MAIN, namespace=namespace, input_namespace=namespace)

    def under(self, parent: Config) -> Lane:
        """This catalogue entry as a lane of ``parent``."""
        return msgspec.structs.replace(self, namespace=lane_namespace(parent.namespace, self.name),
                                       input_namespace=parent.input_namespace or parent.namespace,
                                       idle_timeout_ms=(parent.idle_timeout_ms or DEFAULT_IDLE_TIMEOUT_MS)
                                       if self.idle else None)

    def config(self, parent: Config) -> Config:
        """``parent``'s configuration with this lane's watermark strategy, namespace and checkpoint."""
        idle = (parent.idle_timeout_ms or DEFAULT_IDLE_TIMEOUT_MS) if self.idle else None
        placed = self.under(parent)
        return parent.with_(
            namespace=placed.namespace,
            checkpoint_dir=f"{parent.checkpoint_dir.rstrip('/')}.{self.name}",
            input_namespace=placed.input_namespace,
            watermark_mode=self.mode, watermark_policy=self.policy, idle_timeout_ms=idle, lanes=(),
        )

    @property
    def label(self) -> str:
        return "configured pipeline" if self.name == MAIN else self.name


MAIN = "main"

LANES: dict[str, Lane] = {s.name: s for s in (
    Lane(name="global", mode="global", policy="min", description="one watermark over all servers"),
    Lane(name="per-server-min", mode="per-server", policy="min",
         description="each server its own watermark, combined by min: the slowest or an idle server holds windows "
                     "open"),
    Lane(name="per-server-min-idle", mode="per-server", policy="min", idle=True,
         description="per-server min, and a server silent for IDLE_TIMEOUT stops holding the watermark back"),
    Lane(name="per-server-max", mode="per-server", policy="max",
         description="per-server max: the fastest server drives the watermark, a slow server's data is dropped"),
)}
"""The lanes ``LAB_LANES`` may name."""


def lane_namespace(parent: str, lane: str) -> str:
    return f"{parent}.{lane}"


def lane_config(parent: Config, lane: str) -> Config:
    """The parent's configuration for its lane named ``lane``."""
    return LANES[lane].config(parent)


_TOKEN = re.compile(r"^[\x21-\x7e]+$")
"""A bearer token as a header carries it: printable ASCII without spaces."""


MIN_TOKEN = 32
"""The shortest token ``POST /annotations`` accepts: guessing 32 random characters is out of reach."""


def annotations_token(env: Mapping[str, str]) -> str | None:
    """The token ``POST /annotations`` asks for: ``ANNOTATIONS_TOKEN``, or the content of the file
    ``ANNOTATIONS_TOKEN_FILE`` names (a Kubernetes secret mounted as a file); None when neither is set. Not a
    field of :class:`Config`: only ``wm-monitor`` and ``wm-annotate`` read it, so no other process reads the file
    or holds the secret."""
    given = (env.get("ANNOTATIONS_TOKEN") or "").strip()
    path = (env.get("ANNOTATIONS_TOKEN_FILE") or "").strip()
    _check(not (given and path), "ANNOTATIONS_TOKEN_FILE", "and ANNOTATIONS_TOKEN are both set; set one")
    var, token = "ANNOTATIONS_TOKEN", given
    if path:
        var = "ANNOTATIONS_TOKEN_FILE"
        try:
            with open(path, encoding="utf-8") as f:
                token = f.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{var}={path!r} cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
        _check(bool(token), var, f"{path!r} is empty")
    if not token:
        return None
    _check(bool(_TOKEN.match(token)), var, "must be printable ASCII without spaces (an HTTP header carries it)")
    _check(len(token) >= MIN_TOKEN, var, f"is {len(token)} characters: at least {MIN_TOKEN} are needed (e.g. "
           "`openssl rand -hex 24`)")
    return token


def _redis_url(env: Mapping[str, str]) -> str:
    """``REDIS_URL``; with ``REDIS_SENTINELS`` and ``REDIS_SENTINEL_MASTER`` the ``redis+sentinel://`` URL they name
    (:mod:`watermark_client.sentinel`), ``REDIS_URL`` then giving only its credentials, database, TLS and options.
    Empty: neither is set (the embedded Redis)."""
    url = env.get("REDIS_URL", "").strip()
    sentinels = env.get("REDIS_SENTINELS", "").strip()
    master = env.get("REDIS_SENTINEL_MASTER", "").strip()
    if not sentinels:
        _check(not master, "REDIS_SENTINEL_MASTER", "is set without REDIS_SENTINELS (the Sentinels to ask for it)")
        return url
    _check(bool(master), "REDIS_SENTINEL_MASTER",
           "must be set with REDIS_SENTINELS: the name the Sentinels monitor the primary under")
    _check(not is_sentinel(url), "REDIS_SENTINELS",
           "and a redis+sentinel:// REDIS_URL are both set; set one")
    try:
        return sentinel_url(sentinels, master, url or None)
    except ValueError as exc:
        if url and str(exc).startswith("must be"):
            raise ConfigError(f"REDIS_URL {redact_url(url)!r} {exc}") from None
        raise ConfigError(f"REDIS_SENTINELS={sentinels!r}: {exc}") from None


SECRET_OPTIONS = ("password", "sentinel_password")
"""URL options that hold a password (``redis://h?password=...``, :mod:`watermark_client.sentinel`)."""


def redact_url(url: str) -> str:
    """The URL with any password replaced (the user's, and any in its options), safe for logs and the dashboard.
    Takes every form ``REDIS_URL`` does, a ``redis+sentinel://`` URL's list of Sentinels included."""
    parts = urlsplit(url)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    secret_user = bool(at) and ":" in userinfo
    options = parse_qsl(parts.query, keep_blank_values=True)
    if not secret_user and not any(k in SECRET_OPTIONS for k, _ in options):
        return url
    if secret_user:
        parts = parts._replace(netloc=f"{userinfo.partition(':')[0]}:***@{hosts}")
    query = [(k, "***" if k in SECRET_OPTIONS else v) for k, v in options]
    return parts._replace(query=urlencode(query, safe="*")).geturl()


def is_loopback(address: str) -> bool:
    """Whether only this machine can connect to a server bound to ``address``: 127.0.0.0/8, ``::1`` or
    ``localhost``. Any other name, and the empty address (every interface), is taken as beyond loopback."""
    host = address.strip().strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def shown_url(url: str) -> str:
    """A receiver's address as pages and logs show it: scheme, host and port only. Its user, password, query and
    path are left out: chat integrations keep their token in the path (``/services/T000/B000/XXXX``).

    >>> shown_url("https://u:pw@hooks.example.com:8443/services/T0/B0/secret?token=x")
    'https://hooks.example.com:8443/…'
    >>> shown_url("http://alertmanager:9093"), shown_url("")
    ('http://alertmanager:9093', '')
    """
    if not url:
        return ""
    u = urlsplit(url)
    try:
        port = f":{u.port}" if u.port else ""
    except ValueError:
        port = ""
    hidden = "/…" if u.path not in ("", "/") or u.query else ""
    return f"{u.scheme}://{u.hostname or ''}{port}{hidden}"


def hidden_url(url: str) -> str:
    """``url`` as given, for an error about the URL itself: its password, path and query replaced by ``…``, the
    rest (scheme, user, host, port, right or wrong) kept.

    >>> hidden_url("http://alice:pw@h:abc/hook/T0?token=x"), hidden_url("h:9")
    ('http://alice:…@h:abc/…?…', 'h:/…')
    """
    parts = urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    user = (userinfo.partition(":")[0] + (":…" if ":" in userinfo else "") + "@") if at else ""
    path = "/…" if parts.path not in ("", "/") else parts.path
    return urlunsplit((parts.scheme, user + hostport, path, "…" if parts.query else "", ""))


def scrub_url(text: str, url: str) -> str:
    """``text`` (an error about ``url``) without what :func:`shown_url` leaves out of ``url``: the URL whole, its
    user and password, its path and its query, each replaced by ``…`` wherever it shows (an error may quote the
    address, or a part of it it could not parse).

    >>> scrub_url("InvalidURL: nonnumeric port: 's3cret@127.0.0.1'", "http://alice:s3cret@127.0.0.1/hook/T0/x")
    "InvalidURL: nonnumeric port: '…@127.0.0.1'"
    >>> scrub_url("HTTP 500 <urlopen error for /hook/T0/x?token=abc>", "http://h/hook/T0/x?token=abc")
    'HTTP 500 <urlopen error for …?…>'
    """
    if not url:
        return text
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    secrets = {url, userinfo, userinfo.partition(":")[2], parts.query}
    if parts.path not in ("", "/"):
        secrets.add(parts.path)
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, "…")
    return text


def _check(ok: bool, var: str, message: str) -> None:
    if not ok:
        raise ConfigError(f"{var} {message}")


def _duration(env: Mapping[str, str], var: str, default: int) -> int:
    raw = env.get(var)
    if raw is None or raw.strip() == "":
        return default
    try:
        return parse_duration_ms(raw)
    except ValueError as exc:
        raise ConfigError(f"{var}={raw!r} is not a duration: {exc}") from None


def _optional_duration(env: Mapping[str, str], var: str, default: int | None) -> int | None:
    """A duration, or ``off`` to switch the check off."""
    raw = (env.get(var) or "").strip()
    if raw.lower() == "off":
        return None
    return _duration(env, var, default) if raw else default  # type: ignore[arg-type]


def _switch(env: Mapping[str, str], var: str, default: bool) -> bool:
    """``on`` or ``off`` (any case); unset or empty: ``default``."""
    raw = (env.get(var) or "").strip()
    if not raw:
        return default
    if raw.lower() not in ("on", "off"):
        raise ConfigError(f"{var}={raw!r} must be on or off")
    return raw.lower() == "on"


def _name_set(env: Mapping[str, str], var: str) -> frozenset[str] | None:
    raw = (env.get(var) or "").strip()
    if not raw:
        return None
    names = frozenset(n.strip() for n in raw.split(","))
    if "" in names:
        raise ConfigError(f"{var}={raw!r} has an empty name; use a comma-separated list like A,B,C")
    return names


def _lane_list(env: Mapping[str, str], var: str) -> tuple[str, ...]:
    raw = (env.get(var) or "").strip()
    names = tuple(n.strip() for n in raw.split(",") if n.strip()) if raw else ()
    unknown = [n for n in names if n not in LANES]
    if unknown:
        raise ConfigError(f"{var}={raw!r}: unknown lane {', '.join(unknown)}; choose from {', '.join(LANES)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"{var}={raw!r} names a lane twice")
    return names


def _port(env: Mapping[str, str], var: str) -> int | None:
    """A port number (0-65535); unset or empty: None."""
    raw = (env.get(var) or "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) > 65_535:
        raise ConfigError(f"{var}={raw!r} is not a port number (0-65535)")
    return int(raw)


def _positive(env: Mapping[str, str], var: str) -> int | None:
    """A positive integer; unset or empty: None."""
    raw = (env.get(var) or "").strip()
    if not raw:
        return None
    value = _int(env, var, 0)
    _check(value > 0, var, f"({value}) must be positive")
    return value


def _float(env: Mapping[str, str], var: str, default: float) -> float:
    raw = (env.get(var) or "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{var}={raw!r} is not a number") from None


def _int(env: Mapping[str, str], var: str, default: int) -> int:
    raw = env.get(var)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{var}={raw!r} is not an integer") from None
