"""The rules every chart keeps: lines broken where the job did not run, time axes, gaps, marks."""

from __future__ import annotations

import pytest

from dashboard import charts
from dashboard.status import assess
from streaming.schema.records import LagRecord, ServerRecord
from streaming.store.views import snapshot as data
from tests.ui.units.snapshots import MIN, MOVING, NOW, T, batch, snap, state, window

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
    from dashboard.screens.lab.model import dropped_by_server

    assert dropped_by_server(dropped) == said
