"""Who is online: the per-player rule, pure (no Spark, no Redis), so it is tested as a table.

A player is online from a login until a logout, or until ``timeout`` of event
time passes without an event from them. Heartbeats and logins refresh; an event
without a kind (replayed event sets carry none) keeps a player online too, like a
heartbeat: a player who sends anything is there. A heartbeat without a login
also makes the player online (the login may have been dropped as late).

Order is event time, ties broken by stream entry ID (arrival), so the outcome
does not depend on how events are cut into batches: an event older than the
player's latest one cannot change their status and is ignored (``stale``).
An event at or below the watermark (``event_us <= watermark_ms * 1000``, the
predicate Spark's own stateful operators drop late rows with) is ignored
(``late``): it could otherwise reopen a session that has already expired.

Expiry is decided by the watermark: an online player whose latest event is at
``last_us`` goes offline, at event time ``last_us + timeout``, in the first
batch whose watermark is at or above that instant (:func:`expiry_ms` is the
timer; Spark fires event-time timers with ``expiry <= watermark``). Two events
further apart than the timeout give an offline and an online transition even
when they arrive together.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

LOGOUT = "logout"
TIMEOUT = "timeout"
ANY_EVENT = "event"
"""The cause recorded for an event without a kind."""


@dataclass(frozen=True, slots=True)
class Seen:
    """One accepted event of one player."""

    event_us: int
    entry: tuple[int, int]  # stream entry ID: breaks ties at equal event time
    kind: str | None


@dataclass(frozen=True, slots=True)
class PlayerState:
    """What Spark keeps per (server, player) between batches."""

    online: bool
    last_us: int  # event time of the latest event applied
    last_entry: tuple[int, int]

    def timer_ms(self, timeout_ms: int) -> int:
        """When Spark should call back: the expiry when online; when offline (after a logout), the
        logout's time, after which no accepted event can be older and the state can go."""
        return expiry_ms(self.last_us, timeout_ms) if self.online else -(-self.last_us // 1000)


@dataclass(frozen=True, slots=True)
class Transition:
    online: bool
    at_us: int  # event time it happened at
    cause: str  # login, heartbeat, event (no kind), logout or timeout


@dataclass(frozen=True)
class Outcome:
    state: PlayerState | None  # None: nothing to keep
    transitions: list[Transition]
    late: int = 0
    stale: int = 0


def expiry_ms(last_us: int, timeout_ms: int) -> int:
    """The smallest watermark (ms) at which a player last seen at ``last_us`` has timed out."""
    return -(-(last_us + timeout_ms * 1000) // 1000)


def apply_events(state: PlayerState | None, events: Iterable[Seen], watermark_ms: int,
                 timeout_ms: int) -> Outcome:
    """Fold one batch's events of one player into their state."""
    transitions: list[Transition] = []
    late = stale = 0
    for ev in sorted(events, key=lambda e: (e.event_us, e.entry)):
        if ev.event_us <= watermark_ms * 1000:
            late += 1
            continue
        if state is not None and (ev.event_us, ev.entry) < (state.last_us, state.last_entry):
            stale += 1
            continue
        online = ev.kind != LOGOUT
        was = state is not None and state.online
        if was and state is not None and ev.event_us >= state.last_us + timeout_ms * 1000:
            # Silent for longer than the timeout in between: that session ended.
            transitions.append(Transition(False, state.last_us + timeout_ms * 1000, TIMEOUT))
            was = False
        if online != was:
            transitions.append(Transition(online, ev.event_us, ev.kind or ANY_EVENT))
        state = PlayerState(online, ev.event_us, ev.entry)
    return Outcome(state, transitions, late, stale)


def on_timer(state: PlayerState | None, watermark_ms: int, timeout_ms: int) -> tuple[Outcome, int | None]:
    """A timer fired at ``watermark_ms``: expire or forget the player; returns the timer to set next, if any.

    The expiry is recomputed from the state rather than taken from the timer, so a
    timer set under another ``ONLINE_TIMEOUT`` (before a restart) still does the right thing."""
    if state is None:
        return Outcome(None, []), None
    if state.timer_ms(timeout_ms) > watermark_ms:  # e.g. the timeout grew since the timer was set
        return Outcome(state, []), state.timer_ms(timeout_ms)
    if state.online:
        return Outcome(None, [Transition(False, state.last_us + timeout_ms * 1000, TIMEOUT)]), None
    return Outcome(None, []), None
