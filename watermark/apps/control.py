"""The lab's control plane: what the presenter asks for, and what the generator applied.

The dashboard's "Lab control" page (or ``wm-control``) writes
the request into ``{ns}:control``; the generator in follow mode
(``wm-generator --follow``, see ``watermark.apps.follow``) polls it
and reports what it applied in ``{ns}:generator``. Both sides go through this
module, so the field names and their text forms live in one place. No pyspark:
the dashboard imports it.

Every change bumps ``rev`` in the same MULTI as the change, so a reader can
tell "the generator applied my request" (its ``rev`` caught up) from "it has
not looked yet".
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass

import redis

from watermark.rules.scenarios import SCENARIOS, scenarios_help
from watermark.schema.config import Config, ConfigError
from watermark.schema.keys import KeySchema
from watermark.schema.timeutil import format_duration_ms, parse_duration_ms

RUNNING = "running"
STOPPED = "stopped"
STATUS_STALE_MS = 5_000
"""A generator status older than this means no generator is following (it writes one every ~0.5 s)."""


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _fields(raw: Mapping) -> dict[str, str]:
    return {_text(k): _text(v) for k, v in raw.items()}


def _int(fields: Mapping[str, str], name: str, where: str) -> int | None:
    if name not in fields:
        return None
    try:
        return int(fields[name])
    except ValueError:
        raise ConfigError(f"{where} field {name}={fields[name]!r} is not an integer") from None


def check_scenario(scenario: str) -> str:
    if scenario not in SCENARIOS:
        raise ConfigError(f"scenario {scenario!r} is unknown; choose one of: {', '.join(SCENARIOS)}")
    return scenario


def check_rate(rate: object) -> float:
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate < 0:
        raise ConfigError(f"rate must be a finite number >= 0 events/s (0 = as fast as possible), got {rate!r}")
    return float(rate)


def check_delay_ms(delay_ms: object) -> int:
    if isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or delay_ms < 0:
        raise ConfigError(f"delay_ms must be an integer >= 0 milliseconds, got {delay_ms!r}")
    return delay_ms


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
    def from_hash(cls, raw: Mapping) -> Control:
        """Inverse of :meth:`to_hash`; a value nobody could have written through :func:`write_control`
        raises ConfigError naming the field."""
        f = _fields(raw)
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
        delay = _int(f, "delay_ms", "control")
        return cls(scenario=check_scenario(f["scenario"]) if "scenario" in f else None, rate=rate, running=running,
                   delay_ms=None if delay is None else check_delay_ms(delay), rev=_int(f, "rev", "control") or 0,
                   updated_ms=_int(f, "updated_ms", "control"))

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
    def from_hash(cls, raw: Mapping) -> GeneratorStatus:
        """Inverse of :meth:`to_hash`."""
        f = _fields(raw)
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


def read_control(client: redis.Redis, keys: KeySchema) -> Control | None:
    """The current request, or None if nobody has asked for anything yet."""
    raw = client.hgetall(keys.control)
    return Control.from_hash(raw) if raw else None


def read_lab(client: redis.Redis, keys: KeySchema) -> tuple[Control | None, GeneratorStatus | None]:
    """Request and generator status in one round trip (read commands only)."""
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.control)
    pipe.hgetall(keys.generator_status)
    control, status = pipe.execute()
    return (Control.from_hash(control) if control else None,
            GeneratorStatus.from_hash(status) if status else None)


def write_control(client: redis.Redis, keys: KeySchema, *, scenario: str | None = None, rate: float | None = None,
                  running: bool | None = None, delay_ms: int | None = None, now_ms: int | None = None) -> Control:
    """Change the given fields and bump ``rev``, atomically; validated before anything is written."""
    if scenario is not None:
        check_scenario(scenario)
    if rate is not None:
        rate = check_rate(rate)
    if running is not None and not isinstance(running, bool):
        raise ConfigError(f"running must be True or False, got {running!r}")
    if delay_ms is not None:
        check_delay_ms(delay_ms)
    change = Control(scenario=scenario, rate=rate, running=running, delay_ms=delay_ms,
                     updated_ms=wall_ms() if now_ms is None else now_ms).to_hash()
    del change["rev"]
    if len(change) == 1:
        raise ConfigError("nothing to change: give a scenario, rate, running (start/stop) or delay_ms")
    pipe = client.pipeline(transaction=True)
    pipe.hset(keys.control, mapping=change)
    pipe.hincrby(keys.control, "rev", 1)
    pipe.hgetall(keys.control)
    return Control.from_hash(pipe.execute()[-1])


def seed_control(client: redis.Redis, keys: KeySchema, *, scenario: str, rate: float, running: bool = True,
                 now_ms: int | None = None) -> Control:
    """Fill in scenario, rate and generator only where missing (a restarted generator must not
    override the presenter's choice); bumps ``rev`` if it filled anything."""
    check_scenario(scenario)
    wanted = Control(scenario=scenario, rate=check_rate(rate), running=running).to_hash()
    del wanted["rev"]

    def seed(pipe: redis.client.Pipeline) -> Control:
        have = _fields(pipe.hgetall(keys.control))
        missing = {k: v for k, v in wanted.items() if k not in have}
        if not missing:
            return Control.from_hash(have)
        pipe.multi()
        pipe.hset(keys.control, mapping={**missing, "updated_ms": str(wall_ms() if now_ms is None else now_ms)})
        pipe.hincrby(keys.control, "rev", 1)
        pipe.hgetall(keys.control)
        return Control.from_hash(pipe.execute()[-1])

    return client.transaction(seed, keys.control, value_from_callable=True)


def write_status(client: redis.Redis, keys: KeySchema, status: GeneratorStatus) -> None:
    client.hset(keys.generator_status, mapping=status.to_hash())


# --------------------------------------------------------------------------- CLI


def _rate(text: str) -> float:
    try:
        return check_rate(float(text))
    except (ValueError, ConfigError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _delay(text: str) -> int:
    try:
        return parse_duration_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="wm-control",
        description="Show or change what the lab's generator runs and the watermark delay the job should use "
                    "(REDIS_URL, PIPELINE_NAMESPACE from the environment).",
        epilog=scenarios_help(),
    )
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("show", help="print the request and the generator's status as JSON")
    s = sub.add_parser("set", help="change the request (bumps rev)")
    s.add_argument("--scenario", choices=list(SCENARIOS), default=None)
    s.add_argument("--rate", type=_rate, default=None, help="events per second; 0 = as fast as possible")
    s.add_argument("--delay", type=_delay, default=None, help="watermark delay for the job, e.g. 20s, 2m")
    run = s.add_mutually_exclusive_group()
    run.add_argument("--start", dest="running", action="store_const", const=True, default=None)
    run.add_argument("--stop", dest="running", action="store_const", const=False)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cfg = Config.from_env()
        keys = KeySchema(cfg.namespace)
        client = redis.Redis.from_url(cfg.redis_url, socket_connect_timeout=2.0, socket_timeout=5.0)
        if args.command == "set":
            write_control(client, keys, scenario=args.scenario, rate=args.rate, running=args.running,
                          delay_ms=args.delay)
        control, status = read_lab(client, keys)
    except (ConfigError, redis.RedisError) as exc:
        print(f"control: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
    doc = {"control": None if control is None else {**asdict(control), "delay": None if control.delay_ms is None
                                                    else format_duration_ms(control.delay_ms)},
           "generator": None if status is None else asdict(status)}
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
