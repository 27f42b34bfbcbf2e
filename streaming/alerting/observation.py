"""What the monitor reads from Redis each round, typed, and the short memory the windowed rules need.

One :class:`Observation` serves both the metrics endpoint and the alert rules, so an alert and the number
beside it on a Grafana panel never disagree. :class:`Memory` keeps the samples a rule compares over time
(players online, late drops, watermarks); it lives in the monitor's process, and what it needs back after a
restart (players online) is re-read from Redis, so a restart neither fires nor resolves an alert by itself.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from streaming.alerting.verdicts import Flat, WatermarkPoint, flat_run
from streaming.schema import config
from streaming.schema.records import NameGuardRecord

MAIN = config.MAIN
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
    lost_batches: tuple[int, int] | None = None
    """The first and last batch whose commits Redis lost (:class:`.health.Verdict`)."""
    name_guard: NameGuardRecord | None = None
    """The flood guard's minute and last burst (the pipeline's only)."""

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
    """Silent for RETIRE_AFTER: out of the live views until its next event (``streaming.rules.fleet.retired``)."""
    region: str | None = None
    """The region its events carry (``{ns}:regions``); None: they carry none."""
    drained_ms: int = 0
    """The online view's drained mark (``streaming.rules.fleet.drained_after``): its players all logged out before
    it fell silent; 0: not drained."""
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
    online_rows: dict[int, SampleRows] = field(default_factory=dict)
    """The players-drop rule's rows of each online sample, by batch (``conditions.OnlineWindow``): built once, not
    every round."""
    _newest: int | None = field(default=None, repr=False)
    """The newest event time of all servers, found once a round (``trail_ms`` asks it per server)."""
    _runs: dict[str, Flat | None] = field(default_factory=dict, repr=False)
    """Each pipeline's watermark run since the last sample: found once a round, read by the alert and the verdict."""

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
        self._runs.clear()
        if obs.servers:  # a server no reading names any more (forgotten once retired) is forgotten here too
            named = {s.name for s in obs.servers}
            for per_server in (self.dropped, self.clock_ahead, self.newest_event, self.delayed_at):
                for gone in [k for k in per_server if k not in named]:
                    del per_server[gone]
        self._newest = max(self.newest_event.values(), default=None)

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
        if pipeline not in self._runs:
            series = self.watermarks.get(pipeline)
            points = [WatermarkPoint(t, *cast(tuple[int | None, int], v)) for t, v in series.since(0)] if series else []
            self._runs[pipeline] = flat_run(points)
        return self._runs[pipeline]

    def trail_ms(self, server: str) -> int | None:
        """How far the server's newest event time trails the newest of all servers; None if never seen."""
        mine = self.newest_event.get(server)
        return None if mine is None or self._newest is None else self._newest - mine

    def mark_delayed(self, server: str, at_ms: int, why: str) -> None:
        self.delayed_at[server] = (at_ms, why)


@dataclass(frozen=True)
class SampleRows:
    """One online view batch as rows over the servers ``names``: players online, logouts, timeouts."""

    names: tuple[str, ...]
    counts: np.ndarray
    logouts: np.ndarray
    timeouts: np.ndarray

    @classmethod
    def of(cls, s: OnlineSample, names: tuple[str, ...], col: Mapping[str, int]) -> SampleRows:
        logouts, timeouts = [0] * len(names), [0] * len(names)
        for server, causes in s.causes.items():
            if (j := col.get(server)) is not None:
                logouts[j] = causes.get("logout", 0)
                timeouts[j] = causes.get("timeout", 0)
        return cls(names, np.array([s.counts.get(n, 0) for n in names], np.int64), np.array(logouts, np.int64),
                   np.array(timeouts, np.int64))


@dataclass(frozen=True)
class OnlineWindow:
    """Players online within the players-drop window, one row per online view batch and one column per server
    (every server the memory holds), built once a round: each server's and each region's rule then reads its
    columns instead of every sample again (at 300 servers, 300 x 300 look-ups a round and the same again for
    the causes became one pass)."""

    names: tuple[str, ...]
    col: Mapping[str, int]
    """Each server's column."""
    counts: np.ndarray
    """Players online, samples x servers."""
    logouts_after: np.ndarray
    """Row i: each server's logouts in the samples after sample i (a suffix sum), samples x servers."""
    timeouts_after: np.ndarray

    @classmethod
    def of(cls, samples: Sequence[OnlineSample], names: Sequence[str],
           rows: dict[int, SampleRows] | None = None) -> OnlineWindow:
        """``rows``: each sample's rows as computed in an earlier round (the memory's), reused while the servers
        are the same, and kept to the samples given."""
        names = tuple(names)
        col = {n: j for j, n in enumerate(names)}
        cache: dict[int, SampleRows] = {} if rows is None else rows
        got = []
        for s in samples:
            r = cache.get(s.batch)
            if r is None or (r.names is not names and r.names != names):
                r = cache[s.batch] = SampleRows.of(s, names, col)
            got.append(r)
        if rows is not None and len(rows) > len(got):
            keep = {s.batch for s in samples}
            for b in [b for b in rows if b not in keep]:
                del rows[b]
        if not got:
            empty = np.zeros((0, len(names)), np.int64)
            return cls(names, col, empty, empty, empty)
        return cls(names, col, np.stack([r.counts for r in got]), _sum_after(np.stack([r.logouts for r in got])),
                   _sum_after(np.stack([r.timeouts for r in got])))

    def columns(self, members: Sequence[str]) -> list[int]:
        return [self.col[m] for m in members if m in self.col]


def _sum_after(a: np.ndarray) -> np.ndarray:
    """Row i: the sum of rows i+1 to the last (the last row: zeros)."""
    out = np.zeros_like(a)
    if len(a) > 1:
        out[:-1] = np.cumsum(a[::-1], axis=0)[::-1][1:]
    return out
