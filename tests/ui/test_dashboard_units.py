"""The dashboard's pure parts: record parsing, the status line, window picking and the figures."""

from __future__ import annotations

from dataclasses import replace

import msgspec
import pytest
import redis

from dashboard import charts
from dashboard.status import Level, assess, human_ms, stall, unreachable
from streaming.alerting.config import AlertConfig, Freshness, WatermarkFlat
from streaming.schema.keys import WindowKey
from streaming.schema.records import LagRecord, RecordError, ServerRecord
from streaming.store.views import snapshot as data
from streaming.store.views.snapshot import (
    BatchPoint,
    PipelineState,
    Snapshot,
    StreamInfo,
    Totals,
    WindowRow,
    waiting_entries,
)

MIN = 60_000
T = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def state(**kw: object) -> PipelineState:
    base = PipelineState(last_batch=9, watermark_ms=T + 9 * MIN, next_watermark_ms=T + 10 * MIN - 30_000,
                         max_event_us=(T + 10 * MIN) * 1000, committed_id=f"{T}-5", window_ms=MIN,
                         slide_ms=MIN, delay_ms=30_000, trigger_ms=1_000, updated_ms=T + 10 * MIN)
    return replace(base, **kw)


def batch(i: int, wm: int, nxt: int, parsed: int = 10, duration: int | None = 500, **kw: object) -> BatchPoint:
    base = BatchPoint(batch=i, batch_ts_ms=T + 10 * MIN - (9 - i) * 1000, watermark_ms=wm, next_watermark_ms=nxt,
                      min_event_us=None, max_event_us=None, running_max_event_us=(nxt + 30_000) * 1000, input=parsed,
                      parsed=parsed, quarantined=0, events=parsed, dropped=0, late=0, servers={}, bad={},
                      duration_ms=duration, start_id="0-0", end_id="0-0")
    return msgspec.structs.replace(base, **kw)


def slow(batches: tuple[BatchPoint, ...]) -> tuple[BatchPoint, ...]:
    """The same batches, each taking 1.5 s (a 1 s trigger)."""
    return tuple(msgspec.structs.replace(b, duration_ms=1_500) for b in batches)


def window(start: int, server: str, players: int, final: bool, size: int = MIN) -> WindowRow:
    return WindowRow(WindowKey(start, start + size, server), events=players * 2, dropped=0, late=0, players=players,
                     final=final)


def snap(st: PipelineState | None = None, batches: tuple[BatchPoint, ...] = (), waiting: int = 0, length: int = 0,
         windows: tuple[WindowRow, ...] = (), servers: tuple[str, ...] = ("A", "B"),
         oldest_ms: int | None = None) -> Snapshot:
    return Snapshot(namespace="wm", read_ms=T, range_ms=15 * MIN, state=st, totals=Totals(), servers=servers,
                    windows=windows, batches=batches,
                    stream=StreamInfo(length=length, last_id=None, waiting=waiting,
                                      oldest_waiting_ms=oldest_ms if waiting else None))


MOVING = tuple(batch(i, T + i * 1000, T + (i + 1) * 1000) for i in range(10))
STALLED = (batch(-51, T - 1000, T - 1000), *(batch(i, T, T) for i in range(-50, 10)))
"""The watermark last moved in the batch at NOW - 59 s; 59 batches of 10 events since."""


# --------------------------------------------------------------------------- records


def test_records_parse_from_what_the_sink_and_listener_write() -> None:
    rec = {"batch": 3, "batch_ts_ms": 5, "watermark_ms": 1, "next_watermark_ms": 2, "min_event_us": 10,
           "start_id": "4-0", "end_id": "5-2",
           "max_event_us": 20, "running_max_event_us": 20, "input": 7, "parsed": 6, "quarantined": 1, "events": 5,
           "dropped": 1, "late": 2, "bad": {"malformed_json": 1},
           "servers": {"C": {"rows": 6, "events": 5, "dropped": 1, "late": 2, "min_event_us": 10, "max_event_us": 20,
                             "ingest_lag_ms": {"p50": 1.0, "p95": 2.0, "max": 3.0},
                             "processing_lag_ms": {"p50": 4.0, "p95": 5.0, "max": 6.0}}},
           "progress": {"durations_ms": {"triggerExecution": 1500}, "input_rows": 14, "input_rows_per_s": 10.0,
                        "processed_rows_per_s": None}}
    b = BatchPoint.from_record(rec)
    # Spark read 14 rows for the 7 entries (say two scans): its 10 rows/s are 5 entries/s
    assert (b.batch, b.input, b.dropped, b.late, b.duration_ms, b.input_per_s) == (3, 7, 1, 2, 1500, 5.0)
    assert b.processed_per_s is None
    assert b.servers["C"].ingest_lag_ms == LagRecord(1.0, 2.0, 3.0)
    assert b.servers["C"].processing_lag_ms == LagRecord(4.0, 5.0, 6.0)
    no_progress = BatchPoint.from_record({k: v for k, v in rec.items() if k != "progress"})
    assert no_progress.duration_ms is None
    with pytest.raises(RecordError, match="batch 3 is not a batch record: Expected `int`, got `str` - at `\\$.input`"):
        BatchPoint.from_record({**rec, "input": "seven"})  # a clear error where it is read, not three calls later


def test_totals_split_overall_per_server_and_per_reason() -> None:
    t = Totals.from_hash({"input": "9", "dropped": "2", "dropped|C": "2", "events|A": "4", "bad|bad_timestamp": "1",
                          "late|A": "1"})
    assert (t.input, t.dropped, t.events) == (9, 2, 0)
    assert t.servers["C"].dropped == 2 and t.servers["A"].events == 4 and t.servers["A"].late == 1
    assert t.bad == {"bad_timestamp": 1}


def test_state_is_none_before_the_first_commit() -> None:
    assert PipelineState.from_hash({}) is None
    s = PipelineState.from_hash({"last_batch": "0", "params": '{"window_ms": 60000, "slide_ms": 30000, '
                                 '"delay_ms": 5000}', "max_event_us": "", "trigger_ms": "2000"})
    assert s is not None and s.max_event_us is None and s.head_ms is None
    assert (s.window_ms, s.slide_ms, s.delay_ms, s.trigger_ms) == (60_000, 30_000, 5_000, 2_000)


# --------------------------------------------------------------------------- current windows


def test_current_window_is_the_one_holding_the_head_of_event_time() -> None:
    head = T + 6 * MIN + 30_000
    ws = (window(T + 5 * MIN, "A", 3, True), window(T + 6 * MIN, "A", 4, False), window(T + 5 * MIN, "B", 9, True))
    s = snap(state(max_event_us=head * 1000), windows=ws)
    current = s.current_windows()
    assert current["A"] is ws[1]
    assert current["B"] is None  # B has no events in the current window: shown as 0, not as its old window
    assert s.last_final_windows() == {"A": ws[0], "B": ws[2]}
    assert s.current_window_bounds() == (T + 6 * MIN, T + 7 * MIN)


def test_with_sliding_windows_the_current_one_is_the_fullest() -> None:
    head = T + 6 * MIN + 30_000
    # 2-minute windows every minute: [5,7) and [6,8) both hold 06:30; [5,7) covers the last full window length.
    ws = (window(T + 5 * MIN, "A", 8, False, size=2 * MIN), window(T + 6 * MIN, "A", 2, False, size=2 * MIN))
    s = snap(state(max_event_us=head * 1000, window_ms=2 * MIN, slide_ms=MIN), windows=ws, servers=("A",))
    assert s.current_windows()["A"] is ws[0]
    assert s.current_window_bounds() == (T + 5 * MIN, T + 7 * MIN)


# --------------------------------------------------------------------------- status line

NOW = T + 10 * MIN


@pytest.mark.parametrize(
    ("snapshot", "now", "level", "phrase"),
    [
        # nothing at all yet: say how to start
        (snap(), NOW, Level.INFO, "Start the pipeline"),
        # events but no batch: starting while the oldest has waited up to [job_quiet] first_batch (2 min), then down
        (snap(length=42, waiting=42, oldest_ms=NOW - 30_000), NOW, Level.INFO,
         "Starting: 42 events wait in `wm:events` (the oldest 30.0 s) and no batch has completed yet"),
        (snap(length=42, waiting=42, oldest_ms=NOW - 121_000), NOW, Level.ERROR, "Down: 42 events wait"),
        # fresh commit, watermark moving, fast batches: all good
        (snap(state(), MOVING), NOW + 800, Level.OK, "Live: batch #9 committed 800 ms ago"),
        # no commit for 60 s with entries waiting: the job is down
        (snap(state(), MOVING, waiting=500), NOW + 60_000, Level.ERROR, "Down: no batch has completed for 1 min"),
        # stopped on request 60 s ago, entries arrived since: stopped, not down
        (snap(state(stopped_ms=NOW), MOVING, waiting=500, oldest_ms=NOW), NOW + 60_000, Level.INFO,
         "Stopped: the job was stopped at 00:10:00 UTC (1 min ago) after batch #9; 500 entries waiting"),
        # no commit for 60 s and nothing waiting: idle, not broken
        (snap(state(), MOVING), NOW + 60_000, Level.INFO, "Idle: no new events for 1 min"),
        # 4.9 s is within 5 triggers (and the 10 s floor): still fine
        (snap(state(), MOVING, waiting=500), NOW + 4_900, Level.OK, "Live"),
        # entries waiting, quick batches: live, and how far behind in entries and time
        (snap(state(), MOVING, waiting=1, oldest_ms=NOW), NOW + 600, Level.OK, "1 entry waiting (the oldest 600 ms)"),
        (snap(state(), MOVING), NOW + 600, Level.OK, "up to date"),
        # quick (capped) batches but the oldest waiting entry is older than the trigger + 5 s (the freshness
        # alert's rule, ops/alerts.toml): behind; at the limit, only waiting
        (snap(state(), MOVING, waiting=250_000, oldest_ms=NOW - 12_000), NOW + 500, Level.WARNING,
         "Behind: behind by 250,000 entries / 12.5 s"),
        (snap(state(), MOVING, waiting=250_000, oldest_ms=NOW - 5_500), NOW + 500, Level.OK,
         "250,000 entries waiting (the oldest 6.0 s)"),
        (snap(state(), MOVING, waiting=250_000, oldest_ms=NOW - 5_499), NOW + 502, Level.WARNING,
         "Behind: behind by 250,000 entries / 6.0 s"),
        # Redis came back empty at batch 5, within the batches shown: the break is said
        (snap(state(lost_at_batch=5), MOVING), NOW + 500, Level.WARNING, "History lost at batch 5: Redis came back"),
        # long ago (before the range shown): live, with where the totals start
        (snap(state(lost_at_batch=5), MOVING[6:]), NOW + 500, Level.OK, "totals from batch 5 (Redis came back empty"),
        # the watermark unmoved for the WatermarkFlat alert's 1 min while events arrive: stalled, as the alert says
        (snap(state(), STALLED), NOW + 1_000, Level.WARNING, "Stalled: the watermark has not moved for 1 min while 590 "
                                                             "events arrived"),
        (snap(state(), STALLED), NOW + 999, Level.OK, "Live"),  # a millisecond short
        (snap(state(), MOVING[:7] + tuple(batch(i, T, T) for i in (7, 8, 9))), NOW + 500, Level.OK, "Live"),
        # most of the last batches slower than the trigger: said, but live until the oldest entry waits too long
        (snap(state(), slow(MOVING)), NOW + 500, Level.INFO,
         "Slow batches: 10 of the last 10 took longer than the 1.0 s trigger (slowest 1.5 s); not behind yet"),
        (snap(state(), slow(MOVING), waiting=90_000, oldest_ms=NOW - 2_500),
         NOW + 500, Level.INFO, "Slow batches: 10 of the last 10"),
        # ... and behind once it has: falling behind, with why
        (snap(state(), slow(MOVING), waiting=90_000, oldest_ms=NOW - 6_500),
         NOW + 500, Level.WARNING, "Falling behind: 10 of the last 10 batches took longer than the 1.0 s trigger "
                                   "(slowest 1.5 s); behind by 90,000 entries / 7.0 s"),
        # every server silent for over ServerSilent's 1 min while idle markers keep batches coming: stalled, with
        # the moment the numbers stand as of; one of two silent is not most
        (replace(snap(state(), MOVING), seen={"A": NOW - 100_000, "B": NOW - 100_000}), NOW + 800, Level.WARNING,
         "Stalled: 2 of 2 servers silent since 00:08:20 UTC (1 min 40 s ago), with players online (no event for "
         "1 min or more): the numbers stand as of then. Batch #9 committed 800 ms ago"),
        (replace(snap(state(), MOVING), seen={"A": NOW - 100_000, "B": NOW}), NOW + 800, Level.OK, "Live"),
        # the watermark 3 min 34 s behind now, far past the 30 s delay and the trigger: behind, never "up to date"
        (snap(state(next_watermark_ms=NOW - 214_000), MOVING), NOW, Level.WARNING,
         "Behind: the watermark is at 00:06:26 UTC, 3 min 34 s behind now, past the 30.0 s delay and the 1.0 s "
         "trigger"),
        (snap(state(next_watermark_ms=NOW - 36_000), MOVING), NOW, Level.OK, "Live"),
        # Redis at its maxmemory: it refuses writes, said first and plainly
        (replace(snap(state(), MOVING), redis_memory=(100 * 2**20, 100 * 2**20)), NOW + 500, Level.ERROR,
         "Redis is full: it uses 100 MB of its 100 MB maxmemory and refuses writes"),
        # under it, or no maxmemory, or INFO refused: nothing to say about memory
        (replace(snap(state(), MOVING), redis_memory=(99 * 2**20, 100 * 2**20)), NOW + 500, Level.OK, "Live"),
        (replace(snap(state(), MOVING), redis_memory=(9 * 2**30, 0)), NOW + 500, Level.OK, "Live"),
        (replace(snap(state(), MOVING), redis_memory=(None, 100)), NOW + 500, Level.OK, "Live"),
    ],
)
def test_status_line(snapshot: Snapshot, now: int, level: Level, phrase: str) -> None:
    statuses = assess(snapshot, now)
    assert statuses[0].level is level, statuses
    assert phrase in statuses[0].text, statuses[0].text


@pytest.mark.parametrize(("length", "trimmed", "committed", "waiting"), [
    (0, 0, 0, 0),  # nothing ever written
    (10, 0, 0, 10),  # nothing committed: the whole stream waits
    (10, 0, 10, 0),  # all committed, nothing trimmed yet
    (4, 6, 10, 0),  # all committed, 6 of them trimmed
    (7, 6, 10, 3),  # 3 more arrived after the last commit
    (3, 6, 10, 0),  # someone else deleted an entry: never below zero
])
def test_waiting_entries_from_length_trimmed_and_committed(length: int, trimmed: int, committed: int,
                                                           waiting: int) -> None:
    assert waiting_entries(length, trimmed, committed) == waiting


def test_a_watermark_unmoved_while_nothing_arrives_is_not_stalled() -> None:
    empty = tuple(msgspec.structs.replace(b, parsed=0, events=0) for b in STALLED)
    assert stall(snap(state(), empty), NOW + 1_000) is None
    assert all(s.level is not Level.WARNING for s in assess(snap(state(), empty), NOW + 1_000))


def test_the_status_line_judges_with_the_thresholds_the_monitor_published() -> None:
    """ops/alerts.toml's [watermark_flat] after and [freshness] above_trigger move the status line too."""
    strict = AlertConfig(watermark_flat=WatermarkFlat(after_ms=2_000), freshness=Freshness(above_trigger_ms=500))
    texts = [s.text for s in assess(replace(snap(state(), STALLED[-4:], waiting=9, oldest_ms=NOW - 1_000),
                                            thresholds=strict), NOW + 1_000)]
    assert texts[0].startswith("Stalled: the watermark has not moved for 4.0 s while 30 events arrived"), texts
    lenient = replace(snap(state(), STALLED, waiting=9, oldest_ms=NOW - 1_000),
                      thresholds=AlertConfig(watermark_flat=WatermarkFlat(after_ms=120_000)))
    assert [s.level for s in assess(lenient, NOW + 1_000)] == [Level.OK]


def test_unreachable_names_the_redacted_url_and_the_error() -> None:
    from dashboard.text import md

    s = unreachable("redis://:***@db:6379/0", ConnectionError("Connection refused"))
    assert s.level is Level.ERROR and md("redis://:***@db:6379/0") in s.text and "Connection refused" in s.text


@pytest.mark.parametrize(("ms", "text"), [(0, "0 ms"), (999, "999 ms"), (1_500, "1.5 s"), (60_000, "1 min"),
                                          (61_000, "1 min 1 s"), (3_600_000, "1 h 0 min"), (3 * 86_400_000, "3 days")])
def test_human_ms(ms: int, text: str) -> None:
    assert human_ms(ms) == text


# --------------------------------------------------------------------------- figures


def test_players_now_hatches_provisional_windows() -> None:
    current = {"A": window(T, "A", 5, final=False), "B": window(T, "B", 7, final=True), "C": None}
    fig = charts.players_now(current, ["A", "B", "C"])
    bars = {t.name: t for t in fig.data}
    assert list(bars["A"].y) == [5] and bars["A"].marker.pattern.shape == charts.PROVISIONAL_PATTERN
    assert list(bars["B"].y) == [7] and bars["B"].marker.pattern.shape == ""
    assert list(bars["C"].y) == [0]


def test_players_over_time_splits_final_and_provisional_but_keeps_the_line_connected() -> None:
    ws = [window(T, "A", 1, True), window(T + MIN, "A", 2, True), window(T + 2 * MIN, "A", 3, False)]
    fig = charts.players_over_time(ws, ["A"])
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["A"].y) == [1, 2]
    assert list(by_name["A (provisional)"].y) == [2, 3]  # starts at the last final point
    assert by_name["A (provisional)"].line.dash == "dot"


def test_watermark_chart_skips_the_epoch_and_draws_wall_clock_to_now() -> None:
    batches = [batch(0, 0, T), batch(1, T, T + 1000), batch(2, T + 1000, T + 2000)]
    fig = charts.watermark_vs_time(batches, now_ms=NOW)
    traces = {t.name: t for t in fig.data}
    assert [b[0] for b in traces["watermark in force"].customdata] == [1, 2]
    assert traces["watermark in force"].line.shape == "hv"
    assert len(traces["max event time"].x) == 3
    assert traces["wall clock"].x[-1] == charts.ts(NOW)


def test_batch_durations_mark_batches_slower_than_the_trigger() -> None:
    batches = [batch(1, T, T, duration=400), batch(2, T, T, duration=1_001), batch(3, T, T, duration=None)]
    bar = charts.batch_durations(batches, trigger_ms=1_000).data[0]
    assert list(bar.marker.color) == [charts.ON_TIME, charts.BEHIND]  # the untimed batch is left out
    assert list(bar.y) == [0.4, 1.001]


def test_per_server_counts_over_time_use_each_servers_share() -> None:
    sb = ServerRecord(rows=3, events=1, dropped=2, late=0, min_event_us=None, max_event_us=None, ingest_lag_ms=None,
                      processing_lag_ms=None)
    batches = [batch(1, T, T, servers={"C": sb}), batch(2, T, T)]
    fig = charts.per_server_over_time(batches, ["A", "C"], "dropped", "Dropped")
    by_name = {t.name: list(t.y) for t in fig.data}
    assert by_name == {"A": [0, 0], "C": [2, 0]}


@pytest.mark.parametrize(("stat", "ingest", "processing"), [("p50", 0.01, 0.1), ("p95", 0.02, 0.2),
                                                            ("max", 0.03, 0.3)])
def test_lag_chart_has_the_chosen_statistic_per_server_in_both_panels(stat: str, ingest: float,
                                                                      processing: float) -> None:
    lag = LagRecord(10.0, 20.0, 30.0)
    sb = ServerRecord(rows=1, events=1, dropped=0, late=0, min_event_us=None, max_event_us=None, ingest_lag_ms=lag,
                      processing_lag_ms=LagRecord(100.0, 200.0, 300.0))
    fig = charts.lag_chart([batch(1, T, T, servers={"A": sb})], ["A", "B"], stat)
    assert len(fig.data) == 2 * 2  # one line per server in each panel
    ys = {(t.name, t.yaxis): list(t.y) for t in fig.data}
    assert ys[("A", "y")] == [ingest] and ys[("A", "y2")] == [processing]


def test_server_colours_are_stable_across_pages() -> None:
    assert charts.server_colors(["C", "A", "B"]) == charts.server_colors(["A", "B", "C"])


def test_the_dashboard_never_imports_pyspark() -> None:
    import subprocess
    import sys

    code = ("import sys; import streaming.store.views.snapshot, dashboard.status, dashboard.charts, dashboard.ui; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(("error", "phrase"), [
    (redis.ConnectionError("refused"), "is unreachable"),
    (redis.TimeoutError("slow"), "is unreachable"),
    (redis.exceptions.AuthenticationError("bad password"), "rejected the dashboard's credentials"),
    (redis.exceptions.NoPermissionError("no perm"), "needs +@read"),
])
def test_redis_failures_say_what_went_wrong(error: Exception, phrase: str) -> None:
    assert phrase in unreachable("redis://x:6379/0", error).text


def test_online_per_minute_and_transitions_per_minute() -> None:
    from dashboard.pages.live_ops import figures
    from streaming.rules.online.rollup import TOTAL, Minute

    minutes = [Minute(60_000, {"A": 3, "B": 1}, {"A": 4, "B": 1, TOTAL: 5},
                      {"A": {"login": 3, "heartbeat": 1, "logout": 1}, "B": {"event": 1, "timeout": 2}}),
               Minute(120_000, {"A": 2}, {"A": 3, TOTAL: 3}, {"A": {"timeout": 1}}),
               Minute(300_000, {"A": 1}, {"A": 1, TOTAL: 1})]  # the job was down for two minutes before
    marks = [charts.Mark(100_000, None, "deploy: patch 1.4.2", "#2ca02c"),
             charts.Mark(200_000, 400_000, "maintenance", "#7f7f7f"),  # cut to the chart's span
             charts.Mark(900_000, None, "later", "#7f7f7f")]  # outside it
    spec = figures.online_per_minute(minutes, ["A", "B"], marks=marks)
    assert spec is not None
    line, ranges, moments = spec["layer"]
    rows = [(r["minute"], r["series"], r["online"], r.get("peak")) for r in line["data"]["values"]]
    # B absent later: 0; a row without a count before the minute after the gap breaks each line there
    assert rows == [(60_000, "A", 3, "4"), (60_000, "B", 1, "1"), (120_000, "A", 2, "3"), (120_000, "B", 0, "0"),
                    (299_999, "A", None, None), (300_000, "A", 1, "1"), (299_999, "B", None, None),
                    (300_000, "B", 0, "0")]
    assert line["mark"]["invalid"] == "break-paths-show-domains"
    assert [(m["start"], m["end"], m["label"]) for m in ranges["data"]["values"]] == [(200_000, 300_000,
                                                                                       "maintenance")]
    assert [(m["start"], m["label"]) for m in moments["data"]["values"]] == [(100_000, "deploy: patch 1.4.2")]
    # per group the peak is not kept, and the tooltip says so; nobody online at all is no chart
    grouped = figures.online_per_minute(minutes, ["A"], " per region")
    assert grouped is not None and {r.get("peak") for r in grouped["layer"][0]["data"]["values"]
                                    if r["online"] is not None} == {"not kept per group"}
    assert figures.online_per_minute(minutes, ["C"]) is None
    spec = figures.transitions_per_minute(minutes)
    assert spec is not None
    # a heartbeat or a kind-less event that brings a player online counts as coming online
    got = {(r["minute"], r["what"]): r["players"] for r in spec["layer"][0]["data"]["values"]}
    assert got == {(60_000, "came online"): 5, (60_000, "logged out"): 1, (60_000, "timed out"): 2,
                   (120_000, "came online"): 0, (120_000, "logged out"): 0, (120_000, "timed out"): 1,
                   (300_000, "came online"): 0, (300_000, "logged out"): 0, (300_000, "timed out"): 0}
    assert figures.transitions_per_minute(minutes[2:]) is None


def test_a_weeks_chart_draws_each_series_the_week_ago_dotted_and_the_marks_in_its_range() -> None:
    from streaming.rules.online.rollup import DAY_MS, TOTAL, Point, region_key
    from streaming.store.history_store import Timeline

    t0 = 1_767_225_600_000
    tl = Timeline(t0, t0 + DAY_MS, 60_000,
                  {TOTAL: [Point(t0, 5, 6), Point(t0 + 60_000, 7, 9), Point(t0 + 600_000, 4, 4)],
                   region_key("eu"): [Point(t0, 3, 3)]},
                  {TOTAL: [Point(t0, 2, 2)]})
    fig = charts.online_history(tl, {TOTAL: "All servers", region_key("eu"): "eu"}, " per region")
    # a minute with no data (the job down) is a gap, not a line across
    assert [(t.name, list(t.y)) for t in fig.data] == [("All servers", [5, 7, None, 4]),
                                                       ("All servers, a week ago", [2]), ("eu", [3])]
    assert fig.data[1].line.dash == "dot" and [c[0] for c in fig.data[0].customdata if c] == ["6", "9", "4"]
    marks = [charts.Mark(t0 + 120_000, None, "deploy: patch 1.4.2", "#2ca02c"),
             charts.Mark(t0 + 240_000, t0 + 360_000, "maintenance (eu)", "#7f7f7f"),
             charts.Mark(t0 - 3 * DAY_MS, t0 - 2 * DAY_MS, "long before", "#7f7f7f")]  # outside what is shown
    fig = charts.mark(fig, marks)
    assert [(sh.type, sh.x0, sh.x1) for sh in fig.layout.shapes] == [
        ("line", charts.ts(t0 + 120_000), charts.ts(t0 + 120_000)),
        ("rect", charts.ts(t0 + 240_000), charts.ts(t0 + 360_000))]
    assert [a.text for a in fig.layout.annotations] == ["deploy: patch 1.4.2", "maintenance (eu)"]
    assert len(fig.data) == 3  # shapes, not traces: the legend keeps the lines
    bars = charts.players_now({}, ["A", "B"])  # no time axis: nothing drawn over it
    assert charts.mark(bars, marks).layout.shapes == ()


def test_a_time_chart_names_the_span_its_data_covers_and_ticks_it_apart() -> None:
    """Issue 62, item 7: a chart asked for 24 h holding 10 minutes says so under its title, and its ticks carry
    seconds (else plotly's 15 s ticks read "05:31 05:31 05:31"); a day of data ticks in minutes, a week by day."""
    from streaming.rules.online.rollup import DAY_MS, TOTAL, Point
    from streaming.store.history_store import Timeline

    t0 = 1_767_225_600_000
    for covered, fmt, subtitle in (
            (9 * 60_000, "%H:%M:%S", "00:00:00–00:09:00 UTC · 9 min of data (24 h asked)"),
            (DAY_MS - 60_000, "%H:%M", "00:00–23:59 UTC · 23 h 59 min"),
            (7 * DAY_MS, "%a %d %H:%M", "Thu 01 00:00–Thu 08 00:00 UTC · 7 days")):
        points = [Point(t0 + m, 5, 5) for m in range(0, covered + 1, 60_000 if covered < DAY_MS else 3_600_000)]
        fig = charts.online_history(Timeline(t0, t0 + max(covered, DAY_MS), 60_000, {TOTAL: points}, {}),
                                    {TOTAL: "All servers"})
        fig = charts.frame(fig)
        assert (fig.layout.xaxis.tickformat, fig.layout.title.subtitle.text) == (fmt, subtitle)
        assert fig.layout.title.text == "Players online"
    assert charts.frame(charts.players_now({}, ["A"])).layout.title.subtitle.text is None  # no time axis


def test_an_alert_bands_label_is_dark_on_light_never_cut_and_whole_on_hover() -> None:
    """Issue 62, item 7: labels were orange on an orange band, or cut to "Se" at the right edge."""
    from streaming.rules.online.rollup import TOTAL, Point
    from streaming.store.history_store import Timeline

    t0 = 1_767_225_600_000
    tl = Timeline(t0, t0 + 600_000, 60_000, {TOTAL: [Point(t0 + m, 5, 5) for m in range(0, 600_001, 60_000)]}, {})
    long = "ServerSilent · 300 servers in eu, na, sa, af, as, oc and more"
    fig = charts.mark(charts.time_axis(charts.online_history(tl, {TOTAL: "All servers"})), [
        charts.Mark(t0 + 60_000, t0 + 120_000, "deploy: 1.4.2", "#ff7f0e"),
        charts.Mark(t0 + 90_000, None, "note", "#6b6b6b"),
        charts.Mark(t0 + 540_000, None, long, charts.BEHIND)])
    first, second, last = fig.layout.annotations
    assert {a.font.color for a in fig.layout.annotations} == {"#222222"}  # not the band's colour
    assert all(a.bgcolor and a.bordercolor for a in fig.layout.annotations)
    assert first.y != second.y  # neighbours stepped apart
    assert (first.xanchor, last.xanchor) == ("left", "right")  # the last ends at its mark: nothing past the edge
    assert last.hovertext == long and len(last.text) <= 40


def test_the_online_chart_leaves_out_a_batch_before_any_event() -> None:
    """Its watermark is the epoch: drawn, it would stretch the time axis to 1970."""
    from streaming.store.views.online import OnlinePoint

    history = [OnlinePoint(0, 0, 1, {}, 0, 0), OnlinePoint(1, 1_767_225_600_000, 2, {"A": 1}, 1, 0)]
    fig = charts.online_over_batches(history, ["A"])
    assert list(fig.data[0].y) == [1]


# --------------------------------------------------------------------------- the charts' rules (issue 18)


def _audit(fig, **kw: object) -> list[str]:  # noqa: ANN001
    from tests.figure_audit import audit

    d = fig.to_dict()
    return audit(d["data"], d["layout"], **kw)


def _lags() -> dict[str, ServerRecord]:
    lag = LagRecord(p50=100, p95=200, max=300)
    return {s: ServerRecord(rows=5, dropped=2 if s == "C" else 0, ingest_lag_ms=lag, processing_lag_ms=lag)
            for s in ("A", "B", "C")}


# A run, a stop of 13 minutes, and a run again: the charts must show the gap, not a line across it.
RESTARTED = tuple(batch(i, T + i * 1000, T + (i + 1) * 1000, servers=_lags(), dropped=i % 2, late=0)
                  for i in range(10)) + tuple(
    batch(i, T + i * 1000, T + (i + 1) * 1000, servers=_lags(), dropped=1, batch_ts_ms=T + 23 * MIN + i * 500)
    for i in range(10, 20))
WINDOWS = tuple(window(T + k * MIN, s, 3 + k, k < 18) for k in (0, 1, 2, 16, 17, 18) for s in ("A", "B", "C"))


@pytest.mark.parametrize("name", ["players_over_time", "events_per_window", "watermark_vs_time", "watermark_lag",
                                  "dropped_over_time", "lag_chart", "batch_durations", "rates", "input_per_batch"])
def test_every_chart_keeps_the_rules(name: str) -> None:
    servers = ("A", "B", "C")
    fig = {
        "players_over_time": lambda: charts.players_over_time(WINDOWS, servers),
        "events_per_window": lambda: charts.events_per_window(WINDOWS, servers),
        "watermark_vs_time": lambda: charts.watermark_vs_time(RESTARTED, T + 24 * MIN),
        "watermark_lag": lambda: charts.watermark_lag(RESTARTED, 30_000),
        "dropped_over_time": lambda: charts.per_server_over_time(RESTARTED, servers, "dropped", "Dropped late"),
        "lag_chart": lambda: charts.lag_chart(RESTARTED, servers, "p95"),
        "batch_durations": lambda: charts.batch_durations(RESTARTED, 500),
        "rates": lambda: charts.rates(RESTARTED),
        "input_per_batch": lambda: charts.input_per_batch(RESTARTED),
    }[name]()
    assert _audit(fig, range_ms=60 * MIN) == []


def test_the_history_chart_keeps_the_rules() -> None:
    from streaming.rules.online.rollup import DAY_MS, TOTAL, Point
    from streaming.store.history_store import Timeline

    pts = {s: [Point(T + m * MIN, 3 + m % 5, 4 + m % 5) for m in range(0, 600, 7)] for s in (TOTAL, "A", "B", "C")}
    tl = Timeline(T - 14 * 60 * MIN, T + 10 * 60 * MIN, MIN, pts, {TOTAL: pts[TOTAL][:40]})
    fig = charts.online_history(tl, {TOTAL: "All servers", "A": "A", "B": "B", "C": "C"})
    assert _audit(fig, range_ms=DAY_MS) == [] and len(fig.data) == 5


@pytest.mark.parametrize("name", ["watermark_vs_time", "watermark_lag", "lag_chart", "rates", "players_over_time"])
def test_lines_break_where_the_job_did_not_run(name: str) -> None:
    servers = ("A", "B", "C")
    fig = {
        "watermark_vs_time": lambda: charts.watermark_vs_time(RESTARTED, T + 24 * MIN),
        "watermark_lag": lambda: charts.watermark_lag(RESTARTED, 30_000),
        "lag_chart": lambda: charts.lag_chart(RESTARTED, servers, "p95"),
        "rates": lambda: charts.rates(RESTARTED),
        "players_over_time": lambda: charts.players_over_time(WINDOWS, servers),
    }[name]()
    lines = [t for t in fig.data if t.mode and "lines" in t.mode and len(t.x or ()) > 2]
    assert lines and all(None in list(t.x) for t in lines), [t.name for t in lines]


def test_a_count_chart_of_zeros_is_empty_and_says_so_instead() -> None:
    quiet = charts.per_server_over_time(MOVING, ("A", "B"), "late", "Late but accepted per batch")
    assert not charts.has_data(quiet)
    assert charts.has_data(charts.per_server_over_time(RESTARTED, ("A", "B", "C"), "dropped", "Dropped"))


def test_time_axes_span_the_data_not_the_epoch() -> None:
    fig = charts.watermark_vs_time((batch(0, 0, 0, running_max_event_us=None), *MOVING), T + 11 * MIN)
    lo, hi = fig.layout.xaxis.range
    assert lo.year == 2026 and (hi - lo).total_seconds() < 11 * 60


@pytest.mark.parametrize(("gaps_in", "limit", "expected"), [
    ([0, 1_000, 2_000], 5_000, [0, 1_000, 2_000]),
    ([0, 1_000, 60_000, 61_000], 5_000, [0, 1_000, None, 60_000, 61_000]),
    ([0, 5_000], 5_000, [0, 5_000]),  # exactly at the limit: joined
    ([], 5_000, []),
])
def test_gaps_break_a_line_where_neighbours_are_too_far_apart(gaps_in: list[int], limit: int,
                                                             expected: list[int | None]) -> None:
    xs, ys = charts.gaps([T + x for x in gaps_in], gaps_in, limit)
    assert ys == expected
    assert [None if x is None else int(x.timestamp() * 1000) - T for x in xs] == expected


def test_committed_rate_is_entries_per_second_of_wall_time() -> None:
    bs = tuple(batch(i, T, T, parsed=200, batch_ts_ms=T + i * 1_000) for i in range(12))
    rates = charts.committed_rates(bs, span=10)
    assert rates[0] is None and rates[1] == 200.0 and rates[11] == 200.0


def test_a_quiet_pipeline_is_idle_not_stuck() -> None:
    stuck = MOVING[:7] + tuple(batch(i, T, T) for i in (7, 8, 9))
    texts = [s.text for s in assess(snap(state(), stuck), NOW + 60_000)]
    assert any(t.startswith("Idle") for t in texts) and not any("has not moved" in t for t in texts), texts


def test_the_break_where_redis_came_back_empty_is_marked_on_the_charts() -> None:
    fig = charts.mark_loss(charts.input_per_batch(MOVING), MOVING, 5)
    mark = fig.data[-1]
    assert mark.name == "history lost (batch 5)" and list(mark.x) == [charts.ts(MOVING[5].batch_ts_ms)] * 2
    assert len(charts.mark_loss(charts.input_per_batch(MOVING), MOVING, 42).data) == len(fig.data) - 1  # not shown


@pytest.mark.parametrize(("start", "lost", "partial"), [
    (T + 4 * MIN, 5, True),  # open at the loss (ends after batch 5's watermark, started before it ran)
    (T, 5, False),  # final before the loss (ends at or below batch 5's watermark): whole
    (T + 11 * MIN, 5, False),  # started after the loss: whole
    (T + 4 * MIN, None, False),  # nothing lost
    (T + 4 * MIN, 42, False),  # the loss is not in the range shown: the status line says where totals start
])
def test_a_window_open_when_redis_came_back_empty_is_partial(start: int, lost: int | None, partial: bool) -> None:
    batches = tuple(batch(i, T + i * MIN // 5, T + (i + 1) * MIN // 5) for i in range(10))
    s = snap(state(lost_at_batch=lost), batches)
    assert data.open_at_loss(window(start, "A", 3, final=False), s) is partial


@pytest.mark.parametrize(("groups", "styles", "problem"), [
    (10, 1, None),
    (10, 2, None),  # each series solid and dotted: ten legend entries, twenty traces
    (11, 1, "11 series (at most 10)"),
    (7, 3, "21 traces (at most 20: a series in two styles at most)"),
])
def test_the_audit_counts_series_by_legend_entry(groups: int, styles: int, problem: str | None) -> None:
    from tests.figure_audit import audit

    data = [{"name": f"g{g}" + ("" if k == 0 else f" ({k})"), "legendgroup": f"g{g}", "showlegend": k == 0,
             "x": [1, 2], "y": [1, 2]} for g in range(groups) for k in range(styles)]
    got = [p for p in audit(data, {"title": {"text": "A chart"}}, name="c") if "series" in p or "traces" in p]
    assert got == ([] if problem is None else [f"c: {problem}"])


def test_a_provisional_part_shares_its_series_legend_entry() -> None:
    fig = charts.players_over_time(WINDOWS, ("A", "B", "C"))
    shown = [t.name for t in fig.data if t.showlegend is not False]
    assert shown == ["A", "B", "C"] and len(fig.data) == 6


@pytest.mark.parametrize(("dropped", "said"), [
    ({}, "-"),
    ({"A": 0, "B": 2, "C": 40}, "A 0, B 2, C 40"),  # three servers: each named
    ({f"eu-{i:03d}": 0 for i in range(300)}, "none of 300 servers"),
    ({**{f"eu-{i:03d}": 0 for i in range(300)}, "eu-007": 3, "eu-100": 40, "eu-200": 12, "eu-201": 1, "eu-202": 1},
     "eu-100 40, eu-200 12, eu-007 3 and 2 more servers"),
])
def test_the_lab_table_names_the_servers_that_dropped_most(dropped: dict[str, int], said: str) -> None:
    from dashboard.pages.lab.model import dropped_by_server

    assert dropped_by_server(dropped) == said


# ------------------------------------------------------------------------------------------- the wall

def _alert(rule: str, subject: str, since: int = 0, value: float | None = None, status: str = "firing"):  # noqa: ANN202
    from streaming.alerting.lifecycle import AlertState

    return AlertState(rule=rule, subject=subject, status=status, since_ms=since, active_since_ms=since, value=value)


def test_the_wall_counts_what_fires_by_alert_and_region() -> None:
    """300 servers silent in three regions and a handful of drops are five lines, critical first, not 300."""
    from dashboard.pages.wall.model import firing_lines

    regions = {f"eu-{i}": "eu" for i in range(5)} | {"as-1": "as"}
    alerts = [_alert("server_silent", "eu", 10, 200), _alert("server_silent", "na", 20, 90),
              _alert("server_silent", "", 30, 10), *(_alert("players_drop", f"eu-{i}", 40 + i) for i in range(5)),
              _alert("players_drop", "as-1", 5), _alert("players_drop", "ghost", 6),
              _alert("freshness", "main", 50), _alert("clock_ahead", "as-1", 1, status="pending")]
    lines = [(x.alert, x.where, x.count, x.since_ms) for x in firing_lines(alerts, regions)]
    assert lines == [("PlayersDrop", "eu", 5, 40), ("PlayersDrop", "as-1 in as", 0, 5), ("PlayersDrop", "ghost", 0, 6),
                     ("ServerSilent", "eu", 200, 10), ("ServerSilent", "na", 90, 20),
                     ("ServerSilent", "no region", 10, 30), ("PipelineBehind", "main", 0, 50)]
    one = firing_lines([_alert("server_silent", "eu", 1, 1)], {})
    assert [x.text() for x in one] == ["ServerSilent · eu · 1 server"]


def test_the_wall_shows_names_as_text_and_each_region_on_its_own_scale() -> None:
    from base64 import b64decode

    from dashboard.pages.wall import screen

    hostile = screen.Number('<img src="http://x/i">', 5, -2, (1, 2, None, 3), charts.PALETTE[0], "06:00–07:00 UTC")
    tiles = screen.region_tiles([hostile, screen.Number("eu", 50_000, 120, (49_000, 50_000), charts.PALETTE[1])])
    assert "<img src=\"http://x" not in tiles and "&lt;img src=&quot;http://x/i&quot;&gt;" in tiles
    assert "▼ −2 in 1 h" in tiles and "▲ +120 in 1 h" in tiles
    svg = b64decode(screen.sparkline((1, 2, None, 3), "#fff", 90).split("base64,")[1].split('"')[0]).decode()
    assert svg.count("<polyline") == 1  # the gap splits the line: only runs of two points or more are drawn
    small, big = (b64decode(screen.sparkline(p, "#fff", 100).split("base64,")[1].split('"')[0]).decode()
                  for p in ((10, 20), (10_000, 20_000)))
    assert small == big  # each on its own scale: a region of 20 players draws as tall as one of 20,000
    flat = b64decode(screen.sparkline((5_000, 5_001), "#fff", 100).split("base64,")[1].split('"')[0]).decode()
    assert "0.0,50.1 1000.0,49.9" in flat  # a change of 1 in 5,000 is not blown up to the full height
    assert "as of 05:33:42 UTC: no server is speaking" in screen.total_block(hostile, "05:33:42 UTC")
    assert "as of" not in screen.total_block(hostile, None)


@pytest.mark.parametrize(("range_ms", "refresh_s", "paused", "label"), [
    (900_000, 2, False, "View: 15 min · every 2 s"),
    (300_000, 10, False, "View: 5 min · every 10 s"),
    (3_600_000, 1, True, "View: 60 min · paused"),
])
def test_the_view_settings_say_the_view_while_closed(range_ms: int, refresh_s: int, paused: bool, label: str) -> None:
    from dashboard.ui import View, view_label

    assert view_label(View(range_ms=range_ms, refresh_s=refresh_s, paused=paused)) == label


# --------------------------------------------------------------------------- colour has one meaning


def _hue(color: str) -> tuple[float, float]:
    """Hue in degrees and saturation of ``#rrggbb``."""
    import colorsys

    r, g, b = (int(color[i:i + 2], 16) / 255 for i in (1, 3, 5))
    h, _, sat = colorsys.rgb_to_hls(r, g, b)
    return h * 360, sat


def status_like(color: str) -> bool:
    """Red, amber or green to a reader: a saturated hue below 60 degrees or from 75 to 165."""
    hue, sat = _hue(color)
    return sat > 0.15 and (hue < 60 or hue > 345 or 75 <= hue <= 165)


def test_servers_and_regions_never_wear_a_status_colour() -> None:
    assert [c for c in charts.PALETTE if status_like(c)] == []
    assert all(status_like(c) for c in (charts.BEHIND, charts.LATE, charts.ON_TIME))
    assert len(set(charts.server_colors([f"s{i}" for i in range(8)]).values())) == 8  # a chart's 8 series differ
    assert not status_like(charts.WATERMARK) and not status_like(charts.MAX_EVENT)


def test_a_region_keeps_its_colour_whichever_page_draws_it() -> None:
    regions = ["af", "as", "eu", "na", "oc", "sa"]
    once = charts.server_colors(regions)
    assert charts.server_colors(list(reversed(regions))) == once


def test_drawing_a_shared_figure_again_changes_nothing_in_it() -> None:
    """A figure built once per refresh tick is drawn by every session: escaping it, or handing it to Streamlit,
    must not change it (titles grew a <b> at every refresh, names were escaped again)."""
    import plotly.graph_objects as go

    from dashboard.text import safe_figure

    fig = go.Figure(go.Scatter(x=[1, 2], y=[1, 2], name="<b>na</b>"))
    fig.update_layout(title={"text": "Players online"})
    before = fig.to_json()
    first, second = safe_figure(fig), safe_figure(fig)
    assert fig.to_json() == before
    assert first.data[0].name == second.data[0].name == "&lt;b&gt;na&lt;/b&gt;"
    assert first.layout.title.text == second.layout.title.text == "Players online"


def test_a_chart_is_drawn_in_our_theme_and_the_figure_shared_is_not_changed() -> None:
    """Streamlit's theme wraps ``layout.title`` in ``<b>`` at each drawing of the same figure in the browser:
    every chart is drawn with ``theme=None`` in a template of ours (Streamlit's look), on a copy."""
    import plotly.graph_objects as go

    from dashboard import ui

    fig = charts.layout(go.Figure(go.Scatter(x=[1, 2], y=[1, 2])), "Players online", "players")
    before = fig.to_json()
    drawn = ui._ready(fig)
    assert fig.to_json() == before  # the shared figure is not changed
    assert drawn.layout.template.layout.font.family == charts.FONT and drawn.layout.title.text == "Players online"
    assert drawn.layout.template.layout.title.font.weight == 600


def test_the_lab_draws_each_lane_by_its_distance_behind_the_newest_event() -> None:
    """Two lanes over the same events: the configured one 30 s behind the newest event time, a per-server-min lane
    held back to 90 s by a silent server; each at its own height, neither under the other."""
    from dashboard.pages.lab.model import lanes_watermarks
    from streaming.schema.config import Lane

    newest = T + 5 * MIN
    main = tuple(batch(i, T, newest - 30_000, running_max_event_us=newest * 1000) for i in range(3))
    held = tuple(batch(i, T, newest - 90_000, running_max_event_us=(newest - 60_000) * 1000) for i in range(3))
    fig = lanes_watermarks([Lane.main("wm"), Lane(name="per-server-min", mode="per-server", namespace="wm.psm")],
                           [snap(state(), main), snap(state(), held)], NOW)
    assert [list(t.y) for t in fig.data] == [[30.0] * 3, [90.0] * 3]  # behind the configured pipeline's newest
    assert fig.layout.yaxis.title.text == "seconds behind"


def test_the_fleet_at_a_glance_counts_each_regions_servers_by_state() -> None:
    from dashboard.pages.live_ops.model import states_by_region

    s = replace(snap(state(), MOVING, servers=("eu-1", "eu-2", "na-1", "x")),
                regions={"eu-1": "eu", "eu-2": "eu", "na-1": "na", "eu-9": "eu", "na-8": "na"},
                drained={"eu-9": NOW}, retired={"na-8": NOW - 900_000})
    rows = states_by_region(s, silent={"eu-2"})
    assert rows == [{"Region": "eu", "Live": 1, "Silent": 1, "Drained": 1, "Retired": 0},
                    {"Region": "na", "Live": 1, "Silent": 0, "Drained": 0, "Retired": 1},
                    {"Region": "no region", "Live": 1, "Silent": 0, "Drained": 0, "Retired": 0},
                    {"Region": "all", "Live": 3, "Silent": 1, "Drained": 1, "Retired": 1}]


def test_the_slowest_clocks_are_ranked_by_the_worse_lag_the_lag_page_heads() -> None:
    from dashboard.pages.live_ops.model import slowest_clocks
    from streaming.schema.records import LagRecord, ServerRecord

    def lag(p95: float | None) -> LagRecord | None:
        return None if p95 is None else LagRecord(p95 / 2, p95, p95 * 2)

    def rec(ingest: float | None, processing: float | None) -> ServerRecord:
        return ServerRecord(rows=1, events=1, ingest_lag_ms=lag(ingest), processing_lag_ms=lag(processing))

    assert rec(300.0, 9_000.0).worse_lag_p95() == ("processing", 9_000.0)
    assert rec(400.0, 400.0).worse_lag_p95() == ("ingest", 400.0)  # a tie: ingest
    assert rec(None, None).worse_lag_p95() is None
    batches = (batch(1, T, T, servers={"A": rec(100.0, 25_000.0), "B": rec(4_000.0, 500.0), "C": rec(50.0, 60.0)}),
               batch(2, T, T, servers={"C": rec(900.0, 70.0)}))  # C's newest batch counts, not its older one
    s = snap(state(), batches, servers=("A", "B", "C"))
    assert slowest_clocks(s, 2) == [("A", 25_000.0), ("B", 4_000.0)]
    assert slowest_clocks(s)[-1] == ("C", 900.0)
