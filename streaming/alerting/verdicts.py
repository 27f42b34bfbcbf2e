"""The pipeline's health verdicts, each defined once: the alerts (:mod:`.conditions`), the dashboard's status line
and the Watermark lab judge with these functions and the thresholds of one :class:`AlertConfig` (the running
monitor's, which it publishes; ``ops/alerts.toml`` sets them), so the status line and the Alerts page cannot
disagree about the same moment.

* **Behind**: the oldest entry not committed yet has waited longer than the trigger plus
  ``[freshness] above_trigger`` (a batch every trigger is keeping up; entries that arrived since the last batch
  are waiting, not late).
* **Watermark stalled**: the watermark has not moved for ``[watermark_flat] after`` or longer while events kept
  arriving (accepted or dropped as late: a watermark held by a clock far ahead drops everything that arrives,
  and that is the stall to see). Watermarks never go back, so "not moved since T" is "equal since T".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from streaming.alerting.config import AlertConfig


def behind_limit_ms(trigger_ms: int, cfg: AlertConfig) -> int:
    """How long the oldest waiting entry may wait before the pipeline is behind."""
    return trigger_ms + cfg.freshness.above_trigger_ms


def is_behind(behind_ms: int, trigger_ms: int, cfg: AlertConfig) -> bool:
    return behind_ms > behind_limit_ms(trigger_ms, cfg)


@dataclass(frozen=True)
class WatermarkPoint:
    """The watermark at a moment, and how many events had arrived by then (a running count: accepted plus dropped
    as late)."""

    at_ms: int
    watermark_ms: int | None
    arrived: int


@dataclass(frozen=True)
class Flat:
    """The watermark's latest run without a move."""

    watermark_ms: int | None
    since_ms: int
    """The first point of the run: the watermark has been here at least since then."""
    arrived: int
    """Events that arrived during the run."""
    seen_from_start: bool
    """The run starts at the first point there is: it may have started earlier."""

    def held_ms(self, now_ms: int) -> int:
        return now_ms - self.since_ms

    def stalled(self, now_ms: int, cfg: AlertConfig) -> bool | None:
        """Whether this run is a stall; None when it cannot tell: the run is all there is and shorter than
        ``after`` (it may have started before the first point), or there is no watermark yet."""
        if self.watermark_ms is None:
            return None
        if self.held_ms(now_ms) < cfg.watermark_flat.after_ms:
            return None if self.seen_from_start else False
        return self.arrived > 0


def flat_run(points: Sequence[WatermarkPoint]) -> Flat | None:
    """The trailing run of points with the newest watermark; None without points."""
    if not points:
        return None
    last = points[-1]
    i = len(points) - 1
    while i > 0 and points[i - 1].watermark_ms == last.watermark_ms:
        i -= 1
    return Flat(last.watermark_ms, points[i].at_ms, last.arrived - points[i].arrived, i == 0)

