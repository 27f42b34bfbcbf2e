"""The simulator: the same seed gives the same events, each scenario's servers delay, burst, go silent or skew
as it says, and players log in, beat and leave."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import replace
from itertools import islice, pairwise
from statistics import median

import pytest

from streaming.rules.scenarios import SCENARIOS, BurstModel, DelayModel, Outage, Scenario, ServerProfile, get_scenario
from streaming.rules.simulate import Simulator, generate
from streaming.schema.config import ConfigError
from tests.store.generator import START
from watermark_client.events import KINDS, Event


def delays_by_server(events: list[tuple[int, Event]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for arrival, ev in events:
        out[ev.server].append(arrival - ev.event_time_us)
    return out


def test_same_seed_scenario_and_start_give_the_identical_sequence() -> None:
    a = generate("late-burst", seed=42, start_us=START, rate=500, count=3_000)
    b = generate("late-burst", seed=42, start_us=START, rate=500, count=3_000)
    assert a == b
    assert list(Simulator("late-burst", seed=42, start_us=START, rate=500, count=3_000).records()) == \
        list(Simulator("late-burst", seed=42, start_us=START, rate=500, count=3_000).records())


def test_different_seeds_or_starts_differ() -> None:
    a = generate("overseas-lag", seed=1, start_us=START, rate=500, count=2_000)
    b = generate("overseas-lag", seed=2, start_us=START, rate=500, count=2_000)
    assert [e for _, e in a] != [e for _, e in b]
    later = generate("overseas-lag", seed=1, start_us=START + 60_000_000, rate=500, count=2_000)
    assert [(arr - 60_000_000, replace(e, event_time_us=e.event_time_us - 60_000_000)) for arr, e in later] == a


def test_events_come_out_in_arrival_order(overseas: list[tuple[int, Event]]) -> None:
    arrivals = [a for a, _ in overseas]
    assert arrivals == sorted(arrivals)
    assert all(a >= e.event_time_us for a, e in overseas)


def test_overseas_c_arrives_out_of_event_time_order(overseas: list[tuple[int, Event]]) -> None:
    c_times = [e.event_time_us for _, e in overseas if e.server == "C"]
    inversions = sum(1 for x, y in pairwise(c_times) if y < x)
    assert inversions > len(c_times) // 4


def test_c_delays_are_much_larger_than_home_servers(overseas: list[tuple[int, Event]]) -> None:
    d = delays_by_server(overseas)
    assert set(d) == {"A", "B", "C"}
    home_max = max(max(d["A"]), max(d["B"]))
    assert home_max <= 151_000  # 150 ms, plus up to 1 ms from millisecond event times
    assert min(d["A"] + d["B"]) >= 20_000
    assert min(d["C"]) >= 500_000 > home_max
    assert 2_000_000 < median(d["C"]) < 8_000_000
    assert max(d["C"]) - min(d["C"]) > 5_000_000  # heavy jitter


def test_late_burst_delivers_a_chunk_of_c_minutes_late(burst: list[tuple[int, Event]]) -> None:
    late = [(a, e) for a, e in burst if a - e.event_time_us > 120_000_000]
    assert late, "no event arrived more than 2 minutes late"
    assert {e.server for _, e in late} == {"C"}
    # The chunk is C's events from [20 s, 25 s) of event time, delivered together after it ends.
    offsets = sorted(e.event_time_us - START for _, e in late)
    assert offsets[0] >= 20_000_000 and offsets[-1] < 25_000_000
    c_in_chunk = [e for _, e in burst if e.server == "C" and 20_000_000 <= e.event_time_us - START < 25_000_000]
    assert len(late) == len(c_in_chunk) > 1000  # 250/s for 5 s
    assert max(a - e.event_time_us for a, e in late) < 330_000_000  # 5 min + chunk + max delay


def test_steady_has_no_late_events() -> None:
    events = generate("steady", seed=3, start_us=START, rate=1000, count=10_000)
    assert max(a - e.event_time_us for a, e in events) <= 151_000


def test_count_stops_exactly() -> None:
    for count in (0, 1, 999, 4_321):
        assert len(generate("late-burst", seed=5, start_us=START, rate=1000, count=count)) == count
    endless = iter(Simulator("steady", seed=5, start_us=START, rate=1000))
    assert len(list(islice(endless, 5_000))) == 5_000


def test_event_and_player_ids(overseas: list[tuple[int, Event]]) -> None:
    ids = [e.event_id for _, e in overseas]
    assert len(set(ids)) == len(ids)
    for _, e in overseas:
        assert re.fullmatch(rf"{e.server}-\d{{9}}", e.event_id or ""), e
        assert re.fullmatch(rf"{e.server}-p\d{{5}}", e.player_id), e
    sim = Simulator("overseas-lag", seed=7, start_us=START, rate=1000, count=10_000)
    assert {e.player_id for _, e in overseas if e.server == "A"} <= set(sim.players("A"))


def test_players_follow_login_heartbeat_logout(overseas: list[tuple[int, Event]]) -> None:
    """In generation order (= event-id order per server) every player logs in first,
    and heartbeats or logs out only while logged in."""
    assert {e.kind for _, e in overseas} == set(KINDS)
    by_player: dict[str, list[Event]] = defaultdict(list)
    for _, e in sorted(overseas, key=lambda p: (p[1].server, p[1].event_id)):
        by_player[e.player_id].append(e)
    for player, events in by_player.items():
        assert events[0].kind == "login", player
        online = False
        for e in events:
            assert (e.kind == "login") != online, (player, e)
            online = e.kind != "logout"
        times = [e.event_time_us for e in events]
        assert times == sorted(times)


def test_rate_shares_and_heartbeat_interval() -> None:
    events = generate("steady", seed=11, start_us=START, rate=1000, count=20_000)
    times = [e.event_time_us for _, e in events]
    assert max(times) - min(times) == pytest.approx(20_000_000, rel=0.01)  # rate sets event-time spacing
    shares = Counter(e.server for _, e in events)
    assert shares["A"] / 20_000 == pytest.approx(0.40, abs=0.02)
    assert shares["C"] / 20_000 == pytest.approx(0.25, abs=0.02)
    last: dict[str, int] = {}
    gaps = []
    for e in sorted((e for _, e in events), key=lambda e: e.event_time_us):
        if e.kind == "heartbeat" and e.player_id in last:
            gaps.append(e.event_time_us - last[e.player_id])
        last[e.player_id] = e.event_time_us
    assert 4_000_000 < median(gaps) < 7_000_000  # "every few seconds" (5 s by default)


def test_outages_and_clock_skew_for_later_scenarios() -> None:
    base = get_scenario("steady")
    scen = base.replace_server("A", outages=(Outage(2_000, 3_000, backfill=True),)) \
        .replace_server("B", outages=(Outage(2_000, 3_000, backfill=False),)) \
        .replace_server("C", clock_skew_ms=-90_000)
    events = generate(scen, seed=1, start_us=START, rate=1000, count=10_000)
    a_in = [(a, e) for a, e in events if e.server == "A" and 2_000_000 <= e.event_time_us - START < 5_000_000]
    assert a_in and all(a >= START + 5_000_000 for a, _ in a_in)  # backfilled after the outage
    assert not [e for _, e in events if e.server == "B" and 2_000_000 <= e.event_time_us - START < 5_000_000]
    c = [(a, e) for a, e in events if e.server == "C"]
    assert all(89_800_000 < a - e.event_time_us < 90_200_000 for a, e in c)  # clock 90 s behind


def test_scenario_registry() -> None:
    assert list(SCENARIOS) == ["steady", "overseas-lag", "late-burst", "idle-server", "clock-skew",
                               "outage-and-backfill", "players-leave", "rolling-deploy", "matches"]
    for name, scen in SCENARIOS.items():
        assert scen.name == name and scen.description
        assert [s.name for s in scen.servers] == ["A", "B", "C"]
    assert SCENARIOS["late-burst"].server("C").burst is not None
    assert SCENARIOS["overseas-lag"].server("C").burst is None
    assert SCENARIOS["steady"].server("C").delay == SCENARIOS["steady"].server("A").delay


def by_id(events: list[tuple[int, Event]]) -> dict[str, tuple[int, Event]]:
    return {e.event_id: (a, e) for a, e in events if e.event_id}


def test_idle_server_b_is_silent_for_90_s_from_30_s_and_again_every_5_min() -> None:
    """Rate 100 for 400 s of event time covers the first outage and the start of the second."""
    idle = generate("idle-server", seed=6, start_us=START, rate=100, count=30_000)
    steady = generate("steady", seed=6, start_us=START, rate=100, count=30_000)
    b = sorted(e.event_time_us - START for _, e in idle if e.server == "B")
    silent = [(30_000_000, 120_000_000), (330_000_000, 420_000_000)]
    assert not [t for t in b for lo, hi in silent if lo <= t < hi]
    # events right up to each outage and right after the first one (B has ~35 events/s)
    assert 29_000_000 <= max(t for t in b if t < 30_000_000)
    assert min(t for t in b if t >= 30_000_000) < 121_000_000
    assert 329_000_000 <= max(t for t in b if t < 330_000_000)
    # A and C do not notice: over the event time both runs cover, their events are identical to steady's
    horizon = min(max(e.event_time_us for _, e in run) for run in (idle, steady))
    for server in ("A", "C"):
        assert [p for p in idle if p[1].server == server and p[1].event_time_us <= horizon] == \
            [p for p in steady if p[1].server == server and p[1].event_time_us <= horizon]
    assert len(idle) == 30_000  # the count is still exact: the slots B would have had stay empty


def test_clock_skew_puts_a_20_s_ahead_and_changes_nothing_else() -> None:
    skew = generate("clock-skew", seed=8, start_us=START, rate=1000, count=10_000)
    steady = generate("steady", seed=8, start_us=START, rate=1000, count=10_000)
    assert len(skew) == len(steady)
    for (a1, e1), (a2, e2) in zip(skew, steady, strict=True):
        assert a1 == a2  # same arrival: the event happened at the same true time
        assert e1.event_time_us - e2.event_time_us == (20_000_000 if e1.server == "A" else 0)
        assert replace(e1, event_time_us=e2.event_time_us) == e2
    a_ahead = [e.event_time_us - a for a, e in skew if e.server == "A"]
    # ahead of its ingest time by 20 s minus the network delay, well within MAX_FUTURE_SKEW (5 min)
    assert a_ahead and all(19_849_000 <= d <= 19_980_000 for d in a_ahead)


def test_outage_and_backfill_delivers_cs_backlog_at_once_when_the_link_returns() -> None:
    """Same events as steady (none lost); C's from the outage arrive at its end plus their own delay."""
    backfill = generate("outage-and-backfill", seed=4, start_us=START, rate=100, count=40_000)
    steady = by_id(generate("steady", seed=4, start_us=START, rate=100, count=40_000))
    assert len(backfill) == 40_000 and set(by_id(backfill)) == set(steady)
    held = 0
    for arrival, e in backfill:
        steady_arrival, steady_event = steady[e.event_id]
        assert e == steady_event
        offset = e.event_time_us - START
        if e.server == "C" and any(lo <= offset < lo + 60_000_000 for lo in (30_000_000, 330_000_000)):
            end = START + (offset - 30_000_000) // 300_000_000 * 300_000_000 + 90_000_000
            assert arrival == steady_arrival - e.event_time_us + end  # the link's return + the same delay
            held += 1
        else:
            assert arrival == steady_arrival
    assert held > 2 * 60 * 25 * 0.9  # C's ~25 events/s over both outages
    arrivals = sorted(a - START for a, e in backfill if e.server == "C" and 30_000_000 <= e.event_time_us - START
                      < 90_000_000)
    assert 90_000_000 < arrivals[0] and arrivals[-1] <= 90_151_000  # the whole backlog within one delay spread


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Simulator("nope", seed=1, start_us=START, rate=10), "unknown scenario 'nope'; choose one of: steady"),
        (lambda: Simulator("steady", seed=1, start_us=START, rate=-5), "rate must be a number >= 0"),
        (lambda: Simulator("steady", seed=1, start_us=START, rate=float("nan")), "rate must be a number >= 0"),
        (lambda: Simulator("steady", seed=1, start_us=START, rate=10, count=-1), "count must be an integer >= 0"),
        (lambda: DelayModel(min_ms=50, median_ms=10, max_ms=100), "median_ms (10) must be between min_ms (50)"),
        (lambda: BurstModel(period_ms=1000, duration_ms=2000, lateness_min_ms=0, lateness_max_ms=1),
         "duration_ms (2000) must be positive and at most period_ms (1000)"),
        (lambda: ServerProfile("A 1", 1.0, SCENARIOS["steady"].server("A").delay), "server 'A 1': name must be"),
        (lambda: ServerProfile("A", 0, SCENARIOS["steady"].server("A").delay),
         "server 'A': share must be a positive number, got 0"),
        (lambda: Scenario("x", "", (SCENARIOS["steady"].server("A"),) * 2), "duplicate server names A"),
        (lambda: SCENARIOS["steady"].replace_server("Z", share=1.0), "has no server 'Z'"),
        (lambda: Outage(0, 5_000, every_ms=5_000), "outage every_ms (5000) must be longer than duration_ms (5000)"),
    ],
)
def test_config_errors_are_precise(build: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        build()  # type: ignore[operator]
    assert message in str(info.value)


def online_counts(events: list[tuple[int, Event]], server: str, every_s: int) -> dict[int, int]:
    """Players online on ``server`` by event time, at the end of each ``every_s`` seconds."""
    online: set[str] = set()
    out: dict[int, int] = {}
    for _, e in sorted(events, key=lambda x: x[1].event_time_us):
        if e.server == server:
            (online.discard if e.kind == "logout" else online.add)(e.player_id)
            out[(e.event_time_us - START) // (every_s * 1_000_000)] = len(online)
    return out


def test_players_leave_logs_80_percent_of_b_out_from_30_s_for_90_s_while_b_keeps_sending() -> None:
    events = generate("players-leave", seed=3, start_us=START, rate=200, count=200 * 150)
    b = online_counts(events, "B", 10)
    assert b[2] == 350 and b[3] <= 71 and b[10] <= 71  # 20 % of 350 stay through 30-120 s
    assert b[12] >= 340  # back once it ends
    assert min(online_counts(events, "A", 10).values()) >= 390  # the others are untouched
    b_during = [e for _, e in events if e.server == "B" and 40e6 <= e.event_time_us - START < 110e6]
    assert len(b_during) > 0.3 * 200 * 70 * 0.9  # B's share of the rate goes on: its players really left


def test_a_scaled_timeline_brings_the_outage_forward_and_keeps_the_delays() -> None:
    scaled = SCENARIOS["idle-server"].scaled(0.2)
    (outage,) = scaled.server("B").outages
    assert (outage.start_ms, outage.duration_ms, outage.every_ms) == (6_000, 18_000, 60_000)
    assert scaled.server("B").delay == SCENARIOS["idle-server"].server("B").delay
    burst = SCENARIOS["late-burst"].scaled(0.2).server("C").burst
    assert burst is not None and (burst.period_ms, burst.lateness_min_ms) == (12_000, 24_000)
    assert SCENARIOS["steady"].scaled(1) is SCENARIOS["steady"]
    with pytest.raises(ConfigError, match="a timeline scale must be a positive number, got 0"):
        SCENARIOS["steady"].scaled(0)
