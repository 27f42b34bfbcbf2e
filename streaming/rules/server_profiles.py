"""What a scenario's servers are made of, as values: each server's network delay, late bursts, outages,
exoduses, daily curve and clock skew (:class:`ServerProfile`). Scenarios (``streaming.rules.scenarios``) are built
from them."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from statistics import NormalDist

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
