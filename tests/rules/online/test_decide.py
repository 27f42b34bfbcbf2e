"""Each server's players against its own clock (streaming.rules.online.decide.decide_servers) as a table, without
Redis. The expected values are worked out by hand from the rule's words (streaming.rules.server_clock, the online
timeout, streaming.rules.fleet.forgotten), not taken from a run: delay 5 s, timeout (and the clock's jump) 10 s."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from streaming.rules.online.decide import decide_servers
from streaming.rules.online.fold import KIND_CODES
from streaming.rules.online.table import OnlineEvents, PlayerTable
from streaming.schema.records import ClockRecord

DELAY, TIMEOUT = 5_000, 10_000
S = 1_000_000  # one second in microseconds


def clock_at(seconds: int, heard_ms: int | None = None) -> ClockRecord:
    """A server's clock that last moved on its events at ``seconds`` of event time (arriving then, unless
    ``heard_ms``), its watermark that minus the delay."""
    return ClockRecord(watermark_ms=seconds * 1000 - DELAY, clock_us=seconds * S,
                       heard_ms=seconds * 1000 if heard_ms is None else heard_ms, clock_at_heard_us=seconds * S)


@dataclass(frozen=True)
class Server:
    """One server before the batch: its clock, its players online and logged out (player -> latest event, s)."""

    clock: ClockRecord | None = None
    online: dict[str, float] = field(default_factory=dict)
    logged_out: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class After:
    """What the batch does to one server: its players online, the transitions and their causes, its next watermark
    (None: it has no clock after the batch), and whether the view forgets it."""

    count: int
    came: int = 0
    went: int = 0
    causes: dict[str, int] = field(default_factory=dict)
    watermark_ms: int | None = None
    forget: bool = False


def us(seconds: float) -> bytes:
    return str(round(seconds * S)).encode()


def decide(before: dict[str, Server], events: list[tuple[str, str, float, str | None, int]], asked: dict[str, int],
           retire_after_ms: int) -> tuple[dict[str, After], PlayerTable, dict]:
    t = PlayerTable()
    for server, s in before.items():
        t.load(server, {p.encode(): us(v) for p, v in s.online.items()},
               {p.encode(): us(v) for p, v in s.logged_out.items()})
    ev = OnlineEvents(np.array([e[0] for e in events], object), np.array([e[1] for e in events], object),
                      np.array([round(e[2] * S) for e in events], np.int64), np.arange(len(events), dtype=np.int64),
                      np.array([KIND_CODES[e[3]] for e in events], np.int8),
                      np.array([e[4] for e in events], np.int64))
    clocks = {s: b.clock for s, b in before.items() if b.clock is not None}
    writes, after = decide_servers(t, ev, clocks, DELAY, TIMEOUT, None, retire_after_ms, asked)
    got = {s: After(w.count, w.came_online, w.went_offline, w.causes,
                    after[s].watermark_ms if s in after else None, w.forget) for s, w in writes.items()}
    return got, t, writes


A_105 = Server(clock_at(105), online={"p1": 105})  # one player online, the clock at their event

# (what, servers before, events (server, player, event time s, kind, arrival ms), operator's requests, RETIRE_AFTER,
#  each server decided after the batch)
CASES = [
    ("a server's first batch: its newest event sets its clock, its watermark that minus the delay",
     {}, [("A", "p1", 100, "login", 100_000)], {}, 600_000,
     {"A": After(1, 1, 0, {"login": 1}, 95_000)}),
    ("each server against its own clock: one far ahead times out nobody else's players",
     {}, [("A", "p1", 100, "login", 100_000), ("B", "q1", 1000, "login", 100_000)], {}, 600_000,
     {"A": After(1, 1, 0, {"login": 1}, 95_000), "B": After(1, 1, 0, {"login": 1}, 995_000)}),
    ("an online player whose latest event + timeout the next watermark reaches times out",
     {"A": A_105}, [("A", "p2", 120, "heartbeat", 120_000)], {}, 600_000,
     {"A": After(1, 1, 1, {"heartbeat": 1, "timeout": 1}, 115_000)}),
    ("... and a millisecond short of it is still online",
     {"A": A_105}, [("A", "p2", 119.999, "heartbeat", 120_000)], {}, 600_000,
     {"A": After(2, 1, 0, {"heartbeat": 1}, 114_999)}),
    ("an event at or below the server's watermark in force is late: it changes nothing",
     {"A": A_105}, [("A", "p2", 100, "login", 105_000)], {}, 600_000,
     {"A": After(1, 0, 0, {}, 100_000)}),
    ("a silent server's clock runs on arrival: its players time out as real time passes, whatever another sends",
     {"A": A_105}, [("B", "q1", 1000, "login", 120_000)], {}, 600_000,
     {"A": After(0, 0, 1, {"timeout": 1}, 115_000), "B": After(1, 1, 0, {"login": 1}, 995_000)}),
    ("one player far ahead of what arrival predicts moves no clock, but is online",
     {"A": A_105}, [("A", "p2", 500, "heartbeat", 106_000)], {}, 600_000,
     {"A": After(2, 1, 0, {"heartbeat": 1}, 101_000)}),
    ("a second player that far ahead: the clock stepped forward, and its players move with it (nobody times out)",
     {"A": A_105}, [("A", "p2", 500, "heartbeat", 106_000), ("A", "p3", 501, "heartbeat", 106_000)], {}, 600_000,
     {"A": After(3, 2, 0, {"heartbeat": 2}, 495_000)}),
    ("a server an operator asked to forget, with no player and silent since, is forgotten",
     {"A": Server(clock_at(105))}, [("B", "q1", 1000, "login", 120_000)], {"A": 110_000}, 600_000,
     {"A": After(0, forget=True), "B": After(1, 1, 0, {"login": 1}, 995_000)}),
    ("... one that spoke after the request is kept",
     {"A": Server(clock_at(105, heard_ms=111_000))}, [("B", "q1", 1000, "login", 120_000)], {"A": 110_000}, 600_000,
     # its clock runs on from 105 s heard at 111 s: 114 s at 120 s of arrival
     {"A": After(0, watermark_ms=109_000), "B": After(1, 1, 0, {"login": 1}, 995_000)}),
    ("a server with no player, silent for RETIRE_AFTER of arrival time, is forgotten",
     {"A": Server(clock_at(105))}, [("B", "q1", 1000, "login", 120_000)], {}, 15_000,
     {"A": After(0, forget=True), "B": After(1, 1, 0, {"login": 1}, 995_000)}),
    ("... a millisecond before it, kept",
     {"A": Server(clock_at(105))}, [("B", "q1", 1000, "login", 120_000)], {}, 15_001,
     {"A": After(0, watermark_ms=115_000), "B": After(1, 1, 0, {"login": 1}, 995_000)}),
    ("a server without a clock, a player or an event is not decided at all",
     {"A": Server(), "B": Server(clock_at(105), online={"q1": 105})}, [("B", "q1", 110, None, 110_000)], {}, 600_000,
     {"B": After(1, 0, 0, {}, 105_000)}),
]


@pytest.mark.parametrize(("what", "before", "events", "asked", "retire_after_ms", "expected"), CASES,
                         ids=[c[0] for c in CASES])
def test_each_server_is_decided_by_its_own_clock(what: str, before: dict[str, Server],
                                                 events: list[tuple[str, str, float, str | None, int]],
                                                 asked: dict[str, int], retire_after_ms: int,
                                                 expected: dict[str, After]) -> None:
    got, _, _ = decide(before, events, asked, retire_after_ms)
    assert got == expected


# (player's logout time s) -> forgotten with the batch (the next watermark, 105 s, reaches it)?
LOGOUTS = [(103, True), (105, True), (105.001, False), (107, False)]


@pytest.mark.parametrize(("logout_s", "forgotten"), LOGOUTS)
def test_a_logout_is_forgotten_once_the_servers_next_watermark_reaches_it(logout_s: float, forgotten: bool) -> None:
    before = {"A": Server(clock_at(105), online={"p2": 105}, logged_out={"p1": logout_s})}
    got, t, writes = decide(before, [("A", "p2", 110, "heartbeat", 110_000)], {}, 600_000)
    assert got == {"A": After(1, 0, 0, {}, 105_000)}
    assert writes["A"].drop_logged_out == (["p1"] if forgotten else [])
    assert (t.entries("A", False).names.tolist() == ["p1"]) is not forgotten
