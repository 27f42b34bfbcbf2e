"""Simulated game servers feeding the input Redis Stream.

Each server has its own player population and its own network: an event
happens at ``event_time`` on the server and reaches Redis only after that
server's delay, so arrival order differs from event-time order, and an overseas
server's events can arrive far behind the watermark. That disorder is what the
dashboard exists to show, so the simulator makes it explicit and reproducible.

Two layers, so tests and replays never sleep:

* :class:`Simulator` is pure: given a scenario, seed, start time and rate it
  yields ``(arrival_us, Event)`` in arrival order, holding each event back
  until its arrival time. Same inputs, same sequence.
* :class:`StreamWriter` XADDs every event whose arrival time has come on an
  injected :class:`Clock`, many per round trip, then sleeps until the next one.

``wm-generator --scenario overseas-lag --rate 1000``; see
``--help``. With ``--follow`` it runs whatever ``{ns}:control`` asks for
(``watermark.apps.follow``). Scenarios live in :data:`SCENARIOS`; a new one is a new
:class:`Scenario` value, usually :meth:`Scenario.replace_server` of an old one.
"""

from __future__ import annotations

import argparse
import heapq
import logging
import math
import random
import re
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from types import FrameType
from typing import Any, Protocol

import redis

try:
    import hiredis
except ImportError:  # pragma: no cover - redis-py works without it, only slower
    hiredis = None

from watermark.schema.config import Config, ConfigError
from watermark.schema.events import KINDS, Event, parse_entry_id
from watermark.schema.keys import KeySchema
from watermark.schema.timeutil import iso_from_us, parse_iso_us
from watermark.store.redis_conn import connect

log = logging.getLogger("watermark.apps.generator")

ASAP_TIMELINE_RATE = 100_000
"""Events per second of event time when ``rate=0`` (write as fast as possible):
close to what one process writes, so event time stays near wall-clock time."""

MIN_PLAYERS = 20
MAX_PLAYERS = 1_000_000
"""Per-server population bounds; above the cap, heartbeats just get more frequent. The cap leaves room for
game scale: at 50,000 events/s and a heartbeat every 5 s, about 250,000 players are online."""

_RING_MS = 1 << 15  # ~33 s: normal delays stay in the ring, late bursts go beyond
_DELAY_BITS = 12
_DELAY_TABLE_SIZE = 1 << _DELAY_BITS
_SERVER_NAME = re.compile(r"^[A-Za-z0-9_]{1,16}$")


# --------------------------------------------------------------------------- scenario parameters


@dataclass(frozen=True)
class DelayModel:
    """Network delay from a server to Redis: log-normal around ``median_ms``, clipped.

    Log-normal because real latency has a hard floor and a long right tail;
    ``sigma`` is the jitter (0 = constant).
    """

    min_ms: int
    median_ms: int
    max_ms: int
    sigma: float = 0.5

    def __post_init__(self) -> None:
        if self.min_ms < 0:
            raise ConfigError(f"delay min_ms must not be negative, got {self.min_ms}")
        if not self.min_ms <= self.median_ms <= self.max_ms:
            raise ConfigError(
                f"delay median_ms ({self.median_ms}) must be between min_ms ({self.min_ms}) "
                f"and max_ms ({self.max_ms})"
            )
        if not (self.sigma >= 0 and math.isfinite(self.sigma)):
            raise ConfigError(f"delay sigma must be a finite number >= 0, got {self.sigma}")

    def table_us(self, size: int = _DELAY_TABLE_SIZE) -> list[int]:
        """Equally likely delays (quantiles), so drawing one costs a getrandbits and an index."""
        normal = NormalDist()
        lo, hi = self.min_ms * 1000, self.max_ms * 1000
        out = []
        for i in range(size):
            z = normal.inv_cdf((i + 0.5) / size)
            us = round(self.median_ms * 1000 * math.exp(self.sigma * z))
            out.append(min(hi, max(lo, us)))
        return out


@dataclass(frozen=True)
class BurstModel:
    """Every ``period_ms`` a ``duration_ms`` chunk of a server's events is held back
    and delivered together ``lateness`` later (uniform in [min, max], drawn per burst).

    The first chunk starts ``offset_ms`` after the simulation start.
    """

    period_ms: int
    duration_ms: int
    lateness_min_ms: int
    lateness_max_ms: int
    offset_ms: int = 0

    def __post_init__(self) -> None:
        if self.period_ms <= 0:
            raise ConfigError(f"burst period_ms must be positive, got {self.period_ms}")
        if not 0 < self.duration_ms <= self.period_ms:
            raise ConfigError(
                f"burst duration_ms ({self.duration_ms}) must be positive and at most period_ms ({self.period_ms})"
            )
        if not 0 <= self.lateness_min_ms <= self.lateness_max_ms:
            raise ConfigError(
                f"burst lateness_min_ms ({self.lateness_min_ms}) must be >= 0 and at most "
                f"lateness_max_ms ({self.lateness_max_ms})"
            )
        if self.offset_ms < 0:
            raise ConfigError(f"burst offset_ms must not be negative, got {self.offset_ms}")


@dataclass(frozen=True)
class Outage:
    """A server is unreachable from ``start_ms`` (after the simulation start) for ``duration_ms``,
    and again every ``every_ms`` after that if set, so an endless live run keeps showing it.

    With ``backfill`` it keeps playing and delivers the buffered events when the
    link returns; without, it is idle (produces nothing) for that time.
    """

    start_ms: int
    duration_ms: int
    backfill: bool = True
    every_ms: int | None = None

    def __post_init__(self) -> None:
        if self.start_ms < 0 or self.duration_ms <= 0:
            raise ConfigError(
                f"outage needs start_ms >= 0 and duration_ms > 0, got {self.start_ms} and {self.duration_ms}"
            )
        if self.every_ms is not None and self.every_ms <= self.duration_ms:
            raise ConfigError(
                f"outage every_ms ({self.every_ms}) must be longer than duration_ms ({self.duration_ms})"
            )


@dataclass(frozen=True)
class ServerProfile:
    """One simulated game server: its share of the total rate, network, and players.

    ``clock_skew_ms`` shifts the server's reported event times (its clock is
    wrong), not when events happen or arrive. ``players=None`` sizes the
    population so each online player heartbeats about every ``heartbeat_ms``.
    """

    name: str
    share: float
    delay: DelayModel
    burst: BurstModel | None = None
    outages: tuple[Outage, ...] = ()
    clock_skew_ms: int = 0
    heartbeat_ms: int = 5_000
    online_fraction: float = 0.6
    churn: float = 0.02
    players: int | None = None

    def __post_init__(self) -> None:
        where = f"server {self.name!r}"
        if not _SERVER_NAME.match(self.name):
            raise ConfigError(f"{where}: name must be 1-16 letters, digits or '_'")
        if not (self.share > 0 and math.isfinite(self.share)):
            raise ConfigError(f"{where}: share must be a positive number, got {self.share}")
        if self.heartbeat_ms <= 0:
            raise ConfigError(f"{where}: heartbeat_ms must be positive, got {self.heartbeat_ms}")
        if not 0 < self.online_fraction < 1:
            raise ConfigError(f"{where}: online_fraction must be in (0, 1), got {self.online_fraction}")
        if not 0 <= self.churn <= 0.5:
            raise ConfigError(f"{where}: churn must be in [0, 0.5], got {self.churn}")
        if self.players is not None and self.players < 2:
            raise ConfigError(f"{where}: players must be at least 2, got {self.players}")


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    servers: tuple[ServerProfile, ...]

    def __post_init__(self) -> None:
        if not self.servers:
            raise ConfigError(f"scenario {self.name!r} has no servers")
        names = [s.name for s in self.servers]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(f"scenario {self.name!r}: duplicate server names {', '.join(dupes)}")

    def server(self, name: str) -> ServerProfile:
        for s in self.servers:
            if s.name == name:
                return s
        raise ConfigError(f"scenario {self.name!r} has no server {name!r}")

    def replace_server(self, server: str, **changes: object) -> Scenario:
        """A copy with one server's parameters changed; how derived scenarios are built."""
        self.server(server)
        return replace(self, servers=tuple(replace(s, **changes) if s.name == server else s  # type: ignore[arg-type]
                                           for s in self.servers))


HOME_DELAY = DelayModel(min_ms=20, median_ms=50, max_ms=150, sigma=0.5)
OVERSEAS_DELAY = DelayModel(min_ms=500, median_ms=4_000, max_ms=25_000, sigma=0.7)
LATE_BURST = BurstModel(period_ms=60_000, duration_ms=5_000, offset_ms=20_000,
                        lateness_min_ms=120_000, lateness_max_ms=300_000)

_STEADY = Scenario(
    "steady",
    "all servers close by: 20-150 ms delay, little disorder",
    (ServerProfile("A", 0.40, HOME_DELAY), ServerProfile("B", 0.35, HOME_DELAY), ServerProfile("C", 0.25, HOME_DELAY)),
)
_OVERSEAS_LAG = replace(
    _STEADY.replace_server("C", delay=OVERSEAS_DELAY),
    name="overseas-lag",
    description="C is overseas: 0.5-25 s delay (median 4 s) with heavy jitter",
)
_LATE_BURST = replace(
    _OVERSEAS_LAG.replace_server("C", burst=LATE_BURST),
    name="late-burst",
    description="overseas-lag, and every 60 s a 5 s chunk of C's events arrives 2-5 min late",
)

OUTAGE_EVERY_MS = 300_000
"""Outages of the idle-server and outage-and-backfill scenarios recur this often in an endless run."""
_IDLE_SERVER = replace(
    _STEADY.replace_server("B", outages=(Outage(30_000, 90_000, backfill=False, every_ms=OUTAGE_EVERY_MS),)),
    name="idle-server",
    description="steady, but B goes silent 30 s after the start for 90 s (again every 5 min): no events at all, "
                "so a per-server watermark would stall on B",
)
_CLOCK_SKEW = replace(
    _STEADY.replace_server("A", clock_skew_ms=20_000),
    name="clock-skew",
    description="steady, but A's clock runs 20 s ahead: its events are accepted (under MAX_FUTURE_SKEW) and "
                "drag the watermark 20 s forward, so B and C look 20 s late",
)
_OUTAGE_AND_BACKFILL = replace(
    _STEADY.replace_server("C", outages=(Outage(30_000, 60_000, backfill=True, every_ms=OUTAGE_EVERY_MS),)),
    name="outage-and-backfill",
    description="steady, but C loses its link 30 s after the start for 60 s (again every 5 min) and then "
                "delivers the whole backlog at once",
)

SCENARIOS: dict[str, Scenario] = {s.name: s for s in (_STEADY, _OVERSEAS_LAG, _LATE_BURST, _IDLE_SERVER,
                                                       _CLOCK_SKEW, _OUTAGE_AND_BACKFILL)}


LOST_REDIS = (redis.ConnectionError, redis.TimeoutError, OSError)
"""What losing Redis looks like to the writer: its raw reply path raises OSError."""


def scenarios_help() -> str:
    """Every scenario with its description, for a command's ``--help``."""
    return "scenarios: " + "; ".join(f"{s.name}: {s.description}" for s in SCENARIOS.values())


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ConfigError(f"unknown scenario {name!r}; choose one of: {', '.join(SCENARIOS)}") from None


# --------------------------------------------------------------------------- payload fast path

_ISO_SECOND: dict[int, str] = {}
_KIND_SET = frozenset(KINDS)
_QUOTES_IN_PAYLOAD = 20  # 5 keys + 5 string values, each quoted


def _iso_ms(ms: int) -> str:
    """``iso_from_us(ms * 1000)`` with the date-time part cached per second (strftime is slow)."""
    sec, frac = divmod(ms, 1000)
    prefix = _ISO_SECOND.get(sec)
    if prefix is None:
        if len(_ISO_SECOND) > 65_536:
            _ISO_SECOND.clear()
        prefix = _ISO_SECOND[sec] = iso_from_us(sec * 1_000_000)[:-5]  # strip ".000Z"
    return f"{prefix}.{frac:03d}Z"


def _payload_text(ev: Event) -> str:
    """``ev.payload()`` as latin-1 text (one char per byte), built with an f-string.

    Anything orjson would escape, or that is not a plain string, falls back to
    ``Event.payload()``, so the bytes are always identical.
    """
    t = ev.event_time_us
    if t % 1000 or ev.kind not in _KIND_SET or type(ev.event_id) is not str or type(ev.player_id) is not str \
            or type(ev.server) is not str:
        return ev.payload().decode("latin-1")
    text = (f'{{"event_id":"{ev.event_id}","server":"{ev.server}","player_id":"{ev.player_id}",'
            f'"kind":"{ev.kind}","event_time":"{_iso_ms(t // 1000)}"}}')
    if text.count('"') != _QUOTES_IN_PAYLOAD or "\\" in text or not text.isascii() or not text.isprintable():
        return ev.payload().decode("latin-1")
    return text


def fast_payload(ev: Event) -> bytes:
    """Byte-identical to ``ev.payload()``, several times cheaper."""
    return _payload_text(ev).encode("latin-1")


def record_payload(rec: Record) -> bytes:
    """The payload of a :meth:`Simulator.records` tuple; no escaping checks, because
    generated names are validated ASCII. Same template as the writer's inline copy."""
    _arrival, _seq, server, player, _event_time_us, kind, event_id, iso = rec
    return (f'{{"event_id":"{event_id}","server":"{server}","player_id":"{player}",'
            f'"kind":"{kind}","event_time":"{iso}"}}').encode()


# --------------------------------------------------------------------------- simulator


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
                 start_us: int) -> None:
        self.index = index
        self.name = profile.name
        rng = random.Random(f"{seed}:{profile.name}")
        self.rand = rng.random
        self.bits = rng.getrandbits
        self.delays = population.delays
        self.target = population.target
        self.online: deque[str] = deque()
        self.offline = list(population.players)
        self.churn = profile.churn
        self.prefix = f"{profile.name}-"
        self.skew_us = profile.clock_skew_ms * 1000
        self.burst = profile.burst
        self.burst_spec = None if profile.burst is None else (
            start_us + profile.burst.offset_ms * 1000, profile.burst.period_ms * 1000, profile.burst.duration_ms * 1000)
        self.burst_late = [-1, 0]  # [window, lateness_us] of the current chunk
        self.outages = tuple((start_us + o.start_ms * 1000, o.duration_ms * 1000, (o.every_ms or 0) * 1000,
                              o.backfill) for o in profile.outages)
        self.seed = seed

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
                self.rand, self.bits, self.delays, self.burst_spec, self.burst_late, self.outages, self.skew_us)


Record = tuple[int, int, str, str, int, str, str, str]
"""``(arrival_us, seq, server, player_id, event_time_us, kind, event_id, event_time_iso)``.

``seq`` is the generation index, which breaks arrival-time ties deterministically;
``event_time_iso`` is formatted here, where event times come in order and
consecutive events mostly share a millisecond, rather than in arrival order."""

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
                 count: int | None = None) -> None:
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
        self._populations = [_Population.build(p, self.timeline_rate * sh)
                             for p, sh in zip(self.scenario.servers, self._shares, strict=True)]

    def _states(self) -> list[_ServerState]:
        return [_ServerState(i, p, pop, self.seed, self.start_us)
                for i, (p, pop) in enumerate(zip(self.scenario.servers, self._populations, strict=True))]

    def players(self, server: str) -> list[str]:
        """The population of one server: every player id that can appear."""
        self.scenario.server(server)
        return next(list(pop.players) for p, pop in zip(self.scenario.servers, self._populations, strict=True)
                    if p.name == server)

    def __iter__(self) -> Iterator[tuple[int, Event]]:
        for arrival, _seq, server, player, event_time_us, kind, event_id, _iso in self.records():
            yield arrival, Event(server, player, event_time_us, kind, event_id)

    def records(self) -> Iterator[Record]:
        """The same sequence as iterating, as plain tuples: what the writer consumes,
        because building a frozen dataclass per event costs more than generating it."""
        states = self._states()
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
                iso = _iso_ms(t_ms)

            (state, k, name, prefix, online, offline, target, churn, rand, bits, delays, burst, burst_late, outages,
             skew) = pick[choose(_PICK_BITS)]
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

            r = rand()
            if r >= churn + churn and len(online) >= target:
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

            delay = delays[bits(_DELAY_BITS)]
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
                   _iso_ms(t_ms + skew // 1000) if skew else iso)
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


def generate(scenario: str | Scenario, seed: int, start_us: int, rate: float, count: int) -> list[tuple[int, Event]]:
    """``count`` events as ``(arrival_us, event)`` in arrival order (see :class:`Simulator`)."""
    return list(Simulator(scenario, seed=seed, start_us=start_us, rate=rate, count=count))


# --------------------------------------------------------------------------- clocks


class Clock(Protocol):
    """Time source of the writer, injected so tests drive it without sleeping."""

    def now_us(self) -> int: ...

    def sleep_until(self, us: int) -> None: ...


class RealClock:
    """Wall-clock time; ``sleep_until`` returns early once ``stop`` is set (SIGTERM)."""

    def __init__(self, stop: threading.Event | None = None) -> None:
        self.stop = stop or threading.Event()

    def now_us(self) -> int:
        return time.time_ns() // 1000

    def sleep_until(self, us: int) -> None:
        delay = us - self.now_us()
        if delay > 0:
            self.stop.wait(delay / 1e6)


class ManualClock:
    """A clock that only moves when told; ``sleep_until`` jumps there instantly."""

    def __init__(self, start_us: int = 0) -> None:
        self._now = start_us
        self.sleeps = 0

    def now_us(self) -> int:
        return self._now

    def advance(self, us: int) -> None:
        if us < 0:
            raise ValueError(f"a clock cannot go back: advance({us})")
        self._now += us

    def sleep_until(self, us: int) -> None:
        self.sleeps += 1
        self._now = max(self._now, us)


# --------------------------------------------------------------------------- writer


class WriteError(RuntimeError):
    """Redis rejected some XADDs (e.g. an explicit ID not above the stream's last ID)."""


@dataclass
class WriteStats:
    """Confirmed progress; passed to ``on_batch`` after every batch Redis acknowledged."""

    written: int = 0
    per_server: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    last_id: str | None = None
    lag_us: int = 0
    """How far behind its arrival time the newest batch was sent (paced mode)."""


def stream_last_id(client: redis.Redis, stream_key: str) -> tuple[int, int]:
    """The stream's last generated ID (counts deleted entries too); ``(0, 0)`` if there is none."""
    try:
        info = client.xinfo_stream(stream_key)
    except redis.ResponseError as exc:
        if "no such key" in str(exc).lower():
            return 0, 0
        raise
    last = info.get("last-generated-id", info.get(b"last-generated-id"))
    return parse_entry_id(last) if last else (0, 0)


class _Replies:
    """Reads pipelined replies straight off the connection's socket with a hiredis Reader.

    redis-py's ``read_response`` costs about 3 us per reply (more than Redis takes
    for the XADD); this is ~0.3 us. Only used on a connection this writer holds
    exclusively and between complete batches, so no other reader shares the socket.
    Without hiredis it falls back to ``read_response``.
    """

    def __init__(self, conn: redis.connection.Connection) -> None:
        self.conn = conn
        sock = getattr(conn, "_sock", None)
        self.reader = hiredis.Reader() if hiredis is not None and sock is not None else None
        self.sock = sock

    def read(self, n: int) -> tuple[object, int, str | None]:
        """``(last reply, number of error replies, first error message)``."""
        reader = self.reader
        last: object = None
        errors = 0
        first: str | None = None
        if reader is None:
            for _ in range(n):
                try:
                    last = self.conn.read_response(disable_decoding=True)
                except redis.ResponseError as exc:
                    errors += 1
                    first = first or str(exc)
            return last, errors, first
        gets, recv, feed = reader.gets, self.sock.recv, reader.feed
        error_type = hiredis.ReplyError
        got = 0
        while got < n:
            reply = gets()
            if reply is False:
                data = recv(1 << 18)
                if not data:
                    raise redis.ConnectionError("Redis closed the connection while replies were pending")
                feed(data)
                continue
            got += 1
            if type(reply) is error_type:
                errors += 1
                first = first or str(reply)
            else:
                last = reply
        return last, errors, first


class StreamWriter:
    """XADDs simulated events when their arrival time comes, up to ``batch_size`` per round trip.

    Without a clock it writes as fast as possible. With one, an event is due at
    ``arrival_us + offset_us`` clock time; the writer sleeps until the next due
    event, lingering up to ``linger_us`` so a busy stream is sent in batches
    rather than one round trip per event. One batch stays in flight while the
    next is built, so Redis and Python work in parallel.

    ``explicit_ids`` uses ``{arrival_ms}-{seq}`` instead of ``*``, kept strictly
    above the stream's last ID, so ingest times are the simulated arrival times.
    """

    def __init__(self, client: redis.Redis, stream_key: str, *, explicit_ids: bool = False,
                 batch_size: int = 2_000, clock: Clock | None = None, offset_us: int = 0, linger_us: int = 1_000,
                 stop: threading.Event | None = None,
                 on_batch: Callable[[WriteStats], None] | None = None) -> None:
        if batch_size < 1:
            raise ConfigError(f"batch_size must be at least 1, got {batch_size}")
        self.client = client
        self.stream_key = stream_key
        self.explicit_ids = explicit_ids
        self.batch_size = batch_size
        self.clock = clock
        self.offset_us = offset_us
        self.linger_us = max(0, linger_us)
        self.stop = stop
        self.on_batch = on_batch
        self.stats = WriteStats()
        key = stream_key.encode()
        self._key_frame = f"${len(key)}\r\n{key.decode('latin-1')}\r\n"
        self._last = (0, 0)
        self._replies: _Replies

    def run(self, events: Iterable[tuple[int, Event]] | Simulator) -> WriteStats:
        """Write until ``events`` is exhausted or ``stop`` is set; a :class:`Simulator`
        is consumed through its cheaper :meth:`~Simulator.records`."""
        raw = isinstance(events, Simulator)
        it: Iterator[tuple[int, Event]] | Iterator[Record] = events.records() if raw else iter(events)
        return self.resume(it, raw)

    def resume(self, it: Iterator[Any], raw: bool) -> WriteStats:
        """Go on writing from ``it`` (after a lost connection, with a new ``client``)."""
        if self.explicit_ids:
            self._last = max(self._last, stream_last_id(self.client, self.stream_key))
        pool = self.client.connection_pool
        conn = pool.get_connection()
        try:
            conn.connect()
            self._replies = _Replies(conn)
            self._loop(conn, it, raw)
        except BaseException:
            conn.disconnect()  # replies of a batch in flight would be read by the next user
            raise
        finally:
            pool.release(conn)
        return self.stats

    def _loop(self, conn: redis.connection.Connection, it: Iterator[Any], raw: bool) -> None:
        clock, offset, linger, stop = self.clock, self.offset_us, self.linger_us, self.stop
        inflight: tuple[int, dict[str, int]] | None = None
        nxt = next(it, None)
        while nxt is not None:
            if stop is not None and stop.is_set():
                break
            horizon: int | None = None
            if clock is not None:
                horizon = clock.now_us() - offset
                if nxt[0] > horizon:
                    if inflight is not None:  # confirm before idling
                        self._confirm(conn, *inflight)
                        inflight = None
                    clock.sleep_until(max(nxt[0], horizon + linger) + offset)
                    continue
                self.stats.lag_us = horizon - nxt[0]
            data, n, counts, nxt = self._build(nxt, it, horizon, raw)
            conn.send_packed_command([data], check_health=False)
            if inflight is not None:  # the previous batch: Redis worked on it while this one was built
                self._confirm(conn, *inflight)
            inflight = (n, counts)
        if inflight is not None:
            self._confirm(conn, *inflight)

    def _build(self, item: Any, it: Iterator[Any], horizon: int | None, raw: bool,
               ) -> tuple[bytes, int, dict[str, int], Any]:
        """RESP for one batch, packed by hand (redis-py's per-command packing costs more
        than generating the event). Text is latin-1 so the stream key can be any bytes."""
        frames: list[str] = []
        append = frames.append
        counts: dict[str, int] = {}
        head = f"*5\r\n$4\r\nXADD\r\n{self._key_frame}"
        star_head = f"{head}$1\r\n*\r\n$1\r\ne\r\n"
        explicit = self.explicit_ids
        last_ms, last_seq = self._last
        limit = self.batch_size
        advance = it.__next__
        n = 0
        while True:
            if raw:
                arrival, _seq, server, player, _et, kind, eid, iso = item
                text = (f'{{"event_id":"{eid}","server":"{server}","player_id":"{player}",'
                        f'"kind":"{kind}","event_time":"{iso}"}}')
            else:
                arrival, ev = item
                server = ev.server
                text = _payload_text(ev)
            if explicit:
                ms = arrival // 1000
                if ms > last_ms:
                    last_ms, last_seq = ms, 0
                else:
                    last_seq += 1
                entry_id = f"{last_ms}-{last_seq}"
                append(f"{head}${len(entry_id)}\r\n{entry_id}\r\n$1\r\ne\r\n${len(text)}\r\n{text}\r\n")
            else:
                append(f"{star_head}${len(text)}\r\n{text}\r\n")
            counts[server] = counts.get(server, 0) + 1
            n += 1
            try:
                item = advance()
            except StopIteration:
                item = None
                break
            if n >= limit or (horizon is not None and item[0] > horizon):
                break
        self._last = (last_ms, last_seq)
        return "".join(frames).encode("latin-1"), n, counts, item

    def _confirm(self, conn: redis.connection.Connection, n: int, counts: dict[str, int]) -> None:
        """Read one batch's replies; all of them, even after an error, so the connection stays usable."""
        reply, errors, first_error = self._replies.read(n)
        stats = self.stats
        if errors:
            raise WriteError(f"{errors} of {n} XADDs to {self.stream_key!r} failed: {first_error}")
        stats.written += n
        stats.batches += 1
        per = stats.per_server
        for server, c in counts.items():
            per[server] = per.get(server, 0) + c
        if reply is not None:
            stats.last_id = reply.decode() if isinstance(reply, bytes) else str(reply)
        if self.on_batch is not None:
            self.on_batch(stats)


def write(client: redis.Redis, stream_key: str, events: Iterable[tuple[int, Event]] | Simulator, *,
          clock: Clock | None = None, explicit_ids: bool = False, batch_size: int = 2_000,
          offset_us: int = 0, linger_us: int = 1_000, stop: threading.Event | None = None,
          on_batch: Callable[[WriteStats], None] | None = None) -> WriteStats:
    """Write ``(arrival_us, event)`` pairs to ``stream_key``; see :class:`StreamWriter`."""
    return StreamWriter(client, stream_key, explicit_ids=explicit_ids, batch_size=batch_size, clock=clock,
                        offset_us=offset_us, linger_us=linger_us, stop=stop, on_batch=on_batch).run(events)


# --------------------------------------------------------------------------- CLI


class _Progress:
    """The periodic one-line summary; throttled here so the writer stays clock-agnostic."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self.t0 = self.t_last = time.monotonic()
        self.n_last = 0

    def __call__(self, stats: WriteStats, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.t_last < self.every_s:
            return
        rate = (stats.written - self.n_last) / max(now - self.t_last, 1e-9)
        if final:
            rate = stats.written / max(now - self.t0, 1e-9)
        servers = " ".join(f"{k}={v}" for k, v in sorted(stats.per_server.items()))
        log.info("%s written=%d rate=%.0f/s %s lag=%dms last_id=%s", "done" if final else "progress",
                 stats.written, rate, servers, max(0, stats.lag_us) // 1000, stats.last_id)
        self.t_last, self.n_last = now, stats.written


def _nonneg_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _positive_int(text: str) -> int:
    value = _nonneg_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be positive, got 0")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="wm-generator",
        description="Simulated game servers writing events to the input Redis Stream (REDIS_URL, "
                    "PIPELINE_NAMESPACE from the environment).",
        epilog=scenarios_help(),
    )
    p.add_argument("--scenario", default="steady", help="one of: " + ", ".join(SCENARIOS) + " (default: steady)")
    p.add_argument("--seed", type=int, default=None, help="random seed; the same seed, scenario, rate and start "
                   "give the same events in the same order (default: random, logged)")
    p.add_argument("--rate", type=float, default=1000.0,
                   help="events per second across all servers; 0 = as fast as possible (default: 1000)")
    p.add_argument("--count", type=_nonneg_int, default=None, help="stop after this many events (default: run until "
                   "SIGTERM); in-flight events are still delivered")
    p.add_argument("--start", default=None, help="ISO-8601 event time of the first event (default: now)")
    p.add_argument("--stream", default=None, help="stream key (default: {namespace}:events)")
    p.add_argument("--explicit-ids", action="store_true",
                   help="entry IDs from the simulated arrival time instead of Redis' clock")
    p.add_argument("--batch-size", type=_positive_int, default=2_000, help="max XADDs per round trip (default: 2000)")
    p.add_argument("--log-every", type=float, default=5.0, help="seconds between summary lines (default: 5)")
    p.add_argument("--follow", action="store_true",
                   help="follow {namespace}:control (the dashboard's Lab control page, wm-control): "
                        "--scenario and --rate only fill in what it does not set yet; a change of scenario or rate "
                        "restarts the simulation from now, stop pauses; status in {namespace}:generator")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s generator %(message)s")
    args = parse_args(argv)
    stop = threading.Event()
    clock = RealClock(stop)
    try:
        cfg = Config.from_env()
        start_us = parse_iso_us(args.start) if args.start else clock.now_us()
        seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
        if args.follow and (args.count is not None or args.start):
            raise ConfigError("--count and --start do not apply with --follow (it runs until stopped, from now)")
        sim = Simulator(args.scenario, seed=seed, start_us=start_us, rate=args.rate, count=args.count)
    except (ConfigError, ValueError) as exc:
        print(f"generator: error: {exc}", file=sys.stderr)
        return 2
    key = args.stream or KeySchema(cfg.namespace).events
    progress = _Progress(args.log_every)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt  # second signal: give up on the current batch
        log.info("%s: stopping after the current batch", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if args.follow:
        return _follow(args, cfg, seed, clock, stop, progress)
    log.info("scenario=%s seed=%d rate=%s count=%s start=%s stream=%s ids=%s", sim.scenario.name, seed,
             sim.rate or "max", sim.count if sim.count is not None else "endless", iso_from_us(sim.start_us),
             key, "explicit" if args.explicit_ids else "*")
    writer: StreamWriter | None = None

    def nap(seconds: float) -> None:
        stop.wait(seconds)

    def run() -> WriteStats:
        nonlocal writer
        client = connect(cfg.redis_url, sleep=nap)
        writer = StreamWriter(client, key, explicit_ids=args.explicit_ids, batch_size=args.batch_size,
                              clock=None if sim.rate == 0 else clock, offset_us=clock.now_us() - sim.start_us,
                              stop=stop, on_batch=progress)
        records = sim.records()
        while True:
            try:
                return writer.resume(records, raw=True)
            except LOST_REDIS as exc:
                if stop.is_set():
                    return writer.stats
                # A simulator need not be exact: the batches in flight may be lost or written twice,
                # and the pipeline counts whatever the stream holds.
                log.warning("lost Redis (%s); reconnecting, up to %d events in flight may be lost or doubled",
                            exc, 2 * args.batch_size)
                writer.client = connect(cfg.redis_url, sleep=nap, attempts=1_000, max_delay_s=5.0)

    return _exit_code(run, lambda: None if writer is None else writer.stats, progress, stop)


def _exit_code(run: Callable[[], WriteStats], written: Callable[[], WriteStats | None], progress: _Progress,
               stop: threading.Event) -> int:
    """Run the writing loop; the process's exit code, with a last progress line whatever happened:
    130 on a second Ctrl-C, 1 on a write or Redis error (0 if stopped while still waiting for Redis)."""
    try:
        stats = run()
    except KeyboardInterrupt:
        if (so_far := written()) is not None:
            progress(so_far, final=True)
        return 130
    except (WriteError, ConnectionError, redis.RedisError) as exc:
        so_far = written()
        if so_far is not None:
            progress(so_far, final=True)
        if stop.is_set() and so_far is None:
            return 0  # stopped while still waiting for Redis
        print(f"generator: error: {exc}", file=sys.stderr)
        return 1
    progress(stats, final=True)
    return 0


def _follow(args: argparse.Namespace, cfg: Config, seed: int, clock: RealClock, stop: threading.Event,
            progress: _Progress) -> int:
    """``--follow``: run what ``{ns}:control`` asks for (see ``watermark.apps.follow``)."""
    from watermark.apps.follow import Follower  # imported here because it imports this module

    def nap(seconds: float) -> None:
        stop.wait(seconds)

    log.info("following %s:control (seeding scenario=%s rate=%s where unset) seed=%d", cfg.namespace, args.scenario,
             args.rate or "max", seed)
    follower: Follower | None = None

    def run() -> WriteStats:
        nonlocal follower
        client = connect(cfg.redis_url, sleep=nap)
        follower = Follower(
            client, KeySchema(cfg.namespace), clock=clock, scenario=args.scenario, rate=args.rate, seed=seed,
            reconnect=lambda: connect(cfg.redis_url, sleep=nap, attempts=1_000, max_delay_s=5.0), stop=stop,
            explicit_ids=args.explicit_ids, batch_size=args.batch_size, stream_key=args.stream, on_batch=progress)
        return follower.follow()

    return _exit_code(run, lambda: None if follower is None else follower.writer.stats, progress, stop)


if __name__ == "__main__":
    from watermark.apps.generator import (
        main as module_main,  # one copy of this module, the one watermark.apps.follow imports
    )

    sys.exit(module_main())
