"""The seeded data itself, the snapshot the pages draw and /metrics, against Redis read directly and the oracle."""

from __future__ import annotations

import urllib.request

import pytest
import redis

from streaming.apps.redis_server import free_port
from streaming.schema.keys import KeySchema
from streaming.store.views.snapshot import read_snapshot
from tests.oracle import oracle, to_ms
from tests.seed import Seeded

pytestmark = pytest.mark.spark

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
