"""A deploy, maintenance or incident someone marked (``wm-annotate``, ``POST /annotations``), drawn over every
time chart."""

from __future__ import annotations

import msgspec

from streaming.schema.records.codec import JsonRecord
from watermark_client.events import bad_name

ANNOTATION_KINDS = ("deploy", "maintenance", "incident", "note")


class Annotation(JsonRecord, frozen=True, kw_only=True):
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
