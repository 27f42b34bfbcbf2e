"""What the monitor reads from Redis each round, typed, and the short memory the windowed rules need.

One :class:`Observation` serves both the metrics endpoint and the alert rules, so an alert and the number
beside it on a Grafana panel never disagree. :class:`Memory` keeps the samples a rule compares over time
(players online, late drops, watermarks); it lives in the monitor's process, and what it needs back after a
restart (players online) is re-read from Redis, so a restart neither fires nor resolves an alert by itself.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import cast

from watermark.alerting.verdicts import Flat, WatermarkPoint, flat_run

MAIN = "main"
"""The pipeline's name in labels and subjects; lab lanes go by their own names."""


@dataclass(frozen=True)
class PipelineObs:
    name: str
    watermark_ms: int | None
    max_event_ms: int | None
    delay_ms: int
    trigger_ms: int
    accepted: int
    """Events accepted so far (the totals' ``events``)."""
    waiting: int
    behind_ms: int
    """How long the oldest entry not committed yet has waited (0 when none waits)."""
    last_batch: int | None = None
    dropped: int = 0
    """Events dropped as late so far: with ``accepted``, what arrived (:meth:`.verdicts.Flat.stalled`)."""
    committed_ms: int | None = None
    """When its last batch was committed (None: none yet)."""
    stopped_ms: int | None = None
    """The job was stopped on request at this time (cleared by its next commit)."""
    lost_at_batch: int | None = None
    """Redis came back empty before this batch (:class:`.health.Verdict`)."""

    @property
    def arrived(self) -> int:
        return self.accepted + self.dropped


@dataclass(frozen=True)
class ServerObs:
    name: str
    last_arrival_ms: int | None
    """Arrival of the server's newest committed event (``{ns}:seen``)."""
    accepted: int = 0
    dropped: int = 0
    late: int = 0
    players: int | None = None
    newest_event_ms: int | None = None
    """The server's newest event time in the pipeline's last batch (None: none in it)."""
    lag_p95_ms: float | None = None
    """p95 of arrival minus event time of the server's events in the pipeline's last batch."""
    retired: bool = False
    """Silent for RETIRE_AFTER: out of the live views until its next event (``watermark.rules.idleness.retired``)."""
    region: str | None = None
    """The region its events carry (``{ns}:regions``); None: they carry none."""
    clock_ahead_ms: int | None = None
    """How far the server's events ran ahead of their arrival in the online view's last batch with any of them
    (its clock running fast); None: the online view has not judged it."""


@dataclass(frozen=True)
class OnlineSample:
    """Players online per server after one batch of the online view, and how many left it by which cause."""

    batch: int
    at_ms: int
    counts: Mapping[str, int]
    causes: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Observation:
    at_ms: int
    redis_error: str | None = None
    """Why Redis could not be read; everything else is empty then."""
    data_error: str | None = None
    """Redis answered, but with a record that is not what its type says: nothing is judged this round."""
    pipelines: tuple[PipelineObs, ...] = ()
    servers: tuple[ServerObs, ...] = ()
    online: tuple[OnlineSample, ...] = ()
    """Online view batches committed since the previous observation (all within the memory's reach at start)."""
    online_behind_ms: int = 0
    redis_used_bytes: int | None = None
    """Redis' ``used_memory`` (None: INFO refused, as to a user without ``+info``)."""
    redis_maxmemory_bytes: int = 0
    """Redis' ``maxmemory`` (0: none set, it never refuses a write for memory)."""

    def pipeline(self, name: str) -> PipelineObs | None:
        return next((p for p in self.pipelines if p.name == name), None)

    @property
    def main(self) -> PipelineObs | None:
        return self.pipeline(MAIN)


class Series:
    """``(at_ms, value)`` samples in time order, kept for ``reach_ms``."""

    def __init__(self, reach_ms: int) -> None:
        self.reach_ms = reach_ms
        self.times: deque[int] = deque()
        self.values: deque[object] = deque()

    def add(self, at_ms: int, value: object) -> None:
        if self.times and at_ms < self.times[-1]:
            return  # a clock step back: keep the series ordered
        self.times.append(at_ms)
        self.values.append(value)
        while self.times and self.times[0] < at_ms - self.reach_ms:
            self.times.popleft()
            self.values.popleft()

    def at_or_before(self, at_ms: int) -> tuple[int, object] | None:
        """The newest sample at or before ``at_ms``; None when the series does not reach back that far."""
        i = bisect_right(self.times, at_ms)
        return None if i == 0 else (self.times[i - 1], self.values[i - 1])

    def since(self, at_ms: int) -> list[tuple[int, object]]:
        return [(t, v) for t, v in zip(self.times, self.values, strict=True) if t >= at_ms]

    @property
    def last(self) -> tuple[int, object] | None:
        return None if not self.times else (self.times[-1], self.values[-1])


@dataclass
class Memory:
    """The samples the windowed rules compare; ``started_ms`` says how far back the monitor has watched."""

    started_ms: int
    reach_ms: int
    online: Series = field(init=False)
    dropped: dict[str, Series] = field(default_factory=dict)
    watermarks: dict[str, Series] = field(default_factory=dict)
    newest_event: dict[str, int] = field(default_factory=dict)
    """Per server, its newest event time seen so far: how far it trails the others."""
    clock_ahead: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per server, how far its clock ran ahead (ms) as observed before, and now: a change is a clock step."""
    delayed_at: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Per server, the last time its data was seen delayed (silent, or the pipeline behind), and why."""

    def __post_init__(self) -> None:
        self.online = Series(self.reach_ms)

    def remember(self, obs: Observation) -> None:
        if obs.redis_error is not None or obs.data_error is not None:
            return
        self.remember_online(obs.online)
        for s in obs.servers:
            self.dropped.setdefault(s.name, Series(self.reach_ms)).add(obs.at_ms, s.dropped)
            if s.clock_ahead_ms is not None:
                now = s.clock_ahead_ms
                self.clock_ahead[s.name] = (self.clock_ahead.get(s.name, (now, now))[1], now)
            if s.newest_event_ms is not None:  # a future-dated event counts as now: it must not make the
                newest = min(s.newest_event_ms, obs.at_ms)  # others look behind
                self.newest_event[s.name] = max(newest, self.newest_event.get(s.name, newest))
        for p in obs.pipelines:
            self.watermarks.setdefault(p.name, Series(self.reach_ms)).add(obs.at_ms, (p.watermark_ms, p.arrived))

    def remember_online(self, samples: Iterable[OnlineSample]) -> None:
        last = self.online.last
        for s in samples:
            if last is None or s.batch > last[1].batch:  # type: ignore[attr-defined]
                self.online.add(s.at_ms, s)

    def last_online_batch(self) -> int | None:
        last = self.online.last
        return None if last is None else last[1].batch  # type: ignore[attr-defined]

    def watermark_run(self, pipeline: str) -> Flat | None:
        """The pipeline's watermark's latest unmoved run in the samples kept (None: no sample)."""
        series = self.watermarks.get(pipeline)
        points = [WatermarkPoint(t, *cast(tuple[int | None, int], v)) for t, v in series.since(0)] if series else []
        return flat_run(points)

    def trail_ms(self, server: str) -> int | None:
        """How far the server's newest event time trails the newest of all servers; None if never seen."""
        mine = self.newest_event.get(server)
        return None if mine is None else max(self.newest_event.values()) - mine

    def mark_delayed(self, server: str, at_ms: int, why: str) -> None:
        self.delayed_at[server] = (at_ms, why)
