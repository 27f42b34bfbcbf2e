"""The generator's scenarios: each server's population, network delays, late bursts, outages and clock skew,
as values. A new scenario is a new :class:`Scenario`, usually :meth:`Scenario.replace_server` of an old one;
:data:`SCENARIOS` lists them by name."""

from __future__ import annotations

import math
import re
import zlib
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import TypeVar

from streaming.schema.config import ConfigError

ASAP_TIMELINE_RATE = 100_000
"""Events per second of event time when ``rate=0`` (write as fast as possible):
close to what one process writes, so event time stays near wall-clock time."""

MIN_PLAYERS = 20
MAX_PLAYERS = 1_000_000
"""Per-server population bounds; above the cap, heartbeats just get more frequent. The cap leaves room for
game scale: at 50,000 events/s and a heartbeat every 5 s, about 250,000 players are online."""

_RING_MS = 1 << 15  # ~33 s: normal delays stay in the ring, late bursts go beyond
DELAY_BITS = 12
_DELAY_TABLE_SIZE = 1 << DELAY_BITS
_SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")


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
class Exodus:
    """From ``start_ms`` (after the simulation start) for ``duration_ms``, only ``keep`` of a server's players
    stay online: the others log out, each with a logout event, as the server's next events; when it ends they
    log in again. Again every ``every_ms`` if set. Players really leaving, as opposed to a server whose events
    stop coming (an :class:`Outage`): what the players-drop alert must tell apart."""

    start_ms: int
    duration_ms: int
    keep: float = 0.2
    every_ms: int | None = None

    def __post_init__(self) -> None:
        if self.start_ms < 0 or self.duration_ms <= 0:
            raise ConfigError(f"exodus needs start_ms >= 0 and duration_ms > 0, got {self.start_ms} and "
                              f"{self.duration_ms}")
        if not 0 <= self.keep < 1:
            raise ConfigError(f"exodus keep must be in [0, 1), got {self.keep}")
        if self.every_ms is not None and self.every_ms <= self.duration_ms:
            raise ConfigError(f"exodus every_ms ({self.every_ms}) must be longer than duration_ms ({self.duration_ms})")


DAY_MS = 86_400_000
HOUR_MS = 3_600_000
EVENING = (0.55, 0.42, 0.3, 0.22, 0.17, 0.15, 0.16, 0.2, 0.25, 0.3, 0.33, 0.36, 0.42, 0.45, 0.47, 0.5, 0.55, 0.62,
           0.72, 0.83, 0.93, 1.0, 0.95, 0.78)
"""A game's day, local time: players online at each hour against the evening's peak (21:00); few before dawn."""
WEEK = (0.85, 0.85, 0.87, 0.9, 0.96, 1.0, 0.94)
"""Monday to Sunday against the busiest day (Saturday)."""


@dataclass(frozen=True)
class DailyCurve:
    """How many of a server's players are online through the day: players log in through the evening and leave
    at night (:data:`EVENING`, interpolated between hours, times the weekday's :data:`WEEK`), in the server's local
    time (``offset_ms`` ahead of UTC). A day lasts ``day_ms`` of event time: a real day, or a few minutes when
    :meth:`Scenario.scaled` compresses it, so a week passes in minutes in tests and demos (days and weekdays count
    from the Unix epoch, a Thursday, in days of ``day_ms``)."""

    hourly: tuple[float, ...] = EVENING
    weekly: tuple[float, ...] = WEEK
    day_ms: int = DAY_MS
    offset_ms: int = 0

    def __post_init__(self) -> None:
        if len(self.hourly) != 24 or len(self.weekly) != 7:
            raise ConfigError("a daily curve needs 24 hourly and 7 weekday shares")
        if not all(0 < v <= 1 for v in (*self.hourly, *self.weekly)):
            raise ConfigError("a daily curve's shares must be in (0, 1]")
        if self.day_ms < 24:
            raise ConfigError(f"a daily curve's day must be at least 24 ms, got {self.day_ms}")

    def share(self, t_ms: int) -> float:
        """The share of the server's full house online at event time ``t_ms``."""
        day, at = divmod(t_ms + self.offset_ms, self.day_ms)
        hour = at * 24 / self.day_ms
        i = int(hour)
        f = hour - i
        return (self.hourly[i] * (1 - f) + self.hourly[(i + 1) % 24] * f) * self.weekly[(day + 3) % 7]


T = TypeVar("T", Outage, Exodus)
"""A stretch of a server's timeline (:meth:`Scenario.scaled` scales both alike)."""


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
    exodus: tuple[Exodus, ...] = ()
    clock_skew_ms: int = 0
    heartbeat_ms: int = 5_000
    online_fraction: float = 0.6
    churn: float = 0.02
    players: int | None = None
    region: str | None = None
    """Carried in each event (``region``); None: the events carry none."""
    daily: DailyCurve | None = None
    """Players online follow the time of day; None: always the same share."""

    def __post_init__(self) -> None:
        where = f"server {self.name!r}"
        if not _SERVER_NAME.match(self.name):
            raise ConfigError(f"{where}: name must be 1-32 letters, digits, '_' or '-'")
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
class Churn:
    """Servers as cattle: each of the scenario's servers is a *slot* played by one server at a time, named like a
    pod (``eu-017-3fa2c``), replaced by a new one at each generation. A player online on the old one logs out there
    at the replacement's moment and logs in on the new one with their next event, as a reconnect does; the old one
    falls silent with nobody online (drained).

    ``deploy``: a rolling deploy every ``period_ms``, the slots replaced in ``waves`` waves ``wave_ms`` apart
    (Kubernetes' maxUnavailable). ``match``: a server per match of ``period_ms`` (Agones), the slots' matches
    staggered over the period, so some match ends at any moment."""

    kind: str
    period_ms: int
    waves: int = 4
    wave_ms: int = 10_000

    def __post_init__(self) -> None:
        if self.kind not in ("deploy", "match"):
            raise ConfigError(f"churn kind must be deploy or match, got {self.kind!r}")
        if self.period_ms <= 0 or self.waves <= 0 or self.wave_ms < 0:
            raise ConfigError(f"churn needs a positive period and waves, got {self.period_ms} and {self.waves}")

    def generation(self, slot: int, slots: int, at_ms: int) -> int:
        """Which server plays ``slot`` (of ``slots``) at ``at_ms`` after the simulation's start."""
        if self.kind == "deploy":
            return max(0, (at_ms - (slot % self.waves) * self.wave_ms) // self.period_ms)
        return (at_ms + slot * self.period_ms // slots) // self.period_ms

    def starts_ms(self, slot: int, slots: int, generation: int) -> int:
        """When ``generation`` took ``slot`` over, after the simulation's start (its first: 0)."""
        if generation == 0:
            return 0
        if self.kind == "deploy":
            return generation * self.period_ms + (slot % self.waves) * self.wave_ms
        return generation * self.period_ms - slot * self.period_ms // slots

    @staticmethod
    def name(slot: str, generation: int) -> str:
        """A pod's name: the slot and a hash of its generation (deterministic, never reused)."""
        return f"{slot}-{zlib.crc32(f'{slot}:{generation}'.encode()) & 0xFFFFF:05x}"

    def scaled(self, factor: float) -> Churn:
        return replace(self, period_ms=max(1, round(self.period_ms * factor)),
                       wave_ms=round(self.wave_ms * factor))


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    servers: tuple[ServerProfile, ...]
    churn: Churn | None = None
    """Servers replaced as they play (:class:`Churn`); None: the same servers all along."""

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

    def scaled(self, factor: float) -> Scenario:
        """The same scenario on a faster (``factor`` < 1) or slower clock: when outages, exoduses and late
        bursts start, last and recur, how late a burst arrives, how long a day of the daily curve lasts; not the
        network's delays or a server's clock skew. For demos and tests that cannot wait 30 s for an outage, or a
        week for a week."""
        if not (factor > 0 and math.isfinite(factor)):
            raise ConfigError(f"a timeline scale must be a positive number, got {factor}")
        if factor == 1:
            return self

        def ms(v: int) -> int:
            return max(1, round(v * factor))

        def timed(x: T) -> T:  # an outage or an exodus: when it starts, how long it lasts, how often
            every = None if x.every_ms is None else ms(x.every_ms)
            return replace(x, start_ms=ms(x.start_ms), duration_ms=ms(x.duration_ms), every_ms=every)

        def server(p: ServerProfile) -> ServerProfile:
            daily = None if p.daily is None else replace(p.daily, day_ms=max(24, ms(p.daily.day_ms)),
                                                         offset_ms=round(p.daily.offset_ms * factor))
            return replace(p, outages=tuple(map(timed, p.outages)), exodus=tuple(map(timed, p.exodus)), daily=daily,
                           burst=None if p.burst is None else replace(
                               p.burst, period_ms=ms(p.burst.period_ms), duration_ms=ms(p.burst.duration_ms),
                               offset_ms=ms(p.burst.offset_ms), lateness_min_ms=ms(p.burst.lateness_min_ms),
                               lateness_max_ms=ms(p.burst.lateness_max_ms)))
        return replace(self, servers=tuple(server(p) for p in self.servers),
                       churn=None if self.churn is None else self.churn.scaled(factor))

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

_PLAYERS_LEAVE = replace(
    _STEADY.replace_server("B", exodus=(Exodus(30_000, 90_000, keep=0.2, every_ms=OUTAGE_EVERY_MS),)),
    name="players-leave",
    description="steady, but 30 s after the start 80 % of B's players log out for 90 s (again every 5 min): B "
                "keeps sending, its players really leave",
)

ROLLING_DEPLOY = Churn("deploy", period_ms=120_000, waves=3, wave_ms=10_000)
MATCHES = Churn("match", period_ms=180_000)
_ROLLING_DEPLOY = replace(
    _STEADY, name="rolling-deploy", churn=ROLLING_DEPLOY,
    description="steady on pods: every 2 min a rolling deploy replaces each server by a new one (a wave every "
                "10 s); its players log out and log in on the new one, the old one falls silent, drained")
_MATCHES = replace(
    _STEADY, name="matches", churn=MATCHES,
    description="a server per match of 3 min (Agones): when a match ends its players log out and the next "
                "match's server takes them; the matches end at staggered times")
CHURNS = {_ROLLING_DEPLOY.name: ROLLING_DEPLOY, _MATCHES.name: MATCHES}
"""The scenarios whose servers are replaced as they play, playable on a fleet too (``--servers``)."""
SCENARIOS: dict[str, Scenario] = {s.name: s for s in (_STEADY, _OVERSEAS_LAG, _LATE_BURST, _IDLE_SERVER,
                                                       _CLOCK_SKEW, _OUTAGE_AND_BACKFILL, _PLAYERS_LEAVE,
                                                       _ROLLING_DEPLOY, _MATCHES)}




REGIONS = ("eu", "na", "sa", "as", "oc", "af", "me", "in", "jp", "kr", "br", "za")
"""Region names for :func:`fleet`, in the order they are used."""
REGION_DELAYS = {
    "as": DelayModel(min_ms=1_500, median_ms=2_000, max_ms=4_000, sigma=0.3),  # one region 2 s behind
    "sa": DelayModel(min_ms=100, median_ms=250, max_ms=1_500, sigma=0.6),
    "oc": DelayModel(min_ms=150, median_ms=300, max_ms=2_000, sigma=0.6),
}
"""Each region's network delay to Redis; the others are close by (:data:`HOME_DELAY`)."""
REGION_UTC_OFFSET_H = {"eu": 1, "na": -5, "sa": -3, "as": 8, "oc": 10, "af": 2, "me": 3, "in": 5, "jp": 9, "kr": 9,
                       "br": -3, "za": 2}
"""Each region's local time against UTC: its evening peak comes at its own hour."""
MAX_FLEET = 10_000


def fleet(servers: int, regions: int, daily: bool = True) -> Scenario:
    """``--servers N --regions R``: the steady scenario's game on ``servers`` servers named like ``eu-017``,
    dealt round-robin over the first ``regions`` of :data:`REGIONS`, each region with its own delay and local time;
    within a region the k-th server has ``1/sqrt(k)`` of the first one's players (a few busy shards, a long tail),
    and players come and go with the time of day (:class:`DailyCurve`); ``daily=False``: a full house all day (a
    benchmark's load must not depend on the hour it runs at)."""
    if not 1 <= regions <= len(REGIONS):
        raise ConfigError(f"regions must be 1 to {len(REGIONS)}, got {regions}")
    if not regions <= servers <= MAX_FLEET:
        raise ConfigError(f"servers must be {regions} (one per region) to {MAX_FLEET:,}, got {servers}")
    profiles = []
    for i in range(servers):
        region, k = REGIONS[i % regions], i // regions + 1
        curve = DailyCurve(offset_ms=REGION_UTC_OFFSET_H[region] * HOUR_MS) if daily else None
        profiles.append(ServerProfile(f"{region}-{k:03d}", 1 / math.sqrt(k), REGION_DELAYS.get(region, HOME_DELAY),
                                      region=region, daily=curve))
    return Scenario(f"fleet-{servers}x{regions}",
                    f"steady, on {servers:,} servers in {regions} regions ({', '.join(REGIONS[:regions])}), players "
                    f"online following each region's evening; "
                    f"{'as is 2 s behind' if 'as' in REGIONS[:regions] else 'all close by'}", tuple(profiles))


def game(name: str, servers: int | None = None, regions: int | None = None, daily: bool = True) -> Scenario:
    """The scenario the generator plays: ``name``, on a :func:`fleet` of ``servers`` in ``regions`` when given
    (the steady game only: the others are built around their three named servers)."""
    if servers is None:
        if regions is not None:
            raise ConfigError("--regions needs --servers")
        return get_scenario(name)
    if name != "steady" and name not in CHURNS:
        raise ConfigError(f"--servers plays the steady game on many servers, as they are or replaced as they play "
                          f"({', '.join(CHURNS)}); scenario {name!r} has its own three")
    many = fleet(servers, regions or min(servers, 6), daily)
    return many if name == "steady" else replace(many, name=f"{name}-{many.name}", churn=CHURNS[name])


def scenarios_help() -> str:
    """Every scenario with its description, for a command's ``--help``."""
    return "scenarios: " + "; ".join(f"{s.name}: {s.description}" for s in SCENARIOS.values())


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ConfigError(f"unknown scenario {name!r}; choose one of: {', '.join(SCENARIOS)}") from None
