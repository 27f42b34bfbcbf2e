"""The lab's control plane: ``{ns}:control`` (what the presenter asks for) and ``{ns}:generator`` (what the
following generator applied), hashes written and read by ``streaming.store.control_store``; a bad value
raises ConfigError naming the field."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from streaming.schema.config import ConfigError
from streaming.schema.records.codec import decoded

RUNNING = "running"
STOPPED = "stopped"


def _hash_fields(raw: Mapping[Any, Any]) -> dict[str, str]:
    return {decoded(k): decoded(v) for k, v in raw.items()}


def _hash_int(fields: Mapping[str, str], name: str, where: str) -> int | None:
    if name not in fields:
        return None
    try:
        return int(fields[name])
    except ValueError:
        raise ConfigError(f"{where} field {name}={fields[name]!r} is not an integer") from None


def check_rate(rate: object) -> float:
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate < 0:
        raise ConfigError(f"rate must be a finite number >= 0 events/s (0 = as fast as possible), got {rate!r}")
    return float(rate)


def check_delay_ms(delay_ms: object) -> int:
    if isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or delay_ms < 0:
        raise ConfigError(f"delay_ms must be an integer >= 0 milliseconds, got {delay_ms!r}")
    return delay_ms


@dataclass(frozen=True)
class ControlChange:
    """One change of :class:`Control`, as the audit (``{ns}:control:audit``) keeps it: when, by whom, as what role,
    the fields set (JSON text, shown as text) and the ``rev`` it made."""

    at_ms: int
    by: str
    role: str
    change: str
    rev: int

    @classmethod
    def from_hash(cls, raw: Mapping[Any, Any]) -> ControlChange:
        """Inverse of :meth:`to_hash` (an audit entry's fields, bytes or text); KeyError or ValueError for an entry
        nobody wrote this way."""
        f = _hash_fields(raw)
        return cls(at_ms=int(f["at_ms"]), by=f["by"], role=f["role"], change=f["change"], rev=int(f["rev"]))

    def to_hash(self) -> dict[str, str]:
        return {"at_ms": str(self.at_ms), "by": self.by, "role": self.role, "change": self.change,
                "rev": str(self.rev)}


@dataclass(frozen=True)
class Control:
    """The presenter's request. ``None`` where nothing was asked yet (the generator seeds
    scenario, rate and running when it starts; the job falls back to WATERMARK_DELAY)."""

    scenario: str | None = None
    rate: float | None = None
    running: bool | None = None
    delay_ms: int | None = None
    rev: int = 0
    updated_ms: int | None = None

    @classmethod
    def from_hash(cls, raw: Mapping[Any, Any]) -> Control:
        """Inverse of :meth:`to_hash`; a value nobody could have written through
        :func:`streaming.store.control_store.write_control` raises ConfigError naming the field (whether the
        scenario is one the generator knows is the store's check: the catalogue is a rule)."""
        f = _hash_fields(raw)
        rate: float | None = None
        if "rate" in f:
            try:
                number = float(f["rate"])
            except ValueError:
                raise ConfigError(f"control field rate={f['rate']!r} is not a number") from None
            rate = check_rate(number)
        running: bool | None = None
        if "generator" in f:
            if f["generator"] not in (RUNNING, STOPPED):
                raise ConfigError(f"control field generator={f['generator']!r} must be {RUNNING!r} or {STOPPED!r}")
            running = f["generator"] == RUNNING
        delay = _hash_int(f, "delay_ms", "control")
        return cls(scenario=f.get("scenario"), rate=rate, running=running,
                   delay_ms=None if delay is None else check_delay_ms(delay), rev=_hash_int(f, "rev", "control") or 0,
                   updated_ms=_hash_int(f, "updated_ms", "control"))

    def to_hash(self) -> dict[str, str]:
        """The hash fields of the values that are set; inverse of :meth:`from_hash`."""
        out = {"scenario": self.scenario, "rate": None if self.rate is None else repr(float(self.rate)),
               "generator": None if self.running is None else (RUNNING if self.running else STOPPED),
               "delay_ms": None if self.delay_ms is None else str(self.delay_ms), "rev": str(self.rev),
               "updated_ms": None if self.updated_ms is None else str(self.updated_ms)}
        return {k: v for k, v in out.items() if v is not None}


ACHIEVED_OVER_MS = 5_000
"""The generator's achieved rate is measured over this much of its clock: long enough to smooth its bursts."""


@dataclass(frozen=True)
class GeneratorStatus:
    """What the following generator is doing: ``rev`` is the control revision it applied."""

    state: str
    scenario: str
    rate: float
    rev: int
    written: int
    since_ms: int
    updated_ms: int
    error: str = ""
    achieved: float = 0.0
    """Events/s actually written over the last :data:`ACHIEVED_OVER_MS` (or since the run began); below the
    rate asked whenever the scenario holds events back (late bursts, outages), so not a health signal."""
    lag_ms: int = 0
    """How far behind its schedule the last write finished: above zero the generator (or Redis) lacks CPU."""

    @classmethod
    def from_hash(cls, raw: Mapping[Any, Any]) -> GeneratorStatus:
        """Inverse of :meth:`to_hash`."""
        f = _hash_fields(raw)
        try:
            return cls(state=f["state"], scenario=f["scenario"], rate=float(f["rate"]), rev=int(f["rev"]),
                       written=int(f["written"]), since_ms=int(f["since_ms"]), updated_ms=int(f["updated_ms"]),
                       error=f.get("error", ""), achieved=float(f.get("achieved", "0")),
                       lag_ms=int(f.get("lag_ms", "0")))
        except (KeyError, ValueError) as exc:
            raise ConfigError(f"generator status hash is malformed ({type(exc).__name__}: {exc})") from None

    def to_hash(self) -> dict[str, str]:
        """Inverse of :meth:`from_hash`."""
        return {k: repr(v) if isinstance(v, float) else str(v) for k, v in asdict(self).items()}
