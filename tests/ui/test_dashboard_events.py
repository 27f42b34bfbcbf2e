"""The Events page against a real Redis seeded by the real pipeline (sliding windows, late bursts).

Its per-status counts are checked against the independent oracle (``tests/oracle.py``, from the raw
events and the rules alone), and the view's dropped (event, window) pairs, summed per window, against
the ``dropped`` field the sink wrote into each window hash.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
import redis
from pyspark.sql import SparkSession
from streamlit.testing.v1 import AppTest

from dashboard.testing import page_test
from streaming.apps.redis_server import free_port
from streaming.rules.eventview import Status, dropped_pairs
from streaming.rules.late import LateEvent
from streaming.schema.keys import KeySchema, WindowKey
from streaming.store.commit import trim_counted
from streaming.store.views.events import find_player, read_events
from tests.oracle import event_status, judged
from tests.seed import BAD_PAYLOADS, Seeded, seed_pipeline
from watermark_client.events import Event, parse_entry_id

pytestmark = pytest.mark.spark

PAGE = "events"
WINDOW, SLIDE = 60_000, 30_000
LABELS = {"on_time": "On time", "late_accepted": "Late but accepted", "partly_dropped": "Partly dropped",
          "dropped": "Dropped", "pending": "Pending"}


class World:
    """The seeded namespace plus entries written after the last batch: pending, one of them bad."""

    def __init__(self, seeded: Seeded, pending: list[tuple[str, Event]], pending_bad: int) -> None:
        self.seeded = seeded
        self.pending = pending
        self.pending_bad = pending_bad
        self.keys = KeySchema(seeded.cfg.namespace)

    def judged(self) -> list[tuple[dict, int, list[tuple[int, int, bool]]]]:
        """Every committed event by the oracle: its line (with ``entry``), the watermark met, its windows."""
        lines = [dict(line, entry=entry_id) for line, (entry_id, _) in zip(self.seeded.lines, self.seeded.entries,
                                                                             strict=True)]
        return judged(lines, WINDOW, SLIDE, self.seeded.cfg.delay_ms)

    def expected(self, server: str | None, from_id: tuple[int, int] = (0, 0)) -> dict[str, int]:
        """Per-status counts by the oracle: committed events judged from the raw lines and the rules,
        then every entry written after the last batch as pending. Below ``from_id`` (trimmed from the
        stream) only the late events count: they are kept."""
        counts = Counter({k: 0 for k in LABELS})
        for line, wm, windows in self.judged():
            status = event_status(line, wm, windows)
            below = parse_entry_id(line["entry"]) < from_id
            if (server is None or line["server"] == server) and (not below or status != "on_time"):
                counts[status] += 1
        counts["pending"] = sum(1 for entry_id, ev in self.pending
                                if (server is None or ev.server == server) and parse_entry_id(entry_id) >= from_id)
        return dict(counts)


@pytest.fixture(scope="module")
def world(spark: SparkSession, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> World:
    seeded = seed_pipeline(redis_url, tmp_path_factory.mktemp("events"), slide_ms=SLIDE, minutes_ago=5)
    keys = KeySchema(seeded.cfg.namespace)
    client = redis.Redis.from_url(redis_url)
    last_ms = parse_entry_id(client.xrevrange(keys.events, count=1)[0][0])[0]
    # Written after the job's last batch, so never processed: a late one, an on-time one per server, a bad one.
    pending = [(f"{last_ms + 1_000 + i}-0", Event(s, f"late-{s}", (last_ms - 30 * 60_000) * 1000, "heartbeat"))
               for i, s in enumerate("ABC")]
    pending.append((f"{last_ms + 2_000}-0", Event("A", "p-new", last_ms * 1000, "login")))
    for entry_id, ev in pending:
        client.xadd(keys.events, ev.fields(), id=entry_id)
    client.xadd(keys.events, {"e": b"{broken"}, id=f"{last_ms + 3_000}-0")
    written = len(seeded.entries) + len(BAD_PAYLOADS) + len(pending) + 1
    assert client.xlen(keys.events) == written, "the sink trimmed the seeded stream: the seed took too long"
    client.close()
    return World(seeded, pending, 1)


@pytest.fixture()
def env(world: World, monkeypatch: pytest.MonkeyPatch) -> World:
    monkeypatch.setenv("REDIS_URL", world.seeded.cfg.redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", world.seeded.cfg.namespace)
    return world


@pytest.fixture()
def client(world: World) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(world.seeded.cfg.redis_url)
    yield c
    c.close()


def run_page(server: str | None = None, range_label: str | None = None) -> AppTest:
    at = page_test(PAGE, timeout=120, **({"range": range_label} if range_label else {}))
    if server is not None:
        at.selectbox(key="events_server").set_value(server).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def shown_counts(at: AppTest) -> dict[str, int]:
    metrics = {m.label: m.value for m in at.metric}
    return {k: int(metrics[label].replace(",", "")) for k, label in LABELS.items()}


# --------------------------------------------------------------------------- the view against Redis and the oracle


def test_dropped_pairs_per_window_equal_the_window_hashes(world: World, client: redis.Redis) -> None:
    ev = read_events(client, world.keys, server=None, range_ms=86_400_000)
    assert ev is not None and not ev.capped and ev.trimmed == 0 and ev.reaches_below_stream
    assert len(ev.points) == len(world.seeded.entries) + len(world.pending)
    got = dropped_pairs(ev.points)
    members = [WindowKey.parse(m) for m in client.zrange(world.keys.windows, 0, -1)]
    pipe = client.pipeline(transaction=False)
    for m in members:
        pipe.hget(world.keys.window(m), "dropped")
    stored = {(m.start_ms, m.end_ms, m.server): int(d or 0) for m, d in zip(members, pipe.execute(), strict=True)}
    assert set(got) <= set(stored)
    assert {k: got.get(k, 0) for k in stored} == stored
    assert sum(stored.values()) == int(client.hget(world.keys.totals, "dropped")) > 0


def test_every_event_is_judged_as_the_oracle_says(world: World, client: redis.Redis) -> None:
    ev = read_events(client, world.keys, server=None, range_ms=86_400_000)
    assert ev is not None
    lines = {entry_id: line for line, (entry_id, _) in zip(world.seeded.lines, world.seeded.entries, strict=True)}
    want = {}
    for line, wm, windows in judged([dict(v, entry=k) for k, v in lines.items()], WINDOW, SLIDE,
                                    world.seeded.cfg.delay_ms):
        want[line["entry"]] = (event_status(line, wm, windows), wm, sorted(windows))
    pending = {entry_id for entry_id, _ in world.pending}
    for p in ev.points:
        if p.entry_id in pending:
            assert p.status is Status.PENDING and p.batch is None
            continue
        status, wm, windows = want[p.entry_id]
        assert (p.status.value, p.watermark_ms) == (status, wm), p.entry_id
        assert [(w.window.start_ms, w.window.end_ms, w.verdict.value == "dropped") for w in p.windows] == windows
    counts = ev.counts()
    assert counts[Status.PARTLY_DROPPED] > 0 and counts[Status.DROPPED] > 0 and counts[Status.LATE_ACCEPTED] > 0
    assert counts[Status.UNKNOWN] == 0
    assert len(ev.quarantined) == len(BAD_PAYLOADS) + world.pending_bad
    assert sum(q.pending for q in ev.quarantined) == world.pending_bad


def test_the_watermark_steps_follow_the_batches(world: World, client: redis.Redis) -> None:
    ev = read_events(client, world.keys, server=None, range_ms=86_400_000)
    assert ev is not None
    committed = [s for s in ev.steps if s.batch is not None]
    assert [s.batch for s in committed] == list(range(len(world.seeded.document["batches"])))
    assert [s.watermark_ms for s in committed] == sorted(s.watermark_ms for s in committed)  # it never falls
    tail = ev.steps[-1]
    assert tail.batch is None and tail.watermark_ms == int(client.hget(world.keys.state, "next_watermark_ms"))


def test_the_cap_keeps_the_newest_entries_and_says_so(world: World, client: redis.Redis) -> None:
    ev = read_events(client, world.keys, server=None, range_ms=86_400_000, cap=100)
    assert ev is not None and ev.capped and ev.entries_read == 100
    newest = client.xrevrange(world.keys.events, count=100)
    assert ev.shown_from_ms == parse_entry_id(newest[-1][0])[0]
    assert len(ev.points) - ev.kept + len(ev.quarantined) == 100
    below = [i for i, _ in client.xrange(world.keys.late, "-", f"({newest[-1][0].decode()}")]
    assert [p.entry_id for p in ev.points[:ev.kept]] == [i.decode() for i in below] and ev.kept > 0  # kept, shown


# --------------------------------------------------------------------------- the page


@pytest.mark.parametrize("server", ["A", "C", "all servers"])
def test_page_counts_equal_the_oracle(env: World, server: str) -> None:
    at = run_page(server)
    want = env.expected(None if server == "all servers" else server)
    assert shown_counts(at) == want
    if server != "A":  # the overseas server's late bursts
        assert want["dropped"] > 0 and want["partly_dropped"] > 0 and want["late_accepted"] > 0
    metrics = {m.label: m.value for m in at.metric}
    assert int(metrics["Quarantined"]) == len(BAD_PAYLOADS) + env.pending_bad
    assert len(at.get("plotly_chart")) == 1
    if want["dropped"] + want["partly_dropped"]:
        assert len(at.dataframe[0].value) == min(1_000, want["dropped"] + want["partly_dropped"])
    # the 15 minutes reach below the stream's first entry, but nothing was trimmed: said, not warned
    assert not any("trimmed" in w.value or "newest" in w.value for w in at.warning)
    assert any("nothing was trimmed" in c.value for c in at.caption)


def test_a_trimmed_range_says_so_and_counts_what_is_left(env: World, client: redis.Redis,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of the namespace whose stream was trimmed as the sink does (XTRIM MINID, counted)."""
    copy = KeySchema(env.keys.namespace + "-trimmed")
    for key in client.scan_iter(match=env.keys.namespace + ":*", count=1000):
        name = key.decode()
        client.restore(copy.namespace + name[len(env.keys.namespace):], 0, client.dump(key), replace=True)
    ids = [i for i, _ in client.xrange(copy.events)]
    cut = parse_entry_id(ids[len(ids) // 2])
    trim_counted(client, copy, f"{cut[0]}-{cut[1]}", approximate=False)
    monkeypatch.setenv("PIPELINE_NAMESPACE", copy.namespace)
    at = run_page("all servers")
    trimmed = [w.value for w in at.warning if "trimmed" in w.value]
    first = client.xrange(copy.events, count=1)[0][0]
    assert first == ids[len(ids) // 2]
    assert len(trimmed) == 1 and f"{len(ids) // 2:,} entries have been trimmed" in trimmed[0]
    assert _hms(parse_entry_id(first)[0]) in trimmed[0]
    assert shown_counts(at) == env.expected(None, from_id=cut)
    late_below = [line for line, wm, windows in env.judged()
                  if parse_entry_id(line["entry"]) < cut and event_status(line, wm, windows) != "on_time"]
    assert late_below and f"the {len(late_below):,} late ones (dropped or late but accepted) are kept" in trimmed[0]
    # a lab lane reads its parent's input: what was trimmed from it is the parent's count, on the Events page as in
    # the player search (the page read the lane's own count, which a lane never writes)
    lane = KeySchema(copy.namespace + ".lane")
    client.restore(lane.state, 0, client.dump(copy.state), replace=True)
    ev = read_events(client, lane, server=None, range_ms=86_400_000, input_keys=copy)
    found = find_player(client, lane, "p0001", 0, 2**62, input_keys=copy)
    assert ev is not None and found is not None and ev.trimmed == found.trimmed == len(ids) // 2


def test_the_late_events_kept_are_exactly_the_oracles(world: World, client: redis.Redis) -> None:
    want = {}
    for line, wm, windows in world.judged():
        status = event_status(line, wm, windows)
        if status != "on_time":
            want[line["entry"]] = (line["server"], line["player_id"], status, wm)
    kept = [LateEvent.from_fields(i, f) for i, f in client.xrange(world.keys.late)]
    got = {e.entry_id: (e.server, e.player_id, e.point(WINDOW, SLIDE).status.value, e.watermark_ms) for e in kept}
    assert got == want and len(kept) == len(want) > 0
    assert int(client.hget(world.keys.totals, "kept")) == client.xlen(world.keys.late)  # nothing evicted


def test_a_player_is_found_in_the_stream_and_in_the_late_events_kept(env: World, client: redis.Redis) -> None:
    """In a copy whose stream lost its older half, a player with a late event in that half and events after."""
    copy = KeySchema(env.keys.namespace + "-lookup")
    for key in client.scan_iter(match=env.keys.namespace + ":*", count=1000):
        client.restore(copy.namespace + key.decode()[len(env.keys.namespace):], 0, client.dump(key), replace=True)
    ids = [i for i, _ in client.xrange(copy.events)]
    cut = parse_entry_id(ids[len(ids) // 2])
    trim_counted(client, copy, f"{cut[0]}-{cut[1]}", approximate=False)
    rows = env.judged()
    late_before = {line["player_id"] for line, wm, windows in rows
                   if parse_entry_id(line["entry"]) < cut and event_status(line, wm, windows) != "on_time"}
    after = {line["player_id"] for line, _, _ in rows if parse_entry_id(line["entry"]) >= cut}
    player = sorted(late_before & after)[0]
    found = find_player(client, copy, player, 0, 2**62)
    assert found is not None
    want = [(line["entry"], event_status(line, wm, windows)) for line, wm, windows in rows
            if line["player_id"] == player and (parse_entry_id(line["entry"]) >= cut
                                                or event_status(line, wm, windows) != "on_time")]
    assert [(p.entry_id, p.status.value) for p in found.points] == sorted(want, key=lambda x: parse_entry_id(x[0]))
    assert found.stream_from_ms == cut[0] and found.capped_at_ms is None
    narrow = find_player(client, copy, player, 0, 2**62, scan_cap=3)  # a bounded scan says where it stopped
    assert narrow is not None and narrow.scanned == 3 and narrow.capped_at_ms is not None


def test_the_page_never_writes(env: World, client: redis.Redis) -> None:
    before = int(client.info("persistence")["rdb_changes_since_last_save"])
    run_page("B")
    assert int(client.info("persistence")["rdb_changes_since_last_save"]) == before


def test_unreachable_redis_is_a_status_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    at = run_page()
    assert len(at.error) == 1 and "is unreachable" in at.error[0].value
    assert not at.get("plotly_chart")


def _hms(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%H:%M:%S")


def test_the_page_finds_a_player_by_id_and_time(env: World, client: redis.Redis) -> None:
    line, wm, windows = next((line, wm, w) for line, wm, w in env.judged() if event_status(line, wm, w) == "dropped")
    player = line["player_id"]
    at = run_page("all servers")
    assert any("Type a player id" in c.value for c in at.caption)  # nothing asked yet: said in words
    at.text_input(key="lookup_player").set_value(player)
    at.selectbox(key="lookup_span").set_value("± 12 h")
    next(b for b in at.button if b.label == "Find").click().run()
    assert not at.exception, [e.value for e in at.exception]
    table = at.dataframe[-1].value  # below the dropped events table
    want = sum(1 for ln, _, _ in env.judged() if ln["player_id"] == player) + sum(
        1 for _, ev in env.pending if ev.player_id == player)
    assert set(table["Player"]) == {player} and len(table) == want
    assert "dropped" in set(table["Status"])
    assert any("Searched the whole range in the input stream" in c.value for c in at.caption)


@pytest.mark.parametrize(("cut", "firsts", "below"), [
    # not capped: a shard trimmed past lo shows its kept late events below its oldest entry; one whose stream
    # still reaches lo needs none; one the trim emptied, or whose entries all came after the range, up to hi
    (None, [(5, 0), (2, 0), None, (50, 1)], ["(5-0", None, "40", "40"]),
    # capped at entry 30-2 of shard 1: the merge orders by (ID, shard), so shard 0's 30-2 is below the cut too
    (((30, 2), 1), [(5, 0), None, (1, 0)], ["30-2", "(30-2", "(30-2"]),
])
def test_the_late_events_kept_are_read_below_what_each_shard_shows_and_within_the_range(
        cut: tuple | None, firsts: list, below: list) -> None:
    from streaming.store.views.events import below_shown

    assert below_shown(cut, firsts, 3, 40) == below
