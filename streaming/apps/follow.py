"""Generator follow mode: write whatever scenario ``{ns}:control`` asks for, and say what was applied.

``wm-generator --follow`` runs :class:`Follower`. Between
write chunks (at least every :data:`CHECK_EVERY_US` of its clock) it reads the
control hash; a new scenario or rate restarts the :class:`Simulator` from the
current time with the next seed and the players who were online (a switch changes
how the game plays, not who plays: no wave of logins and time-outs that a
players-drop rule would rightly see), ``stopped`` pauses writing, and ``running``
again starts afresh from the current time (the servers were off meanwhile, so
nothing is owed for the pause). Events still in flight when a simulation is
replaced (an overseas delay, a held-back burst or backlog) are abandoned with
it. After every check it writes ``{ns}:generator`` so the dashboard can show
that a request was picked up (its ``rev``).

The clock is injected, so tests drive a whole run, switches included, without
sleeping.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import redis

from streaming.rules.scenarios import CHURNS, game
from streaming.rules.simulate import Record, Simulator
from streaming.schema.clock import Clock
from streaming.schema.config import ConfigError
from streaming.schema.keys import KeySchema
from streaming.schema.records import ACHIEVED_OVER_MS, RUNNING, STOPPED, Control, GeneratorStatus, check_rate
from streaming.store.control_store import check_scenario, read_control, seed_control, write_status
from streaming.store.stream_writer import LOST_REDIS, StreamWriter, WriteStats

log = logging.getLogger("streaming.apps.generator")

CHECK_EVERY_US = 500_000

EXITED = "exited"


class _Pending:
    """A record iterator that can be read up to a time and resumed later without losing the next record."""

    def __init__(self, records: Iterator[Record]) -> None:
        self.records = records
        self.head: Record | None = None
        self.done = False

    def until(self, arrival_us: int) -> Iterator[Record]:
        while True:
            if self.head is None:
                self.head = next(self.records, None)
                if self.head is None:
                    self.done = True
                    return
            if self.head[0] > arrival_us:
                return
            item, self.head = self.head, None
            yield item


@dataclass
class _Run:
    """The simulation being written: events are due at ``arrival + offset_us`` on the clock."""

    scenario: str
    rate: float
    seed: int
    offset_us: int
    pending: _Pending
    sim: Simulator


class Follower:
    """Follows ``{ns}:control``; ``reconnect`` returns a fresh client after Redis was lost."""

    def __init__(self, client: redis.Redis, keys: KeySchema, *, clock: Clock, scenario: str, rate: float, seed: int,
                 reconnect: Callable[[], redis.Redis], stop: threading.Event | None = None,
                 explicit_ids: bool = False, batch_size: int = 2_000, check_every_us: int = CHECK_EVERY_US,
                 stream_key: str | None = None, on_batch: Callable[[WriteStats], None] | None = None,
                 timeline_scale: float = 1.0, servers: int | None = None, regions: int | None = None,
                 daily: bool = True, max_stream_entries: int | None = None, shards: int = 1) -> None:
        if check_every_us <= 0:
            raise ConfigError(f"check_every_us must be positive, got {check_every_us}")
        self.default_scenario = check_scenario(scenario)
        self.default_rate = check_rate(rate)
        self.client = client
        self.keys = keys
        self.clock = clock
        self.reconnect = reconnect
        self.stop = stop or threading.Event()
        self.check_every_us = check_every_us
        self.writer = StreamWriter(client, stream_key or keys.events, explicit_ids=explicit_ids,
                                   batch_size=batch_size, clock=clock, stop=self.stop, on_batch=on_batch,
                                   max_stream_entries=max_stream_entries, shards=shards)
        self.next_seed = seed
        self.timeline_scale = timeline_scale
        self.servers, self.regions, self.daily = servers, regions, daily
        # a bad one fails here, not at a switch
        game(self.default_scenario, servers, regions, daily).scaled(timeline_scale)
        self.run: _Run | None = None
        self.rev = 0
        self.since_ms = clock.now_us() // 1000
        self.error = ""
        self._samples: deque[tuple[int, int]] = deque()  # (clock us, events written) at each publish
        self.lag_us = 0  # how late the last chunk's writes finished, against the time they were due by

    # ------------------------------------------------------------------ one check

    def _desired(self) -> Control:
        """The request, seeding whatever is missing (also after someone deleted the hash)."""
        ctl = read_control(self.client, self.keys)
        if ctl is None or ctl.scenario is None or ctl.rate is None or ctl.running is None:
            ctl = seed_control(self.client, self.keys, scenario=self.default_scenario, rate=self.default_rate,
                               now_ms=self.clock.now_us() // 1000)
        return ctl

    def check(self) -> None:
        """Read the request, apply it, publish the status."""
        now_us = self.clock.now_us()
        try:
            ctl = self._desired()
        except ConfigError as exc:  # someone wrote a value by hand: keep what runs, say why
            if str(exc) != self.error:
                log.warning("ignoring the control hash: %s", exc)
            self.error = str(exc)
        else:
            self.error = ""
            self.apply(ctl, now_us)
        self.publish(now_us)

    def apply(self, ctl: Control, now_us: int) -> None:
        assert ctl.scenario is not None and ctl.rate is not None
        run = self.run
        if not ctl.running:
            if run is not None:
                log.info("rev %d: stopped; no events until started again", ctl.rev)
                self.run, self.since_ms = None, now_us // 1000
        elif run is None or (run.scenario, run.rate) != (ctl.scenario, ctl.rate):
            # the steady game and the churning ones play on a fleet; the others have their three servers
            many = self.servers if ctl.scenario == "steady" or ctl.scenario in CHURNS else None
            sim = Simulator(game(ctl.scenario, many, self.regions if many else None, self.daily).scaled(
                                self.timeline_scale),
                            seed=self.next_seed, start_us=now_us, rate=ctl.rate,
                            online=None if run is None else run.sim.online_now())
            self.writer.regions = sim.regions
            log.info("rev %d: scenario=%s rate=%s seed=%d from now", ctl.rev, ctl.scenario, ctl.rate or "max",
                     self.next_seed)
            self.run = _Run(ctl.scenario, ctl.rate, self.next_seed, now_us - sim.start_us, _Pending(sim.records()), sim)
            self.next_seed += 1
            self.since_ms = now_us // 1000
            self._samples.clear()  # a new rate: measure it from its start
        self.rev = ctl.rev

    def achieved(self, now_us: int) -> float:
        """Events/s written over the last :data:`ACHIEVED_OVER_MS` of this run: what the generator really does,
        which falls short of the rate asked for when it (or Redis) runs out of CPU."""
        samples, written = self._samples, self.writer.stats.written
        if self.run is None:
            samples.clear()
            return 0.0
        samples.append((now_us, written))
        while len(samples) > 2 and samples[1][0] <= now_us - ACHIEVED_OVER_MS * 1000:
            samples.popleft()
        t0, w0 = samples[0]
        return (written - w0) * 1e6 / (now_us - t0) if now_us > t0 else 0.0

    def status(self, now_us: int, state: str | None = None) -> GeneratorStatus:
        run = self.run
        achieved = self.achieved(now_us) if state is None else 0.0  # an exited generator writes nothing
        return GeneratorStatus(
            state=state or (RUNNING if run is not None else STOPPED),
            scenario=run.scenario if run is not None else "", rate=run.rate if run is not None else 0.0,
            rev=self.rev, written=self.writer.stats.written, since_ms=self.since_ms, updated_ms=now_us // 1000,
            error=self.error, achieved=achieved, lag_ms=self.lag_us // 1000 if run is not None else 0)

    def publish(self, now_us: int, state: str | None = None) -> None:
        write_status(self.client, self.keys, self.status(now_us, state))

    # ------------------------------------------------------------------ the loop

    def follow(self) -> WriteStats:
        """Check, write what is due up to the next check, sleep until it; until ``stop`` is set."""
        clock, stop = self.clock, self.stop
        next_check = clock.now_us()
        while not stop.is_set():
            try:
                self.check()
                next_check = max(next_check + self.check_every_us, clock.now_us())
                run = self.run
                if run is not None:
                    self.writer.offset_us = run.offset_us
                    self.writer.resume(run.pending.until(next_check - run.offset_us), raw=True)
                    self.lag_us = max(0, clock.now_us() - next_check)
            except LOST_REDIS as exc:
                if stop.is_set():
                    break
                # The writer settles the batches in flight on the new connection: each written exactly once.
                log.warning("lost Redis (%s); reconnecting, then the batches in flight are written exactly once",
                            exc)
                self.client = self.writer.client = self.reconnect()
                continue
            if not stop.is_set():
                clock.sleep_until(next_check)
        try:
            self.publish(clock.now_us(), EXITED)
        except LOST_REDIS as exc:
            log.warning("could not publish the generator's exit: %s", exc)
        return self.writer.stats
