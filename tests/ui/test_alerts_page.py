"""The Alerts page under Streamlit's AppTest against a real Redis holding what a monitor wrote, and its rows and
timeline as tables (no Spark)."""

from __future__ import annotations

import uuid

import pytest
import redis
from streamlit.testing.v1 import AppTest

from dashboard.alertview import Span, alert_marks, alert_rows, spans
from dashboard.testing import page_test
from dashboard.text import md
from streaming.alerting.conditions import Finding, watching
from streaming.alerting.config import AlertConfig, Timing
from streaming.alerting.lifecycle import AlertState, Notice, step_all
from streaming.schema.keys import KeySchema
from streaming.store.alert_store import acknowledge, apply_decision, record_failure

T0 = 1_800_000_000_000
TIMING = {r: Timing(0, 0) for r in ("server_silent", "players_drop", "late_drops", "clock_ahead")}


def notice(status: str, subject: str, start: int, at: int) -> Notice:
    return Notice(status=status, rule="clock_ahead", subject=subject, starts_at_ms=start, at_ms=at,  # type: ignore[arg-type]
                  ends_at_ms=at if status == "resolved" else None)


@pytest.mark.parametrize(("history", "firing", "want"), [
    # a firing paired with its resolve by alert and start
    ([notice("firing", "B", T0, T0), notice("resolved", "B", T0, T0 + 9_000)], [],
     [Span("ClockAhead · B", "warning", T0, T0 + 9_000, False)]),
    # still firing: reaches now
    ([notice("firing", "B", T0, T0)], [], [Span("ClockAhead · B", "warning", T0, T0 + 60_000, True)]),
    # fired over a day ago, resolved since: starts a day ago
    ([notice("resolved", "B", T0 - 90_000_000, T0)], [],
     [Span("ClockAhead · B", "warning", T0 + 60_000 - 86_400_000, T0, False)]),
    # two firings of one alert stay two spans
    ([notice("firing", "A", T0, T0), notice("resolved", "A", T0, T0 + 1_000), notice("firing", "A", T0 + 5_000,
                                                                                     T0 + 5_000)], [],
     [Span("ClockAhead · A", "warning", T0, T0 + 1_000, False),
      Span("ClockAhead · A", "warning", T0 + 5_000, T0 + 60_000, True)]),
])
def test_spans_pair_each_firing_with_its_resolve(history: list[Notice], firing: list[AlertState],
                                                 want: list[Span]) -> None:
    assert spans(history, firing, T0 + 60_000) == want


def test_alerts_over_the_time_charts_are_one_range_per_alert_and_overlap() -> None:
    history = [notice("firing", f"eu-{i:03d}", T0 + i * 1_000, T0 + i * 1_000) for i in range(300)]
    history += [notice("resolved", f"eu-{i:03d}", T0 + i * 1_000, T0 + 600_000) for i in range(300)]
    history += [notice("firing", "us-001", T0 + 3_600_000, T0 + 3_600_000),
                notice("resolved", "us-001", T0 + 3_600_000, T0 + 3_660_000)]
    marks = alert_marks(spans(history, [], T0 + 7_200_000, T0 - 86_400_000))
    assert [(m.start_ms, m.end_ms, m.label) for m in marks] == [
        (T0, T0 + 600_000, "ClockAhead · 300 servers"),  # an outage of 300 servers: one range
        (T0 + 3_600_000, T0 + 3_660_000, "ClockAhead · us-001")]  # a later firing: its own
    # a week back: a firing resolved before the range is not drawn
    assert alert_marks(spans(history, [], T0 + 7_200_000, T0 + 3_000_000))[0].label == "ClockAhead · us-001"


def test_the_timeline_draws_an_outage_of_300_servers_as_one_row() -> None:
    from dashboard.alertview import timeline

    history = [notice("firing", f"eu-{i:03d}", T0 + i * 1_000, T0 + i * 1_000) for i in range(300)]
    history += [notice("resolved", f"eu-{i:03d}", T0 + i * 1_000, T0 + 600_000) for i in range(300)]
    history += [notice("firing", "us-001", T0 + 3_600_000, T0 + 3_600_000)]
    fig = timeline(spans(history, [], T0 + 7_200_000, T0 - 86_400_000), T0 + 7_200_000)
    rows = [y for t in fig.data for y in t.y]
    assert rows == ["ClockAhead · 300 servers", "ClockAhead · us-001"]
    assert [c[1] for t in fig.data for c in t.customdata] == ["08:10:00 UTC", "still firing"]
    # the title asks for a day; under it, the two hours the firings cover (issue 62, item 7)
    assert fig.layout.title.subtitle.text == "08:00–10:00 UTC · 2 h 0 min of data (24 h asked)"
    assert fig.layout.title.text == "Alerts fired in the last day" and fig.layout.xaxis.tickformat == "%H:%M"


def test_rows_put_critical_first_and_say_since_when() -> None:
    d = step_all({}, [Finding("server_silent", "B", True, 5.0, "no event from B for 5s"),
                      Finding("players_drop", "C", True, 80.0, "C: 10 players online, down 80 %")], T0, TIMING)
    rows = alert_rows(list(d.states.values()), T0 + 65_000)
    assert [r["Alert"] for r in rows] == ["PlayersDrop", "ServerSilent"]
    assert rows[0]["Since"] == "08:00:00 UTC (1 min 5 s)" and rows[0]["About"] == "server C"
    assert set(rows[0]) == {"Alert", "Severity", "About", "Since", "What"}


@pytest.fixture()
def seeded_alerts(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> KeySchema:
    keys = KeySchema(f"page-{uuid.uuid4().hex[:8]}")
    client = redis.Redis.from_url(redis_url)
    silent = step_all({}, [Finding("server_silent", "A", True, 70.0, "no event from A for 1m10s")], T0 - 600_000,
                      TIMING)
    ((first_id, first),) = apply_decision(client, keys, silent, T0 - 600_000, outbox=True)
    resolved = step_all(silent.states, [Finding("server_silent", "A", False)], T0 - 300_000, TIMING)
    apply_decision(client, keys, resolved, T0 - 300_000, outbox=True)
    now = step_all(resolved.states, [
        Finding("players_drop", "B", True, 80.0, "B: 70 players online, down 80 % from 350 within 5m"),
        Finding("players_drop", "C", True, 100.0, "C: 0 players online, down 100 % from 90 within 5m",
                held="no event from C for 45s: its players time out while its events are delayed")], T0, TIMING)
    apply_decision(client, keys, now, T0, outbox=True)
    client.hset(keys.alerts_webhook, mapping={"url": "http://hooks.example/alerts", "dropped": 1200})
    client.hset(keys.alerts_monitor, "watching", watching(AlertConfig()))
    acknowledge(client, keys, first_id, first.id, T0 - 599_000)
    record_failure(client, keys, "HTTP Error 503: Service Unavailable", T0 - 1_000)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", keys.namespace)
    return keys


def run_alerts(now_ms: int) -> AppTest:
    at = page_test("alerts", now_ms=now_ms)
    assert not at.exception, at.exception
    return at


def test_the_page_shows_firing_held_history_and_the_webhook(seeded_alerts: KeySchema) -> None:
    at = run_alerts(T0 + 2_000)
    assert [e.value for e in at.error] == ["1 alert firing: PlayersDrop (server B)."]
    firing, held, history = (df.value for df in at.dataframe)
    assert list(firing["Alert"]) == ["PlayersDrop"] and list(firing["About"]) == ["server B"]
    assert list(held["Held because"]) == ["no event from C for 45s: its players time out while its events are "
                                          "delayed"]
    assert list(history["Event"]) == ["fired", "resolved after 5 min", "fired"]
    captions = " ".join(c.value for c in at.caption)
    assert f"Webhook {md('http://hooks.example/alerts')}: 1 delivered, 2 waiting to be delivered, 1,200 never sent: " \
           "the receiver refused for longer than the outbox holds (10,000 notices; the history keeps them); last " \
           f"attempt failed at 07:59:59 UTC: {md('HTTP Error 503: Service Unavailable')} (retrying with backoff)." \
           in captions
    assert "Watching for PlayersDrop: down over 50 % within 5 min, not counting players who moved to another " \
           "server (RegionPlayersDrop: a region's sum) · ServerSilent: 1 min with players online" in captions
    for df in (firing, held, history):  # operator words, not field names
        assert not [c for c in df.columns if "_" in c], df.columns


def test_a_stopped_monitor_is_said_in_words(seeded_alerts: KeySchema) -> None:
    at = run_alerts(T0 + 600_000)
    assert any("The monitor last evaluated at 08:00:00 UTC, 10 min ago: is `wm-monitor` running?" in w.value
               for w in at.warning)


def test_no_monitor_yet_and_nothing_fired_are_said_in_words(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", f"none-{uuid.uuid4().hex[:6]}")
    at = run_alerts(T0)
    assert [w.value for w in at.warning] == [
        "No monitor has evaluated alerts for this pipeline yet. `./run.sh` starts one (`wm-monitor`)."]
    assert [i.value for i in at.info] == ["No alert has fired in the last day."]


def test_the_lab_control_changes_show_beside_the_annotations_with_who_and_role(
        seeded_alerts: KeySchema, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from streaming.store.control_store import write_control

    client = redis.Redis.from_url(redis_url)
    write_control(client, seeded_alerts, by="ana@ops.example.com", role="operator", delay_ms=20_000, now_ms=T0)
    write_control(client, seeded_alerts, by="<b>root</b>@build", role="Redis credential (wm-control)",
                  scenario="steady", now_ms=T0 + 1_000)
    monkeypatch.setenv("LAB_CONTROL", "off")
    at = run_alerts(T0 + 2_000)
    audit = at.dataframe[-1].value
    assert list(audit["Who"]) == ["<b>root</b>@build", "ana@ops.example.com"]  # newest first, as text
    assert list(audit["Role"]) == ["Redis credential (wm-control)", "operator"]
    assert list(audit["Change"]) == ['{"scenario": "steady"}', '{"delay_ms": "20000"}']
    assert list(audit["When (UTC)"])[-1].startswith("2027-01-15T08:00:00")
    assert any("Lab control is off here (`LAB_CONTROL`): the job follows none of these." in c.value
               for c in at.caption)


def test_the_firing_line_groups_servers_under_their_alert() -> None:
    from dashboard.alertview import firing_text

    d = step_all({}, [Finding("players_drop", s, True) for s in "CAB"]
                 + [Finding("clock_ahead", "B", True), Finding("late_drops", "C", False)], T0, TIMING)
    assert firing_text(list(d.states.values())) == (
        "4 alerts firing: PlayersDrop (servers A, B, C), ClockAhead (server B).")
    assert firing_text([]) is None


def test_the_firing_line_names_eight_servers_of_an_outage_and_counts_the_rest() -> None:
    from dashboard.alertview import firing_text

    d = step_all({}, [Finding("players_drop", f"eu-{i:03d}", True) for i in range(300)], T0, TIMING)
    assert firing_text(list(d.states.values())) == (
        "300 alerts firing: PlayersDrop (servers eu-000, eu-001, eu-002, eu-003, eu-004, eu-005, eu-006, eu-007 "
        "and 292 more).")


def test_the_firing_line_counts_silent_servers_by_region() -> None:
    """ServerSilent is one alert a region (streaming.alerting.conditions.servers_silent): the line gives the counts,
    the largest first, never a list of thousands of servers."""
    from dashboard.alertview import alert_rows, firing_text

    d = step_all({}, [Finding("server_silent", "as", True, 38.0), Finding("server_silent", "eu", True, 1.0),
                      Finding("server_silent", "", True, 2.0),
                      Finding("server_silent", "na", True, 1.0, servers=("na-4",))], T0, TIMING)
    firing = list(d.states.values())
    assert firing_text(firing) == ("4 alerts firing: ServerSilent (38 servers in as, 2 servers, na-4 in na, "
                                   "1 server in eu).")  # a region's one silent server named, as the metric does
    assert sorted(r["About"] for r in alert_rows(firing, T0)) == ["region as", "region eu", "region na",
                                                                   "servers without a region"]


def test_a_regions_alert_is_named_by_its_region() -> None:
    from dashboard.alertview import alert_rows, firing_text

    d = step_all({}, [Finding("region_players_drop", "eu", True), Finding("players_drop", "eu-001", True)], T0,
                 {**TIMING, "region_players_drop": TIMING["players_drop"]})
    firing = list(d.states.values())
    assert firing_text(firing) == "2 alerts firing: PlayersDrop (server eu-001), RegionPlayersDrop (region eu)."
    assert sorted(r["About"] for r in alert_rows(firing, T0)) == ["region eu", "server eu-001"]
