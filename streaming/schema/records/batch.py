"""A batch's records: what the pipeline's batch did (:class:`BatchRecord`, with each server's
:class:`ServerRecord` and its lags), the flood guard's minute, and the entries of the commits and dead streams."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec
import numpy as np

from streaming.schema.records.codec import JsonRecord, RecordError


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
    """One server's figures in a batch: built by the sink (``streaming.rules.commit.judge.BatchTable``), committed in
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


class NameGuardRecord(JsonRecord, frozen=True, kw_only=True):
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


class BatchRecord(JsonRecord, frozen=True, kw_only=True):
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
