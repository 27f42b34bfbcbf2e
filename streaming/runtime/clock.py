"""The wall clock: the default of every injected ``now`` and the :class:`~streaming.schema.clock.Clock` the
commands run on (the pure core takes time as an argument, never from here)."""

from __future__ import annotations

import threading
import time


def wall_ms() -> int:
    """The wall clock in milliseconds: the default of every injected ``now``."""
    return time.time_ns() // 1_000_000


class RealClock:
    """Wall-clock time; ``sleep_until`` returns early once ``stop`` is set (SIGTERM)."""

    def __init__(self, stop: threading.Event | None = None) -> None:
        self.stop = stop or threading.Event()

    def now_us(self) -> int:
        return time.time_ns() // 1000

    def sleep_until(self, us: int) -> None:
        delay = us - self.now_us()
        if delay > 0:
            self.stop.wait(delay / 1e6)
