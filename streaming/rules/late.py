"""The events people ask about, kept: every event that arrived behind the watermark (dropped from its windows
or counted late), one record each, so "why was this event dropped?" still answers hours later, after the
input stream has been trimmed.

The sink takes them from the batch's accepted events (the source's player rows carry each event's entry
ID, server, player, kind and event time), keeps those behind the watermark in force (the late rule,
:func:`streaming.rules.windows.is_late`) and writes them in the pipeline's commit, under its batch-id guard, to
the stream ``{ns}:late``. Each record has the entry ID of the input entry it came from (so arrival times and IDs
are the input's), the batch that read it and the watermark it met: the verdict per window is re-derived from
those with :func:`streaming.rules.windows.classify`, the rule that counted it. The stream is bounded
(``LATE_EVENTS_KEEP``, exact ``MAXLEN``); the totals' field ``kept`` counts every record ever written, so
``kept - XLEN`` is exactly how many the bound evicted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from streaming.rules.eventview import EventPoint, WindowStatus, overall
from streaming.rules.windows import classify, window_ranges
from watermark_client.events import parse_entry_id


@dataclass(frozen=True, slots=True)
class LateEvent:
    """One event that arrived behind the watermark in force for ``batch`` (``watermark_ms``)."""

    entry_id: str
    server: str
    player_id: str
    kind: str | None
    event_time_us: int
    batch: int
    watermark_ms: int
    shard: int = 0
    """The input shard it was read from: its ``entry_id`` is unique there, and it is kept in that shard's late
    stream (``shard_key(keys.late, shard)``), not a field."""

    def fields(self) -> dict[str, str]:
        """The record's fields in its late stream (its ID is ``entry_id``)."""
        return {"s": self.server, "p": self.player_id, "k": self.kind or "", "t": str(self.event_time_us),
                "b": str(self.batch), "w": str(self.watermark_ms)}

    @classmethod
    def from_fields(cls, entry_id: str | bytes, fields: Mapping[bytes, bytes], shard: int = 0) -> LateEvent:
        eid = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
        try:
            return cls(eid, fields[b"s"].decode(), fields[b"p"].decode(), fields[b"k"].decode() or None,
                       int(fields[b"t"]), int(fields[b"b"]), int(fields[b"w"]), shard)
        except (KeyError, ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{eid} in the late events is not a late-event record: {dict(fields)!r} "
                             f"({type(exc).__name__}: {exc})") from None

    def point(self, window_ms: int, slide_ms: int) -> EventPoint:
        """The event judged as the Events page judges one still in the stream: per window, by the same rule."""
        windows = window_ranges(self.event_time_us, window_ms, slide_ms)
        verdicts = [classify(self.event_time_us, w, self.watermark_ms) for w in windows]
        return EventPoint(
            entry_id=self.entry_id, arrival_ms=parse_entry_id(self.entry_id)[0], server=self.server,
            player_id=self.player_id, kind=self.kind, event_id=None, event_time_us=self.event_time_us,
            batch=self.batch, watermark_ms=self.watermark_ms,
            windows=tuple(WindowStatus(w, v) for w, v in zip(windows, verdicts, strict=True)),
            status=overall(verdicts), shard=self.shard)

