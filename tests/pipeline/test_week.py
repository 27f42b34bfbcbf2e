"""A compressed week through the real stack: the generator's fleet (6 servers in 3 regions, players following
each region's evening) plays eight days of event time, cut into a batch every 2 hours of arrival and replayed
through the real source, query and sink with entry IDs at the events' arrival (as ``wm-replay`` writes them), so
a week of event time is a week of minutes. Every minute per server, region and total, each day's peaks, the
highest ever and the week-ago overlay read back equal an independent model (tests/history_model.py) of the
players the events log in and out; Live ops draws the same week and the same peaks."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import replace

import pytest
import redis
from pyspark.sql import SparkSession
from streamlit.testing.v1 import AppTest

from streaming.apps.replay import ReplayBatch, replay
from streaming.rules.online.rollup import DAY_MS, MINUTE_MS, TOTAL, Point, parse_peaks, resample
from streaming.rules.scenarios import fleet
from streaming.rules.simulate import Simulator
from streaming.schema.config import Config
from streaming.schema.keys import KeySchema
from streaming.schema.records import Annotation
from streaming.store.annotation_store import add_annotation
from streaming.store.history_store import read_history, read_timeline
from tests import history_model
from tests.paths import APP
from tests.seed import arrival_ids

pytestmark = pytest.mark.spark

T0 = 1_767_571_200_000  # Monday 2026-01-05T00:00:00Z
DAYS = 8
BATCH_MS = 2 * 3_600_000
RATE = 0.05  # events per second of event time: about 35,000 events in the week


class Week:
    def __init__(self, cfg: Config, counts: list[tuple[int, dict[str, int]]], regions: dict[str, str]) -> None:
        self.cfg, self.counts, self.regions = cfg, counts, regions
        self.keys = KeySchema(cfg.namespace)
        self.client = redis.Redis.from_url(cfg.redis_url)


@pytest.fixture(scope="module")
def week(spark: SparkSession, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Week:
    # A heartbeat every 2 h per player at this rate makes a full house of about 60 players a server.
    game = fleet(6, 3)
    game = replace(game, servers=tuple(replace(p, heartbeat_ms=BATCH_MS) for p in game.servers))
    sim = Simulator(game, seed=11, start_us=T0 * 1000, rate=RATE, count=int(RATE * DAYS * 86_400))
    events = list(sim)
    ids = arrival_ids(events)
    ns = f"week-{uuid.uuid4().hex[:8]}"
    cfg = Config(redis_url=redis_url, embedded_redis=False, namespace=ns, window_ms=3_600_000, slide_ms=3_600_000,
                 delay_ms=1_800_000, trigger_ms=1_000, checkpoint_dir=str(tmp_path_factory.mktemp("week") / ns),
                 spark_master="local[2]", retention_ms=100 * 365 * DAY_MS, online_timeout_ms=3 * DAY_MS,
                 retire_after_ms=9 * DAY_MS)  # every server kept all week: the model writes each one's minutes
    groups: dict[int, list[int]] = {}
    for i, (arrival_us, _) in enumerate(events):
        groups.setdefault((arrival_us // 1000 - T0) // BATCH_MS, []).append(i)
    batches = [ReplayBatch(label, [events[i][1].payload() for i in rows], [ids[i] for i in rows])
               for label, rows in sorted(groups.items())]
    replay(batches, cfg)
    # The model: each player online after a batch iff their latest event so far is not a logout (nobody times
    # out: a 3-day timeout, a heartbeat every 2 h); a batch's time is its newest entry's arrival.
    latest: dict[tuple[str, str], tuple[int, str]] = {}
    counts = []
    for _, rows in sorted(groups.items()):
        for i in rows:
            e = events[i][1]
            if (e.server, e.player_id) not in latest or latest[(e.server, e.player_id)][0] <= e.event_time_us:
                latest[(e.server, e.player_id)] = (e.event_time_us, e.kind or "event")
        per: dict[str, int] = {}
        for (server, _), (_, kind) in latest.items():
            per[server] = per.get(server, 0) + (kind != "logout")
        counts.append((int(ids[rows[-1]].split("-")[0]), per))
    return Week(cfg, counts, dict(sim.regions))


def test_every_minute_per_server_region_and_total_equals_the_model(week: Week) -> None:
    expected = history_model.minutes(week.counts, week.regions)
    assert set(expected) == {*week.regions, "region|eu", "region|na", "region|sa", TOTAL}
    got = read_history(week.client, week.keys, sorted(expected), T0, T0 + DAYS * DAY_MS)
    open_minute = week.counts[-1][0] // MINUTE_MS * MINUTE_MS  # no later batch closed it: the state holds it
    for series, by_minute in expected.items():
        assert got[series] == [Point(m, *v) for m, v in sorted(by_minute.items()) if m != open_minute], series
    # the daily curve made it through: each day the total at its evening is several times its night's
    totals = [last for _, (last, _) in sorted(expected[TOTAL].items())]
    assert max(totals) > 2 * min(totals) and len(totals) == DAYS * 12  # a batch every 2 h, each its own minute


def test_each_days_peaks_and_the_highest_ever_equal_the_model(week: Week) -> None:
    per_day = history_model.peaks(week.counts, week.regions, per_day=True)
    assert len(per_day) == DAYS
    for day, want in per_day.items():
        assert day is not None
        assert parse_peaks(week.client.hgetall(week.keys.online_peak(day))) == want, day
    ever = history_model.peaks(week.counts, week.regions, per_day=False)[None]
    assert parse_peaks(week.client.hgetall(week.keys.online_peak_ever)) == ever


def test_today_against_a_week_ago(week: Week) -> None:
    today = T0 + 7 * DAY_MS
    tl = read_timeline(week.client, week.keys, [TOTAL, "region|eu"], today, today + DAY_MS, week_ago=[TOTAL])
    expected = history_model.minutes(week.counts, week.regions)
    want = [Point(m + 7 * DAY_MS, *v) for m, v in sorted(expected[TOTAL].items()) if T0 <= m < T0 + DAY_MS]
    assert tl.week_ago[TOTAL] == want and len(want) == 12
    assert "region|eu" not in tl.week_ago  # only what was asked for


def test_live_ops_draws_the_week_its_peaks_and_an_annotation(week: Week, monkeypatch: pytest.MonkeyPatch) -> None:
    end = T0 + DAYS * DAY_MS - 60_000
    add_annotation(week.client, week.keys, Annotation(id="a1", text="patch 1.4.2", kind="deploy",
                                                      start_ms=end - 2 * DAY_MS, created_ms=end), 8, end)
    monkeypatch.setenv("REDIS_URL", week.cfg.redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", week.cfg.namespace)
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["now_ms"] = end
    at.session_state["ops_history_range"] = "7 d"
    at.session_state["ops_tab"] = "Over time"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    (chart,) = [c for c in at.get("plotly_chart") if "online_history" in c.proto.id]
    spec = json.loads(chart.proto.spec)
    # the week is all there: its subtitle names the span, from a day to a day, without "of data (7 days asked)"
    assert re.fullmatch(r"\w{3} \d\d \d\d:\d\d–\w{3} \d\d \d\d:\d\d UTC · 7 days",
                        spec["layout"]["title"]["subtitle"]["text"]), spec["layout"]["title"]
    total = next(t for t in spec["data"] if t["name"] == "All servers")
    expected = history_model.minutes(week.counts, week.regions)
    start = end - end % MINUTE_MS + MINUTE_MS - 7 * DAY_MS
    want = resample([Point(m, *v) for m, v in sorted(expected[TOTAL].items()) if m >= start], 5 * MINUTE_MS)
    assert [y for y in total["y"] if y is not None] == [p.last for p in want]
    assert any(a["text"] == "deploy: patch 1.4.2" for a in spec["layout"].get("annotations", []))
    (peaks,) = [df.value for df in at.dataframe if "Highest ever" in df.value.columns and "" in df.value.columns]
    ever = history_model.peaks(week.counts, week.regions, per_day=False)[None]
    row = peaks.set_index("").loc["All servers"]
    assert int(row["Highest ever"]) == ever[TOTAL][0]
