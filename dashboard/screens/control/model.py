"""What the Lab control page says about the generator, in plain words.

Pure: the request, the generator's status and the time in, one message out, so
every case is unit-tested with hand-built values and an injected clock.
"""

from __future__ import annotations

from dashboard.status import Level, Status, clock, human_ms
from streaming.schema.records import RUNNING, Control, GeneratorStatus
from streaming.store.control_store import STATUS_STALE_MS
from watermark_client.timeutil import format_duration_ms

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


def delay_line(control: Control | None, job_delay_ms: int | None) -> str:
    """What the job uses and what was asked, both from Redis: the job's own delay as its last commit wrote it,
    never this dashboard's ``WATERMARK_DELAY`` (another process, with its own environment).

    >>> delay_line(None, 10_000)
    'The job uses 10s (its last commit). Nothing requested here: it keeps its own WATERMARK_DELAY.'
    >>> delay_line(Control(delay_ms=20_000, rev=3), 10_000)
    'The job uses 10s (its last commit). Requested: 20s (rev 3): the job restarts its query with it.'
    >>> delay_line(Control(delay_ms=20_000, rev=3), 20_000)
    'The job uses 20s (its last commit), as requested (rev 3).'
    >>> delay_line(None, None)
    'The job has not committed a batch yet, so its delay is not known here. Nothing requested here.'
    """
    if job_delay_ms is None:
        used = "The job has not committed a batch yet, so its delay is not known here."
    else:
        used = f"The job uses {format_duration_ms(job_delay_ms)} (its last commit)"
    wanted = None if control is None else control.delay_ms
    if wanted is not None and wanted == job_delay_ms:
        return f"{used}, as requested (rev {control.rev})."  # type: ignore[union-attr]
    end = "." if job_delay_ms is not None else ""
    if wanted is None:
        tail = " Nothing requested here: it keeps its own WATERMARK_DELAY." if job_delay_ms is not None else \
            " Nothing requested here."
        return f"{used}{end}{tail}"
    return (f"{used}{end} Requested: {format_duration_ms(wanted)} (rev {control.rev}): the job restarts its "  # type: ignore[union-attr]
            "query with it.")
