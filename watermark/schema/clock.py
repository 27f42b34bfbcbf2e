"""Time, injected: the writer and the generator's follow mode sleep on a :class:`Clock`, so tests drive them
without sleeping (:class:`ManualClock`)."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Time source of the writer, injected so tests drive it without sleeping."""

    def now_us(self) -> int: ...

    def sleep_until(self, us: int) -> None: ...


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


class ManualClock:
    """A clock that only moves when told; ``sleep_until`` jumps there instantly."""

    def __init__(self, start_us: int = 0) -> None:
        self._now = start_us
        self.sleeps = 0

    def now_us(self) -> int:
        return self._now

    def advance(self, us: int) -> None:
        if us < 0:
            raise ValueError(f"a clock cannot go back: advance({us})")
        self._now += us

    def sleep_until(self, us: int) -> None:
        self.sleeps += 1
        self._now = max(self._now, us)
