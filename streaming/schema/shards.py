"""The input as N streams (shards): which shard a server's events go to, where each shard lives, and a position
in all of them at once.

One shard is the layout before shards: the key ``{ns}:events`` and a position that is one entry ID (``ms-seq``), so a
checkpoint or a commit record written before shards reads the same. With ``N > 1`` shards, shard 0 is still
``{ns}:events`` and shard ``i`` is ``{ns}:events:{i}`` (``{wm:events:i}`` under a braced namespace, decision 0018); a
position is the N entry IDs joined by commas, in shard order
(``"1700000000000-3,0-0,1700000000001-0,1700000000000-9"``). One string keeps every place that stores or compares "how
far a query has read" (Spark's offset log, the commit guard's ``committed_id``) unchanged: two positions are the same
exactly when their strings are.

A server's events all go to one shard (:func:`shard_of`), so they stay in arrival order there. Each shard's entry
IDs carry the clock of the Redis that holds it; IDs are compared only within a shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from watermark_client.events import parse_entry_id
from watermark_client.stream import input_shard_key

SEP = ","
START = "0-0"


def shard_key(key: str, shard: int) -> str:
    """A per-shard stream the pipeline writes itself (its late events, its dead letters): shard 0 is ``key``, shard
    ``i`` adds ``:{i}``. It keeps the pipeline's hash tag, so in a Redis Cluster it stays in the slot of the commit
    that writes it (decision 0018). The input's shards are :func:`input_shard_key`."""
    if shard < 0:
        raise ValueError(f"a shard is a number from 0, got {shard}")
    return key if shard == 0 else f"{key}:{shard}"


def trimmed_key(events_key: str, trimmed_key0: str, shard: int) -> str:
    """Where the entries trimmed from an input shard are counted: shard 0 in ``trimmed_key0`` (``{ns}:trimmed``,
    the one-shard layout), shard ``i`` beside its stream (``{input shard}:trimmed``), in the shard's own slot so
    that the trim and its count stay one script in a Redis Cluster. Readers sum them. (A counter written before
    shards had their own holds the sum of all: read as shard 0's, the sum stays right.)"""
    return trimmed_key0 if shard == 0 else f"{input_shard_key(events_key, shard)}:trimmed"


@dataclass(frozen=True)
class Position:
    """How far a reader has read each shard: the last entry ID read, ``0-0`` for none."""

    ids: tuple[str, ...]

    @classmethod
    def start(cls, shards: int) -> Position:
        if shards < 1:
            raise ValueError(f"shards must be >= 1, got {shards}")
        return cls((START,) * shards)

    @classmethod
    def parse(cls, text: str, shards: int) -> Position:
        """``text`` as a position in ``shards`` shards. A position of fewer shards (a checkpoint from before the
        shards were added) reads the new ones from their start: a server moved to a new shard is read there from
        its first event. A position of more shards than configured is refused: the entries of the shards
        dropped would never be read."""
        ids = cls.of(text).ids
        if len(ids) > shards:
            raise ValueError(f"the position {text!r} covers {len(ids)} shards and the input has {shards}: "
                             "lowering STREAM_SHARDS would leave the other shards' entries unread; "
                             "raise it back or start from a new checkpoint")
        return cls(ids + (START,) * (shards - len(ids)))

    @classmethod
    def of(cls, text: str | bytes) -> Position:
        """``text`` as a position of as many shards as it names (one entry ID: one shard), for what only compares
        positions or reads their times; :meth:`parse` where the number of shards is known."""
        text = text.decode() if isinstance(text, bytes) else text
        ids = tuple(text.split(SEP)) if text else (START,)
        for i in ids:
            try:
                parse_entry_id(i)
            except ValueError:
                raise ValueError(f"not a stream position: {text!r} ({i!r} is no entry ID)") from None
        return cls(ids)

    def at(self, shard: int) -> str:
        """Shard ``shard``'s entry ID; ``0-0`` (nothing read) for a shard this position does not name (one added
        since it was written)."""
        return self.ids[shard] if shard < len(self.ids) else START

    def __str__(self) -> str:
        return SEP.join(self.ids)

    @property
    def shards(self) -> int:
        return len(self.ids)

    def covers(self, other: Position) -> bool:
        """Every shard read at least as far as ``other`` read it (a shard one of them does not name: ``0-0``)."""
        return all(parse_entry_id(self.at(k)) >= parse_entry_id(other.at(k))
                   for k in range(max(self.shards, other.shards)))

    def newest_ms(self) -> int:
        """The latest ingest time read in any shard (ms), 0 when nothing was read."""
        return max(parse_entry_id(i)[0] for i in self.ids)


def lowest(positions: Sequence[str]) -> str:
    """Shard by shard, the lowest entry ID of ``positions`` (as far as every one of them has read); a position
    naming fewer shards has read nothing of the others."""
    parsed = [Position.of(p) for p in positions]
    shards = max(q.shards for q in parsed)
    low = [min(parse_entry_id(q.at(k)) for q in parsed) for k in range(shards)]
    return str(Position(tuple(f"{ms}-{seq}" for ms, seq in low)))


def share(backlogs: Sequence[int], cap: int) -> tuple[int, ...]:
    """How many entries each shard may give a batch capped at ``cap`` entries: all of every backlog when they fit,
    else ``cap`` shared in proportion to the backlogs (as Spark's Kafka source shares ``maxOffsetsPerTrigger``
    among partitions), what rounding leaves over given by largest remainder (ties to the lower shard). Then every
    shard with a backlog and no share gets one entry, from the largest share, when ``cap`` allows one each: a
    small shard is never starved by a large one. The shares sum to ``min(cap, sum(backlogs))`` and none exceeds
    its backlog."""
    if cap < 0 or any(b < 0 for b in backlogs):
        raise ValueError(f"a cap and backlogs are counts >= 0, got {cap} and {list(backlogs)}")
    total = sum(backlogs)
    if total <= cap:
        return tuple(backlogs)
    # cap < total, so no exact share cap * b / total reaches its backlog b
    out = [cap * b // total for b in backlogs]
    short = cap - sum(out)  # the fractions left over, cap * b % total / total each, sum to this, each under one
    for k in sorted(range(len(out)), key=lambda k: (-(cap * backlogs[k] % total), k))[:short]:
        out[k] += 1
    starved = [k for k, b in enumerate(backlogs) if b and not out[k]]
    if cap >= sum(1 for b in backlogs if b):  # then a share of 2 or more is there to give from
        for k in starved:
            donor = max(range(len(out)), key=lambda j: (out[j], -j))
            out[donor] -= 1
            out[k] = 1
    return tuple(out)
