"""The generator's scenarios: each server's population, network delays, late bursts, outages and clock skew,
as values. A new scenario is a new :class:`Scenario`, usually :meth:`Scenario.replace_server` of an old one;
:data:`SCENARIOS` lists them by name. What a server is made of (delays, bursts, outages, its daily curve) is
in ``streaming.rules.server_profiles``."""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, replace
from typing import TypeVar

from streaming.rules.server_profiles import (
    HOUR_MS,
    BurstModel,
    DailyCurve,
    DelayModel,
    Exodus,
    Outage,
    ServerProfile,
)
from streaming.schema.config import ConfigError

T = TypeVar("T", Outage, Exodus)
"""A stretch of a server's timeline (:meth:`Scenario.scaled` scales both alike)."""


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
