"""Time, injected: the writer and the generator's follow mode sleep on a :class:`Clock`, so tests drive them
without sleeping (:class:`ManualClock`). The wall clock itself is an adapter's (:mod:`streaming.runtime.clock`):
the schema never reads it."""

from __future__ import annotations

from typing import Protocol


class Clock(Protocol):
    """Time source of the writer, injected so tests drive it without sleeping."""

    def now_us(self) -> int: ...

    def sleep_until(self, us: int) -> None: ...


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
