"""Every dashboard page under Streamlit's AppTest, against a real Redis seeded by the real pipeline.

The numbers each page shows are checked against Redis read directly (not
through ``streaming.store.views.snapshot``) and against the independent oracle, and the whole
run must leave Redis untouched: the dashboard never writes.
"""

from __future__ import annotations

import json
import statistics

import pytest
import redis

from dashboard import charts
from streaming.schema.keys import KeySchema, WindowKey
from streaming.store.report import read_batches
from streaming.store.views.online import read_online
from tests.seed import Seeded
from tests.ui.app.apptest import LAB_PAGES, PAGES, dirty, metrics, n, run_page
from watermark_client.events import parse_entry_id
from watermark_client.timeutil import human_ms

pytestmark = pytest.mark.spark

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


def _hms(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%H:%M:%S")


def _count_or_none(v: object) -> int | None:
    """A table cell of a count: None for an empty one (pandas shows it as None or NaN)."""
    return None if v is None or v != v else int(v)  # type: ignore[call-overload]
