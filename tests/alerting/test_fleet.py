"""A fleet's life as tables: the server life rule (``streaming.rules.fleet``) at its edges, then the alerts over a
rolling deploy, a match ending, a crash, a region outage and a single silent long-lived server. No Redis, no
Spark: observations as the monitor reads them, judged by the same rules."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from streaming.alerting.observation import Observation, OnlineSample, ServerObs
from streaming.rules.fleet import Life, admit, drained_after, forgotten, life
from streaming.schema.config import Config
from streaming.schema.records import NameGuardRecord
from tests.alerting.test_conditions import T0, findings, obs, pipeline

MIN = 60_000
LIFE = {"silent_after_ms": MIN, "retire_after_ms": 10 * MIN}


@pytest.mark.parametrize(("last", "drained", "now", "want"), [
    (None, 0, T0, Life.LIVE),  # nothing committed yet
    (T0, 0, T0 + MIN - 1, Life.LIVE),
    (T0, 0, T0 + MIN, Life.SILENT),  # silent for `after` exactly
    (T0, T0, T0, Life.DRAINED),  # its last player logged out with its newest event: at once
    (T0, T0 - 1, T0 + MIN, Life.SILENT),  # drained before, then an event that left players on it
    (T0, T0, T0 + 10 * MIN - 1, Life.DRAINED),
    (T0, T0, T0 + 10 * MIN, Life.RETIRED),  # drained or not, retired after RETIRE_AFTER
    (T0, 0, T0 + 10 * MIN, Life.RETIRED),
])
def test_a_servers_life(last: int | None, drained: int, now: int, want: Life) -> None:
    assert life(last_arrival_ms=last, drained_ms=drained, now_ms=now, **LIFE) is want


@pytest.mark.parametrize(("prior", "had_events", "online_after", "newest", "want"), [
    (0, True, 0, T0, T0),  # its events left nobody online: drained at their arrival
    (0, True, 3, T0, 0),
    (T0 - 5, True, 1, T0, 0),  # a player came back: not drained any more
    (T0 - 5, False, 0, T0, T0 - 5),  # no events: as it was
    (0, False, 0, T0, 0),  # its players timed out while it was silent: they were there, not drained
])
def test_the_drained_mark(prior: int, had_events: bool, online_after: int, newest: int, want: int) -> None:
    assert drained_after(prior, had_events=had_events, online_after=online_after, newest_arrival_ms=newest) == want


@pytest.mark.parametrize(("had_events", "kept", "heard", "now", "want"), [
    (False, 0, T0, T0 + 10 * MIN, True),  # silent for RETIRE_AFTER, nobody kept: forgotten
    (False, 0, T0, T0 + 10 * MIN - 1, False),
    (False, 1, T0, T0 + 60 * MIN, False),  # a logout the watermark has not passed yet keeps it
    (True, 0, T0, T0 + 60 * MIN, False),  # it speaks: kept
    (False, 0, None, T0, True),  # never had a clock, nobody kept
    (False, 0, T0, None, False),  # an empty batch: no arrival time to judge by
])
def test_what_the_online_view_forgets(had_events: bool, kept: int, heard: int | None, now: int | None,
                                      want: bool) -> None:
    assert forgotten(had_events=had_events, players_kept=kept, heard_ms=heard, now_ms=now,
                     retire_after_ms=10 * MIN) is want


# ------------------------------------------------------------------------------------------- a fleet over time


@dataclass
class Server:
    region: str
    players: int
    last_ms: int
    drained_ms: int = 0


class Fleet:
    """Servers as the monitor observes them, one online view batch a step; the servers in ``sending`` send events
    (heartbeats) at every step."""

    def __init__(self, servers: dict[str, Server]) -> None:
        self.servers = servers
        self.sending = set(servers)
        self.observations: list[Observation] = []
        self.at = T0 - 10 * MIN

    def step(self, at: int, causes: dict[str, dict[str, int]] | None = None) -> None:
        self.at = at
        for n in self.sending:
            self.servers[n].last_ms = at
        sample = OnlineSample(batch=len(self.observations), at_ms=at,
                              counts={n: s.players for n, s in self.servers.items()}, causes=causes or {})
        servers = tuple(ServerObs(name=n, last_arrival_ms=s.last_ms, players=s.players, region=s.region,
                                  drained_ms=s.drained_ms, retired=at - s.last_ms >= 10 * MIN)
                        for n, s in self.servers.items())
        self.observations.append(obs(at, servers=servers, online=(sample,)))

    def live(self, until: int, every: int = 10_000) -> None:
        """A step every ``every`` until ``until``; nothing else changes."""
        t = self.at
        while t + every <= until:
            t += every
            self.step(t)

    def drain(self, at: int, name: str) -> dict[str, int]:
        """The server's players all log out with its last event: its causes for the step."""
        s = self.servers[name]
        self.sending.discard(name)
        out = {"logout": s.players}
        s.players, s.last_ms, s.drained_ms = 0, at, at
        return out

    def firing(self) -> set[tuple[str, str]]:
        """The alerts whose condition holds, not held (what would page once their ``for`` passed)."""
        return {(f.rule, f.subject) for f in findings(self.observations).values() if f.active and f.held is None}


def fleet(regions: dict[str, int], players: int = 50) -> Fleet:
    servers = {f"{r}-{k:03d}": Server(r, players, T0 - 10 * MIN) for r, n in regions.items() for k in range(n)}
    f = Fleet(servers)
    f.step(T0 - 10 * MIN)
    f.live(T0)
    return f


def test_a_rolling_deploy_pages_nobody() -> None:
    """Every server replaced, a few at a time: each one's players log out and log in on its replacement; the
    region's and the fleet's totals hold."""
    f = fleet({"eu": 8, "na": 4})
    for wave in range(4):
        at = f.at + 10_000
        old = [n for n in sorted(f.servers) if f.servers[n].drained_ms == 0][:3]
        causes = {}
        for n in old:
            new = f"{n}-v{wave + 2}"
            f.servers[new] = Server(f.servers[n].region, f.servers[n].players, at)
            f.sending.add(new)
            causes[new] = {"login": f.servers[n].players}
            causes[n] = f.drain(at, n)  # its last event: the last logout
        f.step(at, causes)
        f.live(at + 2 * MIN)
    assert f.firing() == set()
    drained = [n for n, s in f.servers.items() if s.drained_ms]
    assert len(drained) == 12


def test_a_match_ending_pages_nobody() -> None:
    f = fleet({"eu": 4}, players=30)
    at = f.at + 10_000
    f.step(at, {"eu-002": f.drain(at, "eu-002")})
    f.live(at + 5 * MIN)
    assert f.firing() == set()


def test_a_crash_pages_once_for_its_silence() -> None:
    """Its players vanish: no logout, they time out 30 s after its last event. ServerSilent pages; its players'
    drop is held (its events stopped: the silence says it), so a crash is one page."""
    f = fleet({"eu": 4})
    crashed = f.servers["eu-001"]
    f.sending.discard("eu-001")  # no event from here on
    stop = crashed.last_ms
    t = f.at
    for _ in range(12):  # two minutes, a batch each 10 s
        t += 10_000
        causes = {}
        if t - stop >= 30_000 and crashed.players:
            causes = {"eu-001": {"timeout": crashed.players}}
            crashed.players = 0
        f.step(t, causes)
    assert f.firing() == {("server_silent", "eu")}
    got = findings(f.observations)
    assert got[("server_silent", "eu")].value == 1
    assert got[("server_silent", "eu")].summary.startswith("1 server silent in eu with players online")
    drop = got[("players_drop", "eu-001")]
    assert drop.active and drop.held is not None and drop.held.startswith("no event from eu-001 for 2 min")


def test_players_vanishing_from_a_server_that_keeps_sending_page() -> None:
    """The server is up, its players' connections are cut: they time out while its other events arrive."""
    f = fleet({"eu": 4})
    at = f.at + 10_000
    f.servers["eu-001"].players = 20
    f.step(at, {"eu-001": {"timeout": 30}})
    f.live(at + MIN)
    assert f.firing() == {("players_drop", "eu-001")}


def test_a_region_outage_is_one_page() -> None:
    """Every server of a region stops at once: one ServerSilent with the count, not one page per server; the
    region's and each server's players' drop are held (their events stopped: the silence says it)."""
    f = fleet({"eu": 6, "as": 38}, players=25)
    stop = f.at
    f.sending = {n for n, s in f.servers.items() if s.region == "eu"}
    t = f.at
    for _ in range(12):
        t += 10_000
        causes = {}
        for n, s in f.servers.items():
            if s.region == "as" and t - stop >= 30_000 and s.players:
                causes[n] = {"timeout": s.players}
                s.players = 0
        f.step(t, causes)
    assert f.firing() == {("server_silent", "as")}
    got = findings(f.observations)
    assert got[("server_silent", "as")].value == 38
    assert got[("server_silent", "as")].summary.startswith("38 servers silent in as with players online")
    assert " and 33 more" in got[("server_silent", "as")].summary
    assert got[("region_players_drop", "as")].active and got[("region_players_drop", "as")].held is not None
    assert got[("players_drop", "as-000")].held is not None


def test_a_region_losing_its_players_while_its_servers_run_is_one_page() -> None:
    """A region's players cut off (their ISP, a login service) while its servers keep sending: RegionPlayersDrop
    pages, and each of its servers' drops is held under it."""
    f = fleet({"eu": 2, "as": 6}, players=40)
    at = f.at + 10_000
    causes = {}
    for n, s in f.servers.items():
        if s.region == "as":
            causes[n] = {"timeout": 30}
            s.players = 10
    f.step(at, causes)
    f.live(at + MIN)
    assert f.firing() == {("region_players_drop", "as")}
    held = findings(f.observations)[("players_drop", "as-000")]
    assert held.active and held.held == "its region as lost its players as a whole: RegionPlayersDrop as says it"


def test_a_single_long_lived_server_falling_silent_pages_until_it_retires() -> None:
    f = fleet({"eu": 3}, players=10)  # under min_players: its drop is not judged, its silence is
    stop = f.servers["eu-000"].last_ms
    f.sending.discard("eu-000")
    f.live(stop + MIN)
    t = f.at
    assert t - stop >= MIN and f.firing() == {("server_silent", "eu")}
    f.live(stop + 10 * MIN)  # RETIRE_AFTER: out of the live views and the alerts until its next event
    assert f.firing() == set()


def test_players_moving_off_a_server_that_stays_up_page_nobody() -> None:
    """A rebalance: 40 of a server's 50 players log out and log in on others; it keeps its 10 and keeps sending."""
    f = fleet({"eu": 4})
    at = f.at + 10_000
    f.servers["eu-001"].players = 10
    for n in ("eu-002", "eu-003"):
        f.servers[n].players = 70
    f.step(at, {"eu-001": {"logout": 40}, "eu-002": {"login": 20}, "eu-003": {"login": 20}})
    f.live(at + MIN)
    assert f.firing() == set()


# ------------------------------------------------------------------------------------------- the flood guard

GUARD = NameGuardRecord()


@pytest.mark.parametrize(("new", "prior", "now", "limit", "refused", "admitted"), [
    ({"a": 5, "b": 1}, GUARD, T0, 0, set(), 0),  # no guard
    ({"a": 5, "b": 1}, GUARD, T0, 2, set(), 2),  # within the limit
    ({"a": 5, "b": 1, "c": 1}, GUARD, T0, 2, {"c"}, 2),  # the busiest first, then by name: b before c
    ({"z": 50, "a": 1}, GUARD, T0, 1, {"a"}, 1),  # a server with players outsends a one-off name
    ({"d": 1}, NameGuardRecord(minute_ms=T0 - T0 % MIN, admitted=2), T0, 2, {"d"}, 2),  # the minute is full
    ({"d": 1}, NameGuardRecord(minute_ms=T0 - T0 % MIN - MIN, admitted=2), T0, 2, set(), 1),  # a new minute
    ({}, GUARD, T0, 2, set(), 0),
])
def test_the_flood_guard_admits_a_minutes_share(new: dict[str, int], prior: NameGuardRecord, now: int, limit: int,
                                                 refused: set[str], admitted: int) -> None:
    got, after = admit(new, prior, now, limit)
    assert got == refused
    assert after.admitted == admitted
    assert (after.burst_names, after.burst_events) == ((len(refused), sum(new[n] for n in refused)) if refused
                                                       else (prior.burst_names, prior.burst_events))


def test_a_burst_over_several_batches_of_one_minute_is_one_burst() -> None:
    first, after = admit({f"x{i:04}": 1 for i in range(1_500)}, GUARD, T0, 1_000)
    second, after = admit({f"y{i:04}": 1 for i in range(1_500)}, after, T0 + 1_000, 1_000)
    assert len(first) == 500 and len(second) == 1_500  # a buggy producer's 3,000 one-off names
    assert (after.burst_names, after.burst_events, after.limit) == (2_000, 2_000, 1_000)
    assert after.burst_sample == ("x1000", "x1001", "x1002", "x1003", "x1004")


def test_a_rolling_deploy_never_reaches_the_default_limit() -> None:
    """200 servers, 50 replaced every 10 s: 300 new names a minute against NEW_SERVERS_PER_MINUTE's 1,000."""
    after, refused = GUARD, 0
    for step in range(60):  # ten minutes of deploys, a batch a second
        now = T0 + step * 1_000
        names = {f"pod-{step // 10}-{i}": 50 for i in range(50)} if step % 10 == 0 else {}
        got, after = admit(names, after, now, Config().new_servers_per_minute)
        refused += len(got)
    assert refused == 0


@pytest.mark.parametrize(("burst_at", "now", "active"), [
    (None, T0, False),
    (T0 - T0 % MIN, T0, True),
    (T0 - T0 % MIN - MIN, T0, True),  # the minute before
    (T0 - T0 % MIN - 2 * MIN, T0, False),
])
def test_name_flood_is_one_alert_naming_the_burst(burst_at: int | None, now: int, active: bool) -> None:
    guard = NameGuardRecord(burst_minute_ms=burst_at, burst_names=2_000, burst_events=2_000, limit=1_000,
                            burst_sample=("x1000", "[a](http://x)"))
    f = findings([obs(now, pipelines=(pipeline(name_guard=guard),))])
    hits = [x for (rule, _), x in f.items() if rule == "name_flood"]
    assert [x.active for x in hits] == [active]
    if active:
        assert hits[0].summary.startswith("2,000 new server names refused in the minute from")
        assert "x1000, [a](http://x)" in hits[0].summary and "limit of 1,000" in hits[0].summary


def test_a_drop_is_judged_only_for_servers_still_in_the_readings() -> None:
    """The monitor's work is bounded by the live fleet: a server of the online history that is retired, or that no
    reading names any more (forgotten), is not judged; one still named is."""
    from tests.alerting.test_conditions import drop_seq

    seq = drop_seq(100, 0)
    assert ("players_drop", "B") in findings(seq)
    retired = [*seq[:-1], replace_obs(seq[-1], servers=(ServerObs(name="B", last_arrival_ms=T0, retired=True),))]
    assert ("players_drop", "B") not in findings(retired)
    forgotten = [*seq[:-1], replace_obs(seq[-1], servers=(ServerObs(name="other", last_arrival_ms=T0),))]
    assert ("players_drop", "B") not in findings(forgotten)


def replace_obs(o: Observation, **changes: object) -> Observation:
    from dataclasses import replace

    return replace(o, **changes)


def test_the_monitors_memory_keeps_the_servers_still_read_only() -> None:
    """A day of match servers must not grow the monitor: what it remembers per server goes once no reading names
    the server (forgotten once retired)."""
    from streaming.alerting.observation import Memory

    memory = Memory(started_ms=0, reach_ms=60_000)
    named = (ServerObs(name="m1", last_arrival_ms=T0, dropped=1, newest_event_ms=T0, clock_ahead_ms=5),
             ServerObs(name="m2", last_arrival_ms=T0, dropped=0, newest_event_ms=T0 - 9, clock_ahead_ms=0))
    memory.remember(obs(T0, servers=named))
    assert memory.trail_ms("m2") == 9
    memory.remember(obs(T0 + 1_000, servers=named[1:]))
    assert set(memory.dropped) == set(memory.newest_event) == set(memory.clock_ahead) == {"m2"}
    assert memory.trail_ms("m2") == 0
