"""The source's options, read and checked once on the driver when Spark makes a reader (see the package's
docstring for what each means); the reader carries them to the workers."""

from __future__ import annotations

from collections.abc import Mapping

from streaming.schema.keys import KeySchema
from streaming.spark.partial import PartitionPartials
from streaming.spark.window_players import Counting
from watermark_client.events import Rules
from watermark_client.stream import input_shard_key


class SourceOptions:
    """The source's options (see the module's docstring), checked: a wrong one is a ValueError naming it."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.url = options.get("url") or ""
        self.stream = options.get("stream") or ""
        if not self.url or not self.stream:
            raise ValueError("redis_stream source needs options 'url' and 'stream'")
        self.partitions = int(options.get("partitions", "2"))
        self.shards = int(options.get("shards", "1"))
        if self.shards < 1:
            raise ValueError(f"option shards must be >= 1, got {self.shards}")
        self.streams = tuple(input_shard_key(self.stream, k) for k in range(self.shards))
        self.max_events = int(options.get("maxEventsPerBatch", "0"))
        if self.partitions < 1:
            raise ValueError(f"option partitions must be >= 1, got {self.partitions}")
        if self.max_events < 0:
            raise ValueError(f"option maxEventsPerBatch must be >= 0, got {self.max_events}")
        committed_by = options.get("committedBy", "")
        # The namespace whose sink commits and trims this stream: its record says how many entries wait.
        self.commit_keys: tuple[str, ...] = ()
        if committed_by:
            keys = KeySchema(committed_by)
            if keys.events != self.stream:
                raise ValueError(f"option committedBy {committed_by!r} trims {keys.events!r}, not {self.stream!r}")
            self.commit_keys = (keys.state, keys.totals, keys.trimmed)
        self.start_id = options.get("startId", "0-0")
        self.end_id = options.get("endId", "+")
        self.rules = Rules.from_options(options)
        pre = options.get("preAggregate", "false").strip().lower()
        if pre not in ("true", "false"):
            raise ValueError(f"option preAggregate must be 'true' or 'false', got {options.get('preAggregate')!r}")
        self.window: tuple[int, int] | None = None
        if pre == "true":
            try:
                window_ms, slide_ms = int(options["windowMs"]), int(options["slideMs"])
            except (KeyError, ValueError):
                raise ValueError("option preAggregate=true needs windowMs and slideMs as whole milliseconds, got "
                                 f"{options.get('windowMs')!r} and {options.get('slideMs')!r}") from None
            PartitionPartials(window_ms, slide_ms)  # says what is wrong with them, here rather than in a worker
            self.window = (window_ms, slide_ms)
        # The pipeline whose windows' players a streaming batch's partitions count (decision 0019), and their TTL.
        owner = options.get("windowPlayers", "")
        self.count_players: Counting | None = None
        if owner:
            if self.window is None:
                raise ValueError("option windowPlayers needs preAggregate=true")
            self.count_players = Counting(KeySchema(owner), int(options.get("playersTtlS", "86400")),
                                          int(options.get("waitReplicas", "0")),
                                          int(options.get("waitTimeoutMs", "1000")))
