"""Typed records that go through Redis from one process to another, each defined once with its encoder and
decoder (msgspec). A malformed record read back raises :class:`RecordError` naming the record and what is wrong
with it, where it is read, never a ``KeyError`` three calls later.

* :class:`BatchRecord`: the pipeline's record of one batch, ``{ns}:batch:{id}`` field ``sink``, written by the
  sink's commit (``streaming.store.commit``) and read by the dashboard, the Events page and the reports.
* :class:`CommitEntry`: one entry of ``{ns}:commits`` (and ``{ns}:online:commits``): the batch and the last
  input entry it covered.
* :class:`DeadEntry`: one entry of ``{ns}:dead``, a quarantined input entry (same ID) with its reason.
* :class:`OnlineRecord`: the online view's record of one batch, a member of ``{ns}:online:history``.
* a lab lane the job runs, a field of ``{ns}:lanes``: :class:`streaming.schema.config.Lane`.
* :class:`StateRecord`: a pipeline's commit record, the hash ``{ns}:state`` (with :class:`StateParams`), written
  by its commit (``streaming.store.commit``) and by the job when it stops; read by the commits, the sink's lanes,
  the dashboard and the reports.
* :class:`OnlineStateRecord`: the online view's commit record, the hash ``{ns}:online:state``.
* :class:`Annotation`: a deploy, maintenance or incident someone marked (``wm-annotate``, ``POST /annotations``),
  a member of ``{ns}:annotations``, drawn over every time chart.
* :class:`Control` and :class:`GeneratorStatus`: the lab's request (``{ns}:control``) and what the following
  generator applied (``{ns}:generator``), hashes a field per value (``streaming.store.control_store``).

Fields added after the first release have defaults, so records written by an older job still read back. The two
state records stay hashes, a field per attribute (``to_hash``, ``from_hash``): a commit reads back only the
fields it needs, and the job writes ``stopped_ms`` alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Self, TypeVar

import msgspec
import numpy as np

from streaming.schema.config import ConfigError
from streaming.schema.keys import parse_total_field, total_field
from watermark_client.events import bad_name


class RecordError(ValueError):
    """A record read back from Redis is not what its type says."""


class _JsonRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A record kept as one JSON value (a stream field, a sorted set's member, a hash field)."""

    def encode(self) -> bytes:
        return _ENCODER.encode(self)

    @classmethod
    def decode(cls, raw: bytes | str, where: str) -> Self:
        """``raw`` as this record, or :class:`RecordError` naming ``where`` and what is wrong."""
        return decode_json(raw, cls, where)


class LagRecord(msgspec.Struct, frozen=True):
    """p50, p95 and max of a lag, milliseconds."""

    p50: float
    p95: float
    max: float

    @classmethod
    def from_histogram(cls, values_us: Sequence[int], counts: Sequence[int]) -> LagRecord:
        """Exact figures of ``values_us[i]`` seen ``counts[i]`` times (ascending, distinct).

        Percentiles interpolate as Spark's exact ``percentile`` does: position
        ``p * (n - 1)`` between the values either side. A histogram is what the
        sink's one aggregation can produce, and it loses nothing."""
        if not len(values_us) or len(values_us) != len(counts):
            raise ValueError("a lag histogram needs as many counts as values, and at least one")
        values, n = np.asarray(values_us, np.int64), np.asarray(counts, np.int64)
        return cls.from_histograms(values, n, np.zeros(1, np.int64))[0]

    @classmethod
    def from_histograms(cls, values_us: np.ndarray, counts: np.ndarray, starts: np.ndarray) -> list[LagRecord]:
        """:meth:`from_histogram` of many histograms laid end to end, the ``i``-th from ``starts[i]`` to the next
        start (each ascending and distinct, none empty), in one array pass: 300 servers' lags a batch, twice."""
        cum = np.cumsum(counts)
        ends = np.append(starts[1:], len(counts)) - 1
        base = cum[starts] - counts[starts]  # the ranks before each histogram
        last = cum[ends] - base - 1  # each one's highest rank

        def at(rank: np.ndarray) -> np.ndarray:  # the value holding that rank of each histogram
            return np.asarray(values_us[np.searchsorted(cum, base + rank, side="right")])

        def percentile(p: float) -> np.ndarray:
            pos = p * last
            lo, hi = np.floor(pos).astype(np.int64), np.ceil(pos).astype(np.int64)
            v_lo, v_hi = at(lo), at(hi)
            between = ((hi - pos) * v_lo + (pos - lo) * v_hi) / 1000
            return np.where(lo == hi, v_lo / 1000, between)

        p50, p95, top = percentile(0.5).tolist(), percentile(0.95).tolist(), (values_us[ends] / 1000).tolist()
        return [cls(a, b, c) for a, b, c in zip(p50, p95, top, strict=True)]


class ServerRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One server's figures in a batch: built by the sink (``streaming.spark.local_agg.BatchTable``), committed in
    the batch record, and read back as they are by the dashboard."""

    rows: int = 0
    events: int = 0
    dropped: int = 0
    late: int = 0
    min_event_us: int | None = None
    max_event_us: int | None = None
    ingest_lag_ms: LagRecord | None = None
    processing_lag_ms: LagRecord | None = None
    ticks: int = 0
    """Idle markers (never events)."""
    max_tick_us: int | None = None
    max_ingest_us: int | None = None
    """Of real events: when the server was last heard from."""

    def input_max_us(self, idle: bool) -> int | None:
        """The newest event time this server's own input saw (per-server mode): its events, and its idle
        markers where idleness is on."""
        return max((v for v in (self.max_event_us, self.max_tick_us if idle else None) if v is not None),
                   default=None)

    def worse_lag_p95(self) -> tuple[str, float] | None:
        """The lag that matters most for this server: the worse p95 of ingest and processing (ms), and which it is
        (``ingest`` on a tie); None when the batch measured neither."""
        il, pl = self.ingest_lag_ms, self.processing_lag_ms
        if pl is not None and (il is None or pl.p95 > il.p95):
            return "processing", pl.p95
        return ("ingest", il.p95) if il is not None else None


class NameGuardRecord(_JsonRecord, frozen=True, kw_only=True):
    """The flood guard's minute (``streaming.rules.fleet.admit``), in the pipeline's ``{ns}:state`` field
    ``name_guard``: how many new server names the job's current minute admitted and refused, and its last burst."""

    minute_ms: int = 0
    """The minute of the job's clock (batch trigger time) the counts are for."""
    admitted: int = 0
    refused: int = 0
    burst_minute_ms: int | None = None
    """The last minute that refused a name (None: none ever)."""
    burst_names: int = 0
    burst_events: int = 0
    burst_sample: tuple[str, ...] = ()
    """A few of that minute's refused names, the busiest first."""
    limit: int = 0
    """NEW_SERVERS_PER_MINUTE when the burst was judged."""


class BatchRecord(_JsonRecord, frozen=True, kw_only=True):
    """What one batch did, deterministic (a batch run again writes the same record)."""

    batch: int
    watermark_ms: int
    """The watermark in force for the batch (Spark's ``batchWatermarkMs``)."""
    next_watermark_ms: int
    delay_ms: int | None = None
    server_watermarks: dict[str, int] | None = None
    ticks: int = 0
    batch_ts_ms: int
    start_id: str
    end_id: str
    input: int
    parsed: int
    quarantined: int
    events: int
    dropped: int
    late: int
    min_event_us: int | None = None
    max_event_us: int | None = None
    running_max_event_us: int | None = None
    servers: dict[str, ServerRecord] = {}
    bad: dict[str, int] = {}
    aggregation: str = "driver"
    refused: tuple[str, ...] = ()
    """New server names the flood guard refused in this batch (their events are in ``bad`` as ``name_flood``):
    a batch read again for a follower refuses the same names."""

    @classmethod
    def from_dict(cls, doc: Mapping[str, object], where: str) -> BatchRecord:
        try:
            return msgspec.convert(doc, type=cls)
        except msgspec.ValidationError as exc:
            raise RecordError(f"{where} is not a batch record: {exc}") from None


class CommitEntry(msgspec.Struct, frozen=True):
    """An entry of a commits stream: ``batch`` committed the input up to ``end_id``."""

    batch: int
    end_id: str

    def fields(self) -> dict[str, str]:
        return {"batch": str(self.batch), "end_id": self.end_id}

    @classmethod
    def from_fields(cls, fields: Mapping[bytes, bytes], where: str) -> CommitEntry:
        try:
            return cls(int(fields[b"batch"]), fields[b"end_id"].decode())
        except (KeyError, ValueError, UnicodeDecodeError) as exc:
            raise RecordError(f"{where} is not a commit entry: {dict(fields)!r} ({type(exc).__name__}: {exc})") \
                from None


class DeadEntry(msgspec.Struct, frozen=True):
    """A quarantined input entry: why (a stable reason code of ``watermark_client.events``), the detail, the raw
    entry, and the batch that read it."""

    reason: str
    detail: str
    raw: str
    batch: int

    def fields(self) -> dict[str, str]:
        return {"reason": self.reason, "detail": self.detail, "raw": self.raw, "batch": str(self.batch)}

    @classmethod
    def from_fields(cls, fields: Mapping[bytes, bytes], where: str) -> DeadEntry:
        try:
            return cls(fields[b"reason"].decode(), fields[b"detail"].decode(), fields[b"raw"].decode(),
                       int(fields[b"batch"]))
        except (KeyError, ValueError, UnicodeDecodeError) as exc:
            raise RecordError(f"{where} is not a quarantined entry: {dict(fields)!r} ({type(exc).__name__}: "
                              f"{exc})") from None


class OnlineRecord(_JsonRecord, frozen=True, kw_only=True):
    """Players online per server after one batch, and the batch's transitions."""

    batch: int
    watermark_ms: int
    """The watermark the batch's expiries used (the one after it)."""
    in_force_ms: int = 0
    batch_ts_ms: int
    counts: dict[str, int]
    online: int
    """Transitions to online in the batch."""
    offline: int
    causes: dict[str, dict[str, int]] = {}
    """Per server, transitions per cause (login, heartbeat, logout, timeout, ...)."""
    ahead_ms: dict[str, int] = {}
    """Per server whose events ran ahead of their arrival in the batch: by how much at most (ms)."""


class HandoffBatch(_JsonRecord, frozen=True, kw_only=True):
    """One batch handed by the job to the online view's groups (``{ns}:handoff:batches``, decision 0020): what
    their folds need besides the events (``{ns}:handoff:rows:{batch}:{group}``)."""

    batch: int
    groups: int
    """How many groups the job split the batch's events among: a group process configured otherwise refuses."""
    watermark_ms: int
    """The pipeline's watermark in force for the batch."""
    batch_ts_ms: int
    end_id: str
    delay_ms: int
    timeout_ms: int
    next_watermark_ms: int | None = None
    """Per-server pipelines: Spark's combined watermark after the batch, from the sink's model."""
    newest_arrival_ms: int | None = None
    """The whole batch's newest arrival (None: it had no event)."""


class OnlinePart(_JsonRecord, frozen=True, kw_only=True):
    """What one group of servers' fold did to one batch (``{ns}:online:parts:{batch}``, a field per group), until
    the last group's part is in and the parts are merged into the online view's record of the batch
    (``streaming.store.online.merge``). Every group's part carries the batch's own record (the same in each), so
    whoever merges needs nothing else."""

    group: int
    of: HandoffBatch
    """The batch: its id, the pipeline's watermark in force and after it, its arrival, the fold's delay and timeout."""
    counts: dict[str, int]
    """Players online after the batch, per server of the group."""
    causes: dict[str, dict[str, int]] = {}
    came_online: int = 0
    went_offline: int = 0
    ahead_ms: dict[str, int] = {}
    """Per server of the group with events in the batch that ran ahead of their arrival: by how much (ms)."""
    clocks: dict[str, ClockRecord] = {}
    """Each server's clock after the batch."""
    newest_event_us: int | None = None
    """The newest event of the group's share of the batch (None: it had none)."""
    lost: bool = False
    """Redis came back empty while the group's fold still held its players: the group wrote them all again."""
    rebuilt: bool = False
    """Redis came back empty and the fold had no copy either: the group starts from the batch's events."""
    forgotten: tuple[str, ...] = ()
    """Servers of the group the fold forgot with this batch (``streaming.rules.fleet.forgotten``): no player kept,
    silent for RETIRE_AFTER. The view's counts drop them."""
    erased: tuple[str, ...] = ()
    """Those of them an operator asked to forget (``{ns}:forget``, a test server): the merge erases their own
    history too, peaks and per-minute series."""


ANNOTATION_KINDS = ("deploy", "maintenance", "incident", "note")


class Annotation(_JsonRecord, frozen=True, kw_only=True):
    """Something that happened to the game, marked by a person or a pipeline: a range (or a moment) of wall time,
    for every region or one."""

    id: str
    text: str
    kind: str = "note"
    """One of :data:`ANNOTATION_KINDS`."""
    start_ms: int
    end_ms: int | None = None
    """None: a moment (a deploy), drawn as a line."""
    region: str | None = None
    """None: every region."""
    created_ms: int

    def __post_init__(self) -> None:
        if not self.text.strip() or len(self.text) > 200:
            raise msgspec.ValidationError("text must be 1-200 characters")
        if self.kind not in ANNOTATION_KINDS:
            raise msgspec.ValidationError(f"kind {self.kind!r} must be one of {', '.join(ANNOTATION_KINDS)}")
        if self.end_ms is not None and self.end_ms < self.start_ms:
            raise msgspec.ValidationError("end must not be before start")
        if self.region is not None and (why := bad_name("region", self.region)) is not None:
            raise msgspec.ValidationError(why)  # a region as events may name one: 64 characters, nothing invisible
        if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in self.text):
            raise msgspec.ValidationError("text must be one line without control characters")

    @property
    def until_ms(self) -> int:
        return self.start_ms if self.end_ms is None else self.end_ms


class _HashRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A record kept as a Redis hash, one field per attribute, each value its text: an integer in decimal and
    ``None`` as the empty string (what the commits have always written), so a partial ``HMGET`` reads back as
    a record whose other attributes keep their defaults."""

    def to_hash(self, *only: str) -> dict[str, str]:
        """The hash fields, or only those named (the job writes ``stopped_ms`` alone)."""
        out = self._fields()
        return {f: v for f, v in out.items() if f in only} if only else out

    def _fields(self) -> dict[str, str]:
        return {f: _text(getattr(self, f)) for f in self.__struct_fields__}

    @classmethod
    def from_hash(cls, mapping: Mapping[Any, Any], where: str) -> Self:
        """The record of a hash as Redis returns it (bytes or text); a field that is missing, ``None`` (from an
        ``HMGET``) or empty keeps its default. Raises :class:`RecordError` naming the field that is not what the
        type says."""
        fields = {_str(k): _str(v) for k, v in mapping.items() if v is not None and v not in ("", b"")}
        try:
            return msgspec.convert(cls._doc(fields, where), type=cls, strict=False)  # strict=False: "5" -> 5
        except msgspec.ValidationError as exc:
            raise RecordError(f"{where} is not a {cls.__name__}: {exc}") from None

    @classmethod
    def _doc(cls, fields: dict[str, str], where: str) -> dict[str, object]:
        return {f: v for f, v in fields.items() if f in cls.__struct_fields__}


class StateParams(msgspec.Struct, frozen=True, kw_only=True):
    """How a namespace was built (``params`` of ``{ns}:state``): window, slide and watermark mode never change
    on restart (``streaming.store.commit.check_params``); the delay may. ``None``: not recorded (a namespace
    older than the field)."""

    window_ms: int | None = None
    slide_ms: int | None = None
    delay_ms: int | None = None
    mode: str = "global"
    policy: str = "min"

    def to_json(self) -> str:
        # json.dumps with sorted keys, not msgspec: the text the commits have always written.
        return json.dumps({k: v for k, v in msgspec.structs.asdict(self).items() if v is not None}, sort_keys=True)


NONE_CLOSED_MS = -(2**62)
"""``sets_closed_below_ms`` when no window is closed yet: events may be from before 1970 (exact as a Lua number)."""


class StateRecord(_HashRecord, frozen=True, kw_only=True):
    """A pipeline's commit record, ``{ns}:state``: what the last committed batch left and how the namespace is
    built. ``last_batch`` is the commit guard (``None``: nothing committed yet)."""

    last_batch: int | None = None
    watermark_ms: int = 0
    """In force for ``last_batch``."""
    next_watermark_ms: int = 0
    """In force for the next batch: windows ending at or below it are final."""
    max_event_us: int | None = None
    """The running max event time."""
    server_max_event_us: dict[str, int] = {}
    """Per-server mode: each server's input max so far, fields ``max_event_us|S``."""
    server_watermarks: dict[str, int] | None = None
    """Per-server mode: Spark's per-input watermark map after ``last_batch`` (JSON; not written otherwise)."""
    server_heard_ms: dict[str, int] | None = None
    """A lane following the fleet (no KNOWN_SERVERS): when each server in ``server_watermarks`` last sent a real
    event, by its batch's trigger time (JSON); a server retired by it leaves the map (``rules.watermarks``)."""
    delay_ms: int | None = None
    """The delay ``last_batch`` ran with."""
    committed_id: str = "0-0"
    """The last input entry committed."""
    lost_at_batch: int | None = None
    """Redis came back empty before this batch: totals and windows open then are partial."""
    lost_from_batch: int | None = None
    """The first of the batches whose commits Redis lost while keeping older ones (a failover to a replica that did
    not have them; decision 0023), found when a later batch was committed and not rebuilt: their events are missing.
    The latest such run is kept."""
    lost_to_batch: int | None = None
    """... and the last of them (the batch after it committed on top)."""
    stopped_ms: int | None = None
    """The job was stopped on request then, after ``last_batch``; the next commit clears it."""
    sets_closed_below_ms: int = NONE_CLOSED_MS
    """The pipeline's: windows ending at or below this are closed for it and for every lane, their players' sets
    gone (decision 0019); the partitions add no player to such a window. A lane's stays where it was."""
    params: StateParams | None = None
    trigger_ms: int = 1_000
    updated_ms: int = 0
    """When ``last_batch`` was committed."""
    name_guard: NameGuardRecord | None = None
    """The flood guard's minute (JSON; None when writing: the field is left as it was)."""

    def _fields(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for f in self.__struct_fields__:
            value = getattr(self, f)
            if f == "server_max_event_us":
                out.update({total_field(_SERVER_MAX, s): str(v) for s, v in value.items()})
            elif f in ("server_watermarks", "server_heard_ms"):
                if value is not None:  # a global pipeline has never written the field
                    out[f] = json.dumps(value, sort_keys=True)
            elif f in ("lost_from_batch", "lost_to_batch"):
                if value is not None:  # written once commits were lost, and kept: never written otherwise
                    out[f] = str(value)
            elif f == "params":
                out[f] = "" if value is None else value.to_json()
            elif f == "name_guard":
                if value is not None:
                    out[f] = value.encode().decode()
            else:
                out[f] = _text(value)
        return out

    @classmethod
    def _doc(cls, fields: dict[str, str], where: str) -> dict[str, object]:
        doc: dict[str, object] = {}
        per_server: dict[str, str] = {}
        for f, v in fields.items():
            metric, server = parse_total_field(f)
            if server is not None:
                if metric == _SERVER_MAX:
                    per_server[server] = v
            elif f in ("params", "server_watermarks", "server_heard_ms", "name_guard"):
                doc[f] = _json_field(v, f, cls.__name__, where)
            elif f in cls.__struct_fields__ and f != "server_max_event_us":
                doc[f] = v
        return {**doc, "server_max_event_us": per_server}


_SERVER_MAX = "max_event_us"


class ClockRecord(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    """One server's clock for the online view (``streaming.rules.server_clock``): its watermark in force for the
    next batch (ms), its clock (us), when its newest event arrived (Redis' clock, ms) and its clock then (us)."""

    watermark_ms: int
    clock_us: int
    heard_ms: int
    clock_at_heard_us: int
    ahead_ms: int = 0
    """How far its events ran ahead of their arrival in the last batch that had any (0: not ahead)."""
    behind_since_ms: int = 0
    """Arrival time since which every batch of its events has been far behind its clock (0: not behind)."""
    drained_ms: int = 0
    """The arrival of its newest event when that event's batch left it with no player online: its players all
    logged out before it fell silent (``streaming.rules.fleet``); 0 while it has players, or lost them otherwise."""


class OnlineStateRecord(_HashRecord, frozen=True, kw_only=True):
    """The online view's commit record, ``{ns}:online:state``. ``last_batch`` is its own commit guard
    (``None``: nothing committed yet)."""

    last_batch: int | None = None
    watermark_ms: int = 0
    """The watermark the batch's expiries used (the one after it)."""
    in_force_ms: int = 0
    batch_ts_ms: int = 0
    timeout_ms: int = 0
    updated_ms: int = 0
    max_event_us: int | None = None
    committed_id: str = "0-0"
    lost_at_batch: int | None = None
    """Redis came back empty before this batch: the history before it is gone."""
    minute: str | None = None
    """The open minute as JSON, read by ``streaming.rules.online.rollup.Minute`` (a rule: this floor cannot
    name it)."""
    partial_until_ms: int | None = None
    """Rebuilt from new events after a loss: whole once the watermark passes this."""
    clocks: dict[str, ClockRecord] = {}
    """Each server's clock and watermark for the online view (JSON; absent before per-server clocks)."""

    def _fields(self) -> dict[str, str]:
        out = {f: _text(getattr(self, f)) for f in self.__struct_fields__ if f != "clocks"}
        out["clocks"] = _ENCODER.encode(self.clocks).decode()
        return out

    @classmethod
    def _doc(cls, fields: dict[str, str], where: str) -> dict[str, object]:
        doc: dict[str, object] = {f: v for f, v in fields.items() if f in cls.__struct_fields__}
        if "clocks" in doc:
            doc["clocks"] = _json_field(str(doc["clocks"]), "clocks", cls.__name__, where)
        return doc


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _str(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _json_field(raw: str, name: str, record: str, where: str) -> object:
    try:
        return json.loads(raw)
    except ValueError:
        raise RecordError(f"{where} is not a {record}: `{name}` is not JSON: {raw!r}") from None


_ENCODER = msgspec.json.Encoder()


T = TypeVar("T")


def decode_json(raw: bytes | str, kind: type[T], where: str) -> T:
    """``raw`` as a ``kind``, or :class:`RecordError` naming ``where`` and what is wrong."""
    try:
        return msgspec.json.decode(raw, type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise RecordError(f"{where} is not a {kind.__name__}: {exc}") from None


# --------------------------------------------------------------------------- the lab's control plane
# ``{ns}:control`` (what the presenter asks for) and ``{ns}:generator`` (what the following generator applied),
# hashes written and read by streaming.store.control_store; a bad value raises ConfigError naming the field.

RUNNING = "running"
STOPPED = "stopped"


def _hash_fields(raw: Mapping[Any, Any]) -> dict[str, str]:
    return {_str(k): _str(v) for k, v in raw.items()}


def _hash_int(fields: Mapping[str, str], name: str, where: str) -> int | None:
    if name not in fields:
        return None
    try:
        return int(fields[name])
    except ValueError:
        raise ConfigError(f"{where} field {name}={fields[name]!r} is not an integer") from None


def check_rate(rate: object) -> float:
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate < 0:
        raise ConfigError(f"rate must be a finite number >= 0 events/s (0 = as fast as possible), got {rate!r}")
    return float(rate)


def check_delay_ms(delay_ms: object) -> int:
    if isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or delay_ms < 0:
        raise ConfigError(f"delay_ms must be an integer >= 0 milliseconds, got {delay_ms!r}")
    return delay_ms


@dataclass(frozen=True)
class ControlChange:
    """One change of :class:`Control`, as the audit (``{ns}:control:audit``) keeps it: when, by whom, as what role,
    the fields set (JSON text, shown as text) and the ``rev`` it made."""

    at_ms: int
    by: str
    role: str
    change: str
    rev: int

    @classmethod
    def from_hash(cls, raw: Mapping[Any, Any]) -> ControlChange:
        """Inverse of :meth:`to_hash` (an audit entry's fields, bytes or text); KeyError or ValueError for an entry
        nobody wrote this way."""
        f = _hash_fields(raw)
        return cls(at_ms=int(f["at_ms"]), by=f["by"], role=f["role"], change=f["change"], rev=int(f["rev"]))

    def to_hash(self) -> dict[str, str]:
        return {"at_ms": str(self.at_ms), "by": self.by, "role": self.role, "change": self.change,
                "rev": str(self.rev)}


@dataclass(frozen=True)
class Control:
    """The presenter's request. ``None`` where nothing was asked yet (the generator seeds
    scenario, rate and running when it starts; the job falls back to WATERMARK_DELAY)."""

    scenario: str | None = None
    rate: float | None = None
    running: bool | None = None
    delay_ms: int | None = None
    rev: int = 0
    updated_ms: int | None = None

    @classmethod
    def from_hash(cls, raw: Mapping[Any, Any]) -> Control:
        """Inverse of :meth:`to_hash`; a value nobody could have written through
        :func:`streaming.store.control_store.write_control` raises ConfigError naming the field (whether the
        scenario is one the generator knows is the store's check: the catalogue is a rule)."""
        f = _hash_fields(raw)
        rate: float | None = None
        if "rate" in f:
            try:
                number = float(f["rate"])
            except ValueError:
                raise ConfigError(f"control field rate={f['rate']!r} is not a number") from None
            rate = check_rate(number)
        running: bool | None = None
        if "generator" in f:
            if f["generator"] not in (RUNNING, STOPPED):
                raise ConfigError(f"control field generator={f['generator']!r} must be {RUNNING!r} or {STOPPED!r}")
            running = f["generator"] == RUNNING
        delay = _hash_int(f, "delay_ms", "control")
        return cls(scenario=f.get("scenario"), rate=rate, running=running,
                   delay_ms=None if delay is None else check_delay_ms(delay), rev=_hash_int(f, "rev", "control") or 0,
                   updated_ms=_hash_int(f, "updated_ms", "control"))

    def to_hash(self) -> dict[str, str]:
        """The hash fields of the values that are set; inverse of :meth:`from_hash`."""
        out = {"scenario": self.scenario, "rate": None if self.rate is None else repr(float(self.rate)),
               "generator": None if self.running is None else (RUNNING if self.running else STOPPED),
               "delay_ms": None if self.delay_ms is None else str(self.delay_ms), "rev": str(self.rev),
               "updated_ms": None if self.updated_ms is None else str(self.updated_ms)}
        return {k: v for k, v in out.items() if v is not None}


ACHIEVED_OVER_MS = 5_000
"""The generator's achieved rate is measured over this much of its clock: long enough to smooth its bursts."""


@dataclass(frozen=True)
class GeneratorStatus:
    """What the following generator is doing: ``rev`` is the control revision it applied."""

    state: str
    scenario: str
    rate: float
    rev: int
    written: int
    since_ms: int
    updated_ms: int
    error: str = ""
    achieved: float = 0.0
    """Events/s actually written over the last :data:`ACHIEVED_OVER_MS` (or since the run began); below the
    rate asked whenever the scenario holds events back (late bursts, outages), so not a health signal."""
    lag_ms: int = 0
    """How far behind its schedule the last write finished: above zero the generator (or Redis) lacks CPU."""

    @classmethod
    def from_hash(cls, raw: Mapping[Any, Any]) -> GeneratorStatus:
        """Inverse of :meth:`to_hash`."""
        f = _hash_fields(raw)
        try:
            return cls(state=f["state"], scenario=f["scenario"], rate=float(f["rate"]), rev=int(f["rev"]),
                       written=int(f["written"]), since_ms=int(f["since_ms"]), updated_ms=int(f["updated_ms"]),
                       error=f.get("error", ""), achieved=float(f.get("achieved", "0")),
                       lag_ms=int(f.get("lag_ms", "0")))
        except (KeyError, ValueError) as exc:
            raise ConfigError(f"generator status hash is malformed ({type(exc).__name__}: {exc})") from None

    def to_hash(self) -> dict[str, str]:
        """Inverse of :meth:`from_hash`."""
        return {k: repr(v) if isinstance(v, float) else str(v) for k, v in asdict(self).items()}
