"""The per-server clock's rule (``watermark.rules.server_clock``) as tables, without Redis or Spark; the whole
online view against its independent model is tests/store/test_server_clocks.py."""

from __future__ import annotations

import numpy as np
import pytest

from watermark.rules import server_clock
from watermark.schema.records import ClockRecord

S = 1_000_000  # 1 s in us
DELAY, JUMP = 5_000, 30_000
PRIOR = ClockRecord(watermark_ms=95_000, clock_us=100 * S, heard_ms=1_000_000, clock_at_heard_us=100 * S)


def us(*seconds: float) -> np.ndarray:
    return np.array([int(x * S) for x in seconds], np.int64)


@pytest.mark.parametrize(("events", "players", "arrival_ms", "clock_s"), [
    (us(110, 111), 2, 1_010_000, None),  # in step with arrival: nothing to set back
    (us(80, 81), 2, 1_010_000, None),  # 30 s behind the prediction (110 s): at the jump, not past it
    (us(79, 79.5), 2, 1_010_000, 79.5),  # past it, from two players: set back to the newest
    (us(20, 21), 1, 1_010_000, None),  # one player's clock alone does not set the server's back
    (us(20, 150), 2, 1_010_000, None),  # its newest is in step: an old event among current ones is just late
    (us(), 0, 1_010_000, None),  # nothing from the server
])
def test_a_clock_steps_back_only_when_even_its_newest_event_is_far_behind(
        events: np.ndarray, players: int, arrival_ms: int, clock_s: float | None) -> None:
    got = server_clock.step_back(PRIOR, events, players, arrival_ms, DELAY, JUMP)
    if clock_s is None:
        assert got is None
        return
    assert got is not None
    assert got.clock_us == int(clock_s * S) and got.clock_at_heard_us == got.clock_us
    assert got.heard_ms == arrival_ms and got.watermark_ms == int(clock_s * 1000) - DELAY  # judged from it again


def test_a_server_never_heard_from_has_nothing_to_step_back() -> None:
    assert server_clock.step_back(None, us(1, 2), 2, 1_000, DELAY, JUMP) is None


@pytest.mark.parametrize(("batch", "kept", "arrival_ms", "clock_s"), [
    (us(105), us(105), 1_005_000, 105),  # its events move it
    (us(200), us(200), 1_005_000, 105),  # one player 95 s ahead: not trusted, runs on arrival
    (us(200, 201), us(200, 201), 1_005_000, 200),  # two: the server's clock stepped
    (us(), us(), 1_020_000, 120),  # silent: runs on by arrival
])
def test_a_clock_moves_on_its_events_or_on_arrival(batch: np.ndarray, kept: np.ndarray, arrival_ms: int,
                                                   clock_s: float) -> None:
    got = server_clock.advance(PRIOR, batch, kept, arrival_ms, DELAY, JUMP)
    assert got is not None and got.clock_us == int(clock_s * S)
    assert got.watermark_ms == max(PRIOR.watermark_ms, int(clock_s * 1000) - DELAY)
