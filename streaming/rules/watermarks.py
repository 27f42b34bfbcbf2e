"""Per-server watermarks as Spark keeps them, so the dashboard can show what the combined one is made of.

With one ``withWatermark`` input per server, Spark's ``WatermarkTracker``
keeps one watermark per input and after every batch sets each to
``max(own, max event time seen by that input in the batch - delay)``, an input
that has never had data counting as 0. The global watermark becomes
``max(global, policy(all inputs))`` with ``policy`` = min or max
(``spark.sql.streaming.multipleWatermarkPolicy``). Spark does not checkpoint the
per-input map: after a restart it starts empty again, so one instance of this
class lives as long as one query run. Spark reports only the global value;
``tests/pipeline/test_lab.py`` checks this model against the watermark Spark writes into
the next offset log entry, batch by batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from streaming.rules.windows import never_back, server_watermark

POLICIES = {"min": min, "max": max}


@dataclass
class ServerWatermarks:
    """Spark's per-input watermark map. With no fixed ``servers`` (a lab lane following the fleet), an input is a
    server from its first event until it retires: no real event for ``retire_after_ms`` of arrival time
    (``heard``: the stream entry IDs, so a batch run again decides the same; idle markers not counted: the job
    stops marking a retired server, ``streaming.rules.fleet``). A retired server holds nothing back and leaves the
    map, so the map is bounded by the live fleet; it is an input again from its next event."""

    servers: tuple[str, ...]
    delay_ms: int
    policy: str = "min"
    values: dict[str, int] = field(default_factory=dict)
    retire_after_ms: int | None = None
    heard: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")

    def update(self, max_event_ms: Mapping[str, int], spoke: Mapping[str, int] | None = None,
               now_ms: int | None = None) -> dict[str, int]:
        """Apply one batch: ``max_event_ms`` has the servers whose input had rows, with their max event time;
        ``spoke``: those with a real event in it, with its newest arrival; ``now_ms``: the batch's newest arrival.

        With no fixed ``servers`` (a lab lane without KNOWN_SERVERS) every server is an input from its first
        event on: one that has not been heard from holds nothing back, as it is not there yet."""
        if not self.servers and self.retire_after_ms is not None and now_ms is not None:
            self._retire(spoke or {}, now_ms)
        for s in self.servers or sorted(set(self.values) | set(max_event_ms)):
            if s in max_event_ms:
                self.values[s] = server_watermark(self.values.get(s), max_event_ms[s], self.delay_ms)
            else:
                self.values.setdefault(s, 0)
        return dict(self.values)

    def _retire(self, spoke: Mapping[str, int], now_ms: int) -> None:
        for s, t in spoke.items():
            self.heard[s] = max(t, self.heard.get(s, t))
        for s in list(self.values):
            self.heard.setdefault(s, now_ms)  # kept before servers retired: its time starts now
        assert self.retire_after_ms is not None
        for s in [s for s, t in self.heard.items() if now_ms - t >= self.retire_after_ms and s not in spoke]:
            self.values.pop(s, None)
            del self.heard[s]

    def combined(self, in_force_ms: int) -> int:
        """The global watermark for the next batch, given the one in force for this one."""
        if not self.values:
            return in_force_ms
        return never_back(in_force_ms, POLICIES[self.policy](self.values.values()))

    def holder(self) -> str | None:
        """The server whose watermark the policy picks (the one holding the others back under ``min``)."""
        if not self.values:
            return None
        pick = POLICIES[self.policy](self.values.values())
        return min(s for s, v in self.values.items() if v == pick)


def policy_max(running_max_ms: Mapping[str, int], servers: Iterable[str], policy: str) -> int | None:
    """The event time that drives the combined watermark: policy over each server's running maximum.

    ``None`` while it is undefined (under ``min``, until every server has had an event)."""
    names = tuple(servers) or tuple(running_max_ms)  # none fixed: every server heard from
    values = [running_max_ms[s] for s in names if s in running_max_ms]
    if not values or (policy == "min" and len(values) < len(names)):
        return None
    return POLICIES[policy](values)
