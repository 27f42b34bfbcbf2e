"""The health verdicts the alerts, the status line and the lab share (streaming.alerting.verdicts), as tables."""

from __future__ import annotations

import pytest

from streaming.alerting.config import AlertConfig
from streaming.alerting.verdicts import Flat, WatermarkPoint, flat_run, is_behind

CFG = AlertConfig()  # trigger + 5 s is behind; a watermark unmoved 60 s while events arrive is stalled
AFTER = CFG.watermark_flat.after_ms
T = 1_800_000_000_000


def pts(*rows: tuple[int, int | None, int]) -> list[WatermarkPoint]:
    return [WatermarkPoint(T + at, wm, arrived) for at, wm, arrived in rows]


@pytest.mark.parametrize(("behind", "trigger", "want"), [
    (0, 1_000, False), (6_000, 1_000, False), (6_001, 1_000, True), (15_000, 10_000, False), (15_001, 10_000, True),
])
def test_behind_is_the_trigger_plus_the_freshness_margin(behind: int, trigger: int, want: bool) -> None:
    assert CFG.freshness.above_trigger_ms == 5_000
    assert is_behind(behind, trigger, CFG) is want


@pytest.mark.parametrize(("points", "want"), [
    ([], None),
    (pts((0, 5, 0)), Flat(5, T, 0, True)),
    (pts((0, 4, 0), (1_000, 5, 10), (2_000, 5, 30)), Flat(5, T + 1_000, 20, False)),
    (pts((0, 5, 0), (1_000, 5, 10), (2_000, 5, 30)), Flat(5, T, 30, True)),
])
def test_the_flat_run_is_the_trailing_points_with_the_newest_watermark(points: list[WatermarkPoint],
                                                                      want: Flat | None) -> None:
    assert flat_run(points) == want


@pytest.mark.parametrize(("points", "now", "want"), [
    (pts((0, 4, 0), (1_000, 5, 10), (AFTER + 1_000, 5, 11)), AFTER + 1_000, True),   # exactly `after`, one arrived
    (pts((0, 4, 0), (1_000, 5, 10), (AFTER + 999, 5, 11)), AFTER + 999, False),      # a millisecond short: moving
    (pts((0, 4, 0), (1_000, 5, 10), (AFTER + 1_000, 5, 10)), AFTER + 1_000, False),  # nothing arrived: quiet
    (pts((0, 5, 0), (AFTER - 1, 5, 10)), AFTER - 1, None),                           # not watched long enough
    (pts((0, 5, 0), (AFTER, 5, 10)), AFTER, True),                                   # watched exactly `after`
    (pts((0, None, 0), (AFTER, None, 10)), AFTER, None),                             # no watermark yet
    (pts((0, 4, 0), (1_000, 5, 10), (2_000, 5, 12)), AFTER + 1_000, True),           # no point since: still held
])
def test_stalled_is_unmoved_for_after_while_events_arrive(points: list[WatermarkPoint], now: int,
                                                          want: bool | None) -> None:
    run = flat_run(points)
    assert run is not None and run.stalled(T + now, CFG) is want
