"""Simulated game servers, pure: given a scenario, seed, start time and rate, :class:`Simulator` yields
``(arrival_us, Event)`` in arrival order, each event held back until its arrival time (its server's delay), so
arrival order differs from event-time order as it does on a real network. Same inputs, same sequence; tests
and replays never sleep. The payload fast path (``streaming.rules.payloads``) builds each event's wire format
byte-identical to ``Event.payload()``, several times cheaper."""

from __future__ import annotations

import heapq
import math
import random
import sys
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streaming.rules.payloads import Record, fast_payload, iso_from_ms, payload_text, record_payload
from streaming.rules.scenarios import Churn, Scenario, get_scenario
from streaming.rules.server_profiles import DELAY_BITS, MAX_PLAYERS, MIN_PLAYERS, ServerProfile
from streaming.schema.config import ConfigError
from watermark_client.events import Event

__all__ = ["Record", "Simulator", "exodus_target", "fast_payload", "generate", "payload_text", "record_payload"]
"""What callers import from here: the simulator, and the payload fast path beside it (``streaming.rules.payloads``)."""

ASAP_TIMELINE_RATE = 100_000
"""Events per second of event time when ``rate=0`` (write as fast as possible):
close to what one process writes, so event time stays near wall-clock time."""
_RING_MS = 1 << 15  # ~33 s: normal delays stay in the ring, late bursts go beyond


@dataclass(frozen=True)
class _Population:
    """What a run of one server starts from; built once per Simulator (100k player ids
    take a noticeable fraction of a second, which a paced run would start out behind)."""

    players: tuple[str, ...]
    target: int
    delays: list[int]

    @classmethod
    def build(cls, profile: ServerProfile, rate: float) -> _Population:
        want_online = max(1, round(rate * profile.heartbeat_ms / 1000))
        size = profile.players or min(MAX_PLAYERS, max(MIN_PLAYERS, math.ceil(want_online / profile.online_fraction)))
        width = max(5, len(str(size - 1)))
        pad, prefix = 10**width, f"{profile.name}-p"
        players = tuple(prefix + str(pad + i)[1:] for i in range(size))  # A-p00042
        target = max(1, min(want_online, int(size * profile.online_fraction)))
        return cls(players, target, profile.delay.table_us())


class _ServerState:
    """Mutable per-server simulation state."""

    def __init__(self, index: int, profile: ServerProfile, population: _Population, seed: int,
                 start_us: int, online: Sequence[str] = ()) -> None:
        self.index = index
        self.name = profile.name
        rng = random.Random(f"{seed}:{profile.name}")
        self.rand = rng.random
        self.bits = rng.getrandbits
        self.delays = population.delays
        self.target = population.target
        # players already online carry on (a switch of scenario changes how the game plays, not who plays)
        self.online: deque[str] = deque()
        self.offline = list(population.players)
        if online:
            known = set(self.offline)
            self.online.extend(dict.fromkeys(p for p in online if p in known))
            carried = set(self.online)
            self.offline = [p for p in self.offline if p not in carried]
        self.churn = profile.churn
        self.prefix = f"{profile.name}-"
        self.skew_us = profile.clock_skew_ms * 1000
        self.burst = profile.burst
        self.burst_spec = None if profile.burst is None else (
            start_us + profile.burst.offset_ms * 1000, profile.burst.period_ms * 1000, profile.burst.duration_ms * 1000)
        self.burst_late = [-1, 0]  # [window, lateness_us] of the current chunk
        self.outages = tuple((start_us + o.start_ms * 1000, o.duration_ms * 1000, (o.every_ms or 0) * 1000,
                              o.backfill) for o in profile.outages)
        self.exodus = tuple((start_us + x.start_ms * 1000, x.duration_ms * 1000, (x.every_ms or 0) * 1000,
                             int(population.target * x.keep)) for x in profile.exodus)
        self.seed = seed
        self.full = population.target
        self.daily = profile.daily
        # The curve's target is computed once per 1/1440 of its day (a minute of a real day), not per event.
        self.daily_step_ms = max(1, profile.daily.day_ms // 1440) if profile.daily is not None else 0
        self.daily_at = -1

    def daily_target(self, t_ms: int) -> int:
        """Players the server keeps online at ``t_ms`` by its daily curve (at least one)."""
        at = t_ms // self.daily_step_ms
        if at != self.daily_at:
            assert self.daily is not None
            self.daily_at, self.target = at, max(1, round(self.full * self.daily.share(at * self.daily_step_ms)))
        return self.target

    def burst_lateness_us(self, window: int) -> int:
        """Per chunk, from its own seeded stream, so it does not depend on event counts."""
        if self.burst_late[0] != window:
            b = self.burst
            assert b is not None
            u = random.Random(f"{self.seed}:{self.name}:burst:{window}").random()
            self.burst_late[:] = [window, (b.lateness_min_ms + int(u * (b.lateness_max_ms - b.lateness_min_ms))) * 1000]
        return self.burst_late[1]

    def hot(self) -> tuple[Any, ...]:
        """Everything the per-event loop reads, unpacked in one step."""
        return (self, self.index, self.name, self.prefix, self.online, self.offline, self.target, self.churn,
                self.rand, self.bits, self.delays, self.burst_spec, self.burst_late, self.outages, self.skew_us,
                self.exodus)

_PICK_BITS = 16


def _pick_table(shares: list[float], items: list[object]) -> list[object]:
    """2**16 slots split by share (largest remainder), so choosing a server is one getrandbits."""
    size = 1 << _PICK_BITS
    exact = [sh * size for sh in shares]
    counts = [int(x) for x in exact]
    by_remainder = sorted(range(len(shares)), key=lambda i: exact[i] - counts[i], reverse=True)
    for i in by_remainder[: size - sum(counts)]:
        counts[i] += 1
    return [item for item, c in zip(items, counts, strict=True) for _ in range(c)]


class Simulator:
    """Reproducible event sequence for one scenario, in arrival order.

    Event times are spaced ``1/rate`` apart (milliseconds, UTC) from
    ``start_us``; each slot goes to a server drawn by share. ``count`` events are
    generated (``None``: endless) and all of them are delivered, including any
    still in flight, so a finished run is a complete data set.
    """

    def __init__(self, scenario: str | Scenario, *, seed: int, start_us: int, rate: float,
                 count: int | None = None, online: Mapping[str, Sequence[str]] | None = None) -> None:
        self.scenario = get_scenario(scenario) if isinstance(scenario, str) else scenario
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate < 0:
            raise ConfigError(f"rate must be a number >= 0 events/s (0 = as fast as possible), got {rate!r}")
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
            raise ConfigError(f"count must be an integer >= 0 (or None for endless), got {count!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError(f"seed must be an integer, got {seed!r}")
        self.seed = seed
        self.start_us = start_us - start_us % 1000  # event times have millisecond precision
        self.rate = rate
        self.count = count
        self.timeline_rate = rate or ASAP_TIMELINE_RATE
        self._rate_milli = max(1, round(self.timeline_rate * 1000))  # per 1000 s: exact integer spacing
        total = sum(s.share for s in self.scenario.servers)
        self._shares = [s.share / total for s in self.scenario.servers]
        self.regions: dict[str, str] = {p.name: p.region for p in self.scenario.servers if p.region is not None}
        """Each server's region, carried in its events (none when the scenario names none)."""
        self._populations = [_Population.build(p, self.timeline_rate * sh)
                             for p, sh in zip(self.scenario.servers, self._shares, strict=True)]
        self._online_at_start = dict(online or {})
        self._running: list[_ServerState] = []

    def online_now(self) -> dict[str, tuple[str, ...]]:
        """Who is online on each server as far as :meth:`records` has generated (none before it starts):
        what a following simulation starts from, so a switch does not replace the players."""
        return {s.name: tuple(s.online) for s in self._running}

    def _states(self) -> list[_ServerState]:
        return [_ServerState(i, p, pop, self.seed, self.start_us, self._online_at_start.get(p.name, ()))
                for i, (p, pop) in enumerate(zip(self.scenario.servers, self._populations, strict=True))]

    def players(self, server: str) -> list[str]:
        """The population of one server: every player id that can appear."""
        self.scenario.server(server)
        return next(list(pop.players) for p, pop in zip(self.scenario.servers, self._populations, strict=True)
                    if p.name == server)

    def __iter__(self) -> Iterator[tuple[int, Event]]:
        regions = self.regions
        for arrival, _seq, server, player, event_time_us, kind, event_id, _iso in self.records():
            yield arrival, Event(server, player, event_time_us, kind, event_id, regions.get(server))

    def records(self) -> Iterator[Record]:
        """The same sequence as iterating, as plain tuples: what the writer consumes,
        because building a frozen dataclass per event costs more than generating it."""
        churn = self.scenario.churn
        return self._records() if churn is None else self._churned(self._records(), churn)

    def _churned(self, records: Iterator[Record], churn: Churn) -> Iterator[Record]:
        """The records with each slot's server named by its generation (:class:`Churn`): a player online on a
        replaced server logs out there at the replacement's moment and logs in on the new one, with their next
        event; each new name's region is its slot's (:attr:`regions`)."""
        slots = {p.name: i for i, p in enumerate(self.scenario.servers)}
        n, start_ms = len(slots), self.start_us // 1000
        regions = self.regions
        slot_region = dict(regions)
        names: dict[tuple[str, int], str] = {}
        players: dict[tuple[str, str], tuple[int, bool]] = {}  # (slot, player) -> (generation, online there)
        for rec in records:
            arrival, seq, slot, player, event_us, kind, event_id, iso = rec
            k = slots[slot]
            g = churn.generation(k, n, event_us // 1000 - start_ms)
            name = names.get((slot, g))
            if name is None:
                name = names[(slot, g)] = Churn.name(slot, g)
                names.pop((slot, g - 2), None)  # bounded: the generations still playing
                if slot in slot_region:
                    regions[name] = slot_region[slot]
            before = players.get((slot, player))
            if before is not None and before[0] < g and before[1]:  # moved: out of the old one, into the new
                at_ms = start_ms + churn.starts_ms(k, n, g)
                old = names.get((slot, before[0])) or Churn.name(slot, before[0])
                yield (arrival, seq, old, player, at_ms * 1000, "logout", f"{event_id}-out", iso_from_ms(at_ms))
                if kind != "login":
                    yield (arrival, seq, name, player, event_us, "login", f"{event_id}-in", iso)
            players[(slot, player)] = (g, kind != "logout")
            yield (arrival, seq, name, player, event_us, kind, event_id, iso)

    def _records(self) -> Iterator[Record]:
        states = self._running = self._states()
        pick = _pick_table(self._shares, [s.hot() for s in states])
        choose = random.Random(f"{self.seed}:schedule").getrandbits
        seqs = [0] * len(states)
        start, den = self.start_us, self._rate_milli
        limit = sys.maxsize if self.count is None else self.count
        # Events wait in per-millisecond buckets of their arrival time: a ring for the
        # next _RING_MS, a heap of bucket keys beyond (late bursts). Sorting a bucket
        # costs far less than sifting every event through a heap of 100k; same order.
        ring: list[list[Record]] = [[] for _ in range(_RING_MS)]
        mask = _RING_MS - 1
        in_ring = 0
        base = start // 1000  # every held event arrives at or after this millisecond
        far: dict[int, list[Record]] = {}
        far_keys: list[int] = []
        push, pop = heapq.heappush, heapq.heappop
        made = 0
        slot = 0
        iso_ms, iso = -1, ""
        while True:
            if made < limit:
                t = start + slot * 1_000_000_000 // den
                slot += 1
                t_ms = t // 1000
            else:
                t_ms = sys.maxsize  # done generating: deliver everything still held
                if not in_ring and not far_keys:
                    return
            if t_ms != iso_ms:  # a new millisecond: whatever arrives before it can go
                iso_ms = t_ms
                while base < t_ms:
                    if not in_ring:  # skip empty milliseconds in one step
                        if not far_keys or far_keys[0] >= t_ms:
                            base = t_ms
                            break
                        base = far_keys[0]
                    bucket = ring[base & mask]
                    if bucket:
                        in_ring -= len(bucket)
                        ring[base & mask] = []
                    if far_keys and far_keys[0] == base:
                        extra = far.pop(pop(far_keys))
                        bucket = bucket + extra if bucket else extra
                    if bucket:
                        bucket.sort()
                        yield from bucket
                    base += 1
                if made >= limit:
                    continue
                iso = iso_from_ms(t_ms)

            (state, k, name, prefix, online, offline, target, churn, rand, bits, delays, burst, burst_late, outages,
             skew, exodus) = pick[choose(_PICK_BITS)]
            backfill_until = 0
            if outages:
                idle = False
                for first, length, every, backfill in outages:
                    if t >= first:
                        phase = (t - first) % every if every else t - first
                        if phase < length:  # down: idle, or buffering until the link returns
                            idle = not backfill
                            backfill_until = t - phase + length
                            break
                if idle:
                    continue  # the server produces nothing

            if state.daily is not None:  # evening and night: the curve moves the server's target
                target = state.daily_target(t_ms)
            if exodus:
                target = exodus_target(exodus, t, target)
            r = rand()
            if (exodus or state.daily is not None) and len(online) > target:
                # players leaving: the server's next events are their logouts
                player = online.popleft()
                offline.append(player)
                kind = "logout"
            elif r >= churn + churn and len(online) >= target:
                player = online.popleft()
                online.append(player)
                kind = "heartbeat"
            elif len(online) < target:  # filling up (at start, or after a logout)
                j = int(r * len(offline))
                player = offline[j]
                offline[j] = offline[-1]
                offline.pop()
                online.append(player)
                kind = "login"
            elif r < churn:
                player = online.popleft()
                offline.append(player)
                kind = "logout"
            elif offline:
                j = int((r - churn) / churn * len(offline))
                player = offline[j]
                offline[j] = offline[-1]
                offline.pop()
                online.append(player)
                kind = "login"
            else:
                player = online.popleft()
                online.append(player)
                kind = "heartbeat"

            delay = delays[bits(DELAY_BITS)]
            arrival = t + delay
            if burst is not None and t >= burst[0]:
                window, phase = divmod(t - burst[0], burst[1])
                if phase < burst[2]:  # held back with this chunk, delivered together
                    late = burst_late[1] if burst_late[0] == window else state.burst_lateness_us(window)
                    arrival = burst[0] + window * burst[1] + burst[2] + late + delay
            if backfill_until and arrival < backfill_until + delay:
                arrival = backfill_until + delay

            seq = seqs[k]
            seqs[k] = seq + 1
            rec = (arrival, made, name, player, t_ms * 1000 + skew, kind,
                   prefix + str(1_000_000_000 + seq)[1:] if seq < 1_000_000_000 else f"{prefix}{seq}",
                   iso_from_ms(t_ms + skew // 1000) if skew else iso)
            arrival_ms = arrival // 1000
            if arrival_ms - base < _RING_MS:
                ring[arrival_ms & mask].append(rec)
                in_ring += 1
            else:
                bucket = far.get(arrival_ms)
                if bucket is None:
                    far[arrival_ms] = [rec]
                    push(far_keys, arrival_ms)
                else:
                    bucket.append(rec)
            made += 1


def exodus_target(exodus: tuple[tuple[int, int, int, int], ...], t: int, target: int) -> int:
    """Players a server keeps online at ``t``: fewer during an exodus."""
    for first, length, every, kept in exodus:
        if t >= first:
            phase = (t - first) % every if every else t - first
            if phase < length:
                return kept
    return target


def generate(scenario: str | Scenario, seed: int, start_us: int, rate: float, count: int) -> list[tuple[int, Event]]:
    """``count`` events as ``(arrival_us, event)`` in arrival order (see :class:`Simulator`)."""
    return list(Simulator(scenario, seed=seed, start_us=start_us, rate=rate, count=count))

