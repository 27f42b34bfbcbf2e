"""The per-server clock's rule (``streaming.rules.server_clock``) as tables, without Redis or Spark; the whole
online view against its independent model is tests/store/test_server_clocks.py."""

from __future__ import annotations

import numpy as np
import pytest
from msgspec.structs import replace

from streaming.rules import server_clock
from streaming.schema.records import ClockRecord

S = 1_000_000  # 1 s in us
DELAY, JUMP = 5_000, 30_000
PRIOR = ClockRecord(watermark_ms=95_000, clock_us=100 * S, heard_ms=1_000_000, clock_at_heard_us=100 * S)


def us(*seconds: float) -> np.ndarray:
    return np.array([int(x * S) for x in seconds], np.int64)


BEHIND = replace(PRIOR, behind_since_ms=1_000_000)  # far behind since arrival 1,000 s


@pytest.mark.parametrize(("prior", "events", "players", "arrival_ms", "behind_since", "clock_s"), [
    (PRIOR, us(110, 111), 2, 1_010_000, 0, None),  # in step with arrival: nothing to set back
    (PRIOR, us(80, 81), 2, 1_010_000, 0, None),  # 30 s behind the prediction (110 s): at the jump, not past it
    (PRIOR, us(79, 79.5), 2, 1_010_000, 1_010_000, None),  # past it, from two players: behind since now
    (BEHIND, us(79, 79.5), 2, 1_029_999, 1_000_000, None),  # behind for less than the jump (30 s): late
    (BEHIND, us(79, 79.5), 2, 1_030_000, 0, 79.5),  # for the jump: set back to the newest
    (BEHIND, us(20, 21), 1, 1_030_000, 0, None),  # one player's clock alone does not set the server's back
    (BEHIND, us(20, 150), 2, 1_030_000, 0, None),  # its newest is in step: an old event among current ones is late
])
def test_a_clock_steps_back_only_when_its_events_stay_far_behind(
        prior: ClockRecord, events: np.ndarray, players: int, arrival_ms: int, behind_since: int,
        clock_s: float | None) -> None:
    got = server_clock.step_back(prior, events, players, arrival_ms, DELAY, JUMP)
    if clock_s is None:
        assert (got.clock_us, got.watermark_ms) == (prior.clock_us, prior.watermark_ms)
        assert got.behind_since_ms == behind_since
        return
    assert got.clock_us == int(clock_s * S) and got.clock_at_heard_us == got.clock_us
    assert got.heard_ms == arrival_ms and got.watermark_ms == int(clock_s * 1000) - DELAY  # judged from it again
    assert got.behind_since_ms == 0


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
