"""Live ops at 300 servers in 6 regions, seeded through the real pipeline (the regions ride from the events to
Redis): one headline per region and the total, every server in one table with a search box, no chart with more
than a handful of lines, and every region's number equal to an independent sum over Redis' per-server counts."""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict

import pyarrow as pa
import pytest
import redis
from pyspark.sql import SparkSession
from streamlit.testing.v1 import AppTest

from dashboard.testing import page_test
from streaming.rules.online.rollup import day_of, parse_peaks
from streaming.rules.scenarios import fleet
from streaming.schema.keys import KeySchema, WindowKey
from streaming.schema.records import OnlineStateRecord
from streaming.store.views.snapshot import read_snapshot
from tests.paths import APP
from tests.seed import Seeded, seed_pipeline
from watermark_client.timeutil import clock

pytestmark = pytest.mark.spark

MAX_TRACES = 2 * 8  # a line per group, solid and dotted (provisional) for the windowed ones


@pytest.fixture(scope="module")
def seeded(spark: SparkSession, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    return seed_pipeline(redis_url, tmp_path_factory.mktemp("fleet"), scenario=fleet(300, 6), rate=60,
                         count=24_000, batch_arrival_ms=20_000, minutes_ago=9)


def test_regions_ride_from_the_events_into_redis(seeded: Seeded) -> None:
    client = redis.Redis.from_url(seeded.cfg.redis_url, decode_responses=True)
    regions = client.hgetall(KeySchema(seeded.cfg.namespace).regions)
    servers = client.smembers(KeySchema(seeded.cfg.namespace).servers)
    assert len(servers) == 300 and regions == {s: s.split("-")[0] for s in servers}


def test_live_ops_at_300_servers_reads_by_region(seeded: Seeded, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", seeded.cfg.redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", seeded.cfg.namespace)
    at = AppTest.from_file(APP, default_timeout=90)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    client = redis.Redis.from_url(seeded.cfg.redis_url, decode_responses=True)
    keys = KeySchema(seeded.cfg.namespace)
    counts = {s: int(n) for s, n in client.hgetall(keys.online_counts).items()}
    model: dict[str, int] = defaultdict(int)
    for s, n in counts.items():
        model[s.split("-")[0]] += n
    first = {}  # the first metric of each label: the headline row (the distinct players come later)
    for m in at.metric:
        first.setdefault(m.label, int(m.value.replace(",", "")))
    assert {k: v for k, v in first.items() if k in model} == dict(model)  # one headline per region, exact
    (total,) = [label for label in first if label.startswith("All servers · ")]  # online now, or as of when
    assert first[total] == sum(counts.values())
    assert not [m.label for m in at.metric if m.label.startswith("eu-")]  # no column per server
    # each region's own peak today (the highest sum of one batch) and the total's, with when
    peaks = parse_peaks(redis.Redis.from_url(seeded.cfg.redis_url).hgetall(keys.online_peak(
        day_of(int(client.hget(keys.online_state, "committed_id").split("-")[0])))))  # the last batch's arrival
    want = {f"Peak today {peaks[k][0]:,} at {clock(peaks[k][1])}." for k in ["*", *(f"region|{r}" for r in model)]}
    said = {m.proto.help.split(" Peak today ")[1].split(".")[0] for m in at.metric if " Peak today " in m.proto.help}
    assert {f"Peak today {p}." for p in said} == want and len(want) == 7  # in each number's help, not under it
    assert not [df for df in at.dataframe if "Trend (last hour)" in df.value.columns]  # a tab of its own
    at.session_state["ops_tab"] = "Servers"
    at.run()
    (table,) = [df.value for df in at.dataframe if "Trend (last hour)" in df.value.columns]
    # every server but those drained (their players all logged out at night: out of the live views, rules.fleet)
    seen, servers = {s: int(t) for s, t in client.hgetall(keys.seen).items()}, client.smembers(keys.servers)
    clocks = OnlineStateRecord.from_hash(redis.Redis.from_url(seeded.cfg.redis_url).hgetall(keys.online_state),
                                           "the online view").clocks
    drained = {s for s, c in clocks.items() if c.drained_ms and c.drained_ms >= seen.get(s, c.drained_ms + 1)}
    assert sorted(table["Server"]) == sorted(set(servers) - drained) and len(drained) < 300
    assert list(table["Online now"]) == sorted(table["Online now"], reverse=True)
    shown_servers = dict(zip(table["Server"], table["Online now"], strict=True))
    assert shown_servers == {s: counts.get(s, 0) for s in shown_servers}
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        assert len(spec["data"]) <= MAX_TRACES, (chart.key, len(spec["data"]))
    at.text_input(key="ops_find_server").input("as-01").run()
    (found,) = [df.value for df in at.dataframe if "Trend (last hour)" in df.value.columns]
    assert sorted(found["Server"]) == [f"as-{k:03d}" for k in range(10, 20)]


def test_a_snapshot_reads_the_windows_of_the_servers_in_view_only(seeded: Seeded) -> None:
    """What a page reads is bounded by the live fleet: a drained server's windows stay in Redis (its totals and
    the Events page have them) but no snapshot reads them."""
    client = redis.Redis.from_url(seeded.cfg.redis_url)
    keys = KeySchema(seeded.cfg.namespace)
    last = int(client.hget(keys.online_state, "committed_id").split(b"-")[0])
    snap = read_snapshot(client, keys, range_ms=3_600_000, now_ms=last + 1_000)
    index = {WindowKey.parse(m) for m in client.zrange(keys.windows, 0, -1)}
    head = snap.state.head_ms if snap.state else 0
    in_range = {w for w in index if w.end_ms > head - 3_600_000}
    assert snap.drained and {w.server for w in in_range} & set(snap.drained)  # there is something to leave out
    assert {w.key for w in snap.windows} == {w for w in in_range if w.server not in snap.drained}


@pytest.mark.parametrize("page", ["lab", "watermark", "lag", "events",
                                  "delay"])
def test_every_other_page_renders_at_300_servers_with_few_traces(seeded: Seeded, monkeypatch: pytest.MonkeyPatch,
                                                                  page: str) -> None:
    monkeypatch.setenv("REDIS_URL", seeded.cfg.redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", seeded.cfg.namespace)
    at = page_test(page, timeout=90)
    assert not at.exception, [e.value for e in at.exception]
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        assert len(spec["data"]) <= MAX_TRACES + 2, (page, chart.key, len(spec["data"]))


def test_a_week_at_300_servers_reads_a_command_per_region_and_day(seeded: Seeded,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Live ops' 7-day chart at 300 servers in 6 regions: one GETRANGE per region (and the total) and day, whatever
    the number of servers or players, and a line per region."""
    monkeypatch.setenv("REDIS_URL", seeded.cfg.redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", seeded.cfg.namespace)
    now = int(time.time() * 1000)
    end = now - now % 60_000 + 60_000
    days = 7 if end % 86_400_000 == 0 else 8  # a week from a minute's end touches 8 UTC days, unless at midnight
    at = AppTest.from_file(APP, default_timeout=90)
    at.session_state["now_ms"] = now
    at.session_state["ops_history_range"] = "7 d"
    at.session_state["ops_tab"] = "Over time"
    client = redis.Redis.from_url(seeded.cfg.redis_url)
    client.config_resetstat()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    calls = client.info("commandstats").get("cmdstat_getrange", {}).get("calls", 0)
    assert calls == (6 + 1) * days
    (chart,) = [json.loads(c.proto.spec) for c in at.get("plotly_chart") if "online_history" in c.proto.id]
    assert sorted(t["name"] for t in chart["data"]) == sorted(["All servers", "af", "as", "eu", "na", "oc", "sa"])


def test_sessions_viewing_the_same_tick_share_each_chart(seeded: Seeded, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many viewers cost one: a chart of Live ops is built once for every session drawing the same view in a
    refresh tick, and again for a view that differs (another range)."""
    from dashboard import loaders
    from dashboard.screens.live_ops import figures

    monkeypatch.setenv("REDIS_URL", seeded.cfg.redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", seeded.cfg.namespace)
    built: list[str] = []
    real = figures.transitions_per_minute

    def counted(*args: object, **kw: object) -> object:
        built.append("transitions")
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(figures, "transitions_per_minute", counted)
    loaders.forget()
    now = int(time.time() * 1000)
    specs = []
    for state in ({}, {}, {}, {"range": "60 min"}):
        at = page_test("ops", now_ms=now, timeout=90, **state)
        assert not at.exception, [e.value for e in at.exception]
        specs.append(next(c.proto.spec for c in at.get("vega_lite_chart")
                          if "Logins, logouts and timeouts per minute" in c.proto.spec))
    assert built == ["transitions", "transitions"]  # three sessions, one build; the 60-minute view its own
    assert specs[0] == specs[1] == specs[2]


def test_a_region_chosen_is_the_one_every_page_draws_and_a_link_carries(seeded: Seeded,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 62, item 8: ``?region=eu`` sets the filter; Live ops' total, its Servers table and the fleet map are
    eu's alone (the total an independent sum over Redis' per-server counts), each cell leading to its server's
    events; the Lag page, with the filter the session keeps, lists eu's servers alone; the Events page opens on the
    server a cell links to."""
    monkeypatch.setenv("REDIS_URL", seeded.cfg.redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", seeded.cfg.namespace)
    client = redis.Redis.from_url(seeded.cfg.redis_url, decode_responses=True)
    keys = KeySchema(seeded.cfg.namespace)
    counts = {s: int(n) for s, n in client.hgetall(keys.online_counts).items()}
    at = AppTest.from_file(APP, default_timeout=90)
    at.query_params["region"] = "eu"
    at.session_state["ops_tab"] = "Servers"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="region").value == "eu"
    assert sorted(at.selectbox(key="region").options) == ["All regions", "af", "as", "eu", "na", "oc", "sa"]
    (total,) = [m for m in at.metric if m.label.startswith("All servers in eu · ")]
    assert int(total.value.replace(",", "")) == sum(n for s, n in counts.items() if s.startswith("eu-")) > 0
    (table,) = [df.value for df in at.dataframe if "Trend (last hour)" in df.value.columns]
    assert set(table["Server"]) and {s.split("-")[0] for s in table["Server"]} == {"eu"}
    (fleet_map,) = [c for c in at.get("vega_lite_chart") if "The fleet" in c.proto.spec]
    cells = pa.ipc.open_stream(fleet_map.proto.data.data).read_all().to_pylist()  # Streamlit moves it to Arrow
    assert sorted(c["server"] for c in cells) == sorted(table["Server"])
    assert all(c["href"] == f"events?server={c['server']}" and c["players"] == counts.get(c["server"], 0)
               for c in cells)
    states = dict(zip(table["Server"], table["State"], strict=True))
    assert all((c["state"] == "silent") == (states[c["server"]] == "silent") for c in cells)

    lag = page_test("lag", timeout=90, region="eu")
    assert not lag.exception, [e.value for e in lag.exception]
    (rows,) = [df.value for df in lag.dataframe if "Server" in df.value.columns]
    assert len(rows) and {s.split("-")[0] for s in rows["Server"]} == {"eu"}

    events = page_test("events", timeout=90, run=False)
    events.query_params["server"] = "eu-003"
    events.run()
    assert events.selectbox(key="events_server").value == "eu-003"


def test_the_wall_with_a_region_chosen_keeps_the_fleets_status(seeded: Seeded,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 62: with ``region=eu`` the wall's total and its heading are eu's (an independent sum over Redis'
    per-server counts), while its status tile says what it says for the whole fleet: one truth about health."""
    monkeypatch.setenv("REDIS_URL", seeded.cfg.redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", seeded.cfg.namespace)
    client = redis.Redis.from_url(seeded.cfg.redis_url, decode_responses=True)
    counts = {s: int(n) for s, n in client.hgetall(KeySchema(seeded.cfg.namespace).online_counts).items()}
    now = int(time.time() * 1000)

    def wall(**state: object) -> str:
        at = page_test("wall", timeout=90, now_ms=now, **state)
        assert not at.exception, [e.value for e in at.exception]
        return " ".join(h.proto.body for h in at.get("html"))

    whole, eu = wall(), wall(region="eu")
    tile = re.compile(r'class="wall-status"[^>]*>(.*?)</div>')
    assert tile.search(eu).group(1) == tile.search(whole).group(1)
    assert "Players online in eu<" in eu and "Players online<" in whole
    (n,) = re.findall(r'data-label="All servers in eu">([\d,]+)<', eu)
    assert int(n.replace(",", "")) == sum(c for s, c in counts.items() if s.startswith("eu-")) > 0


@pytest.mark.parametrize(("page", "regional"), [("lag", True), ("alerts", False), ("delay", False), ("lab", False)])
def test_the_region_filter_is_offered_only_where_a_page_draws_one_region(seeded: Seeded, page: str, regional: bool,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A page that is the whole fleet's shows the Region filter disabled, saying so, and keeps its value."""
    monkeypatch.setenv("REDIS_URL", seeded.cfg.redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", seeded.cfg.namespace)
    at = page_test(page, timeout=90, region="eu")
    assert not at.exception, [e.value for e in at.exception]
    box = at.selectbox(key="region")
    assert (box.disabled, box.value) == (not regional, "eu")
    assert ("whole fleet's; the filter is kept" in box.help) is not regional
