"""The Lab control page under Streamlit's AppTest against a real Redis, and its status messages.

The page is the dashboard's one writer: it writes ``{ns}:control`` on a button
press and nothing otherwise (Redis' change counter proves both), and a
read-only Redis user gets a warning, not a traceback.
"""

from __future__ import annotations

import json
import threading
import uuid
from urllib.parse import urlsplit

import pytest
import redis
from streamlit.testing.v1 import AppTest

from dashboard.screens.control.model import generator_line
from dashboard.status import Level
from dashboard.testing import page_test
from streaming.apps.follow import Follower
from streaming.apps.redis_server import free_port
from streaming.rules.scenarios import SCENARIOS
from streaming.schema.clock import ManualClock
from streaming.schema.keys import KeySchema
from streaming.schema.records import Control, GeneratorStatus
from streaming.store.control_store import read_control, write_control

PAGE = "control"
NOW = 1_800_000_000_000


@pytest.fixture()
def keys(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> KeySchema:
    ns = f"lab-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", ns)
    return KeySchema(ns)


def dirty(client: redis.Redis) -> int:
    """Redis' count of changes since the last save: any write moves it."""
    return int(client.info("persistence")["rdb_changes_since_last_save"])


def open_page(now_ms: int = NOW) -> AppTest:
    at = page_test(PAGE, now_ms=now_ms)
    assert not at.exception, [e.value for e in at.exception]
    return at


def messages(at: AppTest) -> list[str]:
    return [e.value for e in (*at.error, *at.warning, *at.info, *at.success)]


def test_choosing_a_scenario_and_pressing_apply_writes_the_control_hash(rd: redis.Redis, keys: KeySchema) -> None:
    before = dirty(rd)
    at = open_page()
    assert dirty(rd) == before, "opening the page must not write"
    assert any("No generator running" in m for m in messages(at))
    assert at.selectbox(key="lab_scenario").options == [f"{n} — {s.description}" for n, s in SCENARIOS.items()]
    at.selectbox(key="lab_scenario").set_value("idle-server").run()
    at.number_input(key="lab_rate").set_value(250.0).run()
    assert dirty(rd) == before, "changing a widget must not write"
    at.button(key="lab_apply").click().run()
    assert not at.exception
    assert rd.hgetall(keys.control) == {"scenario": "idle-server", "rate": "250.0", "rev": "1",
                                        "updated_ms": str(NOW)}
    assert "Saved as rev 1." in messages(at)
    assert any("`idle-server` at 250 events/s" in c.value for c in at.caption)  # the page shows the new request
    at.button(key="lab_stop").click().run()
    assert read_control(rd, keys) == Control("idle-server", 250.0, False, None, rev=2, updated_ms=NOW)
    at.button(key="lab_start").click().run()
    assert read_control(rd, keys).running is True  # type: ignore[union-attr]


def test_apply_delay_writes_delay_ms_and_a_bad_duration_writes_nothing(rd: redis.Redis, keys: KeySchema) -> None:
    at = open_page()
    assert at.text_input(key="lab_delay").value == "30s"  # WATERMARK_DELAY's default until one is requested
    at.text_input(key="lab_delay").input("20s").run()
    at.button(key="lab_apply_delay").click().run()
    assert read_control(rd, keys) == Control(delay_ms=20_000, rev=1, updated_ms=NOW)
    before = dirty(rd)
    at.text_input(key="lab_delay").input("soon").run()
    at.button(key="lab_apply_delay").click().run()
    assert not at.exception
    assert any(m.startswith("Not saved: invalid duration 'soon'") for m in messages(at))
    assert dirty(rd) == before


def test_the_page_shows_the_jobs_own_delay_not_this_dashboards(rd: redis.Redis, keys: KeySchema,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The job runs with WATERMARK_DELAY=10s, the dashboard was started without it (two processes, two
    environments): the page says 10 s, read from what the job committed."""
    monkeypatch.delenv("WATERMARK_DELAY", raising=False)
    rd.hset(keys.state, mapping={"last_batch": "4", "watermark_ms": "0", "next_watermark_ms": "0", "max_event_us": "",
                                 "committed_id": "1-0", "trigger_ms": "1000", "updated_ms": str(NOW),
                                 "params": '{"window_ms": 60000, "slide_ms": 60000, "delay_ms": 10000}'})
    at = open_page()
    assert at.text_input(key="lab_delay").value == "10s"
    assert any(c.value == "The job uses 10s (its last commit). Nothing requested here: it keeps its own "
                          "WATERMARK_DELAY." for c in at.caption), [c.value for c in at.caption]
    assert not any("30s" in c.value for c in at.caption)


def test_a_read_only_redis_user_gets_a_warning_not_a_traceback(r: redis.Redis, redis_url: str, keys: KeySchema,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    name, password = f"dash-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    r.acl_setuser(name, enabled=True, passwords=[f"+{password}"], keys=[f"{keys.namespace}:*"],
                  commands=["-@all", "+@read", "+@connection"])  # what docs/operations.md recommends for the dashboard
    parts = urlsplit(redis_url)
    monkeypatch.setenv("REDIS_URL", f"redis://{name}:{password}@{parts.hostname}:{parts.port}/0")
    try:
        write_control(r, keys, by="test", role="operator", scenario="clock-skew", rate=500, now_ms=NOW)
        at = open_page()
        assert any("`clock-skew` at 500 events/s" in c.value for c in at.caption)  # it can read
        before = dirty(r)
        at.selectbox(key="lab_scenario").set_value("steady").run()
        at.button(key="lab_apply").click().run()
        assert not at.exception
        warnings = [w.value for w in at.warning]
        assert any(w.startswith("This dashboard's Redis user cannot change the control settings: NOPERM ")
                   for w in warnings), warnings
        assert dirty(r) == before and read_control(r, keys).scenario == "clock-skew"  # type: ignore[union-attr]
    finally:
        r.acl_deluser(name)


def test_the_page_shows_when_the_generator_picked_up_the_request(r: redis.Redis, redis_url: str,
                                                                  keys: KeySchema) -> None:
    """The real follower applies what the page saved, and the page says so."""
    follower = Follower(r, keys, clock=ManualClock(NOW * 1000), scenario="steady", rate=100, seed=1,
                        reconnect=lambda: r, stop=threading.Event())
    follower.check()  # a generator is running: it seeded rev 1 and applied it
    at = open_page(NOW + 100)
    assert "Generator running at 100 events/s" in " ".join(m for m in messages(at))
    at.selectbox(key="lab_scenario").set_value("outage-and-backfill").run()
    at.button(key="lab_apply").click().run()
    assert any("Waiting for the generator to pick up rev 2 (it has applied rev 1" in m for m in messages(at))
    follower.check()
    at = open_page(NOW + 2_000)  # the next refresh tick (reads are shared per tick)
    assert any(m.startswith("Generator running at 100 events/s · `outage-and-backfill`") and "rev 2 applied" in m
               for m in messages(at)), messages(at)


def test_unreachable_redis_is_a_status_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", f"redis://:s3cret@127.0.0.1:{free_port()}/0")
    at = open_page()
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "is unreachable" in errors[0] and "s3cret" not in errors[0]


def status(**kw: object) -> GeneratorStatus:
    base = {"state": "running", "scenario": "steady", "rate": 1000.0, "rev": 3, "written": 12_345,
            "since_ms": NOW - 60_000, "updated_ms": NOW - 400, "error": "", "achieved": 998.0}
    return GeneratorStatus(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(("control", "gen", "level", "text"), [
    # no generator has ever reported
    (Control("steady", 1000.0, True, rev=3), None, Level.WARNING, "No generator running: none has reported yet"),
    # the generator exited cleanly (SIGTERM)
    (Control("steady", 1000.0, True, rev=3), status(state="exited"), Level.WARNING,
     "No generator running: the last one exited at"),
    # it was killed: its status stopped changing
    (Control("steady", 1000.0, True, rev=3), status(updated_ms=NOW - 6_000), Level.WARNING,
     "No generator running: the last one reported 6.0 s ago"),
    # a value typed into Redis by hand
    (Control("steady", 1000.0, True, rev=3), status(error="scenario 'x' is unknown"), Level.ERROR,
     "The generator cannot apply the control settings and keeps its last ones (rev 3): scenario 'x' is unknown"),
    # a request not picked up yet
    (Control("idle-server", 1000.0, True, rev=4), status(), Level.INFO,
     "Waiting for the generator to pick up rev 4 (it has applied rev 3"),
    # caught up and running
    (Control("steady", 1000.0, True, rev=3), status(), Level.OK,
     "Generator running at 1,000 events/s (achieved 998/s) · `steady` since 07:59:00 UTC · rev 3 applied · "
     "12,345 events written"),
    # behind its schedule: it or Redis lacks CPU
    (Control("steady", 1000.0, True, rev=3), status(achieved=700.0, lag_ms=2_500), Level.WARNING,
     "Generator behind its schedule by 2.5 s (it or Redis lacks CPU): asked for 1,000 events/s, writing 700/s"),
    # writing less than asked because the scenario holds events back (a late burst): on schedule, fine
    (Control("late-burst", 1000.0, True, rev=3), status(scenario="late-burst", achieved=880.0, lag_ms=0),
     Level.OK, "(achieved 880/s)"),
    # caught up and stopped
    (Control("steady", 1000.0, False, rev=3), status(state="stopped"), Level.INFO,
     "Generator stopped since 07:59:00 UTC (rev 3 applied)"),
])
def test_generator_line(control: Control, gen: GeneratorStatus | None, level: Level, text: str) -> None:
    line = generator_line(control, gen, NOW)
    assert line.level == level and text in line.text, line


# --------------------------------------------------------------------------- Choosing the delay


def seed_tradeoff(rd: redis.Redis, keys: KeySchema, buckets: dict[str, dict[int, int]]) -> None:
    """The job's state (delay 30 s) and a trade-off histogram: per server, bucket -> pairs (a pair in bucket b is
    dropped by the first b grid delays)."""
    from streaming.rules.tradeoff import GRID_FIELD, GRID_MS, hist_field

    rd.hset(keys.state, mapping={"last_batch": "4", "watermark_ms": str(NOW - 60_000),
                                 "next_watermark_ms": str(NOW - 30_000), "max_event_us": str(NOW * 1000),
                                 "committed_id": "1-0", "trigger_ms": "1000", "updated_ms": str(NOW),
                                 "params": '{"window_ms": 60000, "slide_ms": 60000, "delay_ms": 30000}'})
    rd.hset(keys.tradeoff, mapping={GRID_FIELD: json.dumps(list(GRID_MS)),
                                    **{hist_field(s, b): str(n) for s, bs in buckets.items() for b, n in bs.items()}})


def delay_page() -> tuple[dict[str, str], list[dict], list[str]]:
    at = page_test("delay", now_ms=NOW)
    assert not at.exception, [e.value for e in at.exception]
    per_server = at.dataframe[0].value.to_dict("records")
    return {m.label: m.value for m in at.metric}, per_server, [i.value for i in at.info]


def test_with_enough_late_pairs_the_delay_page_recommends_the_smallest_that_keeps_the_target(
        rd: redis.Redis, keys: KeySchema) -> None:
    # A: 20,000 pairs on time, 50 dropped by 0-2 s, 5 by 0-15 s (bucket 6): 99.9% allows floor(20.055) = 20
    # dropped, so 5 s (5 dropped) is the smallest; B: 2 late pairs only, too few to say anything of B alone
    seed_tradeoff(rd, keys, {"A": {0: 20_000, 3: 50, 6: 5}, "B": {0: 30_000, 1: 2}})
    metrics, per_server, infos = delay_page()
    # all: 50,057 pairs, 57 late; allowed floor(50.057) = 50: 1 s and 2 s drop 55 (buckets > 1, > 2), 5 s drops 5
    assert metrics["Recommended delay for 99.9%"] == "5.0 s"
    assert {r["Server"]: r["Recommended delay"] for r in per_server} == {"A": "5.0 s", "B": "too few late events"}
    assert not any(i.startswith("Keep the current delay") for i in infos)


def test_with_no_late_pairs_the_delay_page_keeps_the_current_delay(rd: redis.Redis, keys: KeySchema) -> None:
    seed_tradeoff(rd, keys, {"A": {0: 40_000}, "B": {0: 30_000}})
    metrics, per_server, infos = delay_page()
    assert metrics["Recommended delay for 99.9%"] == "keep 30.0 s"  # never "0 s" from nothing late
    assert {r["Recommended delay"] for r in per_server} == {"too few late events"}
    assert any(i.startswith("Keep the current delay: too few late events to recommend a delay: 0 of 70,000")
               for i in infos), infos
