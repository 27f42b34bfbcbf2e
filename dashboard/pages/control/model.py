"""What the Lab control page says about the generator, in plain words.

Pure: the request, the generator's status and the time in, one message out, so
every case is unit-tested with hand-built values and an injected clock.
"""

from __future__ import annotations

from dashboard.status import Level, Status, clock, human_ms
from watermark.schema.records import RUNNING, Control, GeneratorStatus
from watermark.store.control_store import STATUS_STALE_MS

START_HINT = "start it with `wm-generator --follow` (`./run.sh` does); it applies these settings"


def rate_text(rate: float) -> str:
    if rate == 0:
        return "as fast as possible"
    return f"{rate:,.0f} events/s" if rate == int(rate) else f"{rate:,} events/s"


BEHIND_SCHEDULE_MS = 1_000
"""A generator whose writes finish this late against their schedule lacks CPU (it, or Redis)."""


def generator_line(control: Control | None, status: GeneratorStatus | None, now_ms: int) -> Status:
    """Whether a generator follows the control hash, and whether it has applied the latest request."""
    if status is None:
        return Status(Level.WARNING, f"No generator running: none has reported yet; {START_HINT}.")
    if status.state == "exited":
        return Status(Level.WARNING, f"No generator running: the last one exited at {clock(status.updated_ms)}; "
                                     f"{START_HINT}.")
    silent = now_ms - status.updated_ms
    if silent > STATUS_STALE_MS:
        return Status(Level.WARNING, f"No generator running: the last one reported {human_ms(silent)} ago "
                                     f"(at {clock(status.updated_ms)}); {START_HINT}.")
    if status.error:
        return Status(Level.ERROR, f"The generator cannot apply the control settings and keeps its last ones "
                                   f"(rev {status.rev}): {status.error}")
    if control is not None and status.rev < control.rev:
        return Status(Level.INFO, f"Waiting for the generator to pick up rev {control.rev} (it has applied rev "
                                  f"{status.rev}; it looks every half second).")
    if status.state == RUNNING:
        running = (f"`{status.scenario}` since {clock(status.since_ms)} · rev {status.rev} applied · "
                   f"{status.written:,} events written in all")
        if status.lag_ms > BEHIND_SCHEDULE_MS:
            return Status(Level.WARNING, f"Generator behind its schedule by {human_ms(status.lag_ms)} (it or Redis "
                                         f"lacks CPU): asked for {rate_text(status.rate)}, writing "
                                         f"{status.achieved:,.0f}/s · {running}")
        measured = status.rate and status.updated_ms - status.since_ms >= 1_000
        achieved = f" (achieved {status.achieved:,.0f}/s)" if measured else ""
        return Status(Level.OK, f"Generator running at {rate_text(status.rate)}{achieved} · {running}")
    return Status(Level.INFO, f"Generator stopped since {clock(status.since_ms)} (rev {status.rev} applied): no "
                              "events are written until you press Start.")
