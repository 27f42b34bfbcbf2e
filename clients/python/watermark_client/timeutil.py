"""Durations and timestamps.

Internally event times are integer microseconds since the epoch (Spark's
timestamp precision) and watermarks are integer milliseconds (Spark's
watermark precision). Everything user-facing is ISO-8601 UTC ending in ``Z``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

_UNITS_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION_PART = re.compile(r"(\d+)(ms|s|m|h|d)")
_DURATION_FULL = re.compile(r"^(?:\d+(?:ms|s|m|h|d))+$")


def parse_duration_ms(text: str) -> int:
    """Parse ``30s``, ``10m``, ``1h``, ``500ms``, ``1h30m`` into milliseconds."""
    s = text.strip().lower()
    if not _DURATION_FULL.match(s):
        raise ValueError(
            f"invalid duration {text!r}: expected a number and a unit (ms, s, m, h, d), e.g. 30s, 10m, 1h"
        )
    return sum(int(n) * _UNITS_MS[u] for n, u in _DURATION_PART.findall(s))


def format_duration_ms(ms: int) -> str:
    """Inverse of :func:`parse_duration_ms` (shortest exact form)."""
    if ms == 0:
        return "0s"
    out = []
    for unit in ("d", "h", "m", "s", "ms"):
        size = _UNITS_MS[unit]
        if ms >= size:
            out.append(f"{ms // size}{unit}")
            ms %= size
    return "".join(out)


def parse_iso_us(text: str) -> int:
    """ISO-8601 timestamp -> microseconds since the epoch; naive times are UTC.

    Raises ValueError for anything that does not parse.
    """
    if not isinstance(text, str):
        raise ValueError(f"timestamp must be a string, got {type(text).__name__}")
    dt = datetime.fromisoformat(text.strip())
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    delta = dt - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def iso_from_us(us: int) -> str:
    """Microseconds -> ISO-8601 UTC with millisecond (or microsecond) precision and ``Z``."""
    secs, frac = divmod(us, 1_000_000)
    dt = datetime.fromtimestamp(secs, tz=UTC)
    base = dt.strftime("%Y-%m-%dT%H:%M:%S")
    if frac % 1000 == 0:
        return f"{base}.{frac // 1000:03d}Z"
    return f"{base}.{frac:06d}Z"


def iso_from_ms(ms: int) -> str:
    return iso_from_us(ms * 1000)


def human_ms(ms: float) -> str:
    """A duration as an operator reads it: ``850 ms``, ``4.2 s``, ``3 min 5 s``, ``2 h 10 min``."""
    ms = max(0, int(ms))
    if ms < 1_000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(ms // 1000, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    return f"{hours // 24} days"


def clock(ms: int, zone: bool = True) -> str:
    """``HH:MM:SS UTC``: times on the status line are recent, the date would be noise."""
    if ms <= 0:
        return "none yet"
    iso = iso_from_ms(ms)
    return f"{iso[11:19]} UTC" if zone else iso[11:19]
