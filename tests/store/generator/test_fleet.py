"""A fleet (``--servers N --regions R``): servers dealt over regions, their daily curve, and a fleet replaced as
it plays."""

from __future__ import annotations

import json
import uuid
from collections import Counter, defaultdict
from itertools import islice

import pytest
import redis

from streaming.apps.generator import main, parse_args
from streaming.rules.scenarios import SCENARIOS
from streaming.rules.simulate import Simulator, fast_payload, record_payload
from streaming.schema.config import ConfigError
from streaming.store.stream_writer import write
from tests.store.generator import START
from watermark_client.events import Event, parse_entry


def test_a_fleet_deals_its_servers_over_regions_each_with_its_delay() -> None:
    from streaming.rules.scenarios import REGION_DELAYS, fleet, game

    f = fleet(300, 6)
    names = [s.name for s in f.servers]
    assert len(set(names)) == 300 and names[:7] == ["eu-001", "na-001", "sa-001", "as-001", "oc-001", "af-001",
                                                     "eu-002"]
    assert Counter(s.region for s in f.servers) == {r: 50 for r in ("eu", "na", "sa", "as", "oc", "af")}
    assert all(s.name.startswith(f"{s.region}-") for s in f.servers)
    assert f.server("as-017").delay == REGION_DELAYS["as"] and f.server("eu-017").delay == SCENARIOS["steady"].server(
        "A").delay
    assert f.server("eu-001").share > f.server("eu-050").share  # a few busy shards, a long tail
    assert game("steady", 12, 3) == fleet(12, 3) and game("steady") == SCENARIOS["steady"]
    for bad, said in ((lambda: fleet(5, 6), "servers must be 6"), (lambda: fleet(300, 13), "regions must be 1 to 12"),
                      (lambda: game("late-burst", 300, 6), "has its own three"), (lambda: game("steady", None, 6),
                                                                                 "--regions needs --servers")):
        with pytest.raises(ConfigError, match=said):
            bad()


def test_a_fleets_events_carry_their_region_through_every_payload_path(r: redis.Redis, key: str) -> None:
    from streaming.rules.scenarios import fleet

    sim = Simulator(fleet(30, 3), seed=5, start_us=START, rate=0, count=3_000)
    events = list(sim)
    assert {e.server for _, e in events} == {s.name for s in sim.scenario.servers}  # every server plays
    assert all(e.region == e.server.split("-")[0] for _, e in events)
    assert [record_payload(rec, sim.regions.get(rec[2])) for rec in sim.records()] == [e.payload() for _, e in events]
    assert [fast_payload(e) for _, e in events[:200]] == [e.payload() for _, e in events[:200]]
    write(r, key, sim, batch_size=500)  # the writer's own template
    assert [f[b"e"] for _, f in r.xrange(key)] == [e.payload() for _, e in events]
    assert [parse_entry(f, i.decode()) for i, f in r.xrange(key, count=50)] == [e for _, e in events[:50]]


def test_the_generator_says_why_servers_do_not_apply(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--scenario", "late-burst", "--servers", "300", "--count", "1"]) == 2
    assert "--servers plays the steady game on many servers" in capsys.readouterr().err


@pytest.mark.parametrize(("curve", "t_ms", "share"), [
    # 21:00 local on a Saturday (2026-01-03): the evening's peak on the busiest day
    ("utc", START // 1000 + 2 * 86_400_000 + 21 * 3_600_000, 1.0),
    # 05:00 on the same day: before dawn
    ("utc", START // 1000 + 2 * 86_400_000 + 5 * 3_600_000, 0.15),
    # between two hours, interpolated; a Thursday (2026-01-01)
    ("utc", START // 1000 + 21 * 3_600_000 + 1_800_000, (1.0 + 0.95) / 2 * 0.9),
    # eu is an hour ahead of UTC: its 21:00 is 20:00 UTC
    ("eu", START // 1000 + 2 * 86_400_000 + 20 * 3_600_000, 1.0),
    # a day compressed to 86.4 s: the same curve a thousand times faster
    ("fast", (START // 1000 + 2 * 86_400_000 + 21 * 3_600_000) // 1000, 1.0),
])
def test_the_daily_curve_peaks_in_the_local_evening_and_scales(curve: str, t_ms: int, share: float) -> None:
    from streaming.rules.scenarios import DailyCurve

    c = {"utc": DailyCurve(), "eu": DailyCurve(offset_ms=3_600_000), "fast": DailyCurve(day_ms=86_400)}[curve]
    assert c.share(t_ms) == pytest.approx(share)


def test_a_fleets_players_come_in_the_evening_and_leave_at_night_a_day_in_minutes() -> None:
    """A compressed day (``--timeline-scale 0.001``: 86.4 s) of eu-001 against its curve: the players online, as its
    logins and logouts say, are the curve's share of its full house at the evening's peak and before dawn."""
    from streaming.rules.scenarios import fleet

    f = fleet(3, 3).scaled(0.001)
    curve = f.server("eu-001").daily
    assert curve is not None and curve.day_ms == 86_400 and curve.offset_ms == 3_600
    day0 = START // 1000 // 86_400 * 86_400 + 2 * 86_400  # a compressed Saturday
    sim = Simulator(f, seed=4, start_us=day0 * 1000, rate=300, count=300 * 87)
    online: set[str] = set()
    at: dict[str, int] = {}
    peak_ms, dawn_ms = day0 + 20 * 3_600, day0 + 4 * 3_600  # eu's 21:00 and 05:00, in UTC
    for _, e in sorted(((e.event_time_us, e) for _, e in sim if e.server == "eu-001"), key=lambda x: x[0]):
        (online.discard if e.kind == "logout" else online.add)(e.player_id)
        for name, when in (("peak", peak_ms), ("dawn", dawn_ms)):
            if e.event_time_us // 1000 <= when:
                at[name] = len(online)
    full = round(300 * f.servers[0].share / sum(s.share for s in f.servers) * 5)  # a heartbeat every 5 s
    assert at["peak"] == pytest.approx(full, abs=2)
    assert at["dawn"] == pytest.approx(0.15 * full, abs=2)


def test_a_fleet_without_its_daily_curve_keeps_a_full_house() -> None:
    """DAILY_CURVE=off (the benchmark's): the same fleet, every server's players online whatever the hour."""
    from streaming.rules.scenarios import fleet, game

    assert all(p.daily is not None for p in fleet(30, 3).servers)
    flat = fleet(30, 3, daily=False)
    assert all(p.daily is None for p in flat.servers) and game("steady", 30, 3, daily=False) == flat
    assert [(p.name, p.region, p.share) for p in flat.servers] == [(p.name, p.region, p.share)
                                                                   for p in fleet(30, 3).servers]
    assert parse_args(["--servers", "30", "--daily-curve", "off"]).daily_curve == "off"


def test_players_online_carry_over_into_a_following_simulation() -> None:
    first = Simulator("steady", seed=1, start_us=START, rate=200)
    list(islice(first.records(), 3_000))
    online = first.online_now()
    assert {len(p) for p in online.values()} and all(online.values())
    stranger = {"A": ["nobody-here"], "Z": ["A-p00001"]}  # not in the population, or no such server: ignored
    then = Simulator("players-leave", seed=2, start_us=START + 60_000_000, rate=200, online={**stranger, **online})
    events = [e for _, e in islice(then, 200)]
    carried = {p for players in online.values() for p in players}
    assert not [e for e in events if e.kind == "login" and e.player_id in carried], "they were online already"
    assert {e.player_id for e in events if e.kind == "heartbeat"} <= carried
    assert "nobody-here" not in {e.player_id for e in events}
    assert Simulator("steady", seed=1, start_us=START, rate=200).online_now() == {}  # nothing generated yet


@pytest.mark.parametrize(("scenario", "servers"), [("rolling-deploy", None), ("matches", None), ("matches", 12)])
def test_a_fleet_that_is_replaced_as_it_plays_drains_each_server_and_keeps_its_players(
        r: redis.Redis, scenario: str, servers: int | None) -> None:
    """Rolling deploys and a server per match (``streaming.rules.scenarios.Churn``) through the online view's own
    fold: every replaced server ends drained (its players logged out there and in on its successor), none times a
    player out, and the players online in all never dip while servers come and go."""
    from streaming.rules.fleet import drained
    from streaming.rules.online.table import OnlineBatch, OnlineEvents
    from streaming.rules.scenarios import game
    from streaming.schema.keys import KeySchema
    from streaming.schema.records import OnlineStateRecord
    from streaming.store.online.commit import OnlineMirror, commit_online
    from tests.schema.params import built_params

    start_us = 1_800_000_000_000_000
    sim = Simulator(game(scenario, servers).scaled(0.1), seed=3, start_us=start_us, rate=300, count=30_000)
    keys, mirror = KeySchema(f"churn-{uuid.uuid4().hex[:8]}"), OnlineMirror()
    params = built_params(60_000, 60_000, 2_000, retire_after_ms=3_600_000)
    batches: dict[int, list[tuple[int, Event]]] = defaultdict(list)
    for arrival, ev in sim:
        batches[arrival // 1_000_000].append((arrival, ev))
    totals, causes, wm = [], Counter(), 0
    for i, second in enumerate(sorted(batches)):
        rows = batches[second]
        from tests.store.online.rows import events as online_events  # (server, player, ms, kind, arrival ms)

        ev: OnlineEvents = online_events(*[(e.server, e.player_id, e.event_time_us // 1000, e.kind,
                                                a // 1000) for a, e in rows])
        assert commit_online(r, keys, OnlineBatch(i, wm, second * 1000, f"{second * 1000}-0", ev, 2_000),
                               params, 30_000, mirror)
        state = OnlineStateRecord.from_hash(r.hgetall(keys.online_state), "t")
        wm = state.watermark_ms
        last = json.loads(r.zrange(keys.online_history, -1, -1)[0])
        totals.append(sum(last["counts"].values()))
        for c in last["causes"].values():
            causes.update(c)
    clocks = OnlineStateRecord.from_hash(r.hgetall(keys.online_state), "t").clocks
    slots = {p.name for p in sim.scenario.servers}
    newest = {slot: max((s for s in clocks if s.rsplit("-", 1)[0] == slot), key=lambda s: clocks[s].heard_ms)
              for slot in slots}
    end_ms = max(c.heard_ms for c in clocks.values())
    # replaced, and drained since: its players move with their next event, within a heartbeat (5 s)
    replaced = [s for s in clocks if s not in newest.values() and clocks[s].heard_ms < end_ms - 10_000]
    assert len(replaced) >= len(slots)  # every slot was replaced at least once
    assert all(drained(clocks[s].heard_ms, clocks[s].drained_ms) for s in replaced), {s: v for s, v in {
        s: (clocks[s].drained_ms, clocks[s].heard_ms) for s in replaced}.items() if v[0] < v[1]}
    assert causes["timeout"] == 0, causes  # nobody vanished: each moved by a logout and a login
    steady = totals[len(totals) // 4:]  # once the game has filled up
    assert min(steady) >= 0.8 * max(steady), (min(steady), max(steady))
