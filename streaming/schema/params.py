"""How a namespace is built (:class:`Params`), and the one function that builds it from the configuration.

:class:`Params` has no defaults: every field comes from a :class:`Config` through :func:`params_for`, so one place
(``streaming.schema.config``) says what a setting is when unset, and the job, the ``wm-online`` groups, the
commands and the tests all build a namespace's parameters the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from streaming.schema.config import Config
from streaming.schema.keys import KeySchema
from streaming.schema.records import StateParams

FIXED = ("window_ms", "slide_ms", "mode", "policy")
"""The settings a namespace keeps for good (:meth:`Params.fixed_changes`)."""
STREAM_KEEP_MS = 600_000
"""Committed input the trim keeps to look back at, in arrival time (within ``stream_keep_entries``). Not a setting:
``STREAM_KEEP_ENTRIES`` is the bound an operator sets; this only stops a slow stream keeping days of input."""


@dataclass(frozen=True)
class Params:
    """How a namespace is built. Window, slide and watermark mode must not change on restart; the delay may
    (the presenter's lever): every batch record keeps the delay it ran with. Built by :func:`params_for` only."""

    window_ms: int
    slide_ms: int
    delay_ms: int
    retention_ms: int
    progress_history: int
    progress_bytes: int  # ... and at most about this many bytes of them
    stream_keep_ms: int
    stream_keep_entries: int  # ... and about this many entries at most
    ttl_ms: int | None  # key TTL; None: retention_ms
    trigger_ms: int  # not semantic: the dashboard judges batch health against it
    mode: str  # or "per-server": one watermarked input per server in `servers`
    policy: str  # per-server: Spark's multipleWatermarkPolicy
    servers: tuple[str, ...]
    idle_timeout_ms: int | None  # per-server: idle markers move a silent server's watermark
    trims: bool  # a lab lane reads its parent's input and leaves trimming to it
    readers: tuple[str, ...]  # state hashes of everything else that commits from our input (lanes, online
    # view): their ``committed_id`` holds the trim back, so nothing one of them still needs is trimmed
    late_keep: int  # late events kept in ``{ns}:late`` (streaming.rules.late), all shards'
    shards: int  # input streams (streaming.schema.shards): each has its own late and dead stream
    history_days: int  # whole days each minute of players online is kept after its own
    retire_after_ms: int  # a server silent this long with no player kept is forgotten
    new_servers_per_minute: int  # the flood guard (streaming.rules.fleet.admit); 0: none
    wait_replicas: int
    """A commit is done once this many replicas have acknowledged it (``WAIT``, ``REDIS_WAIT_REPLICAS``; decision
    0023); 0: at once."""
    wait_timeout_ms: int
    """How long a commit waits for them (``REDIS_WAIT_TIMEOUT``) before it fails
    (:class:`redis_conn.ReplicasBehind`)."""
    players_lanes: tuple[str, ...] | None
    """The windows' players' sets (decision 0019): a tuple when this namespace's partitions count them (the pipeline),
    holding the state hashes of the lanes that read the same counts: the slowest of them and the pipeline decides
    when a set and a batch's count go. None for a lane: it only adds the counts to its windows."""

    @property
    def ttl_s(self) -> int:
        return max(1, (self.ttl_ms or self.retention_ms) // 1000)

    def records_kept(self, record_bytes: int) -> int:
        """How many batch records a query keeps: ``PROGRESS_HISTORY``, fewer when they would take more than
        ``PROGRESS_BYTES`` at the newest record's size (at least 10)."""
        return max(10, min(self.progress_history, self.progress_bytes // max(1, record_bytes)))

    def fixed_changes(self, built: StateParams) -> dict[str, tuple[object, object]]:
        """What differs between how a namespace was ``built`` and these params among the settings that never
        change on restart (window, slide, watermark mode and policy: the numbers would mix); the delay may."""
        new = self.semantic()
        return {k: (getattr(built, k), getattr(new, k)) for k in FIXED if getattr(built, k) != getattr(new, k)}

    def semantic(self) -> StateParams:
        return StateParams(window_ms=self.window_ms, slide_ms=self.slide_ms, delay_ms=self.delay_ms, mode=self.mode,
                           policy=self.policy)

    @property
    def per_server(self) -> bool:
        return self.mode == "per-server"

    @property
    def late_keep_per_shard(self) -> int:
        """Each shard's late stream keeps its share of ``late_keep`` (rounded up): the bound stays about
        ``late_keep`` however many shards there are."""
        return -(-self.late_keep // self.shards)


def params_for(cfg: Config) -> Params:
    """The build parameters of the namespace ``cfg`` configures: the configured pipeline's (``Config.from_env``) or
    a lab lane's. The lane is its own Config, one of the pipeline's ``cfg.lane_configs()``: its ``input_namespace``
    is set (it reads its parent's input), which is all that makes it a lane here; a lane name alone would not say
    the parent's settings it inherits. Called wherever a sink, a ``wm-online`` group or a command needs them: the
    job's start (each namespace's ``check_params``), the sinks, ``wm-online`` and ``wm-control``.

    Most fields are one setting each. The rest are derived here, each for its reason:

    - ``stream_keep_ms``: not a setting (:data:`STREAM_KEEP_MS`); ``STREAM_KEEP_ENTRIES`` is the operator's bound.
    - ``servers``: per-server mode's inputs are the ``KNOWN_SERVERS`` (sorted: one input order every run).
    - ``trims``, ``readers``: only the pipeline trims its input, held back by every other reader of it
      (:func:`readers_of`); a lane reads its parent's input and trims nothing.
    - ``new_servers_per_minute``: the flood guard runs in the pipeline only; a lane reads the batch its guard left.
    - ``players_lanes``: the pipeline counts the windows' players for itself and its lanes; a lane only adds them.
    """
    lane = cfg.input_namespace is not None
    return Params(window_ms=cfg.window_ms, slide_ms=cfg.slide_ms, delay_ms=cfg.delay_ms,
                  retention_ms=cfg.retention_ms, progress_history=cfg.progress_history,
                  progress_bytes=cfg.progress_mb * 2**20, stream_keep_ms=STREAM_KEEP_MS,
                  stream_keep_entries=cfg.stream_keep_entries, ttl_ms=cfg.key_ttl_ms, trigger_ms=cfg.trigger_ms,
                  mode=cfg.watermark_mode, policy=cfg.watermark_policy,
                  servers=tuple(sorted(cfg.known_servers or ())) if cfg.watermark_mode == "per-server" else (),
                  idle_timeout_ms=cfg.idle_timeout_ms, trims=not lane, readers=readers_of(cfg),
                  late_keep=cfg.late_events_keep, shards=cfg.stream_shards, history_days=cfg.history_days,
                  retire_after_ms=cfg.retire_after_ms,
                  new_servers_per_minute=0 if lane else cfg.new_servers_per_minute,
                  wait_replicas=cfg.wait_replicas, wait_timeout_ms=cfg.wait_timeout_ms,
                  players_lanes=None if lane else tuple(KeySchema(c.namespace).state for c in cfg.lane_configs()))


def readers_of(cfg: Config) -> tuple[str, ...]:
    """The state hashes whose ``committed_id`` holds back the trim of the input: each lab lane's and the
    online view's (:func:`online_reader`). They commit after the pipeline (in the job on a thread of their own,
    while the next batch runs); a reader held back (a failing commit, a crash before it committed) keeps the
    entries it still needs, which is what lets the next run catch it up
    (:meth:`streaming.spark.recovery.Recovery.catch_up`)."""
    if cfg.input_namespace is not None:
        return ()  # a lane trims nothing
    return (*(KeySchema(c.namespace).state for c in cfg.lane_configs()),
            online_reader(KeySchema(cfg.namespace), cfg.online_groups))


def online_reader(keys: KeySchema, groups: int) -> str:
    """The hash whose ``last_batch`` and ``committed_id`` say how far the online view has taken the input: its own
    state, or with groups (decision 0020) its hand-off's (the groups read no input: the job hands it over)."""
    return keys.handoff_guard if groups else keys.online_state


class ParamsMismatch(RuntimeError):
    """The namespace in Redis was built with other parameters than the job's
    (``streaming.store.commit.check_params``)."""
