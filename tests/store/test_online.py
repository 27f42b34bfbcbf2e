"""Online players through the real query (the online view is folded by the pipeline's own sink from the same read)
against an independent oracle, across restarts, and as Live ops shows them."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import redis
from pyspark.sql import SparkSession
from streamlit.testing.v1 import AppTest

from dashboard.charts import online_over_batches
from streaming.schema.config import Config
from streaming.schema.keys import KeySchema
from streaming.spark.query import start_query
from streaming.store.views.online import OnlinePoint, OnlineView, read_online
from tests.oracle import T0_MS, online_oracle, random_online_batches
from tests.store.online.rows import members
from watermark_client.events import PAYLOAD_FIELD, Event

TIMEOUT = 10_000  # ms
DELAY = 5_000



# --- the real query ---------------------------------------------------------------------------------

# (server, player, ms after T0, kind) per batch, in arrival order; delay 5 s, timeout 10 s. The watermark
# after each batch is in the comment; the oracle, not these comments, is what the test compares with.
HANDMADE = [
    [("A", "p1", 0, "login"), ("A", "p2", 1_000, "login"), ("B", "p3", 2_000, "heartbeat"), ("A", "p4", 500, None)],
    # wm 7 s. p2 logs out; p5 arrives
    [("A", "p1", 8_000, "heartbeat"), ("A", "p2", 6_000, "logout"), ("B", "p3", 9_000, "heartbeat"),
     ("A", "p5", 12_000, "login")],
    # late: p4 at 6.5 s and p2 exactly at the watermark (7 s) are dropped; wm 15 s expires p4 (0.5 + 10 s)
    [("A", "p4", 6_500, "heartbeat"), ("A", "p2", 7_000, "heartbeat"), ("B", "p6", 20_000, "login")],
    # p1: logout at 17 s arrives before a heartbeat at 16 s: offline. wm 25 s expires p5 (22 s)
    [("A", "p1", 17_000, "logout"), ("A", "p1", 16_000, "heartbeat"), ("B", "p3", 30_000, "login")],
    # p6 exactly at the watermark (25 s): late. Equal times: arrival decides (p7 out, p8 in). wm 36 s
    [("B", "p6", 25_000, "heartbeat"), ("A", "p7", 40_000, "login"), ("A", "p7", 40_000, "logout"),
     ("A", "p8", 41_000, "logout"), ("A", "p8", 41_000, "login")],
    # wm exactly 40 s: p3 (30 + 10 s) expires with the watermark exactly at its expiry
    [("B", "p9", 45_000, "login")],
    # p9 silent for 13 s between two events of one batch: offline at 55 s and back at 58 s. wm 53 s expires p8
    [("B", "p9", 58_000, "heartbeat"), ("A", "p10", 50_000, "login")],
    [],  # an empty write: nothing changes
]


def online_cfg(redis_url: str, tmp_path: Path) -> Config:
    ns = f"online-{uuid.uuid4().hex[:8]}"
    return Config(redis_url=redis_url, embedded_redis=False, namespace=ns, window_ms=60_000, slide_ms=60_000,
                  delay_ms=DELAY, online_timeout_ms=TIMEOUT, checkpoint_dir=str(tmp_path / ns),
                  spark_master="local[2]", max_future_skew_ms=None, retention_ms=100 * 365 * 86_400_000)


def arrival_ms(batches: list[list[tuple]], i: int) -> int:
    """When batch ``i`` arrives: at its newest event time (the newest so far for an empty one), so arrival
    time passes as event time does, as it does live (the online view runs a silent server's clock on it)."""
    return T0_MS + max((ms for batch in batches[:i + 1] for _, _, ms, _ in batch), default=0) + i  # IDs increase


def timed(batches: list[list[tuple]]) -> list[list[tuple]]:
    """The batches as the oracle takes them: epoch ms, with each event's arrival."""
    return [[(s, p, T0_MS + ms, k, arrival_ms(batches, i)) for s, p, ms, k in batch]
            for i, batch in enumerate(batches)]


def write_batch(client: redis.Redis, keys: KeySchema, batch: list[tuple], bad: bool = False,
                arrival: int | None = None) -> None:
    pipe = client.pipeline(transaction=True)  # a batch becomes visible at once
    ids = (f"{arrival}-{n + 1}" for n in range(len(batch) + 1)) if arrival is not None else iter(lambda: "*", None)
    for server, player, ms, kind in batch:
        pipe.xadd(keys.events, Event(server, player, (T0_MS + ms) * 1000, kind=kind).fields(), id=next(ids))
    if bad:
        pipe.xadd(keys.events, {PAYLOAD_FIELD: b'{"server": "A", "player_id": "p1", "event_time": "never"}'},
                  id=next(ids))
    pipe.execute()


def online_sets(client: redis.Redis, keys: KeySchema) -> dict[str, set[str]]:
    view = read_online(client, keys)
    servers = view.counts if view else {}
    sets = {s: set(members(client, keys.online(s))) for s in servers}
    return {s: ps for s, ps in sets.items() if ps}


def run(spark: SparkSession, cfg: Config, batches: list[list[tuple]],
        restart_after: int | None = None) -> list[dict[str, set[str]]]:
    """Write the batches one by one, processing each fully; the online sets after each."""
    client = redis.Redis.from_url(cfg.redis_url)
    keys = KeySchema(cfg.namespace)
    query = start_query(spark, cfg, trigger_ms=0)
    seen: list[dict[str, set[str]]] = []
    try:
        for i, batch in enumerate(batches):
            write_batch(client, keys, [(s, p, ms, k) for s, p, ms, k in batch], bad=(i == 1),
                        arrival=arrival_ms(batches, i))
            query.processAllAvailable()
            seen.append(online_sets(client, keys))
            if i == restart_after:
                query.stop()
                query = start_query(spark, cfg, trigger_ms=0)
    finally:
        query.stop()
    return seen


def check_counts(client: redis.Redis, keys: KeySchema, expected: dict[str, set[str]]) -> None:
    """The counts hash, the sets' sizes and the history's last record all agree with the oracle."""
    view = read_online(client, keys)
    assert view is not None
    nonzero = {s: n for s, n in view.counts.items() if n}
    assert nonzero == {s: len(ps) for s, ps in expected.items()}
    assert {s: client.hlen(keys.online(s)) for s in view.counts} == view.counts
    assert view.history[-1].counts == view.counts
    batches = [p.batch for p in view.history]
    assert batches == list(range(len(batches)))  # every batch recorded once, none twice


@pytest.mark.spark
def test_handmade_batches_match_the_oracle(spark: SparkSession, redis_url: str, tmp_path: Path) -> None:
    cfg = online_cfg(redis_url, tmp_path)
    seen = run(spark, cfg, HANDMADE)
    expected = online_oracle(timed(HANDMADE), DELAY, TIMEOUT)
    assert seen == expected
    # what the rows above are there for, so a weak oracle cannot hide a wrong rule
    assert expected[0] == {"A": {"p1", "p2", "p4"}, "B": {"p3"}}
    assert expected[2] == {"A": {"p1", "p5"}, "B": {"p3", "p6"}}  # late p4/p2 ignored, p4 expired
    assert expected[4] == {"A": {"p8"}, "B": {"p3"}}  # late p6 did not refresh; equal times by arrival
    assert expected[5] == {"A": {"p8"}, "B": {"p9"}}  # p3 expired with the watermark exactly at 40 s
    assert expected[6] == {"A": {"p8", "p10"}, "B": {"p9"}}  # A's own clock (50 s, wm 45 s) keeps p8 (41 s)
    client = redis.Redis.from_url(redis_url)
    keys = KeySchema(cfg.namespace)
    check_counts(client, keys, expected[-1])
    view = read_online(client, keys)
    assert view is not None and view.timeout_ms == TIMEOUT
    # batch 5 (p9 logs in) moves B's watermark to 40 s, which expires p3; batch 6: p9's gap (off and back on)
    # and p10 on; p8 stays, judged by A's clock, not by B's 58 s (the history keeps the global watermark)
    records = {json.loads(m)["batch"]: json.loads(m) for m in client.zrange(keys.online_history, 0, -1)}
    assert [(records[b]["watermark_ms"] - T0_MS, records[b]["online"], records[b]["offline"]) for b in (5, 6)] == [
        (40_000, 1, 1), (53_000, 2, 1)]
    assert records[6]["causes"] == {"A": {"login": 1}, "B": {"heartbeat": 1, "timeout": 1}}


@pytest.mark.spark
@pytest.mark.parametrize("seed", [3, 8])
def test_random_batches_match_the_oracle(spark: SparkSession, redis_url: str, tmp_path: Path, seed: int) -> None:
    batches = random_online_batches(seed)
    cfg = online_cfg(redis_url, tmp_path)
    expected = online_oracle(timed(batches), DELAY, TIMEOUT)
    assert run(spark, cfg, batches) == expected
    check_counts(redis.Redis.from_url(redis_url), KeySchema(cfg.namespace), expected[-1])
    # the set really exercises going offline: someone online after one batch is not after the next
    assert any(before[s] - after.get(s, set()) for after, before in zip(expected[1:], expected, strict=False)
               for s in before)


@pytest.mark.spark
def test_state_survives_a_restart(spark: SparkSession, redis_url: str, tmp_path: Path) -> None:
    """Stop the query after batch 2 and start a new one on the same checkpoint: players online before the
    restart stay online, and expire, by the state kept in Redis."""
    cfg = online_cfg(redis_url, tmp_path)
    seen = run(spark, cfg, HANDMADE, restart_after=2)
    assert seen == online_oracle(timed(HANDMADE), DELAY, TIMEOUT)
    check_counts(redis.Redis.from_url(redis_url), KeySchema(cfg.namespace), seen[-1])


@pytest.mark.spark
def test_live_ops_page_shows_the_online_counts(spark: SparkSession, redis_url: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = online_cfg(redis_url, tmp_path)
    client = redis.Redis.from_url(redis_url)
    keys = KeySchema(cfg.namespace)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", cfg.namespace)
    from tests.paths import APP as app

    def page(now_ms: int) -> AppTest:  # a new "now" each time: the snapshot is cached per refresh tick
        at = AppTest.from_file(app, default_timeout=60)
        at.session_state["now_ms"] = now_ms
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        return at

    # nothing has run: no online counts yet
    at = page(T0_MS + 60_000)
    assert not [m for m in at.metric if m.label.endswith("online now")]

    seen = run(spark, cfg, HANDMADE)
    expected = online_oracle(timed(HANDMADE), DELAY, TIMEOUT)[-1]
    assert seen[-1] == expected
    at = page(T0_MS + 120_000)
    # the total says "online now", or "as of" the newest arrival when most servers are silent by the page's clock
    shown = {m.label.removesuffix(" · online now"): int(m.value.replace(",", ""))
             for m in at.metric if m.label.endswith(" · online now") or m.label.startswith("All servers · as of ")}
    (total,) = [label for label in shown if label.startswith("All servers")]
    assert shown.pop(total) == sum(shown.values())
    view = read_online(client, keys)
    assert view is not None
    assert shown == view.counts
    assert {s: n for s, n in shown.items() if n} == {s: len(ps) for s, ps in expected.items()}
    # which batch the numbers are of: in the total's help (?), as the page keeps prose out of the way of data
    assert any(f"As of batch {view.last_batch}," in m.proto.help for m in at.metric)


def test_online_chart_has_each_servers_count_after_each_batch() -> None:
    history = [OnlinePoint(0, T0_MS, 1, {"A": 2}, 2, 0), OnlinePoint(1, T0_MS + 5_000, 2, {"A": 1, "B": 3}, 3, 1)]
    fig = online_over_batches(history, ["A", "B"])
    assert [(t.name, list(t.y)) for t in fig.data] == [("A", [2, 1]), ("B", [0, 3])]  # B unseen in batch 0: 0
    assert [c[0] for c in fig.data[0].customdata] == [0, 1]


@pytest.mark.parametrize(("lost_at", "until", "watermark", "phrase"), [
    (None, None, 50_000, None),  # nothing lost: nothing said
    (4, None, 50_000, "Players online are whole again (rewritten from the job's copy)"),
    (4, 60_000, 50_000, "Partial: Redis came back empty before batch 4 while the job restarted"),
    (4, 60_000, 60_000, "Players online are whole again (rebuilt from new events)"),  # the watermark got there
])
def test_live_ops_says_what_a_loss_did_to_the_online_view(lost_at: int | None, until: int | None, watermark: int,
                                                         phrase: str | None) -> None:
    from dashboard.screens.live_ops.model import online_loss_note
    view = OnlineView(last_batch=9, watermark_ms=T0_MS + watermark, timeout_ms=TIMEOUT, updated_ms=0, batch_ts_ms=0,
                      counts={"A": 3}, history=(), lost_at_batch=lost_at,
                      partial_until_ms=None if until is None else T0_MS + until)
    note = online_loss_note(view)
    assert note == phrase if phrase is None else phrase in (note or "")


