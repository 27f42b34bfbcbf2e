"""Typed records that go through Redis from one process to another, each defined once with its encoder and
decoder (msgspec). A malformed record read back raises :class:`RecordError` naming the record and what is wrong
with it, where it is read, never a ``KeyError`` three calls later.

* :class:`BatchRecord`: the pipeline's record of one batch, ``{ns}:batch:{id}`` field ``sink``, written by the
  sink's commit (``watermark.store.commit``) and read by the dashboard, the Events page and the reports.
* :class:`CommitEntry`: one entry of ``{ns}:commits`` (and ``{ns}:presence:commits``): the batch and the last
  input entry it covered.
* :class:`DeadEntry`: one entry of ``{ns}:dead``, a quarantined input entry (same ID) with its reason.
* :class:`PresenceRecord`: the online view's record of one batch, a member of ``{ns}:presence:history``.
* :class:`LaneRecord`: a lab lane the job runs, a field of ``{ns}:lanes``.

Fields added after the first release have defaults, so records written by an older job still read back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

import msgspec


class RecordError(ValueError):
    """A record read back from Redis is not what its type says."""


class LagRecord(msgspec.Struct, frozen=True):
    """p50, p95 and max of a lag, milliseconds."""

    p50: float
    p95: float
    max: float


class ServerRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One server's figures in a batch."""

    rows: int = 0
    events: int = 0
    dropped: int = 0
    late: int = 0
    min_event_us: int | None = None
    max_event_us: int | None = None
    ingest_lag_ms: LagRecord | None = None
    processing_lag_ms: LagRecord | None = None
    ticks: int = 0
    max_tick_us: int | None = None
    max_ingest_us: int | None = None


class BatchRecord(msgspec.Struct, frozen=True, kw_only=True):
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

    def encode(self) -> bytes:
        return _ENCODER.encode(self)

    @classmethod
    def decode(cls, raw: bytes | str, where: str) -> BatchRecord:
        return _decode(raw, cls, where)

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
    """A quarantined input entry: why (a stable reason code of ``watermark.schema.events``), the detail, the raw
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


class PresenceRecord(msgspec.Struct, frozen=True, kw_only=True):
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

    def encode(self) -> bytes:
        return _ENCODER.encode(self)

    @classmethod
    def decode(cls, raw: bytes | str, where: str) -> PresenceRecord:
        return _decode(raw, cls, where)


class LaneRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A lab lane: its namespace and watermark strategy (``watermark.schema.lanes``)."""

    namespace: str
    mode: str = "global"
    policy: str = "min"
    idle: bool = False
    description: str = ""

    def encode(self) -> bytes:
        return _ENCODER.encode(self)

    @classmethod
    def decode(cls, raw: bytes | str, where: str) -> LaneRecord:
        return _decode(raw, cls, where)


_ENCODER = msgspec.json.Encoder()


T = TypeVar("T")


def _decode(raw: bytes | str, kind: type[T], where: str) -> T:
    try:
        return msgspec.json.decode(raw, type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise RecordError(f"{where} is not a {kind.__name__}: {exc}") from None
