"""Where a producer writes: the input stream of a namespace and its shards, a producer's marker beside it, and
the bound writers keep on the stream's length (docs/wire-format.md). Plain names, no Redis: the pipeline's
:class:`~streaming.schema.keys.KeySchema` builds these keys from here.

>>> events_key("wm"), input_shard_key("wm:events", 2), input_shard_key("{wm}:events", 2)
('wm:events', 'wm:events:2', '{wm:events:2}')
>>> shard_of("eu-017", 4), producer_marker_key("wm:events", "p1"), producer_marker_key("wm:events:2", "p1")
(3, 'wm:producer:p1', 'wm:events:2:producer:p1')
"""

from __future__ import annotations

import zlib

DEFAULT_STREAM_MAX_ENTRIES = 2_000_000
"""The input's bound for its writers (``STREAM_MAX_ENTRIES``, the Producer's ``max_stream_entries``): twice what the
job keeps to look back at, so a writer waits only when the readers are behind by about a million entries (some
300 MB of Redis)."""


def events_key(namespace: str) -> str:
    """The input stream of a namespace (shard 0): ``{namespace}:events``."""
    return f"{namespace}:events"


def producer_key(namespace: str, producer_id: str) -> str:
    """A producer's marker in a namespace: the sequence number of its last batch written to :func:`events_key`, set
    in the same transaction as the batch (decision 0010)."""
    return f"{namespace}:producer:{producer_id}"


def producer_marker_key(stream_key: str, producer_id: str) -> str:
    """The marker of a producer writing ``stream_key``: :func:`producer_key` of its namespace for an ``{ns}:events``
    stream, else beside the stream (``{stream_key}:producer:{id}``)."""
    if stream_key.endswith(":events"):
        return producer_key(stream_key[: -len(":events")], producer_id)
    return f"{stream_key}:producer:{producer_id}"


def input_shard_key(events_key: str, shard: int) -> str:
    """The input stream of ``shard``: shard 0 is the events key itself (the one-shard layout), shard ``i`` adds
    ``:{i}``. Under a braced namespace (``{wm}:events``, meant for a Redis Cluster) shard ``i`` is
    ``{wm:events:i}``: the whole name is its hash tag, so the shards spread over the cluster's nodes instead of all
    sitting in the pipeline's slot (decision 0018). Without braces it is the same as :func:`shard_key`."""
    if shard < 0:
        raise ValueError(f"a shard is a number from 0, got {shard}")
    if shard == 0:
        return events_key
    close = events_key.find("}")
    if events_key.startswith("{") and close > 1:
        return f"{{{events_key[1:close]}{events_key[close + 1:]}:{shard}}}"
    return f"{events_key}:{shard}"


def shard_of(server: str, shards: int) -> int:
    """The shard a server's events go to: CRC-32 (zlib's, the common one: ``crc32`` in Go's ``hash/crc32``,
    Java's ``java.util.zip.CRC32``, Node's ``zlib.crc32``) of its UTF-8 name, modulo ``shards``. Any producer in any
    language computes the same, and it never changes while ``shards`` does not."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    return zlib.crc32(server.encode()) % shards if shards > 1 else 0
