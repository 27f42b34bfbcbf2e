"""The alert lifecycle as tables: pending, firing, held, resolved; exactly at ``for`` and ``clear``; flapping;
a restart in the middle of a firing (no Redis, no Spark)."""

from __future__ import annotations

import pytest

from streaming.alerting.conditions import Finding
from streaming.alerting.config import Timing
from streaming.alerting.lifecycle import AlertState, Notice, fingerprint, step, step_all
from streaming.schema.records import RecordError

T = Timing(for_ms=10_000, clear_ms=30_000)


def f(active: bool | None, held: str | None = None) -> Finding:
    return Finding("server_silent", "B", active, 1.0, "no event from B", held)


def run(seq: list[tuple[int, Finding]], timing: Timing = T,
        start: AlertState | None = None) -> tuple[list[str], list[tuple[str, int, int]]]:
    """Statuses after each step and the notices sent as (status, at, starts_at)."""
    state, statuses, notices = start, [], []
    for now, finding in seq:
        state, n = step(state, finding, now, timing)
        statuses.append(state.status if state else "-")
        if n:
            notices.append((n.status, n.at_ms, n.starts_at_ms))
    return statuses, notices


@pytest.mark.parametrize(("seq", "statuses", "notices"), [
    # fires exactly when the condition has held for `for` (10 s), not a millisecond before
    ([(0, f(True)), (9_999, f(True)), (10_000, f(True))], ["pending", "pending", "firing"],
     [("firing", 10_000, 10_000)]),
    # a pending condition that goes away sends nothing
    ([(0, f(True)), (5_000, f(False)), (20_000, f(True))], ["pending", "-", "pending"], []),
    # resolves exactly when gone for `clear` (30 s)
    ([(0, f(True)), (10_000, f(True)), (11_000, f(False)), (40_999, f(False)), (41_000, f(False))],
     ["pending", "firing", "firing", "firing", "-"], [("firing", 10_000, 10_000), ("resolved", 41_000, 10_000)]),
    # flapping at the threshold inside `clear` pages once and resolves once
    ([(0, f(True)), (10_000, f(True)), (12_000, f(False)), (13_000, f(True)), (14_000, f(False)),
      (15_000, f(True)), (16_000, f(False)), (46_000, f(False))],
     ["pending", "firing", "firing", "firing", "firing", "firing", "firing", "-"],
     [("firing", 10_000, 10_000), ("resolved", 46_000, 10_000)]),
    # cannot tell (None): nothing changes, either way
    ([(0, f(True)), (10_000, f(None)), (20_000, f(True))], ["pending", "pending", "firing"],
     [("firing", 20_000, 20_000)]),
    # held: never starts an alert, says why; once not held it starts counting `for` afresh
    ([(0, f(True, "delayed")), (20_000, f(True, "delayed")), (21_000, f(True)), (31_000, f(True))],
     ["held", "held", "pending", "firing"], [("firing", 31_000, 31_000)]),
    # held and the condition gone: nothing to show
    ([(0, f(False, "delayed"))], ["-"], []),
    # a firing alert stays firing while held (no resolve on data that is merely delayed)
    ([(0, f(True)), (10_000, f(True)), (11_000, f(False, "delayed")), (60_000, f(False, "delayed"))],
     ["pending", "firing", "firing", "firing"], [("firing", 10_000, 10_000)]),
])
def test_lifecycle(seq: list, statuses: list[str], notices: list) -> None:
    assert run(seq) == (statuses, notices)


def test_for_zero_fires_at_once() -> None:
    assert run([(5, f(True))], Timing(0, 0)) == (["firing"], [("firing", 5, 5)])
    assert run([(5, f(True)), (6, f(False))], Timing(0, 0)) == (["firing", "-"],
                                                                [("firing", 5, 5), ("resolved", 6, 5)])


def test_a_restart_in_the_middle_of_a_firing_neither_fires_again_nor_resolves() -> None:
    """The monitor reads its alerts back (encoded in Redis): the next rounds continue the same firing."""
    state, n = step(None, f(True), 0, Timing(0, 30_000))
    assert n is not None and state is not None
    back = AlertState.decode(state.encode(), "test")
    assert back == state
    # after the restart the rule has no history yet (None), then sees the condition again
    assert run([(1_000, f(None)), (2_000, f(True))], Timing(0, 30_000), start=back) == (["firing", "firing"], [])
    # and resolves once, with the same start
    assert run([(3_000, f(False)), (33_000, f(False))], Timing(0, 30_000), start=back)[1] == [("resolved", 33_000, 0)]


def test_step_all_resolves_an_alert_whose_subject_is_gone_but_not_while_redis_is_away() -> None:
    timing = {"server_silent": Timing(0, 10)}
    silent_a = Finding("server_silent", "A", True, 61.0, "A")
    d1 = step_all({}, [silent_a, f(True)], 0, timing)
    assert sorted(d1.states) == ["server_silent|A", "server_silent|B"] and len(d1.notices) == 2
    away = step_all(d1.states, [], 100, timing, complete=False)  # nothing could be read: nothing changes
    assert away.states == d1.states and away.notices == ()
    # A is still reported and its condition gone; B is not reported at all any more (its keys expired)
    d2 = step_all(d1.states, [Finding("server_silent", "A", False)], 100, timing)
    assert d2.states["server_silent|B"].summary == "B is no longer reported"
    d3 = step_all(d2.states, [Finding("server_silent", "A", False)], 110, timing)
    assert d3.states == {} and sorted(d3.removed) == ["server_silent|A", "server_silent|B"]
    assert [(n.status, n.subject) for n in d3.notices] == [("resolved", "A"), ("resolved", "B")]


def test_notice_ids_are_stable_per_firing_and_differ_between_fire_and_resolve() -> None:
    fire = Notice(status="firing", rule="clock_ahead", subject="B", starts_at_ms=5, at_ms=5)
    again = Notice(status="firing", rule="clock_ahead", subject="B", starts_at_ms=5, at_ms=9)
    resolve = Notice(status="resolved", rule="clock_ahead", subject="B", starts_at_ms=5, ends_at_ms=9, at_ms=9)
    assert fire.id == again.id != resolve.id
    assert fire.fingerprint == fingerprint("clock_ahead", "B") != fingerprint("clock_ahead", "A")
    assert Notice.decode(resolve.encode(), "t") == resolve
    assert fire.labels("wm") == {"alertname": "ClockAhead", "severity": "warning", "namespace": "wm", "server": "B"}


def test_a_malformed_alert_state_says_what_it_is() -> None:
    with pytest.raises(RecordError, match="alert x is not a AlertState: Object missing required field"):
        AlertState.decode(b'{"rule": "server_silent"}', "alert x")
