"""One value read from an environment mapping, a function per kind (a duration, a switch, a port, a list of
names...), each failing with a :class:`ConfigError` that names the variable; called by ``Config.from_env`` and
``annotations_token`` as they read the environment they are given."""

from __future__ import annotations

from collections.abc import Mapping

from streaming.schema.config.lanes import LANES
from watermark_client.timeutil import parse_duration_ms


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the variable."""


def check(ok: bool, var: str, message: str) -> None:
    if not ok:
        raise ConfigError(f"{var} {message}")


def env_duration(env: Mapping[str, str], var: str, default: int) -> int:
    raw = env.get(var)
    if raw is None or raw.strip() == "":
        return default
    try:
        return parse_duration_ms(raw)
    except ValueError as exc:
        raise ConfigError(f"{var}={raw!r} is not a duration: {exc}") from None


def env_optional_duration(env: Mapping[str, str], var: str, default: int | None) -> int | None:
    """A duration, or ``off`` to switch the check off."""
    raw = (env.get(var) or "").strip()
    if raw.lower() == "off":
        return None
    return env_duration(env, var, default) if raw else default  # type: ignore[arg-type]


def env_switch(env: Mapping[str, str], var: str, default: bool) -> bool:
    """``on`` or ``off`` (any case); unset or empty: ``default``."""
    raw = (env.get(var) or "").strip()
    if not raw:
        return default
    if raw.lower() not in ("on", "off"):
        raise ConfigError(f"{var}={raw!r} must be on or off")
    return raw.lower() == "on"


def env_name_set(env: Mapping[str, str], var: str) -> frozenset[str] | None:
    raw = (env.get(var) or "").strip()
    if not raw:
        return None
    names = frozenset(n.strip() for n in raw.split(","))
    if "" in names:
        raise ConfigError(f"{var}={raw!r} has an empty name; use a comma-separated list like A,B,C")
    return names


def env_lane_list(env: Mapping[str, str], var: str) -> tuple[str, ...]:
    raw = (env.get(var) or "").strip()
    names = tuple(n.strip() for n in raw.split(",") if n.strip()) if raw else ()
    unknown = [n for n in names if n not in LANES]
    if unknown:
        raise ConfigError(f"{var}={raw!r}: unknown lane {', '.join(unknown)}; choose from {', '.join(LANES)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"{var}={raw!r} names a lane twice")
    return names


def env_port(env: Mapping[str, str], var: str) -> int | None:
    """A port number (0-65535); unset or empty: None."""
    raw = (env.get(var) or "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) > 65_535:
        raise ConfigError(f"{var}={raw!r} is not a port number (0-65535)")
    return int(raw)


def env_positive(env: Mapping[str, str], var: str) -> int | None:
    """A positive integer; unset or empty: None."""
    raw = (env.get(var) or "").strip()
    if not raw:
        return None
    value = env_int(env, var, 0)
    check(value > 0, var, f"({value}) must be positive")
    return value


def env_float(env: Mapping[str, str], var: str, default: float) -> float:
    raw = (env.get(var) or "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{var}={raw!r} is not a number") from None


def env_int(env: Mapping[str, str], var: str, default: int) -> int:
    raw = env.get(var)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{var}={raw!r} is not an integer") from None
