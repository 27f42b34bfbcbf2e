"""The wall's counts and names, and colour that only ever means a status."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dashboard import charts
from streaming.schema.records import LagRecord, ServerRecord
from tests.ui.units.snapshots import MIN, MOVING, NOW, T, batch, snap, state

# ------------------------------------------------------------------------------------------- the wall

def _alert(rule: str, subject: str, since: int = 0, value: float | None = None, status: str = "firing"):  # noqa: ANN202
    from streaming.alerting.lifecycle import AlertState

    return AlertState(rule=rule, subject=subject, status=status, since_ms=since, active_since_ms=since, value=value)


def test_the_wall_counts_what_fires_by_alert_and_region() -> None:
    """300 servers silent in three regions and a handful of drops are five lines, critical first, not 300."""
    from dashboard.screens.wall.model import firing_lines

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

    from dashboard.screens.wall import screen

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

    from dashboard.ui import drawing

    fig = charts.layout(go.Figure(go.Scatter(x=[1, 2], y=[1, 2])), "Players online", "players")
    before = fig.to_json()
    drawn = drawing._ready(fig)
    assert fig.to_json() == before  # the shared figure is not changed
    assert drawn.layout.template.layout.font.family == charts.FONT and drawn.layout.title.text == "Players online"
    assert drawn.layout.template.layout.title.font.weight == 600


def test_the_lab_draws_each_lane_by_its_distance_behind_the_newest_event() -> None:
    """Two lanes over the same events: the configured one 30 s behind the newest event time, a per-server-min lane
    held back to 90 s by a silent server; each at its own height, neither under the other."""
    from dashboard.screens.lab.model import lanes_watermarks
    from streaming.schema.config import Lane

    newest = T + 5 * MIN
    main = tuple(batch(i, T, newest - 30_000, running_max_event_us=newest * 1000) for i in range(3))
    held = tuple(batch(i, T, newest - 90_000, running_max_event_us=(newest - 60_000) * 1000) for i in range(3))
    fig = lanes_watermarks([Lane.main("wm"), Lane(name="per-server-min", mode="per-server", namespace="wm.psm")],
                           [snap(state(), main), snap(state(), held)], NOW)
    assert [list(t.y) for t in fig.data] == [[30.0] * 3, [90.0] * 3]  # behind the configured pipeline's newest
    assert fig.layout.yaxis.title.text == "seconds behind"


def test_the_fleet_at_a_glance_counts_each_regions_servers_by_state() -> None:
    from dashboard.screens.live_ops.model import states_by_region

    s = replace(snap(state(), MOVING, servers=("eu-1", "eu-2", "na-1", "x")),
                regions={"eu-1": "eu", "eu-2": "eu", "na-1": "na", "eu-9": "eu", "na-8": "na"},
                drained={"eu-9": NOW}, retired={"na-8": NOW - 900_000})
    rows = states_by_region(s, silent={"eu-2"})
    assert rows == [{"Region": "eu", "Live": 1, "Silent": 1, "Drained": 1, "Retired": 0},
                    {"Region": "na", "Live": 1, "Silent": 0, "Drained": 0, "Retired": 1},
                    {"Region": "no region", "Live": 1, "Silent": 0, "Drained": 0, "Retired": 0},
                    {"Region": "all", "Live": 3, "Silent": 1, "Drained": 1, "Retired": 1}]


def test_the_slowest_clocks_are_ranked_by_the_worse_lag_the_lag_page_heads() -> None:
    from dashboard.screens.live_ops.model import slowest_clocks
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
