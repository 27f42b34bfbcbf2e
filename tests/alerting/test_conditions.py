"""Every alert rule at its edges, as tables (no Redis, no Spark): exactly at the threshold, one past it, not
enough history, and the data-delay holds of the players-drop rule."""

from __future__ import annotations

from dataclasses import replace

import pytest

from streaming.alerting.conditions import Finding, evaluate, note_delays, players_drop
from streaming.alerting.config import AlertConfig
from streaming.alerting.observation import MAIN, Memory, Observation, OnlineSample, OnlineWindow, PipelineObs, ServerObs
from streaming.schema.records import NameGuardRecord

CFG = AlertConfig()
T0 = 1_800_000_000_000


def pipeline(name: str = MAIN, *, watermark: int | None = T0 - 30_000, accepted: int = 0, dropped: int = 0,
             behind: int = 0,
             waiting: int = 0, delay: int = 30_000, trigger: int = 1_000,
             name_guard: NameGuardRecord | None = None) -> PipelineObs:
    return PipelineObs(name=name, watermark_ms=watermark, max_event_ms=None, delay_ms=delay, trigger_ms=trigger,
                       accepted=accepted, waiting=waiting, behind_ms=behind, dropped=dropped, name_guard=name_guard)


def obs(at: int, *, servers: tuple[ServerObs, ...] = (), pipelines: tuple[PipelineObs, ...] | None = None,
        online: tuple[OnlineSample, ...] = (), online_behind: int = 0) -> Observation:
    return Observation(at_ms=at, pipelines=(pipeline(),) if pipelines is None else pipelines, servers=servers,
                       online=online, online_behind_ms=online_behind)


def findings(observations: list[Observation], cfg: AlertConfig = CFG, started: int = T0 - 3_600_000,
             ) -> dict[tuple[str, str], Finding]:
    """The last observation's findings, after remembering all of them in order."""
    memory = Memory(started_ms=started, reach_ms=400_000)
    out: list[Finding] = []
    for o in observations:
        memory.remember(o)
        out = evaluate(o, memory, cfg)
    return {(x.rule, x.subject): x for x in out}


def server(name: str = "B", *, last: int | None = T0, dropped: int = 0, players: int | None = None) -> ServerObs:
    return ServerObs(name=name, last_arrival_ms=last, dropped=dropped, players=players)


@pytest.mark.parametrize(("age", "behind", "active", "held"), [
    (59_999, 0, False, False),
    (60_000, 0, True, False),  # "silent for 60 s" includes 60 s exactly
    (600_000, 0, True, False),
    (600_000, 60_000, True, True),  # the pipeline 60 s behind: B's newer events may be waiting
])
def test_server_silent(age: int, behind: int, active: bool, held: bool) -> None:
    got = findings([obs(T0, servers=(server(last=T0 - age),), pipelines=(pipeline(behind=behind),))])
    f = got[("server_silent", "")]  # the servers without a region: one alert for all of them
    assert (f.active, f.held is not None) == (active, held)
    assert f.value == (1.0 if active else 0.0)
    if active:
        assert f.summary.startswith("1 server silent with players online (no event for 1 min or longer): B (")


@pytest.mark.parametrize(("silent", "named"), [
    (("eu-7",), "eu-7"),  # one silent server: the metric's and the notices' server name it
    (("eu-7", "eu-8"), ""),  # more: the region's alert, its summary names them
    ((), ""),
])
def test_server_silent_names_its_one_server_in_the_metric_and_the_notices(silent: tuple[str, ...],
                                                                           named: str) -> None:
    """Issue 65: a grouped ServerSilent with one silent server carries ``server`` (``wm_alerts``, the webhook's and
    Alertmanager's annotations); its identity stays the region's, so a second silent server changes no alert."""
    from streaming.alerting.alertmanager import postable_alerts
    from streaming.alerting.lifecycle import AlertState
    from streaming.apps.monitor.metrics import alert_family

    fleet = (*(server(n, last=T0 - 120_000) for n in silent), server("eu-1"))
    fleet = tuple(replace(s, region="eu") for s in fleet)
    f = findings([obs(T0, servers=fleet)])[("server_silent", "eu")]
    state = AlertState(rule=f.rule, subject=f.subject, status="firing", since_ms=T0, active_since_ms=T0,
                       value=f.value, summary=f.summary, servers=f.servers)
    (sample,) = alert_family({state.key: state}).samples
    assert (sample.labels["server"], sample.labels["region"]) == (named, "eu")
    (sent,) = postable_alerts([state], [], "wm", "http://x", T0, 60_000)
    assert sent["annotations"].get("server", "") == named and sent["labels"]["region"] == "eu"


def test_a_retired_server_is_not_silent_for_ever() -> None:
    s = replace(server(last=T0 - 700_000), retired=True)
    assert not [f for f in findings([obs(T0, servers=(s,))]).values() if f.rule == "server_silent" and f.active]


@pytest.mark.parametrize(("ahead", "active", "said"), [
    (None, None, "not judged"),  # the online view has not judged the server's clock yet
    (0, False, "clock not ahead"),
    (2_000, False, "clock not ahead"),  # exactly the threshold is not above it
    (2_001, True, "runs 2.0 s ahead"),
    (90_000, True, "runs 1 min 30 s ahead"),
])
def test_clock_ahead(ahead: int | None, active: bool | None, said: str) -> None:
    s = replace(server("A"), clock_ahead_ms=ahead)
    f = findings([obs(T0, servers=(s,))])[("clock_ahead", "A")]
    assert f.active is active
    assert f.value == (None if ahead is None else ahead / 1000)
    assert said in f.summary
    assert ("other servers' are not affected" in f.summary) is bool(active)


@pytest.mark.parametrize(("dropped_then", "dropped_now", "watched_ms", "active"), [
    (0, 100, 60_000, False),  # exactly the threshold is not above it
    (0, 101, 60_000, True),
    (1_000, 1_101, 61_000, True),
    (0, 500, 59_999, None),  # less than a minute watched: cannot tell
    (500, 10, 60_000, None),  # the totals started again (Redis lost its data)
])
def test_late_drops(dropped_then: int, dropped_now: int, watched_ms: int, active: bool | None) -> None:
    seq = [obs(T0 - watched_ms, servers=(server(dropped=dropped_then),)),
           obs(T0, servers=(server(dropped=dropped_now),))]
    assert findings(seq)[("late_drops", "B")].active is active


@pytest.mark.parametrize(("behind", "active"), [(6_000, False), (6_001, True), (0, False)])
def test_freshness_is_above_the_trigger_plus_the_margin(behind: int, active: bool) -> None:
    assert findings([obs(T0, pipelines=(pipeline(behind=behind, waiting=5),))])[("freshness", MAIN)].active is active


@pytest.mark.parametrize(("wm_then", "wm_now", "acc_then", "acc_now", "watched_ms", "active"), [
    (T0 - 90_000, T0 - 90_000, 10, 11, 60_000, True),  # unmoved for exactly `after` while an event came
    (T0 - 90_000, T0 - 90_000, 10, 10, 60_000, False),  # unmoved, but nothing came either
    (T0 - 90_000, T0 - 89_000, 10, 500, 60_000, False),  # moving
    (T0 - 90_000, T0 - 90_000, 10, 500, 59_999, None),  # not watched for `after` yet
])
@pytest.mark.parametrize("dropped_instead", [False, True])  # a clock far ahead: all that arrives is dropped
def test_watermark_flat(wm_then: int, wm_now: int, acc_then: int, acc_now: int, watched_ms: int,
                        active: bool | None, dropped_instead: bool) -> None:
    def p(wm: int, n: int) -> PipelineObs:
        return pipeline("lane", watermark=wm, **({"accepted": 7, "dropped": n} if dropped_instead else {"accepted": n}))

    seq = [obs(T0 - watched_ms, pipelines=(p(wm_then, acc_then),)), obs(T0, pipelines=(p(wm_now, acc_now),))]
    assert findings(seq)[("watermark_flat", "lane")].active is active


@pytest.mark.parametrize(("ahead", "active"), [(30_000, False), (30_001, True), (-5_000, False)])
def test_watermark_jump_is_measured_against_now_minus_the_delay(ahead: int, active: bool) -> None:
    p = pipeline(watermark=T0 - 30_000 + ahead, delay=30_000)
    assert findings([obs(T0, pipelines=(p,))])[("watermark_jump", MAIN)].active is active


def test_a_malformed_record_judges_nothing_but_redis_answering_and_its_memory() -> None:
    got = findings([Observation(at_ms=T0, data_error="the last batch's record is not a BatchRecord",
                                redis_used_bytes=99, redis_maxmemory_bytes=100)])
    assert list(got) == [("redis_unreachable", ""), ("redis_full", "")]
    assert got[("redis_unreachable", "")].active is False and got[("redis_full", "")].active is True


MB = 2**20


@pytest.mark.parametrize(("used", "maxmemory", "active", "says"), [
    (95 * MB, 100 * MB, True, "Redis uses 95 of its 100 MB maxmemory (95 %)"),  # the threshold itself
    (94 * MB, 100 * MB, False, "(94 %)"),
    (100 * MB, 100 * MB, True, ": it refuses writes; the job's commits and the producers wait, nothing is lost"),
    (5_000 * MB, 0, False, "Redis uses 5,000 MB, no maxmemory set"),  # no limit: never full
    (None, 100 * MB, None, "could not be read (INFO refused)"),  # cannot tell
])
def test_redis_full_is_judged_against_its_maxmemory(used: int | None, maxmemory: int, active: bool | None,
                                                    says: str) -> None:
    got = findings([Observation(at_ms=T0, pipelines=(pipeline(),), redis_used_bytes=used,
                                redis_maxmemory_bytes=maxmemory)])[("redis_full", "")]
    assert got.active is active and says in got.summary, got.summary


def test_redis_unreachable_is_the_only_finding_without_redis() -> None:
    got = findings([Observation(at_ms=T0, redis_error="ConnectionError: refused")])
    assert list(got) == [("redis_unreachable", "")] and got[("redis_unreachable", "")].active is True
    assert findings([obs(T0)])[("redis_unreachable", "")].active is False


def online(at: int, batch: int, n: int, causes: dict | None = None) -> OnlineSample:
    return OnlineSample(batch=batch, at_ms=at, counts={"B": n}, causes={"B": causes or {}})


def drop_seq(peak: int, now_count: int, *, last_arrival: int = T0, behind: int = 0) -> list[Observation]:
    return [obs(T0 - 120_000, servers=(server(last=T0 - 120_000),), online=(online(T0 - 120_000, 1, peak),)),
            obs(T0, servers=(server(last=last_arrival),), pipelines=(pipeline(behind=behind),),
                online=(online(T0, 2, now_count, {"timeout": peak - now_count}),))]


@pytest.mark.parametrize(("peak", "now", "active"), [
    (100, 50, False),  # down exactly 50 %: not more than 50 %
    (100, 49, True),
    (19, 0, False),  # a peak under min_players (20) is not judged
    (20, 0, True),
    (100, 100, False),
])
def test_players_drop_threshold(peak: int, now: int, active: bool) -> None:
    f = findings(drop_seq(peak, now))[("players_drop", "B")]
    assert (f.active, f.held) == (active, None)


def test_players_drop_says_who_left_how() -> None:
    f = findings(drop_seq(350, 70))[("players_drop", "B")]
    assert f.summary == "B: 70 players online, down 80 % from 350 within 5 min (0 logged out, 280 timed out)"


def test_players_drop_falls_out_of_the_window() -> None:
    """A peak older than `within` no longer counts."""
    cfg = replace(CFG, players_drop=replace(CFG.players_drop, within_ms=100_000))
    assert findings(drop_seq(100, 10), cfg)[("players_drop", "B")].active is False


@pytest.mark.parametrize(("last_arrival", "behind", "online_behind", "why"), [
    (T0 - 15_000, 0, 0, "no event from B for 15.0 s"),  # quiet for exactly `quiet`
    (T0, 7_000, 0, "the pipeline is behind by 7.0 s"),  # over trigger (1 s) + 5 s
    (T0, 0, 7_000, "the pipeline is behind by 7.0 s"),  # the online view behind counts the same
])
def test_players_drop_on_delayed_data_is_held_and_says_so(last_arrival: int, behind: int, online_behind: int,
                                                         why: str) -> None:
    seq = drop_seq(100, 0, last_arrival=last_arrival, behind=behind)
    seq[-1] = replace(seq[-1], online_behind_ms=online_behind)
    f = findings(seq)[("players_drop", "B")]
    assert f.active is True and f.held is not None and f.held.startswith(why)


@pytest.mark.parametrize(("trail", "held"), [(14_999, False), (15_000, True)])
def test_players_drop_is_held_while_the_servers_events_trail_the_others(trail: int, held: bool) -> None:
    """Events arriving, but late: B's newest event time trails A's by `lag` or more."""
    seq = drop_seq(100, 0)
    seq[-1] = replace(seq[-1], servers=(ServerObs("A", T0, newest_event_ms=T0),
                                        ServerObs("B", T0, newest_event_ms=T0 - trail)))
    f = findings(seq)[("players_drop", "B")]
    assert f.active is True and (f.held is not None) == held
    if held:
        assert f.held == ("B's newest event is 15.0 s behind the other servers': its events arrive late, and its "
                          "players time out behind the watermark the others move")


@pytest.mark.parametrize(("p95", "held"), [(14_999.0, False), (15_000.0, True)])
def test_players_drop_is_held_while_the_servers_events_arrive_late(p95: float, held: bool) -> None:
    """An overseas server: its events keep arriving, each a good while after it happened."""
    seq = drop_seq(100, 0)
    seq[-1] = replace(seq[-1], servers=(ServerObs("B", T0, lag_p95_ms=p95),))
    f = findings(seq)[("players_drop", "B")]
    assert f.active is True and (f.held is not None) == held
    if held:
        assert f.held.startswith("B's events arrive 15.0 s late (p95)")


def test_players_drop_stays_held_while_the_data_settles() -> None:
    memory = Memory(started_ms=T0 - 3_600_000, reach_ms=400_000)
    quiet = obs(T0 - 20_000, servers=(server(last=T0 - 40_000),))
    note_delays(quiet, memory, CFG)
    back = obs(T0 - 20_000 + 29_999, servers=(server(last=T0),))
    assert note_delays(back, memory, CFG)["B"].startswith("B's events caught up 30.0 s ago")
    settled = obs(T0 - 20_000 + 30_000, servers=(server(last=T0),))
    assert "B" not in note_delays(settled, memory, CFG)


def test_a_monitor_just_started_settles_first() -> None:
    f = findings(drop_seq(100, 0), started=T0 - 10_000)[("players_drop", "B")]
    assert f.held == "the monitor started 10.0 s ago: still settling"


def test_the_page_says_what_is_watched_in_one_line() -> None:
    from streaming.alerting.conditions import watching

    assert watching(CFG) == ("PlayersDrop: down over 50 % within 5 min, not counting players who moved to "
                             "another server (RegionPlayersDrop: a region's sum) · ServerSilent: 1 min with players "
                             "online, counted by region · NameFlood: new server names over the job's limit a minute · "
                             "ClockAhead: 2.0 s "
                             "ahead · LateDrops: over 100 a minute · PipelineBehind: trigger + 5.0 s · WatermarkFlat: "
                             "1 min · WatermarkJump: 30.0 s ahead · RedisUnreachable · "
                                 "RedisFull: 95 % of maxmemory")


def region_seq(a_now: int, b_now: int, *, b_last: int = T0, a_cause: str = "timeout") -> list[Observation]:
    """eu-001 and eu-002 in region eu, 60 players each at the peak, and na-001 (100, unchanged) in na; eu-001's
    players leave by ``a_cause``, eu-002's time out."""
    def servers(b_arrival: int) -> tuple[ServerObs, ...]:
        return (replace(server("eu-001"), region="eu"), replace(server("eu-002", last=b_arrival), region="eu"),
                replace(server("na-001"), region="na"))

    def sample(at: int, batch: int, a: int, b: int) -> OnlineSample:
        return OnlineSample(batch=batch, at_ms=at, counts={"eu-001": a, "eu-002": b, "na-001": 100},
                            causes={"eu-001": {a_cause: 60 - a}, "eu-002": {"timeout": 60 - b}})

    return [obs(T0 - 120_000, servers=servers(T0 - 120_000), online=(sample(T0 - 120_000, 1, 60, 60),)),
            obs(T0, servers=servers(b_last), online=(sample(T0, 2, a_now, b_now),))]


@pytest.mark.parametrize(("a_now", "b_now", "a_cause", "region_active", "a_active", "b_active"), [
    (30, 30, "timeout", False, False, False),  # the region down exactly 50 %: not more
    (29, 30, "timeout", True, True, False),  # 61 of 120 lost, 31 of them from eu-001: over 50 % there too
    (30, 29, "timeout", True, False, True),
    (0, 60, "timeout", False, True, False),  # one server emptied, the region down 50 %: the server's alert only
    (0, 60, "logout", False, True, False),  # its players logged out and did not come back elsewhere: they left
    (0, 120, "logout", False, False, False),  # they logged out and in on eu-002: moved, the region held
    (10, 100, "logout", False, False, False),  # most moved: 50 logged out, the region fell by 10
    (60, 60, "timeout", False, False, False),
])
def test_a_regions_players_drop_is_the_sum_of_its_servers(a_now: int, b_now: int, a_cause: str, region_active: bool,
                                                          a_active: bool, b_active: bool) -> None:
    got = findings(region_seq(a_now, b_now, a_cause=a_cause))
    assert got[("region_players_drop", "eu")].active is region_active
    assert (got[("players_drop", "eu-001")].active, got[("players_drop", "eu-002")].active) == (a_active, b_active)
    assert got[("region_players_drop", "na")].active is False and ("region_players_drop", "eu-001") not in got


def test_a_regions_players_drop_says_who_left_how() -> None:
    f = findings(region_seq(10, 20, a_cause="logout"))[("region_players_drop", "eu")]
    assert f.summary == "eu: 30 players online, down 75 % from 120 within 5 min (50 logged out, 40 timed out)"
    moved = findings(region_seq(10, 100, a_cause="logout"))[("players_drop", "eu-001")]
    assert moved.summary == ("eu-001: 10 players online, down 17 % from 60 within 5 min (50 logged out, 0 timed "
                             "out); 40 moved to other servers")


def test_a_regions_players_drop_is_held_while_one_of_its_servers_is() -> None:
    """eu-002 quiet for 15 s: its players time out while its events are delayed, and the region's drop with them."""
    got = findings(region_seq(0, 0, b_last=T0 - 15_000))
    f = got[("region_players_drop", "eu")]
    assert f.active is True and f.held == got[("players_drop", "eu-002")].held
    assert f.held is not None and f.held.startswith("no event from eu-002 for 15.0 s")
    assert got[("players_drop", "eu-001")].held is None


def test_servers_without_a_region_make_no_region_alert() -> None:
    assert not [k for k in findings(drop_seq(100, 0)) if k[0] == "region_players_drop"]


def _drop_model(members: list[str], samples: list[OnlineSample], cfg: AlertConfig) -> tuple[bool, float, str]:
    """The players-drop rule sample by sample, as written before the one-pass window: the independent model."""
    pd = cfg.players_drop
    counts = [sum(s.counts.get(m, 0) for m in members) for s in samples]
    peak_at = max(range(len(counts)), key=lambda i: (counts[i], -i))
    peak, current = counts[peak_at], counts[-1]
    drop = 0.0 if peak == 0 else (peak - current) * 100.0 / peak
    after = samples[peak_at + 1:]
    logouts = sum(s.causes.get(m, {}).get("logout", 0) for s in after for m in members)
    timeouts = sum(s.causes.get(m, {}).get("timeout", 0) for s in after for m in members)
    causes = f" ({logouts:,} logged out, {timeouts:,} timed out)" if logouts or timeouts else ""
    return peak >= pd.min_players and (peak - current) * 100 > pd.percent * peak, drop, causes


@pytest.mark.parametrize("seed", range(8))
def test_the_one_pass_players_drop_equals_the_rule_sample_by_sample(seed: int) -> None:
    import random

    rng = random.Random(seed)
    servers = [f"s{i}" for i in range(rng.randint(1, 12))]
    regions = {"eu": servers[::2], "na": servers[1::2] + ["never-online"]}
    samples = []
    for b in range(rng.randint(1, 40)):
        counts = {s: rng.choice([0, rng.randint(0, 60), rng.randint(0, 5)]) for s in servers if rng.random() < 0.9}
        causes = {s: {"logout": rng.randint(0, 3), "timeout": rng.randint(0, 3)} for s in servers if rng.random() < 0.5}
        samples.append(OnlineSample(batch=b, at_ms=T0 + b * 1_000, counts=counts, causes=causes))
    window = OnlineWindow.of(samples, servers)
    for name, members, region in [*((s, [s], None) for s in servers), *((r, m, m) for r, m in regions.items())]:
        f = players_drop(name, window, CFG, None, region)
        active, drop, causes = _drop_model(members, samples, CFG)
        assert (f.active, f.value) == (active, drop), (name, f)
        said = f.summary.split(" within 5 min", 1)[1].removesuffix(" (a peak under 20 is not judged)")
        assert said == causes, (f.summary, causes)
    assert players_drop("s0", OnlineWindow.of([], servers), CFG, None).active is None
