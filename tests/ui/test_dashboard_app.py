"""Every dashboard page under Streamlit's AppTest, against a real Redis seeded by the real pipeline.

The numbers each page shows are checked against Redis read directly (not
through ``streaming.store.views.snapshot``) and against the independent oracle, and the whole
run must leave Redis untouched: the dashboard never writes.
"""

from __future__ import annotations

import json
import statistics
import urllib.request
from collections.abc import Iterator

import pytest
import redis
from pyspark.sql import SparkSession
from streamlit.testing.v1 import AppTest

from dashboard import charts, loaders
from dashboard.testing import page_test
from streaming.alerting.config import AlertConfig, ServerSilent, WatermarkFlat
from streaming.apps.redis_server import free_port
from streaming.schema.keys import KeySchema, WindowKey
from streaming.store.alert_store import THRESHOLDS_FIELD, publish_thresholds
from streaming.store.report import read_batches
from streaming.store.views.online import read_online
from streaming.store.views.snapshot import read_snapshot
from tests.oracle import oracle, to_ms
from tests.seed import Seeded, seed_pipeline
from watermark_client.events import parse_entry_id
from watermark_client.timeutil import human_ms

pytestmark = pytest.mark.spark
from tests.paths import APP  # noqa: E402

PAGES = ["ops", "watermark", "lag", "health"]
LAB_PAGES = ["events", "lab", "delay", "control"]


@pytest.fixture(scope="module")
def seeded(spark: SparkSession, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    return seed_pipeline(redis_url, tmp_path_factory.mktemp("dash"))


@pytest.fixture()
def env(seeded: Seeded, monkeypatch: pytest.MonkeyPatch) -> Seeded:
    monkeypatch.setenv("REDIS_URL", seeded.cfg.redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", seeded.cfg.namespace)
    # The pages judge retirement by the wall clock: the seed's servers stay live however long the module runs (on
    # a loaded machine it ran past the default 10 minutes, and two of the three servers left the pages). The
    # retirement test sets its own.
    monkeypatch.setenv("RETIRE_AFTER", "1d")
    return seeded


@pytest.fixture()
def direct(seeded: Seeded) -> Iterator[tuple[redis.Redis, KeySchema]]:
    client = redis.Redis.from_url(seeded.cfg.redis_url, decode_responses=True)
    yield client, KeySchema(seeded.cfg.namespace)
    client.close()


def run_page(page: str | None = None, now_ms: int | None = None, **state: object) -> AppTest:
    """``page`` (a URL path) as the entry script draws it; None: the entry script itself, its navigation and its
    default page (Live ops)."""
    if page is None:
        at = AppTest.from_file(APP, default_timeout=60)
        if now_ms is not None:
            at.session_state["now_ms"] = now_ms
        for k, v in state.items():
            at.session_state[k] = v
        at.run()
    else:
        at = page_test(page, now_ms=now_ms, **state)
    assert not at.exception, [e.value for e in at.exception]
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def statuses(at: AppTest) -> list[str]:
    return [e.value for e in (*at.error, *at.warning, *at.info, *at.success)]


def n(text: str) -> int:
    return int(text.replace(",", ""))


def dirty(client: redis.Redis) -> int:
    """Redis' count of changes since the last save: any write moves it."""
    return int(client.info("persistence")["rdb_changes_since_last_save"])


# --------------------------------------------------------------------------- the seeded data itself


def test_the_seed_is_what_the_oracle_says(seeded: Seeded) -> None:
    want = oracle(seeded.lines, 60_000, 60_000, seeded.cfg.delay_ms, with_late=True)
    got = seeded.document["windows"]
    assert [{k: v for k, v in w.items() if k != "late"} for w in want["windows"]] == got
    dropped = sum(w["dropped"] for w in want["windows"])
    late = sum(w["late"] for w in want["windows"])
    assert dropped > 0 and late > 0, "the seed must exercise both dropped and late-but-accepted events"


def test_snapshot_numbers_equal_redis_and_the_oracle(seeded: Seeded, direct: tuple[redis.Redis, KeySchema]) -> None:
    client, keys = direct
    snap = read_snapshot(redis.Redis.from_url(seeded.cfg.redis_url), keys, range_ms=3_600_000, now_ms=0)
    want = oracle(seeded.lines, 60_000, 60_000, seeded.cfg.delay_ms, with_late=True)["windows"]
    got = [{"server": w.server, "start": w.start_ms, "events": w.events, "players": w.players, "dropped": w.dropped,
            "late": w.late, "final": w.final} for w in snap.windows]
    assert got == [{"server": w["server"], "start": to_ms(w["start"]), "events": w["events"],
                    "players": w["players"], "dropped": w["dropped"], "late": w["late"], "final": w["final"]}
                   for w in want]
    assert snap.totals.dropped == sum(w["dropped"] for w in want) == int(client.hget(keys.totals, "dropped"))
    assert snap.totals.late == sum(w["late"] for w in want)
    assert snap.totals.quarantined == seeded.bad
    assert snap.totals.input == len(seeded.lines) + seeded.bad
    assert [b.batch for b in snap.batches] == list(range(len(seeded.document["batches"])))
    assert all(b.duration_ms is not None for b in snap.batches), "every replayed batch carries Spark's progress"
    assert snap.stream.waiting == 0 and snap.stream.oldest_waiting_ms is None
    assert int(client.get(keys.trimmed) or 0) + client.xlen(keys.events) == snap.totals.input


def test_entries_waiting_are_counted_exactly_and_aged_by_the_oldest(seeded: Seeded,
                                                                    direct: tuple[redis.Redis, KeySchema]) -> None:
    """Entries after the last commit: as many as were appended, the oldest one's arrival gives the time behind."""
    client, keys = direct
    ids = [client.xadd(keys.events, {"e": "{}"}) for _ in range(3)]
    try:
        snap = read_snapshot(redis.Redis.from_url(seeded.cfg.redis_url), keys, range_ms=3_600_000, now_ms=0)
        assert snap.stream.waiting == 3
        assert snap.stream.oldest_waiting_ms == int(ids[0].split("-")[0])
        assert snap.stream.behind_ms(snap.stream.oldest_waiting_ms + 2_500) == 2_500
    finally:
        client.xdel(keys.events, *ids)


def test_the_time_range_keeps_windows_ending_within_it_of_the_newest_event(
        seeded: Seeded, direct: tuple[redis.Redis, KeySchema]) -> None:
    client, keys = direct
    head_ms = int(client.hget(keys.state, "max_event_us")) // 1000
    members = client.zrange(keys.windows, 0, -1)
    for range_ms in (60_000, 300_000, 900_000):
        snap = read_snapshot(redis.Redis.from_url(seeded.cfg.redis_url), keys, range_ms=range_ms, now_ms=0)
        expected = sorted(m for m in members if int(m.split(":")[1]) > head_ms - range_ms)
        assert sorted(w.key.member() for w in snap.windows) == expected


# --------------------------------------------------------------------------- the pages


def test_live_ops_shows_players_now_and_totals_as_in_redis(env: Seeded,
                                                           direct: tuple[redis.Redis, KeySchema]) -> None:
    client, keys = direct
    at = run_page()
    # the online view is folded by the same sink: its counts are on the page, equal to Redis
    shown = metrics(at)
    online = {k: int(v) for k, v in client.hgetall(keys.online_counts).items()}
    view = read_online(redis.Redis.from_url(env.cfg.redis_url), keys)  # bytes replies, as the store reads them
    assert view is not None and max(sum(p.counts.values()) for p in view.history) > 0  # players came and went
    if not sum(online.values()):  # the seed ends with C's late burst: A and B silent for minutes of arrival time
        silent = [i.value for i in at.info if i.value.startswith("Timing out: ")]
        assert silent and "A (" in silent[0] and "B (" in silent[0], [i.value for i in at.info]
    assert {s: n(shown[f"{s} · online now"]) for s in online} == online
    assert {s: client.hlen(keys.online(s)) for s in online} == online
    # the seed's events arrived minutes before the page's now: every server is silent, so the total is "as of" then
    (total,) = [label for label in shown if label.startswith("All servers · ")]
    assert total.startswith("All servers · as of ") and total.endswith(" UTC")
    assert n(shown[total]) == sum(online.values())
    # the first tab, drawn on arrival: online per minute and transitions per minute (Vega-Lite, light to draw),
    # nothing heavier; with nobody online in the last hour the first is its empty state in words
    assert at.session_state["ops_tab"] == "Now" and not at.get("plotly_chart")
    titles = {t["text"]: t["subtitle"] for t in (json.loads(c.proto.spec)["title"] for c in at.get("vega_lite_chart"))}
    assert "Logins, logouts and timeouts per minute" in titles
    assert ("Players online per minute" in titles) == any(any(m.last.values()) for m in view.minutes)
    # under each title, the span its minutes cover (of the hour asked, when they are fewer)
    first, last = view.minutes[0].minute_ms, view.minutes[-1].minute_ms
    assert set(titles.values()) == {charts.span_text(first, last, asked_ms=3_600_000)}
    assert "Events accepted" not in shown  # the windows' tab is not run until it is opened

    # over time: a day by default, and online after each batch; the day's and the highest peaks, with when
    at = run_page(ops_tab="Over time")
    assert [c.key for c in at.get("plotly_chart")] == ["online_history", "online_over_batches"]
    (peaks,) = [df.value for df in at.dataframe if "Highest ever" in df.value.columns and "" in df.value.columns]
    rows = peaks.set_index("")
    # (none today when the UTC day turned after the seed's batches: the day's peaks start with its first batch)
    assert {s: _count_or_none(rows.loc[s, "Peak today"]) for s in online} == {
        s: view.peaks[s][0] if s in view.peaks else None for s in online}
    assert int(rows.loc["All servers", "Highest ever"]) == view.peaks_ever["*"][0] >= view.peaks["*"][0]

    # the windows: distinct players per window and server, the totals, players now, over time and events
    at = run_page(ops_tab="Windows")
    shown = metrics(at)
    head_ms = int(client.hget(keys.state, "max_event_us")) // 1000
    start = head_ms // 60_000 * 60_000
    for server in ("A", "B", "C"):
        players = int(client.hget(keys.window(WindowKey(start, start + 60_000, server)), "players") or 0)
        assert players > 0
        assert n(shown[f"{server} · distinct players, current window"]) == players
    totals = client.hgetall(keys.totals)
    assert n(shown["Events accepted"]) == int(totals["events"])
    assert n(shown["Dropped late"]) == int(totals["dropped"])
    assert n(shown["Late but accepted"]) == int(totals["late"])
    assert n(shown["Quarantined"]) == int(totals["quarantined"]) == env.bad
    assert n(shown["Entries read"]) == int(totals["input"])
    assert [c.key for c in at.get("plotly_chart")] == ["players_now", "players_over_time", "events_per_window"]
    # the current window is provisional (its end is above the watermark) and the page says so
    assert any("provisional" in c.value for c in at.caption)
    (table,) = [df.value for df in at.dataframe if "Start (UTC)" in df.value.columns]
    assert len(table) == client.zcard(keys.windows)  # the default 15 minutes hold the whole seed
    assert set(table["Status"]) == {"final", "provisional"}


def test_servers_silent_for_retire_after_leave_the_live_views_named_and_the_totals_keep_them(
        env: Seeded, direct: tuple[redis.Redis, KeySchema], monkeypatch: pytest.MonkeyPatch) -> None:
    """RETIRE_AFTER set so that the two servers heard from last longest ago are retired and the third is not."""
    client, keys = direct
    seen = {k: int(v) for k, v in client.hgetall(keys.seen).items()}
    order = sorted(seen, key=lambda s: seen[s])
    now = seen[order[-1]] + 1_000
    after = now - seen[order[-2]]
    assert after > 1_000, seen  # the newest server is not retired, the others are
    monkeypatch.setenv("RETIRE_AFTER", f"{after}ms")
    gone, live = order[:-1], order[-1]
    at = run_page(now_ms=now)
    shown = metrics(at)
    online = {k: int(v) for k, v in client.hgetall(keys.online_counts).items()}
    columns = {label.split(" · ")[0] for label in shown if label.endswith("· online now")}
    assert columns == {live, "All servers"} | {s for s in gone if online.get(s)}
    (note,) = [c.value for c in at.caption if c.value.startswith("Out of the live views")]
    assert f"{len(gone)} retired (no event for" in note
    assert all(f"{s} (" in note for s in gone) and f"{live} (" not in note
    shown = metrics(run_page(now_ms=now, ops_tab="Windows"))
    assert {label.split(" · ")[0] for label in shown if "distinct players" in label} == {live}
    assert n(shown["Events accepted"]) == int(client.hget(keys.totals, "events"))  # the totals keep them
    lag = run_page("lag", now_ms=now)
    assert [m.label.split(" · ")[0] for m in lag.metric if m.label.endswith(" p95")] == [live]
    assert any(c.value.startswith("Out of the live views") for c in lag.caption)
    monkeypatch.setenv("RETIRE_AFTER", f"{now - seen[order[0]] + 1}ms")  # the oldest 1 ms short of it: all back
    back = metrics(run_page(now_ms=now, ops_tab="Windows"))
    assert {label.split(" · ")[0] for label in back if "distinct players" in label} == set(seen)


def test_watermark_page_shows_the_watermark_and_exact_drop_counts(env: Seeded,
                                                                  direct: tuple[redis.Redis, KeySchema]) -> None:
    client, keys = direct
    at = run_page("watermark")
    shown = metrics(at)
    state = client.hgetall(keys.state)
    totals = client.hgetall(keys.totals)
    assert shown["Watermark (UTC)"] == _hms(int(state["next_watermark_ms"]))
    assert shown["Max event time (UTC)"] == _hms(int(state["max_event_us"]) // 1000)
    assert n(shown["Dropped late (total)"]) == int(totals["dropped"]) > 0
    assert n(shown["Late accepted (total)"]) == int(totals["late"]) > 0
    for server in ("A", "B", "C"):
        assert n(shown[f"{server} · dropped late"]) == int(totals.get(f"dropped|{server}", 0))
    assert len(at.get("plotly_chart")) == 5


def oracle_lag(values_ms: list[float]) -> dict[str, float]:
    """p50/p95 by the statistics module's inclusive quantiles (linear, at p * (n - 1)), as Spark's percentile."""
    if len(values_ms) == 1:
        return {"p50": values_ms[0], "p95": values_ms[0], "max": values_ms[0]}
    cuts = statistics.quantiles(values_ms, n=100, method="inclusive")
    return {"p50": cuts[49], "p95": cuts[94], "max": max(values_ms)}


def test_every_batchs_lag_figures_equal_an_oracle_over_the_events_written(env: Seeded) -> None:
    """The lag figures the Lag page shows, batch by batch and server by server, from the raw events."""
    client = redis.Redis.from_url(env.cfg.redis_url)
    records = read_batches(client, KeySchema(env.cfg.namespace))
    assert len(records) > 5
    checked = 0
    for rec in records:
        lo, hi = parse_entry_id(rec["start_id"]), parse_entry_id(rec["end_id"])
        ingest: dict[str, list[float]] = {}
        processing: dict[str, list[float]] = {}
        for entry_id, ev in env.entries:
            if lo < parse_entry_id(entry_id) <= hi:
                ingest.setdefault(ev.server, []).append(parse_entry_id(entry_id)[0] - ev.event_time_us / 1000)
                processing.setdefault(ev.server, []).append(rec["batch_ts_ms"] - ev.event_time_us / 1000)
        assert set(rec["servers"]) == set(ingest)
        for server, st in rec["servers"].items():
            for name, values in (("ingest_lag_ms", ingest[server]), ("processing_lag_ms", processing[server])):
                assert st[name] == pytest.approx(oracle_lag(values), abs=1e-6), (rec["batch"], server, name)
            checked += 1
    assert checked > 10


def test_lag_page_shows_each_servers_newest_p95(env: Seeded, direct: tuple[redis.Redis, KeySchema]) -> None:
    client, keys = direct
    at = run_page("lag")
    shown = metrics(at)
    newest: dict[str, tuple[str, float]] = {}
    ingest: dict[str, float] = {}
    for bid in client.zrange(keys.batches, 0, -1):
        rec = json.loads(client.hget(keys.batch(int(bid)), "sink"))
        for server, st in rec["servers"].items():
            il, pl = st["ingest_lag_ms"]["p95"], st["processing_lag_ms"]["p95"]
            newest[server] = ("processing", pl) if pl > il else ("ingest", il)  # the worse of the two headlines
            ingest[server] = il
    assert set(newest) == {"A", "B", "C"}
    for server, (which, p95) in newest.items():
        assert shown[f"{server} · {which} p95"] == human_ms(p95)
    assert ingest["C"] > 10 * ingest["A"], "the overseas server is the slow one"
    assert any("slowest server" in c.value for c in at.caption)
    assert len(at.get("plotly_chart")) == 1


def test_health_page_shows_the_last_batch_backlog_and_quarantine(env: Seeded,
                                                                 direct: tuple[redis.Redis, KeySchema]) -> None:
    client, keys = direct
    at = run_page("health")
    shown = metrics(at)
    assert shown["Last batch"] == f"#{client.hget(keys.state, 'last_batch')}"
    assert n(shown["Quarantined (total)"]) == env.bad
    assert shown["Entries waiting"] == "0" and shown["Behind by"] == "up to date"
    assert shown["Input kept"] == f"{client.xlen(keys.events):,}"
    reasons = at.dataframe[0].value
    assert dict(zip(reasons["Reason"], reasons["Entries"], strict=True)) == {
        k.split("|", 1)[1]: f"{int(v):,}" for k, v in client.hgetall(keys.totals).items() if k.startswith("bad|")}
    assert len(at.get("plotly_chart")) == 3


def test_no_page_writes_to_redis(env: Seeded, direct: tuple[redis.Redis, KeySchema]) -> None:
    client, _ = direct
    before = dirty(client)
    for page in [None, *PAGES[1:], *LAB_PAGES]:  # Lab control writes only on a button press
        run_page(page)
    assert dirty(client) == before


def test_many_sessions_cost_one_redis_read_per_refresh_tick(env: Seeded, direct: tuple[redis.Redis, KeySchema]) -> None:
    client, _ = direct

    def commands() -> int:
        return int(client.info("stats")["total_commands_processed"])

    first = commands()
    info_cost = commands() - first  # the INFO call itself
    tick_ms = 2_000  # the default refresh
    now = (int(client.hget(KeySchema(env.cfg.namespace).state, "updated_ms")) // tick_ms + 1000) * tick_ms
    run_page(now_ms=now - tick_ms)  # the process warm, as in any run but the first
    before = commands()
    run_page(now_ms=now)  # Live ops' first tab: the snapshot, without windows
    one_session = commands() - before - info_cost
    assert one_session > 0
    before = commands()
    run_page("watermark", now_ms=now + 500)  # a page that draws windows: the tick's windows, once, besides
    windows = commands() - before - info_cost
    assert windows > 0
    before = commands()
    for page in [None, None, *PAGES[1:]]:  # five more sessions on any page within the same tick
        run_page(page, now_ms=now + 1_500)
    assert commands() - before - info_cost == 0
    before = commands()
    run_page(now_ms=now + tick_ms)  # the next tick reads again, once
    assert commands() - before - info_cost == one_session


# --------------------------------------------------------------------------- the status line and controls


def test_status_line_follows_the_injected_clock(env: Seeded, direct: tuple[redis.Redis, KeySchema]) -> None:
    client, keys = direct
    updated = int(client.hget(keys.state, "updated_ms"))
    fresh = statuses(run_page(now_ms=updated + 500))
    assert not any("Idle" in s for s in fresh)
    # the seed ends with batches of late-burst stragglers only: the watermark stands still, for less than the
    # WatermarkFlat alert's minute; a monitor judging after 1 ms makes it a stall on the status line too (with
    # ServerSilent's `after` past the seed's quiet servers, whose silence is said first otherwise)
    assert not any("watermark has not moved" in s for s in fresh)
    # the seed's events arrived minutes before its last commit (explicit entry IDs): every server is silent by
    # ServerSilent's rule, and the status line says so, with when the numbers last moved
    assert any(s.startswith("Stalled: 3 of 3 servers silent since ") for s in fresh), fresh
    with client.pipeline() as pipe:
        publish_thresholds(pipe, keys, AlertConfig(watermark_flat=WatermarkFlat(after_ms=1),
                                                   server_silent=ServerSilent(after_ms=86_400_000)))
        pipe.execute()
    # The snapshot (and the thresholds with it) is read once a refresh tick and shared by every session in the
    # process: an earlier test may hold this tick's read, from before the thresholds changed.
    loaders.forget()
    try:
        assert any("watermark has not moved" in s for s in statuses(run_page(now_ms=updated + 501)))
    finally:
        client.hdel(keys.alerts_monitor, THRESHOLDS_FIELD)
        loaders.forget()
    later = statuses(run_page(now_ms=updated + 3_600_000))  # every server silent an hour, players on them
    assert any(s.startswith("Stalled: 3 of 3 servers silent") for s in later), later


def test_time_range_and_pause_controls(env: Seeded, direct: tuple[redis.Redis, KeySchema]) -> None:
    client, keys = direct
    head_ms = int(client.hget(keys.state, "max_event_us")) // 1000
    members = client.zrange(keys.windows, 0, -1)
    at = run_page(ops_tab="Windows")
    at.segmented_control(key="range").set_value("5 min").run()
    assert not at.exception
    expected = [m for m in members if int(m.split(":")[1]) > head_ms - 300_000]
    (table,) = [df.value for df in at.dataframe if "Start (UTC)" in df.value.columns]
    assert 0 < len(table) == len(expected) < len(members)
    assert view_settings_label(at) == "View: 5 min · every 2 s"
    at.toggle(key="paused").set_value(True).run()
    assert any(c.value.startswith("Paused") for c in at.caption)
    assert view_settings_label(at) == "View: 5 min · paused"


def view_settings_label(at: AppTest) -> str:
    """The label of the sidebar's popover holding the shared controls (the view they set, while it is closed)."""
    (label,) = [b.proto.popover.label for b in at.sidebar.children.values() if b.type == "popover"]
    return label


def test_unreachable_redis_is_a_status_message_not_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()  # nobody listens there
    monkeypatch.setenv("REDIS_URL", f"redis://:s3cret@127.0.0.1:{port}/0")
    for page in [None, *PAGES[1:], *LAB_PAGES]:
        at = run_page(page)
        errors = [e.value for e in at.error]
        assert len(errors) == 1 and "is unreachable" in errors[0]
        shown = errors[0].replace("\\", "").replace("\u2060", "")  # the Markdown text as it reads
        assert "s3cret" not in shown and ":***@" in shown and "redis://:***@127.0.0.1" in shown
        assert not at.get("plotly_chart")


def test_a_config_error_is_a_status_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPELINE_NAMESPACE", "no spaces allowed")
    at = run_page()
    assert [e.value for e in at.error] == [
        "Configuration error: PIPELINE_NAMESPACE 'no spaces allowed' must be 1-64 characters of letters, digits, "
        "'_', '-', '.', optionally in braces at its start ('{wm}', for a Redis Cluster)"]


def test_an_empty_namespace_says_how_to_start(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", "nothing-here")
    at = run_page()
    assert any("Start the pipeline" in s for s in statuses(at))
    assert not at.get("plotly_chart")


def _hms(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%H:%M:%S")


def test_the_pages_mark_where_redis_came_back_empty(env: Seeded, direct: tuple[redis.Redis, KeySchema]) -> None:
    client, keys = direct
    batches = [int(b) for b in client.zrange(keys.batches, 0, -1)]
    lost = batches[len(batches) // 2]
    client.hset(keys.state, "lost_at_batch", lost)  # what the job records when it finds Redis empty
    try:
        loaders.load_snapshot.clear()  # read afresh: a test at the same refresh tick may have cached the snapshot
        now = int(client.hget(keys.state, "updated_ms")) + 7_777
        at = run_page("watermark", now_ms=now)
        assert any(f"Totals count from batch {lost}" in c.value for c in at.caption)
        assert any(f"History lost at batch {lost}" in s for s in statuses(at))
        traces = [t for c in at.get("plotly_chart") for t in json.loads(c.proto.spec)["data"]]
        assert sum(t.get("name") == f"history lost (batch {lost})" for t in traces) == 2  # watermark, dropped
        at = run_page(now_ms=now, ops_tab="Windows")
        assert any(f"Counted from batch {lost}" in c.value for c in at.caption)
    finally:
        client.hdel(keys.state, "lost_at_batch")


def scrape(url: str, namespace: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """/metrics served by prometheus_client's own HTTP server, as the monitor serves it, parsed back."""
    from prometheus_client import start_http_server
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client.registry import CollectorRegistry

    from streaming.apps.monitor.metrics import StackCollector
    from streaming.store.observe import lane_keys, read_stack

    client, keys = redis.Redis.from_url(url), KeySchema(namespace)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StackCollector(lambda: (read_stack(client, keys, lane_keys(client, keys), 0, None, 0), {})))
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
    finally:
        server.shutdown()
        thread.join()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_metrics_equal_the_dashboard_and_the_oracle(seeded: Seeded) -> None:
    """Every counter /metrics serves is the dashboard's own total, and the oracle's count of the rule."""
    m = scrape(seeded.cfg.redis_url, seeded.cfg.namespace)
    snap = read_snapshot(redis.Redis.from_url(seeded.cfg.redis_url), KeySchema(seeded.cfg.namespace),
                         range_ms=3_600_000, now_ms=0)
    want = oracle(seeded.lines, 60_000, 60_000, seeded.cfg.delay_ms, with_late=True)["windows"]
    assert m[("wm_redis_up", ())] == 1
    for server, t in snap.totals.servers.items():
        labels = (("pipeline", "main"), ("server", server))
        assert m[("wm_events_accepted_total", labels)] == t.events == sum(
            w["events"] for w in want if w["server"] == server)
        assert m[("wm_events_dropped_late_total", labels)] == t.dropped == sum(
            w["dropped"] for w in want if w["server"] == server)
        assert m[("wm_events_accepted_late_total", labels)] == t.late == sum(
            w["late"] for w in want if w["server"] == server)
    assert sum(v for (name, _), v in m.items() if name == "wm_quarantined_entries_total") == seeded.bad
    assert m[("wm_input_entries_total", ())] == len(seeded.lines) + seeded.bad == snap.totals.input
    state = snap.state
    assert state is not None
    assert m[("wm_watermark_seconds", (("pipeline", "main"),))] == state.next_watermark_ms / 1000
    assert m[("wm_last_batch", (("pipeline", "main"),))] == state.last_batch
    assert m[("wm_behind_entries", (("pipeline", "main"),))] == 0
    count = m[("wm_batch_duration_seconds_count", (("pipeline", "main"),))]
    assert count == len(snap.batches) and m[("wm_batch_duration_seconds_bucket", (("le", "+Inf"),
                                                                                  ("pipeline", "main")))] == count


def test_live_ops_shows_what_the_monitor_has_firing(env: Seeded, direct: tuple[redis.Redis, KeySchema]) -> None:
    """A wall screen on the headline page sees an alert without a click; without one it shows nothing more."""
    from streaming.alerting.conditions import Finding
    from streaming.alerting.config import Timing
    from streaming.alerting.lifecycle import step_all
    from streaming.store.alert_store import apply_decision

    client, keys = direct
    now = int(client.hget(keys.state, "updated_ms"))
    assert not run_page(now_ms=now).error
    d = step_all({}, [Finding("players_drop", "B", True, 80.0, "B: 10 players online, down 80 % from 50")], now,
                 {"players_drop": Timing(0, 0)})
    apply_decision(redis.Redis.from_url(env.cfg.redis_url), keys, d, now, outbox=False)
    try:
        at = run_page(now_ms=now + 60_000)  # the next tick: read afresh
        assert [e.value for e in at.error] == ["1 alert firing: PlayersDrop (server B)."]
    finally:
        client.delete(keys.alerts, keys.alerts_history, keys.alerts_monitor)


def _count_or_none(v: object) -> int | None:
    """A table cell of a count: None for an empty one (pandas shows it as None or NaN)."""
    return None if v is None or v != v else int(v)  # type: ignore[call-overload]
