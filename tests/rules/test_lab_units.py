"""The lab's pure parts without Spark: the trade-off histogram, the per-server watermark model, idleness,
the lane catalogue and its configuration, and the lab page's findings."""

from __future__ import annotations

from dataclasses import replace

import msgspec
import pytest

from dashboard.screens.lab.model import findings
from dashboard.status import Level, clock, stall
from streaming.alerting.config import AlertConfig, WatermarkFlat
from streaming.rules.fleet import IdleDecision, IdleTicker, summary
from streaming.rules.tradeoff import GRID_MS, Tradeoff, bucket, hist_field, parse_hist_field
from streaming.rules.watermarks import ServerWatermarks, policy_max
from streaming.schema.config import DEFAULT_IDLE_TIMEOUT_MS, LANES, Config, ConfigError, Lane, lane_config
from streaming.schema.records import RecordError, decode_json
from streaming.store.views.snapshot import BatchPoint, PipelineState, ServerTotals, Snapshot, StreamInfo, Totals


@pytest.mark.parametrize(("slack_ms", "expected"), [
    (None, 0),  # no watermark yet: no delay would drop the pair
    (-1, 0),  # the window ends after the newest event time: never dropped
    (0, 1),  # window end == M: dropped only with delay 0 (end <= M - 0)
    (999, 1),  # still only delay 0
    (1_000, 2),  # end == M - 1 s: delays 0 and 1 s drop it
    (3_600_000, len(GRID_MS)),  # every grid delay, up to 1 h inclusive, drops it
    (10**12, len(GRID_MS)),  # far beyond the grid
])
def test_bucket_counts_the_grid_delays_that_would_drop_a_pair(slack_ms: int | None, expected: int) -> None:
    assert bucket(slack_ms) == expected


@pytest.mark.parametrize("server", ["A", "eu|west", ""])
def test_hist_field_round_trips(server: str) -> None:
    assert parse_hist_field(hist_field(server, 7)) == (server, 7)
    assert parse_hist_field(hist_field(server, 7).encode()) == (server, 7)


def test_candidates_and_recommendation() -> None:
    grid = (0, 10, 20, 30)
    # A: 90 pairs never droppable, 9 droppable by delays 0 and 10, 1 by every delay; B: 10 with bucket 1
    t = Tradeoff.from_hash({"grid": "[0, 10, 20, 30]", "A|0": "90", "A|2": "9", "A|4": "1", b"B|1": b"10"})
    assert t.grid == grid and t.servers == ["A", "B"]
    assert [(c.delay_ms, c.pairs, c.dropped) for c in t.candidates(["A"])] == [(0, 100, 10), (10, 100, 10),
                                                                              (20, 100, 1), (30, 100, 1)]
    assert [c.dropped for c in t.candidates()] == [20, 10, 1, 1]
    assert t.recommend(0.99, ["A"]) == 20  # 1 of 100 dropped is allowed
    assert t.recommend(0.999, ["A"]) is None  # even 30 drops 1 of 100
    assert t.recommend(0.9, ["A"]) == 0  # 10 of 100 allowed
    assert t.recommend(0.99) == 20  # 1 of 110 allowed: floor(1.1) = 1
    assert t.recommend(0.99, ["nobody"]) is None
    with pytest.raises(ValueError, match="completeness"):
        t.recommend(1.5)


def test_server_watermarks_model_sparks_map() -> None:
    m = ServerWatermarks(("A", "B", "C"), delay_ms=100, policy="min")
    assert m.update({"A": 1_000}) == {"A": 900, "B": 0, "C": 0}  # inputs without data count as 0
    assert m.combined(0) == 0
    m.update({"B": 2_000, "C": 500})
    assert m.values == {"A": 900, "B": 1_900, "C": 400} and m.combined(0) == 400 and m.holder() == "C"
    m.update({"C": 100})  # an older max never lowers an input's watermark
    assert m.values["C"] == 400
    assert m.combined(1_000) == 1_000  # the global watermark never falls
    mx = ServerWatermarks(("A", "B"), delay_ms=0, policy="max", values={"A": 5, "B": 9})
    assert mx.combined(0) == 9 and mx.holder() == "B"
    with pytest.raises(ValueError, match="policy"):
        ServerWatermarks(("A",), 0, "avg")


@pytest.mark.parametrize(("running", "policy", "expected"), [
    ({"A": 10, "B": 20}, "min", None),  # C never seen: min is undefined (Spark's 0 drops nothing)
    ({"A": 10, "B": 20, "C": 5}, "min", 5),
    ({"A": 10}, "max", 10),  # max ignores servers without data
    ({}, "max", None),
])
def test_policy_max(running: dict[str, int], policy: str, expected: int | None) -> None:
    assert policy_max(running, ("A", "B", "C"), policy) == expected


def test_idle_ticker_marks_silent_servers_once_per_interval() -> None:
    t = IdleTicker(("A", "B"), timeout_ms=3_000, interval_ms=1_000, started_ms=10_000)
    assert t.due(12_000, {"A": 11_500}) == []  # B unseen since the start: 2 s of silence
    assert t.due(13_000, {"A": 12_900}) == [IdleDecision("B", 13_000, 10_000, heard=False)]  # 3 s since the start
    assert t.due(13_500, {"A": 13_400}) == []  # B again only after the interval
    assert t.due(14_000, {"A": 13_900}) == [IdleDecision("B", 14_000, 10_000, heard=False)]
    assert t.due(14_100, {"A": 13_900, "B": 14_050}) == []  # B is back
    assert t.due(17_000, {"A": 16_900, "B": 14_050}) == []  # 2.95 s: not yet
    assert t.due(17_050, {"A": 16_900, "B": 14_050}) == [IdleDecision("B", 17_050, 14_050)]
    assert t.due(20_050, {"A": 16_900, "B": 14_050}) == [IdleDecision("A", 20_050, 16_900),
                                                        IdleDecision("B", 20_050, 14_050)]
    with pytest.raises(ValueError):
        IdleTicker(("A",), 0, 1, 0)


def test_lane_config_and_lab_variables() -> None:
    parent = Config(namespace="wm", checkpoint_dir="data/ck/wm", known_servers=frozenset("ABC"),
                    lanes=("per-server-min-idle",))
    lane = lane_config(parent, "per-server-min-idle")
    assert (lane.namespace, lane.checkpoint_dir, lane.input_stream) == ("wm.per-server-min-idle",
                                                                        "data/ck/wm.per-server-min-idle", "wm:events")
    assert (lane.watermark_mode, lane.watermark_policy, lane.idle_timeout_ms) == ("per-server", "min",
                                                                                 DEFAULT_IDLE_TIMEOUT_MS)
    assert Config.from_env({"LAB_LANES": "per-server-max, global", "KNOWN_SERVERS": "A"}).lanes == (
        "per-server-max", "global")


@pytest.mark.parametrize("name", list(LANES))
def test_one_lane_type_from_the_catalogue_through_redis_to_the_dashboard(name: str) -> None:
    parent = Config(namespace="wm", lanes=(name,))
    lane = LANES[name].under(parent)
    assert (lane.namespace, lane.input_namespace) == (f"wm.{name}", "wm")
    assert lane.namespace == lane.config(parent).namespace == parent.lane_configs()[0].namespace
    # what the job registers in {ns}:lanes is what the dashboard and the monitor read back, field for field
    assert decode_json(msgspec.json.encode(lane), Lane, "lane") == lane
    assert (lane.mode, lane.policy) == (lane.config(parent).watermark_mode, lane.config(parent).watermark_policy)


def test_a_lane_record_that_is_not_a_lane_is_a_record_error() -> None:
    with pytest.raises(RecordError, match="lane x is not a Lane: .*`name`"):
        decode_json(b'{"mode": "global"}', Lane, "lane x")


@pytest.mark.parametrize(("env", "message"), [
    ({"WATERMARK_MODE": "each"}, "WATERMARK_MODE 'each' must be one of global, per-server"),
    ({"WATERMARK_MODE": "per-server"}, "WATERMARK_MODE per-server needs KNOWN_SERVERS"),
    ({"WATERMARK_POLICY": "avg"}, "WATERMARK_POLICY 'avg' must be one of min, max"),
    ({"IDLE_TIMEOUT": "10s"}, "IDLE_TIMEOUT only applies with WATERMARK_MODE=per-server"),
    ({"IDLE_TIMEOUT": "soon", "WATERMARK_MODE": "per-server", "KNOWN_SERVERS": "A"}, "IDLE_TIMEOUT='soon'"),
    ({"LAB_LANES": "per-server-avg"}, "unknown lane per-server-avg"),
    ({"LAB_LANES": "global,global"}, "names a lane twice"),
])
def test_lab_configuration_errors_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Config.from_env(env)


def point(batch: int, wm: int, events: int = 1, marks: dict[str, int] | None = None, ticks: int = 0) -> BatchPoint:
    return BatchPoint(batch=batch, batch_ts_ms=1_000_000 + batch * 1_000, watermark_ms=wm, next_watermark_ms=wm,
                      min_event_us=None, max_event_us=None, running_max_event_us=None, input=events, parsed=events,
                      quarantined=0, events=events, dropped=0, late=0, servers={}, bad={}, server_watermarks=marks,
                      ticks=ticks, start_id="0-0", end_id="0-0")


def lane_of(name: str, **changes: object) -> Lane:
    """The catalogue's lane as the dashboard reads it under namespace ``wm``."""
    return msgspec.structs.replace(LANES[name].under(Config(namespace="wm")), **changes)


AFTER_2S = AlertConfig(watermark_flat=WatermarkFlat(after_ms=2_000))
"""A lab's thresholds as a monitor publishes them: WatermarkFlat after 2 s (batches are 1 s apart here)."""


@pytest.mark.parametrize(("wms", "events", "now", "since"), [
    ([1, 2, 3], [1, 1, 1], 1_003_000, None),  # moving
    ([1, 2, 2, 2], [1, 1, 1, 1], 1_003_000, 1_001_000),  # unmoved since batch 1 for 2 s while events arrive
    ([1, 2, 2, 2], [1, 1, 1, 1], 1_002_999, None),  # a millisecond short of the alert's `after`
    ([1, 2, 2, 2], [1, 1, 0, 0], 1_003_000, None),  # unmoved, but nothing arrives: idle, not stalled
    ([5, 5], [1, 1], 1_001_999, None),  # never moved within the range, seen for less than `after`: cannot tell
    ([5, 5, 5], [1, 1, 1], 1_002_000, 1_000_000),  # never moved, seen for `after`: stalled at least since then
])
def test_a_lane_is_stalled_by_the_alerts_rule(wms: list[int], events: list[int], now: int, since: int | None) -> None:
    snap = replace(snapshot([point(i, w, e) for i, (w, e) in enumerate(zip(wms, events, strict=True))]),
                   thresholds=AFTER_2S)
    run = stall(snap, now)
    assert (run.since_ms if run else None) == since


def snapshot(batches: list[BatchPoint], totals: Totals | None = None) -> Snapshot:
    state = PipelineState(last_batch=batches[-1].batch, watermark_ms=0, next_watermark_ms=batches[-1].next_watermark_ms,
                          max_event_us=None, committed_id="0-0", window_ms=10_000, slide_ms=10_000, delay_ms=2_000,
                          trigger_ms=1_000, updated_ms=batches[-1].batch_ts_ms, mode="per-server", policy="min")
    return Snapshot("wm.x", 0, 60_000, state, totals or Totals(), ("A", "B"), (), tuple(batches),
                    StreamInfo(0, None, 0, True))


def test_findings_name_the_silent_server_holding_min_back() -> None:
    lane = lane_of("per-server-min")
    marks = {"A": 50_000, "B": 20_000}
    snap = replace(snapshot([point(0, 10_000, marks=marks), point(1, 20_000, marks=marks),
                             point(2, 20_000, marks=marks), point(3, 20_000, marks=marks)]), thresholds=AFTER_2S)
    (f,) = findings(lane, snap, {"A": 1_003_000, "B": 990_000}, now_ms=1_004_000, idle_after_ms=10_000)
    assert f.text.startswith("per-server-min: **B** holds the combined watermark")
    assert "30.0 s behind the fastest" in f.text and "silent for 14.0 s" in f.text
    assert (f"Stalled: windows stopped closing at {clock(1_001_000)}, 3.0 s ago, while 2 events arrived." in f.text
            and f.level is Level.WARNING)


def test_findings_tell_the_idleness_remedy_from_the_stall_it_cures() -> None:
    lane = lane_of("per-server-min-idle")
    marks = {"A": 50_000, "B": 40_000}
    snap = snapshot([point(i, 10_000 * (i + 1), marks=marks, ticks=1) for i in range(4)])
    found = findings(lane, snap, {"A": 1_003_000, "B": 990_000}, now_ms=1_004_000, idle_after_ms=10_000)
    assert [f.level for f in found] == [Level.OK, Level.OK], found
    assert "no stall" in found[0].text and "Stalled" not in found[0].text
    assert found[1].text.startswith("per-server-min-idle: idleness at work: 4 idle markers")


def test_findings_for_max_and_idleness() -> None:
    lane = lane_of("per-server-max", idle=True)
    totals = Totals(servers={"B": ServerTotals(dropped=7)})
    snap = snapshot([point(0, 5, marks={"A": 50_000, "B": 20_000}, ticks=2)], totals)
    texts = [f.text for f in findings(lane, snap, {}, now_ms=0, idle_after_ms=20_000)]
    assert texts[0].startswith("per-server-max: the fastest server **A** drives the watermark")
    assert "**B**, trails it by 30.0 s. Late (event, window) pairs dropped here: B 7." in texts[0]
    assert texts[1].startswith("per-server-max: idleness at work: 2 idle markers")


def test_tradeoff_chart_has_a_line_per_server_and_the_two_delays() -> None:
    from dashboard.screens.delay.model import tradeoff_chart

    t = Tradeoff.from_hash({"A|0": "90", "A|3": "10", "B|5": "4"})
    fig = tradeoff_chart(t, current_delay_ms=30_000, recommended_ms=5_000)
    names = [tr.name for tr in fig.data]
    assert names == ["all servers", "A", "B", "current delay", "recommended"]
    assert fig.data[0].x[0] == 0.5 and fig.layout.xaxis.ticktext[0] == "0 s"  # 0 s on a log axis
    assert list(fig.data[0].y) == [100 * c.dropped_share for c in t.candidates()]
    assert list(fig.data[3].x) == [30.0, 30.0] and list(fig.data[4].x) == [5.0, 5.0]


# Servers come and go: the lab lanes' per-server watermarks and the idle ticker follow every server from its
# first event with no KNOWN_SERVERS; the pipeline's own per-server mode says at start why it cannot; the job's
# idle log is one line per change, not one per server per marker.

def test_a_lane_without_a_list_follows_every_server_from_its_first_event() -> None:
    model = ServerWatermarks((), delay_ms=10, policy="min")
    assert model.update({"A": 100}) == {"A": 90}
    assert model.combined(0) == 90  # B is not there yet: it holds nothing back
    assert model.update({"B": 50}) == {"A": 90, "B": 40}  # B appears: counted from its first event
    assert model.combined(90) == 90  # never backwards
    assert model.update({"B": 200, "C": 150}) == {"A": 90, "B": 190, "C": 140}
    assert model.holder() == "A"
    assert policy_max({"A": 5, "B": 9}, (), "min") == 5
    # a fixed list keeps Spark's rule: a server without data counts as 0
    fixed = ServerWatermarks(("A", "B"), delay_ms=10, policy="min")
    assert fixed.update({"A": 100}) == {"A": 90, "B": 0}
    assert policy_max({"A": 5}, ("A", "B"), "min") is None


def test_default_lanes_start_without_known_servers_and_per_server_mode_says_why_not() -> None:
    cfg = Config(lanes=("per-server-min", "per-server-min-idle"))
    assert lane_config(cfg, "per-server-min").known_servers is None
    with pytest.raises(ConfigError, match=r"cannot follow servers that appear later.*LAB_LANES=per-server-min"):
        Config(watermark_mode="per-server")


def test_the_idle_ticker_watches_every_server_heard_from() -> None:
    ticker = IdleTicker((), timeout_ms=1_000, interval_ms=1_000, started_ms=0)
    assert [d.server for d in ticker.due(5_000, {"A": 4_500, "B": 1_000, "C": 3_900})] == ["B", "C"]
    assert ticker.idle == {"B", "C"}
    assert ticker.due(5_400, {"A": 4_500, "B": 1_000, "C": 3_900}) == []  # within the interval
    assert ticker.idle == {"B", "C"}


def test_the_idle_ticker_marks_no_retired_server_and_forgets_it() -> None:
    """A fleet that redeploys: thousands of names, a marker only for the servers silent under RETIRE_AFTER."""
    ticker = IdleTicker((), timeout_ms=1_000, interval_ms=1_000, started_ms=0, retire_after_ms=600_000)
    seen = {f"pod-{i}": 1_000 for i in range(4_000)} | {"A": 650_000, "B": 700_500}
    assert [d.server for d in ticker.due(700_000, seen)] == ["A"]  # the pods are retired; B is not silent
    seen["A"], seen["B"] = 90_000, 701_900  # as if A had been silent for RETIRE_AFTER too; B spoke again
    assert ticker.due(702_000, seen) == [] and ticker.last_marker_ms == {}
    # a recorded stream of another day: nobody is judged retired by today's clock
    old = IdleTicker((), timeout_ms=1_000, interval_ms=1_000, started_ms=0, retire_after_ms=600_000)
    assert [d.server for d in old.due(90_000_000, {"A": 1_000, "B": 2_000})] == ["A", "B"]


def test_a_lane_following_the_fleet_retires_a_server_silent_for_retire_after() -> None:
    """Markers keep a silent server's watermark moving until it retires; then it holds nothing back and leaves
    the map (bounded by the live fleet); its next event makes it an input again."""
    model = ServerWatermarks((), delay_ms=10, policy="min", retire_after_ms=600_000)
    model.update({"A": 1_000, "B": 1_000}, {"A": 0, "B": 0}, now_ms=0)
    model.update({"A": 300_000, "B": 300_000}, {"A": 300_000}, now_ms=300_000)  # B: a marker, not an event
    assert model.combined(0) == 300_000 - 10 and set(model.heard) == {"A", "B"}
    model.update({"A": 599_000}, {"A": 599_999}, now_ms=599_999)
    assert "B" in model.values and model.combined(0) == 300_000 - 10  # B holds min back: not retired yet
    model.update({"A": 600_000}, {"A": 600_000}, now_ms=600_000)
    assert set(model.values) == {"A"} == set(model.heard) and model.combined(0) == 600_000 - 10
    model.update({"B": 601_000}, {"B": 601_000}, now_ms=601_000)  # back
    assert model.values == {"A": 600_000 - 10, "B": 601_000 - 10}
    fixed = ServerWatermarks(("A", "B"), delay_ms=10, retire_after_ms=1)  # Spark's inputs: never retired
    fixed.update({"A": 5}, {"A": 10_000}, now_ms=10_000)
    assert set(fixed.values) == {"A", "B"}


def test_the_idle_log_is_one_line_per_change_at_three_hundred_servers() -> None:
    names = frozenset(f"eu-{i:03d}" for i in range(300))
    line = summary(frozenset(), names)
    assert line is not None and line.startswith("idle: 300 server(s) silent") and "(+295 more)" in line
    assert "newly idle: 300" in line and line.count("eu-") == 5
    assert summary(names, names) is None  # the same set: nothing to say
    back = summary(names, names - {"eu-007"})
    assert back is not None and "back: eu-007" in back and "newly idle: 0" in back


@pytest.mark.parametrize(("last_ms", "retired"), [(400_000, False), (399_999, False), (400_000 - 1, False),
                                                  (400_000 - 600_000 + 1, False), (400_000 - 600_000, True),
                                                  (0 - 600_000, True)])
def test_a_server_retires_when_silent_for_retire_after_or_longer(last_ms: int, retired: bool) -> None:
    from streaming.rules.fleet import retired as retired_servers

    assert retired_servers({"A": last_ms}, 400_000, 600_000) == ({"A": last_ms} if retired else {})
