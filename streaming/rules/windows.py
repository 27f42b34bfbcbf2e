"""Event-time window math and the late rule, pure and Spark-free.

These functions state the semantics the Spark query implements (the sink
classifies in Spark SQL); the unit tests pin them down, and the integration
tests check the query against an independent oracle built on the same rules:

* windows start at multiples of ``slide`` (epoch-aligned, as Spark's
  ``window()``); an event at ``t`` belongs to every window with
  ``start <= t < start + length``;
* a window is *closed* (final), and an event for it is *dropped*, iff
  ``window.end <= watermark`` (milliseconds, the watermark in force for the
  batch);
* an event below the watermark whose window is still open is *late but
  accepted*;
* after each batch with data the watermark becomes
  ``max(watermark, max_event_time_ms - delay)``; it never falls.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

US_PER_MS = 1000


class Verdict(StrEnum):
    ON_TIME = "on_time"
    LATE_ACCEPTED = "late_accepted"
    DROPPED = "dropped"


@dataclass(frozen=True, slots=True)
class Window:
    start_ms: int
    end_ms: int


def window_ranges(event_us: int, length_ms: int, slide_ms: int) -> list[Window]:
    """Every window containing ``event_us``, oldest first."""
    if length_ms <= 0 or slide_ms <= 0:
        raise ValueError("window length and slide must be positive")
    length_us, slide_us = length_ms * US_PER_MS, slide_ms * US_PER_MS
    last_start_us = event_us - (event_us % slide_us)  # Python's % floors, so negatives work too
    out: list[Window] = []
    start_us = last_start_us
    while start_us + length_us > event_us:
        out.append(Window(start_us // US_PER_MS, (start_us + length_us) // US_PER_MS))
        start_us -= slide_us
    out.reverse()
    return out


def event_ms(event_us: int) -> int:
    """Spark's watermark tracker works in milliseconds: it divides microseconds by 1000."""
    return -(-event_us // US_PER_MS) if event_us < 0 else event_us // US_PER_MS


def is_closed(window_end_ms: int, watermark_ms: int) -> bool:
    return window_end_ms <= watermark_ms


def late_below_us(watermark_ms: int) -> int:
    """The late rule's bound, the one place it is written: an event whose time (us) is below it arrived behind the
    watermark in force (``watermark_ms``), dropped from a closed window or counted late in an open one. Spark's
    side filters a batch's events with it in one vectorised comparison
    (:func:`streaming.spark.local_agg.late_events`, proven equal to :func:`is_late` by tests/rules/test_local_agg.py).

    >>> late_below_us(60_000)
    60000000
    """
    return watermark_ms * US_PER_MS


def is_late(event_us: int, watermark_ms: int) -> bool:
    """The late rule: behind the watermark it met (:func:`late_below_us`); called for each event judged.

    >>> is_late(59_999_999, 60_000), is_late(60_000_000, 60_000)
    (True, False)
    """
    return event_us < late_below_us(watermark_ms)


def classify(event_us: int, window: Window, watermark_ms: int) -> Verdict:
    if is_closed(window.end_ms, watermark_ms):
        return Verdict.DROPPED
    if is_late(event_us, watermark_ms):
        return Verdict.LATE_ACCEPTED
    return Verdict.ON_TIME


def never_back(in_force_ms: int, candidate_ms: int) -> int:
    """A watermark never goes back: the next one is ``candidate_ms`` unless the one in force is higher. Every
    advance below applies it, and so does Spark's combination of its inputs
    (:meth:`streaming.rules.watermarks.ServerWatermarks.combined`)."""
    return max(in_force_ms, candidate_ms)


def server_watermark(own_ms: int | None, newest_ms: int, delay_ms: int) -> int:
    """One input's watermark after a batch with its events, called for each input the batch had events of: the
    newest event time (ms) minus the delay, never below the input's own (``own_ms``; None: the input has none yet,
    and its first batch sets it). The one place the advance is written: :func:`next_watermark` applies it to the
    pipeline's, :class:`streaming.rules.watermarks.ServerWatermarks` to each of Spark's inputs and
    :mod:`streaming.rules.server_clock` to each server's clock.

    >>> server_watermark(60_000, 200_000, 30_000), server_watermark(60_000, 50_000, 30_000)
    (170000, 60000)
    >>> server_watermark(None, 50_000, 30_000)
    20000
    """
    candidate = newest_ms - delay_ms
    return candidate if own_ms is None else never_back(own_ms, candidate)


def next_watermark(in_force_ms: int, newest_us: int | None, delay_ms: int) -> int:
    """The watermark's rule: the watermark in force for the next batch is the larger of the one in force and the
    newest event time seen minus the delay (:func:`server_watermark`); it never goes back, and a batch with no
    event leaves it as it was.

    >>> next_watermark(60_000, 200_000_000, 30_000), next_watermark(60_000, 50_000_000, 30_000)
    (170000, 60000)
    """
    if newest_us is None:
        return in_force_ms
    return server_watermark(in_force_ms, event_ms(newest_us), delay_ms)


def advance_pipeline(in_force_ms: int, running_us: int | None, newest_us: Iterable[int | None], delay_ms: int,
                     combined_ms: int | None = None) -> tuple[int | None, int]:
    """The pipeline's running maximum event time and its next watermark after a batch, called when a batch is
    committed (the pipeline's commit plan, the online view's merge). ``running_us``: the running maximum before it
    (None: no event yet); ``newest_us``: the batch's newest event times (None: a share with none); the next
    watermark is :func:`next_watermark` of the running maximum, or with one input per server Spark's combined
    watermark (``combined_ms``, :meth:`streaming.rules.watermarks.ServerWatermarks.combined`), never below the one
    in force.

    >>> advance_pipeline(60_000, 150_000_000, [200_000_000, None], 30_000)
    (200000000, 170000)
    >>> advance_pipeline(60_000, 150_000_000, [], 30_000, combined_ms=40_000)
    (150000000, 60000)
    """
    known = [v for v in (running_us, *newest_us) if v is not None]
    running = max(known) if known else None
    if combined_ms is not None:
        return running, never_back(in_force_ms, combined_ms)
    return running, next_watermark(in_force_ms, running, delay_ms)


def advance_watermark(watermark_ms: int, event_times_us: Iterable[int], delay_ms: int) -> int:
    """The watermark in force for the next batch, given this batch's event times (:func:`next_watermark`)."""
    return next_watermark(watermark_ms, max(event_times_us, default=None), delay_ms)


def late_counts(starts_ms: np.ndarray, ends_ms: np.ndarray, event_us: np.ndarray, counts: np.ndarray,
                watermark_ms: int) -> np.ndarray:
    """Per open window, its late-but-accepted events, from a histogram of event times (``event_us``
    ascending, ``counts[i]`` events at ``event_us[i]``): those in ``[start, min(end, watermark))``.

    A batch's events arrive pre-aggregated per window, which loses their times; the histogram
    keeps them, so the count stays exact."""
    cum = np.concatenate(([0], np.cumsum(counts, dtype=np.int64)))
    below = np.minimum(ends_ms, watermark_ms) * US_PER_MS
    late: np.ndarray = cum[np.searchsorted(event_us, below)] - cum[np.searchsorted(event_us, starts_ms * US_PER_MS)]
    return np.maximum(late, 0)  # type: ignore[no-any-return]  # a window that starts after the watermark has none


@dataclass(frozen=True)
class Histograms:
    """Every server's histogram of event times (:func:`late_counts`) in one sorted array, keyed ``server code x
    shift + (event time - base)``, so the late counts of a batch's windows of every server come from one
    ``searchsorted`` (a call per server cost about 8 ms a judgement at 300 servers, three judgements a batch)."""

    codes: Mapping[str, int]
    key: np.ndarray
    cum: np.ndarray
    base: int
    shift: int

    @classmethod
    def of(cls, hists: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> Histograms | None:
        """None when the servers' event times span too much to key them in int64 (then judge server by server)."""
        codes = {s: i for i, s in enumerate(hists)}
        parts = [h for h in hists.values() if len(h[0])]
        if not parts:
            return cls(codes, np.zeros(0, np.int64), np.zeros(1, np.int64), 0, 1)
        base = min(int(h[0][0]) for h in parts)
        shift = max(int(h[0][-1]) for h in parts) - base + 2
        if shift * (len(codes) + 1) >= 2**62:
            return None
        key = np.concatenate([codes[s] * shift + (us - base) for s, (us, _) in hists.items()])
        counts = np.concatenate([n for _, n in hists.values()]).astype(np.int64)
        return cls(codes, key, np.concatenate(([0], np.cumsum(counts))), base, shift)

    def late_counts(self, servers: Sequence[str], starts_ms: np.ndarray, ends_ms: np.ndarray,
                    watermark_ms: int) -> np.ndarray:
        """:func:`late_counts` of each window (``servers[i]``'s, ``[starts_ms[i], ends_ms[i])``), all at once."""
        code = np.array([self.codes[s] for s in servers], np.int64) * self.shift

        def at(us: np.ndarray) -> np.ndarray:  # a bound outside the events' span: the segment's start or end
            found: np.ndarray = np.searchsorted(self.key, code + np.clip(us - self.base, -1, self.shift - 1))
            return found

        below = np.minimum(ends_ms, watermark_ms) * US_PER_MS
        late: np.ndarray = self.cum[at(below)] - self.cum[at(starts_ms * US_PER_MS)]
        return np.maximum(late, 0)  # type: ignore[no-any-return]
