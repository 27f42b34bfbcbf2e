"""Idleness, like Flink's ``withIdleness``: a silent server stops holding the per-server watermark back.

Spark has no notion of an idle input: under ``multipleWatermarkPolicy=min`` a
server that sends nothing keeps the combined watermark where its last event
left it, and windows stop closing. The job's remedy is an *idle marker*: when
a server has not been heard from (ingest time of its newest event) for
``timeout_ms``, the job appends ``{"server": S, "kind": "idle", "event_time": now}``
to the input, once per ``interval_ms`` while the silence lasts. In a lane with
idleness on the marker is part of S's input, so S's watermark follows the
clock; it is never counted as an event or a player. When S's data returns the
markers stop and S holds the watermark back again as its events dictate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass
class IdleTicker:
    servers: tuple[str, ...]
    timeout_ms: int
    interval_ms: int
    started_ms: int
    """A server never heard from counts as last heard from when the ticker started."""
    last_marker_ms: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.timeout_ms <= 0 or self.interval_ms <= 0:
            raise ValueError(f"timeout and interval must be positive, got {self.timeout_ms} and {self.interval_ms}")

    def due(self, now_ms: int, seen_ms: Mapping[str, int]) -> list[str]:
        """Servers that get a marker now; records that they got one."""
        out = []
        for s in self.servers:
            heard = max(seen_ms.get(s, self.started_ms), self.started_ms)
            last = self.last_marker_ms.get(s)
            if now_ms - heard >= self.timeout_ms and (last is None or now_ms - last >= self.interval_ms):
                self.last_marker_ms[s] = now_ms
                out.append(s)
        return out
