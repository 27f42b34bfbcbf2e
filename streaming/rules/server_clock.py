"""Each server's own clock for the online view: players time out against their own server's event time.

Spark's one watermark is the newest event time of *any* server minus the delay: right for the windows (the lab
shows what it does), wrong for who is online. One server whose clock runs 90 s fast would time out every
other server's players and make all their later events late. So the online view keeps one clock per server,
and judges each server's players by it alone. The rule, applied after every batch:

- **Arrival predicts.** Since its clock last moved on its events, a server's clock is expected to have run on
  by the arrival time that has passed (stream entry IDs: Redis' clock, one for every server): ``predicted =
  clock then + arrival now - arrival then``.
- **Its events move it.** The clock moves to the newest of the batch's events (each player's latest applied
  one) that is at most ``jump`` (the online timeout) ahead of ``predicted``. An event further ahead moves it
  only when a second player is that far ahead too (the second-newest of those players): a server whose whole
  clock stepped forward moves, one odd event (a glitch, one player's own clock) does not. It still counts for
  its own player. When the clock steps forward so, the server's players still on the old clock (latest event at
  or below the jump's bound) move forward with it by the step (:func:`forward_step`): a clock set forward is not
  time that passed, and times nobody out.
- **It steps back with its events, when they stay behind.** When even the newest of a server's events in a
  batch is more than ``jump`` behind ``predicted``, from at least two players, and its batches have been like
  that for ``jump`` of arrival time, the server's clock was set back (or its link now delivers everything that
  much later): before the batch is applied its clock goes back to that newest event and its watermark in force
  to that minus the delay, so its players are judged by the clock it keeps now. Until then its late events are
  late (one batch of old events, a backlog delivered, changes nothing), and its clock stands still while they
  come, so a clock set back by less than ``jump`` is caught up with by its own events.
- **Silent, it runs on arrival.** A batch with none of the server's events, or none it trusts, moves the clock
  to ``predicted``: players of a server that stopped sending time out as real time passes, never because
  another server's events are ahead, and a server whose single player's clock stepped ahead is trusted again
  once arrival time catches up.
- **Its watermark** is ``max(in force, clock - delay)`` (ms), like Spark's, per server: an event at or below
  the server's watermark in force is late for the online view; an online player whose latest event + timeout
  is at or below the server's next watermark times out; a logout the watermark passes is forgotten.

A server's first batch has nothing to predict from: its newest event sets its clock. No wall clock is read
(a replay gives the same answer), no Spark, no Redis: :mod:`streaming.rules.online.decide` applies it.
"""

from __future__ import annotations

import numpy as np
from msgspec.structs import replace

from streaming.rules.windows import event_ms, server_watermark
from streaming.schema.records import ClockRecord


def advance(prior: ClockRecord | None, batch_us: np.ndarray, kept_us: np.ndarray, now_ms: int | None,
            delay_ms: int, jump_ms: int, ahead: int | None = None) -> ClockRecord | None:
    """The server's clock after a batch. ``batch_us``: the latest event time of each of the batch's players
    whose events were applied; ``kept_us``: the same for every player the server keeps (the batch's
    included); ``now_ms``: the arrival of the server's newest event in the batch, or of the batch's newest
    event when it has none of the server's (None: an empty batch); ``jump_ms``: how far ahead of the
    prediction one player may move it; ``ahead``: the batch's :func:`ahead_ms` of the server (None: the batch
    has none of its events, late ones included)."""
    if prior is None:
        if len(batch_us) == 0 or now_ms is None:
            return None
        clock = int(batch_us.max())
        return _set(None, clock, now_ms, clock, delay_ms, ahead or 0)
    ahead = prior.ahead_ms if ahead is None else ahead
    if now_ms is None:
        return prior
    predicted = predicted_us(prior, now_ms)
    limit = trust_limit_us(prior, now_ms, jump_ms)
    trusted = batch_us[batch_us <= limit]
    beyond = kept_us[kept_us > limit]
    moves = [int(trusted.max())] if len(trusted) else []
    if len(beyond) >= 2:  # a second player that far ahead: the server's clock stepped
        moves.append(int(np.partition(beyond, len(beyond) - 2)[len(beyond) - 2]))
    if moves:
        clock = max(prior.clock_us, *moves)
        return _set(prior, clock, now_ms, clock, delay_ms, ahead)
    return _set(prior, max(prior.clock_us, predicted), prior.heard_ms, prior.clock_at_heard_us, delay_ms, ahead)


def trust_limit_us(prior: ClockRecord, now_ms: int, jump_ms: int) -> int:
    """The latest event time :func:`advance` trusts from one player: ``jump`` ahead of what arrival predicts. Only
    the players beyond it (``kept_us`` above it) matter to :func:`advance`, so a caller may pass those alone."""
    return predicted_us(prior, now_ms) + jump_ms * 1000


def predicted_us(prior: ClockRecord, now_ms: int) -> int:
    """The server's clock as arrival time predicts it: run on since its clock last moved on its events."""
    return prior.clock_at_heard_us + max(0, now_ms - prior.heard_ms) * 1000


def forward_step(prior: ClockRecord, after: ClockRecord, now_ms: int, jump_ms: int) -> tuple[int, int]:
    """``(step, bound)`` in us when :func:`advance` stepped the server's clock forward past the jump (a second
    player that far ahead: the server's clock was set forward); ``(0, 0)`` otherwise. The server's kept players
    whose latest event is at or below ``bound`` (the old clock's time) move forward by ``step`` with it: a clock
    set forward is not time that passed, and must not time them out."""
    predicted = predicted_us(prior, now_ms)
    bound = predicted + jump_ms * 1000
    return (after.clock_us - predicted, bound) if after.clock_us > bound else (0, 0)


def step_back(prior: ClockRecord, event_us: np.ndarray, players: int, now_ms: int, delay_ms: int,
              jump_ms: int) -> ClockRecord:
    """The server's clock before a batch is applied: set back, or marked behind since when, or as it was;
    ``event_us`` are all of the server's events in the batch (late ones too), from ``players`` distinct players,
    the newest arriving at ``now_ms``."""
    predicted = predicted_us(prior, now_ms)
    newest = int(event_us.max())
    if players < 2 or newest >= predicted - jump_ms * 1000:
        return replace(prior, behind_since_ms=0) if prior.behind_since_ms else prior
    if not prior.behind_since_ms:
        return replace(prior, behind_since_ms=now_ms)
    if now_ms - prior.behind_since_ms < jump_ms:
        return prior
    # set back: its watermark starts again from the newest event, not held at the one before
    return ClockRecord(watermark_ms=server_watermark(None, event_ms(newest), delay_ms), clock_us=newest,
                       heard_ms=now_ms, clock_at_heard_us=newest, ahead_ms=prior.ahead_ms)


def _set(prior: ClockRecord | None, clock_us: int, heard_ms: int, at_heard_us: int, delay_ms: int,
         ahead: int) -> ClockRecord:
    in_force = prior.watermark_ms if prior is not None else 0
    return ClockRecord(watermark_ms=server_watermark(in_force, event_ms(clock_us), delay_ms), clock_us=clock_us,
                       heard_ms=heard_ms, clock_at_heard_us=at_heard_us, ahead_ms=ahead,
                       behind_since_ms=prior.behind_since_ms if prior is not None else 0)


NOTICEABLE_AHEAD_MS = 2_000
"""A server whose events ran further than this ahead of their arrival has a clock running fast: the pages name
it, and it is the ClockAhead alert's default threshold. Machines kept by NTP differ by milliseconds; the margin
is for a sender that stamps an event a moment before it hands it over."""


def ahead_ms(event_us: np.ndarray, ingest_ms: np.ndarray) -> int:
    """How far a server's events ran ahead of Redis' clock (their arrival) in a batch: the most any did, 0 when
    none did. An event cannot happen after it arrived, so any positive amount is the sender's clock running
    fast (the alert's threshold leaves room for small clock differences); a clock behind is lag."""
    if len(event_us) == 0:
        return 0
    return max(0, int((event_us // 1000 - ingest_ms).max()))
