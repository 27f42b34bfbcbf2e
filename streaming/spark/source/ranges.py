"""The source's partitions: a batch's offsets (positions, one entry ID a shard) cut into the ranges of entries
its partitions read, on the driver when Spark asks a reader for a batch's partitions (and again wherever a batch is
read a second time: the sink, ``scripts/batch_path.py``). Pure: no Redis."""

from __future__ import annotations

from pyspark.sql.datasource import InputPartition

from streaming.schema.shards import Position
from watermark_client.events import parse_entry_id as parse_id

MAX_SEQ = 18446744073709551615


def format_id(ms: int, seq: int) -> str:
    return f"{ms}-{seq}"


class StreamRange(InputPartition):
    """Entries of shard ``shard`` with ``lo < id <= hi`` (``lo`` inclusive when ``lo_inclusive``); ``batch_end``: the
    position the streaming batch it belongs to ends at (its windows' players are counted under it), empty for a
    read outside a batch."""

    def __init__(self, lo: str, hi: str, lo_inclusive: bool = False, shard: int = 0, batch_end: str = "") -> None:
        super().__init__((lo, hi, lo_inclusive, shard, batch_end))
        self.lo, self.hi, self.lo_inclusive, self.shard, self.batch_end = lo, hi, lo_inclusive, shard, batch_end

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StreamRange) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


def split_range(lo: str, hi: str, parts: int, lo_inclusive: bool = False, shard: int = 0,
                batch_end: str = "") -> list[StreamRange]:
    """Split ``(lo, hi]`` into up to ``parts`` contiguous ranges by the IDs' millisecond part.

    Any split covers the same entries, so replays stay exact even if the split differs."""
    lo_ms, hi_ms = parse_id(lo)[0], parse_id(hi)[0]
    cuts: list[str] = []
    span = hi_ms - lo_ms
    for k in range(1, parts):
        cut_ms = lo_ms + (span * k) // parts
        cut = format_id(cut_ms, MAX_SEQ)
        if parse_id(cut) >= parse_id(hi):
            break
        if cuts and cuts[-1] == cut:
            continue
        if parse_id(cut) <= parse_id(lo):
            continue
        cuts.append(cut)
    bounds = [lo, *cuts, hi]
    return [
        StreamRange(bounds[i], bounds[i + 1], lo_inclusive and i == 0, shard, batch_end)
        for i in range(len(bounds) - 1)
    ]


def ranges(start: str, end: str, shards: int, batch_end: str = "") -> list[StreamRange]:
    """The entries after position ``start`` up to position ``end``: one range per shard that has any (what a
    batch read, read again in one piece per shard); ``batch_end``: as :class:`StreamRange`'s (the batch's windows'
    players counted again under it)."""
    lo, hi = Position.parse(start, shards), Position.parse(end, shards)
    return [StreamRange(a, b, shard=k, batch_end=batch_end) for k, (a, b) in enumerate(zip(lo.ids, hi.ids, strict=True))
            if parse_id(b) > parse_id(a)]
