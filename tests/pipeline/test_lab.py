"""Watermark lab: per-server watermarks (min and max), idle markers, a change of delay, and the delay
trade-off, through the real query against the independent oracle and Spark's own offset log."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import redis
from pyspark.sql import SparkSession

from streaming.apps.replay import ReplayBatch, replay
from streaming.rules.tradeoff import GRID_MS, Tradeoff
from streaming.schema.config import Config
from streaming.schema.keys import KeySchema
from streaming.spark.checkpoint import read_offset_log
from streaming.spark.query import start_query
from streaming.store.report import build_document
from tests.oracle import T0_MS, oracle, random_event_set, to_iso, windows_part
from watermark_client.events import PAYLOAD_FIELD

pytestmark = [pytest.mark.spark, pytest.mark.long]
MIN = 60_000


def lab_cfg(redis_url: str, tmp_path: Path, *, window: int = 10 * MIN, delay: int = 5 * MIN,
            known_servers: frozenset[str] | None = frozenset("ABC"), **kw: object) -> Config:
    ns = f"lab-{uuid.uuid4().hex[:8]}"
    return Config(redis_url=redis_url, embedded_redis=False, namespace=ns, window_ms=window, slide_ms=window,
                  delay_ms=delay, checkpoint_dir=str(tmp_path / ns), spark_master="local[2]",
                  retention_ms=100 * 365 * 86_400_000, known_servers=known_servers, **kw)  # type: ignore[arg-type]


def to_batches(lines: list[dict]) -> list[ReplayBatch]:
    groups: dict[int, list[bytes]] = {}
    for n, line in enumerate(lines):
        doc = {k: v for k, v in line.items() if k != "batch"}
        doc.setdefault("player_id", "*")
        groups.setdefault(line["batch"], []).append(json.dumps({"event_id": f"line-{n}", **doc}).encode())
    return [ReplayBatch(label, groups[label]) for label in sorted(groups)]


def records(client: redis.Redis, keys: KeySchema) -> list[dict]:
    ids = sorted(int(b) for b in client.zrange(keys.batches, 0, -1))
    return [json.loads(client.hget(keys.batch(i), "sink")) for i in ids]


def assert_model_matches_spark(cfg: Config, recs: list[dict]) -> None:
    """The sink's per-server model predicts the watermark Spark wrote for every next batch."""
    for rec in recs[:-1]:
        spark_next = read_offset_log(cfg.checkpoint_dir, rec["batch"] + 1).watermark_ms
        assert rec["next_watermark_ms"] == spark_next, rec


@pytest.mark.parametrize(("seed", "policy"), [
    (11, "min"),  # random batches: a server absent from a batch keeps its own watermark
    (12, "min"),
    (11, "max"),  # the same events: the fastest server drives the watermark
    (13, "max"),
])
def test_per_server_watermarks_match_the_oracle_and_spark(spark: SparkSession, redis_url: str, tmp_path: Path,
                                                         seed: int, policy: str) -> None:
    lines = random_event_set(seed, batches=6, per_batch=20)
    cfg = lab_cfg(redis_url, tmp_path, watermark_mode="per-server", watermark_policy=policy)
    doc = replay(to_batches(lines), cfg)
    assert windows_part(doc) == oracle(lines, 10 * MIN, 10 * MIN, 5 * MIN, per_server=policy, servers="ABC")
    client = redis.Redis.from_url(redis_url)
    recs = records(client, KeySchema(cfg.namespace))
    assert_model_matches_spark(cfg, recs)
    assert all(set(r["server_watermarks"]) == set("ABC") for r in recs)


def test_per_server_policies_differ_where_one_server_lags(spark: SparkSession, redis_url: str,
                                                          tmp_path: Path) -> None:
    """C runs 30 minutes behind A and B: min waits for C, max drops C's events."""
    lines = []
    for b in range(5):
        now = T0_MS + (b + 1) * 10 * MIN
        lines += [{"batch": b, "server": s, "player_id": f"{s}{b}", "event_time": to_iso(now - lag)}
                  for s, lag in (("A", 0), ("B", MIN), ("C", 30 * MIN))]
    docs = {}
    for policy in ("min", "max"):
        cfg = lab_cfg(redis_url, tmp_path, watermark_mode="per-server", watermark_policy=policy)
        docs[policy] = replay(to_batches(lines), cfg)
        assert windows_part(docs[policy]) == oracle(lines, 10 * MIN, 10 * MIN, 5 * MIN, per_server=policy,
                                                    servers="ABC")
    dropped = {p: sum(w["dropped"] for w in d["windows"] if w["server"] == "C") for p, d in docs.items()}
    assert dropped == {"min": 0, "max": 4}  # every C event after the first batch, under max
    assert docs["min"]["batches"][-1]["watermark"] < docs["max"]["batches"][-1]["watermark"]


IDLE_LINES = (
    # A and B play; from batch 2 B is silent and only the pipeline's idle markers speak for it
    [{"batch": b, "server": s, "player_id": f"{s}{b}", "event_time": to_iso(T0_MS + b * 10 * MIN + 1)}
     for b in range(2) for s in "AB"]
    + [{"batch": b, "server": "A", "player_id": f"A{b}", "event_time": to_iso(T0_MS + b * 10 * MIN + 1)}
       for b in range(2, 6)]
    + [{"batch": b, "server": "B", "kind": "idle", "event_time": to_iso(T0_MS + b * 10 * MIN)} for b in range(3, 6)]
    # B comes back in batch 6 with an event from before its markers: late now that it had been idle
    + [{"batch": 6, "server": "B", "player_id": "B6", "event_time": to_iso(T0_MS + 25 * MIN)},
       {"batch": 6, "server": "A", "player_id": "A6", "event_time": to_iso(T0_MS + 60 * MIN)}]
)


@pytest.mark.parametrize("idle", [False, True])
def test_idle_markers_release_the_min_watermark_only_with_idleness_on(spark: SparkSession, redis_url: str,
                                                                      tmp_path: Path, idle: bool) -> None:
    cfg = lab_cfg(redis_url, tmp_path, watermark_mode="per-server", watermark_policy="min",
                  known_servers=frozenset("AB"), idle_timeout_ms=30_000 if idle else None)
    doc = replay(to_batches(IDLE_LINES), cfg)
    expected = oracle(IDLE_LINES, 10 * MIN, 10 * MIN, 5 * MIN, per_server="min", servers="AB", idle=idle)
    assert windows_part(doc) == expected
    client = redis.Redis.from_url(redis_url)
    keys = KeySchema(cfg.namespace)
    assert_model_matches_spark(cfg, records(client, keys))
    totals = {k.decode(): int(v) for k, v in client.hgetall(keys.totals).items()}
    assert totals["ticks"] == 3  # markers are input, never events or players
    assert totals["events"] + totals.get("dropped", 0) == 10
    last_wm = doc["batches"][-1]["watermark"]
    if idle:  # B's markers let A's progress close windows; B's returning event was late
        assert last_wm == to_iso(T0_MS + 50 * MIN - 5 * MIN)  # B's last marker - delay
        assert sum(w["dropped"] for w in doc["windows"]) == 1
    else:  # B, silent, holds the watermark where B's last event left it
        assert last_wm == to_iso(T0_MS + 10 * MIN + 1 - 5 * MIN)
        assert sum(w["dropped"] for w in doc["windows"]) == 0


def test_global_mode_ignores_idle_markers(spark: SparkSession, redis_url: str, tmp_path: Path) -> None:
    lines = [*IDLE_LINES, {"batch": 7, "server": "B", "kind": "idle", "event_time": to_iso(T0_MS + 500 * MIN)}]
    cfg = lab_cfg(redis_url, tmp_path)
    assert windows_part(replay(to_batches(lines), cfg)) == oracle(lines, 10 * MIN, 10 * MIN, 5 * MIN)


def run_batches(spark: SparkSession, cfg: Config, client: redis.Redis, batches: list[ReplayBatch],
                first: int) -> None:
    """Batches ``first``.. through one query run, as the live job would see them."""
    keys = KeySchema(cfg.namespace)
    query = start_query(spark, cfg.with_(max_future_skew_ms=None), trigger_ms=0)
    try:
        for index, batch in enumerate(batches, start=first):
            pipe = client.pipeline(transaction=True)  # a batch becomes visible at once
            for payload in batch.payloads:
                pipe.xadd(keys.events, {PAYLOAD_FIELD: payload})
            pipe.execute()
            query.processAllAvailable()
            assert int(client.hget(keys.state, "last_batch")) == index
    finally:
        query.stop()


def test_a_new_delay_applies_from_the_restart_and_history_is_kept(spark: SparkSession, redis_url: str,
                                                                  tmp_path: Path) -> None:
    lines = random_event_set(21, batches=8, per_batch=15)
    batches = to_batches(lines)
    cut = len(batches) // 2
    labels = [b.label for b in batches]
    cfg = lab_cfg(redis_url, tmp_path, delay=20 * MIN, known_servers=None)
    client = redis.Redis.from_url(redis_url)
    run_batches(spark, cfg, client, batches[:cut], 0)
    run_batches(spark, cfg.with_(delay_ms=2 * MIN), client, batches[cut:], cut)
    keys = KeySchema(cfg.namespace)
    doc = build_document(client, keys, batch_labels=dict(enumerate(labels)))
    assert windows_part(doc) == oracle(lines, 10 * MIN, 10 * MIN, 20 * MIN, delays={labels[cut]: 2 * MIN})
    assert [r["delay_ms"] for r in records(client, keys)] == [20 * MIN] * cut + [2 * MIN] * (len(batches) - cut)


@pytest.mark.parametrize(("mode", "policy", "seed"), [
    ("global", "min", 31),  # one watermark: slack against the running max over all servers
    ("per-server", "min", 32),  # slack against the slowest server's running max
    ("per-server", "max", 33),  # slack against the fastest server's
])
def test_tradeoff_histogram_equals_the_oracle_at_every_grid_delay(spark: SparkSession, redis_url: str,
                                                                  tmp_path: Path, mode: str, policy: str,
                                                                  seed: int) -> None:
    lines = random_event_set(seed, batches=7, per_batch=25)
    cfg = lab_cfg(redis_url, tmp_path, watermark_mode=mode, watermark_policy=policy)
    replay(to_batches(lines), cfg)
    client = redis.Redis.from_url(redis_url)
    tradeoff = Tradeoff.from_hash(client.hgetall(KeySchema(cfg.namespace).tradeoff))
    per_server = policy if mode == "per-server" else None
    for server in (None, "A", "C"):
        got = tradeoff.candidates(None if server is None else [server])
        assert [c.delay_ms for c in got] == list(GRID_MS)
        for c in got:
            doc = oracle(lines, 10 * MIN, 10 * MIN, c.delay_ms, per_server=per_server, servers="ABC")
            cells = [w for w in doc["windows"] if server is None or w["server"] == server]
            assert (c.pairs, c.dropped) == (sum(w["events"] + w["dropped"] for w in cells),
                                            sum(w["dropped"] for w in cells)), (server, c.delay_ms)


@pytest.mark.parametrize("policy", ["min", "max"])
def test_a_lane_goes_on_across_a_restart_as_if_none_happened(spark: SparkSession, redis_url: str, tmp_path: Path,
                                                            policy: str) -> None:
    """Lanes are judged by the pipeline's sink from the same read; each keeps its watermarks (combined and per
    server) in its own state, so stopping the query half-way and starting it again changes nothing: the lane's
    document equals the oracle's for an uninterrupted per-server run."""
    from streaming.schema.config import lane_namespace

    lines = random_event_set(17, batches=8, per_batch=15)
    batches = to_batches(lines)
    lane = f"per-server-{policy}"
    cfg = lab_cfg(redis_url, tmp_path, lanes=(lane,))
    client = redis.Redis.from_url(redis_url)
    cut = len(batches) // 2
    run_batches(spark, cfg, client, batches[:cut], 0)
    run_batches(spark, cfg, client, batches[cut:], cut)
    labels = dict(enumerate(b.label for b in batches))
    lane_keys = KeySchema(lane_namespace(cfg.namespace, lane))
    doc = windows_part(build_document(client, lane_keys, batch_labels=labels))
    assert doc == oracle(lines, 10 * MIN, 10 * MIN, 5 * MIN, per_server=policy, servers="ABC")
    main = windows_part(build_document(client, KeySchema(cfg.namespace), batch_labels=labels))
    assert main == oracle(lines, 10 * MIN, 10 * MIN, 5 * MIN)
    # per-server max takes the largest server's max - delay, which is the global watermark; min differs
    assert (doc == main) == (policy == "max")
