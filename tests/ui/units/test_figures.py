"""The dashboard's figures: what each chart draws from a snapshot."""

from __future__ import annotations

import pytest
import redis

from dashboard import charts
from dashboard.status import unreachable
from streaming.schema.records import LagRecord, ServerRecord
from tests.ui.units.snapshots import MIN, NOW, T, batch, window

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
    from dashboard.screens.live_ops import figures
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
