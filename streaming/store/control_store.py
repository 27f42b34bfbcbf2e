"""The lab's control plane in Redis: what the presenter asks for (``{ns}:control``) and what the generator applied
(``{ns}:generator``), as :class:`~streaming.schema.records.Control` and
:class:`~streaming.schema.records.GeneratorStatus`.

The dashboard's "Lab control" page (or ``wm-control``) writes the request; the generator in follow mode
(``wm-generator --follow``, ``streaming.apps.follow``) polls it and reports what it applied. Every change bumps
``rev`` in the same MULTI as the change, so a reader can tell "the generator applied my request" (its ``rev``
caught up) from "it has not looked yet". Every change is also one entry of ``{ns}:control:audit`` (who, as what
role, when), written in the same MULTI and capped at :data:`CONTROL_AUDIT_KEEP`.
"""

from __future__ import annotations

import json

import redis

from streaming.rules.scenarios import SCENARIOS
from streaming.runtime.clock import wall_ms
from streaming.schema.config import ConfigError
from streaming.schema.keys import KeySchema
from streaming.schema.records import Control, ControlChange, GeneratorStatus, check_delay_ms, check_rate
from watermark_client.connection import home

CONTROL_AUDIT_KEEP = 200
"""Changes the audit keeps, newest first: a presenter's session makes tens."""
WHO_MAX = 200
STATUS_STALE_MS = 5_000
"""A generator status older than this means no generator is following (it writes one every ~0.5 s)."""


def check_scenario(scenario: str) -> str:
    if scenario not in SCENARIOS:
        raise ConfigError(f"scenario {scenario!r} is unknown; choose one of: {', '.join(SCENARIOS)}")
    return scenario


def _known(control: Control) -> Control:
    if control.scenario is not None:
        check_scenario(control.scenario)
    return control


def read_control(client: redis.Redis, keys: KeySchema) -> Control | None:
    """The current request, or None if nobody has asked for anything yet."""
    raw = client.hgetall(keys.control)
    return _known(Control.from_hash(raw)) if raw else None


def operators_delay(client: redis.Redis, keys: KeySchema) -> tuple[int | None, int | None]:
    """The delay the control hash asks for, as ``(delay_ms, None)`` when the newest change of the delay in the
    audit (:func:`write_control`: an operator's, with who and when) set that same delay, else ``(None, the
    unrecorded delay)``: a write straight into the hash, by any credential that may write it, is not an operator's
    and is not followed. ``(None, None)``: no delay asked for. One round trip, on the control's node."""
    pipe = home(client, keys.control).pipeline(transaction=False)
    pipe.hgetall(keys.control)
    pipe.xrevrange(keys.control_audit, count=CONTROL_AUDIT_KEEP)
    raw, entries = pipe.execute()
    asked = _known(Control.from_hash(raw)).delay_ms if raw else None
    if asked is None:
        return None, None
    for change in control_changes(entries):
        try:
            fields = json.loads(change.change)
        except ValueError:
            continue
        if "delay_ms" in fields:
            return (asked, None) if str(fields["delay_ms"]) == str(asked) else (None, asked)
    return None, asked


def read_lab(client: redis.Redis, keys: KeySchema) -> tuple[Control | None, GeneratorStatus | None]:
    """Request and generator status in one round trip (read commands only)."""
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.control)
    pipe.hgetall(keys.generator_status)
    control, status = pipe.execute()
    return (_known(Control.from_hash(control)) if control else None,
            GeneratorStatus.from_hash(status) if status else None)


def write_control(client: redis.Redis, keys: KeySchema, *, by: str, role: str, scenario: str | None = None,
                  rate: float | None = None, running: bool | None = None, delay_ms: int | None = None,
                  now_ms: int | None = None) -> Control:
    """Change the given fields and bump ``rev``, atomically, recording who (``by``, as ``role``) in the audit;
    validated before anything is written."""
    if not by.strip() or not role.strip():
        raise ConfigError("a control change needs who makes it and their role")
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
    what = json.dumps({k: v for k, v in change.items() if k != "updated_ms"}, sort_keys=True)

    def apply(pipe: redis.client.Pipeline) -> Control:
        rev = int(pipe.hget(keys.control, "rev") or 0) + 1
        pipe.multi()
        pipe.hset(keys.control, mapping=change)
        pipe.hincrby(keys.control, "rev", 1)
        entry = ControlChange(at_ms=int(change["updated_ms"]), by=by.strip()[:WHO_MAX], role=role.strip()[:WHO_MAX],
                              change=what, rev=rev)
        pipe.xadd(keys.control_audit, entry.to_hash(), maxlen=CONTROL_AUDIT_KEEP, approximate=False)
        pipe.hgetall(keys.control)
        return Control.from_hash(pipe.execute()[-1])

    return home(client, keys.control).transaction(apply, keys.control, value_from_callable=True)


def read_control_audit(client: redis.Redis, keys: KeySchema, count: int = 20) -> list[ControlChange]:
    """The newest ``count`` changes, newest first; an entry nobody could have written this way is skipped."""
    return control_changes(client.xrevrange(keys.control_audit, count=count))


def control_changes(entries: list) -> list[ControlChange]:
    """``XREVRANGE`` entries of the audit as changes; an entry nobody could have written this way is skipped."""
    out = []
    for _, raw in entries:
        try:
            out.append(ControlChange.from_hash(raw))
        except (KeyError, ValueError):
            continue
    return out


def seed_control(client: redis.Redis, keys: KeySchema, *, scenario: str, rate: float, running: bool = True,
                 now_ms: int | None = None) -> Control:
    """Fill in scenario, rate and generator only where missing (a restarted generator must not
    override the presenter's choice); bumps ``rev`` if it filled anything."""
    check_scenario(scenario)
    wanted = Control(scenario=scenario, rate=check_rate(rate), running=running).to_hash()
    del wanted["rev"]

    def seed(pipe: redis.client.Pipeline) -> Control:
        have = {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in pipe.hgetall(keys.control).items()}
        missing = {k: v for k, v in wanted.items() if k not in have}
        if not missing:
            return Control.from_hash(have)
        pipe.multi()
        pipe.hset(keys.control, mapping={**missing, "updated_ms": str(wall_ms() if now_ms is None else now_ms)})
        pipe.hincrby(keys.control, "rev", 1)
        pipe.hgetall(keys.control)
        return Control.from_hash(pipe.execute()[-1])

    return home(client, keys.control).transaction(seed, keys.control, value_from_callable=True)


def write_status(client: redis.Redis, keys: KeySchema, status: GeneratorStatus) -> None:
    client.hset(keys.generator_status, mapping=status.to_hash())
