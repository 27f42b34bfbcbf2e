"""The real pipeline (Redis Stream -> Spark -> Redis) against hand-written expectations,
the independent oracle, and Spark's own stateful aggregation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import redis
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from streaming.apps.replay import load_batches, replay
from streaming.rules.eventview import Status
from streaming.schema.config import Config
from streaming.schema.keys import KeySchema
from streaming.schema.shards import shard_key
from streaming.spark.query import start_query
from streaming.spark.source import RedisStreamReader, read_range
from streaming.store.report import build_document, read_windows
from streaming.store.views.events import read_events
from tests.oracle import oracle, random_event_set, to_ms, windows_of
from watermark_client.events import PAYLOAD_FIELD, Event
from watermark_client.stream import shard_of

pytestmark = [pytest.mark.spark, pytest.mark.long]
from tests.paths import DATA, ROOT  # noqa: E402

HANDMADE_EXPECTED = {
    "batches": [
        # nothing seen yet: watermark at the epoch
        {"batch": 1, "watermark": "1970-01-01T00:00:00.000Z", "input": 3, "dropped": 0},
        # max 00:12 - 5m
        {"batch": 2, "watermark": "2026-01-01T00:07:00.000Z", "input": 3, "dropped": 0},
        # max 00:25 - 5m: [00:00, 00:10) closed for A and [00:10, 00:20) for B, 3 events dropped
        {"batch": 3, "watermark": "2026-01-01T00:20:00.000Z", "input": 3, "dropped": 3},
        # batch 3 held only old events: the watermark did not move
        {"batch": 5, "watermark": "2026-01-01T00:20:00.000Z", "input": 1, "dropped": 0},
    ],
    "windows": [
        # p1@00:01, p2@00:04, then p1@00:08 late (below 00:07? no: on time) -> 3 events, 2 players;
        # p4@00:09:59.999 and p4@00:03 dropped in batch 3
        {"server": "A", "start": "2026-01-01T00:00:00.000Z", "end": "2026-01-01T00:10:00.000Z",
         "events": 3, "players": 2, "dropped": 2, "final": True},
        # p1@00:12, p2@00:14 accepted; p3@00:19 dropped (window end 00:20 <= watermark 00:20)
        {"server": "B", "start": "2026-01-01T00:10:00.000Z", "end": "2026-01-01T00:20:00.000Z",
         "events": 2, "players": 2, "dropped": 1, "final": True},
        # final watermark is 00:30 - 5m = 00:25, so the windows ending 00:30 and 00:40 are provisional
        {"server": "A", "start": "2026-01-01T00:20:00.000Z", "end": "2026-01-01T00:30:00.000Z",
         "events": 1, "players": 1, "dropped": 0, "final": False},
        {"server": "C", "start": "2026-01-01T00:30:00.000Z", "end": "2026-01-01T00:40:00.000Z",
         "events": 1, "players": 1, "dropped": 0, "final": False},
    ],
    # events without a kind count as online; the default ONLINE_TIMEOUT is 30 s; each server's players are judged
    # by its own clock, its watermark 5 min behind (tests/oracle.py online_oracle gives the same)
    "online": [
        # A's clock 00:04 keeps p1 (00:01) and p2 (00:04); B's p1 (00:12)
        {"batch": 1, "watermark_ms": 1_767_226_020_000, "online": {"A": 2, "B": 1}},
        {"batch": 2, "watermark_ms": 1_767_226_800_000, "online": {"A": 3, "B": 2}},
        # batch 3 arrives no later than batch 2 (a replay's arrival is the newest event time so far), yet two of
        # A's players (p3 00:25, p4 00:09:59.999) are past its clock (00:08) by more than the timeout: A's clock
        # was set forward, to 00:09:59.999, and p1 and p2 move forward with it by the same 1:59.999
        {"batch": 3, "watermark_ms": 1_767_226_800_000, "online": {"A": 4, "B": 3}},
        {"batch": 5, "watermark_ms": 1_767_227_100_000, "online": {"A": 3, "B": 2, "C": 1}},
    ],
}


def cfg_for(redis_url: str, tmp_path: Path, window: int, slide: int, delay: int, **kw: object) -> Config:
    ns = f"test-{uuid.uuid4().hex[:8]}"
    return Config(redis_url=redis_url, embedded_redis=False, namespace=ns, window_ms=window, slide_ms=slide,
                  delay_ms=delay, checkpoint_dir=str(tmp_path / ns), spark_master="local[2]",
                  retention_ms=100 * 365 * 86_400_000, **kw)  # type: ignore[arg-type]


def write_lines(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_replay_handmade_case(spark: SparkSession, redis_url: str, tmp_path: Path) -> None:
    cfg = cfg_for(redis_url, tmp_path, 600_000, 600_000, 300_000)
    assert replay(load_batches(str(DATA / "handmade.jsonl")), cfg) == HANDMADE_EXPECTED


@pytest.mark.parametrize(
    ("seed", "window", "slide", "delay"),
    [
        (1, 600_000, 600_000, 300_000),  # tumbling 10m, delay 5m
        (2, 600_000, 300_000, 600_000),  # sliding 10m/5m, delay 10m
        (3, 300_000, 300_000, 0),  # zero delay: the watermark is the max event time
        (4, 900_000, 300_000, 120_000),  # sliding 15m/5m: every event in three windows
    ],
)
def test_replay_matches_independent_oracle(spark: SparkSession, redis_url: str, tmp_path: Path,
                                           seed: int, window: int, slide: int, delay: int) -> None:
    lines = random_event_set(seed)
    path = write_lines(tmp_path / "events.jsonl", lines)
    cfg = cfg_for(redis_url, tmp_path, window, slide, delay)
    doc = replay(load_batches(str(path)), cfg)
    client, keys = redis.Redis.from_url(redis_url), KeySchema(cfg.namespace)
    expected = oracle(lines, window, slide, delay, with_late=True)
    assert doc["batches"] == expected["batches"]
    assert doc["windows"] == [{k: v for k, v in w.items() if k != "late"} for w in expected["windows"]]
    # late but accepted, per window: counted by the sink from each batch's event-time histogram
    late = {(w.key.start_ms, w.key.server): w.late for w in read_windows(client, keys)}
    assert late == {(to_ms(w["start"]), w["server"]): w["late"] for w in expected["windows"]}
    assert sum(b["dropped"] for b in doc["batches"]) > 0  # the set really exercises the late rule
    assert sum(late.values()) > 0  # and late-but-accepted events


def test_four_shards_give_the_numbers_of_one(spark: SparkSession, redis_url: str, tmp_path: Path) -> None:
    """The same event set replayed into one stream and into four (each server's events in its shard, as a
    producer sends them): equal documents, totals, late events and Events page, every shard used."""
    lines = random_event_set(5, servers="ABCDE")  # A and C share shard 3, B 1, D 0, E 2
    lines += [{"batch": 2, "server": "A", "player_id": "p1", "event_time": "soon"},  # quarantined in A's shard
              {"batch": 4, "player_id": "p1", "event_time": "2026-01-01T00:00:00Z"}]  # no server: shard 0
    path = write_lines(tmp_path / "events.jsonl", lines)
    client = redis.Redis.from_url(redis_url)
    window, slide, delay = 600_000, 300_000, 300_000
    one, four = (cfg_for(redis_url, tmp_path, window, slide, delay, stream_shards=n) for n in (1, 4))
    doc = replay(load_batches(str(path)), one)
    assert replay(load_batches(str(path)), four) == doc
    expected = oracle([x for x in lines if x.get("server") and x["event_time"] != "soon"], window, slide, delay)
    assert doc["windows"] == expected["windows"]
    k1, k4 = KeySchema(one.namespace), KeySchema(four.namespace)
    assert [client.xlen(shard_key(k4.events, k)) for k in range(4)] == [
        sum(1 for x in lines if shard_of(x.get("server") or "D", 4) == k) for k in range(4)]  # D's shard is 0
    assert client.hgetall(k4.totals) == client.hgetall(k1.totals)
    assert int(client.hget(k1.totals, "kept")) > 0 and int(client.hget(k1.totals, "quarantined")) == 2

    def late(keys: KeySchema, shards: int) -> list[tuple]:
        out = []
        for k in range(shards):
            for _, f in client.xrange(shard_key(keys.late, k)):
                assert shard_of(f[b"s"].decode(), shards) == k  # kept in its server's shard
                out.append(tuple(sorted(f.items())))
        return sorted(out)

    assert late(k4, 4) == late(k1, 1)
    dead = {k: [f[b"reason"] for _, f in client.xrange(shard_key(k4.dead, k))] for k in range(4)}
    assert dead == {0: [b"missing_field"], 1: [], 2: [], 3: [b"bad_timestamp"]}

    def page(keys: KeySchema) -> tuple:
        ev = read_events(client, keys, server=None, range_ms=10**12, end_ms=2 * 10**12)
        assert ev is not None
        # every event behind the watermark is shown, from the input or the late events kept, with its batch
        late = sorted((p.server, p.player_id, p.event_time_us, p.status, p.batch, p.watermark_ms)
                      for p in ev.points if p.status is not Status.ON_TIME)
        return late, ev.kept_total, ev.kept_now, {(q.shard, q.reason) for q in ev.quarantined}

    *same, quarantined = page(k4)
    assert same == list(page(k1)[:-1]) and len(same[0]) == int(client.hget(k1.totals, "kept"))
    # each shard is trimmed below what was committed of it (so more on-time entries are still there to see);
    # a quarantined entry still in its shard is shown with the reason from that shard's dead letters
    assert quarantined and quarantined <= {(0, "missing_field"), (3, "bad_timestamp")}


def test_conformance_with_sparks_stateful_aggregation(spark: SparkSession, redis_url: str, tmp_path: Path) -> None:
    """Spark's own windowed aggregation (update mode, one stateful operator) on the same events
    and batch boundaries accepts exactly what our sink counts as accepted."""
    window, slide, delay = 600_000, 300_000, 300_000
    lines = random_event_set(11, batches=8, per_batch=30)
    batches = load_batches(str(write_lines(tmp_path / "events.jsonl", lines)))
    ours = cfg_for(redis_url, tmp_path, window, slide, delay)
    doc = replay(batches, ours)

    theirs = cfg_for(redis_url, tmp_path, window, slide, delay)
    keys = KeySchema(theirs.namespace)
    client = redis.Redis.from_url(redis_url)
    latest: dict[tuple[int, int, str], tuple[int, frozenset[str]]] = {}

    def collect(df, batch_id: int) -> None:  # noqa: ANN001
        for row in df.collect():
            key = (int(row.ws), int(row.we), row.server)
            latest[key] = (row.events, frozenset(row.players))

    spark.conf.set("spark.sql.streaming.statefulOperator.allowMultiple", "false")
    agg = (
        spark.readStream.format("redis_stream").option("url", redis_url).option("stream", keys.events).load()
        .where(F.col("error").isNull())
        .withWatermark("event_time", f"{delay} milliseconds")
        .groupBy(F.window("event_time", f"{window} milliseconds", f"{slide} milliseconds"), "server")
        .agg(F.count(F.lit(1)).alias("events"), F.collect_set("player_id").alias("players"))
        .select((F.unix_micros("window.start") / 1000).cast("long").alias("ws"),
                (F.unix_micros("window.end") / 1000).cast("long").alias("we"), "server", "events", "players")
    )
    query = (agg.writeStream.outputMode("update").foreachBatch(collect)
             .option("checkpointLocation", theirs.checkpoint_dir).start())
    try:
        for batch in batches:
            pipe = client.pipeline(transaction=True)
            for payload in batch.payloads:
                pipe.xadd(keys.events, {PAYLOAD_FIELD: payload})
            pipe.execute()
            query.processAllAvailable()
    finally:
        query.stop()

    our_keys = KeySchema(ours.namespace)
    ours_rows = {(w.key.start_ms, w.key.end_ms, w.key.server): w for w in read_windows(client, our_keys)}
    accepted = {k: v for k, v in ours_rows.items() if v.events > 0}
    assert {k: v[0] for k, v in latest.items()} == {k: v.events for k, v in accepted.items()}
    # distinct players: counted exactly for every window; an open window's players are still in the pipeline's
    # set (shared with lanes, decision 0019), a closed one's set is gone once the watermark passed its end
    assert {k: len(v[1]) for k, v in latest.items()} == {k: w.players for k, w in accepted.items()}
    sets = {k: frozenset(m.decode() for m in client.smembers(our_keys.players(w.key))) for k, w in accepted.items()}
    still_open = {k for k, members in sets.items() if members}
    assert {k: latest[k][1] for k in still_open} == {k: sets[k] for k in still_open}
    assert still_open and len(still_open) < len(accepted), "both kinds of window must be there"

    raw: dict[tuple[int, int, str], int] = {}
    for line in lines:
        for start, end in windows_of(to_ms(line["event_time"]), window, slide):
            raw[(start, end, line["server"])] = raw.get((start, end, line["server"]), 0) + 1
    assert {k: w.dropped for k, w in ours_rows.items()} == {k: raw[k] - latest.get(k, (0,))[0] for k in raw}
    assert sum(w.dropped for w in ours_rows.values()) == sum(b["dropped"] for b in doc["batches"]) > 0


def test_malformed_entries_are_quarantined_and_the_query_goes_on(spark: SparkSession, redis_url: str,
                                                                 tmp_path: Path) -> None:
    cfg = cfg_for(redis_url, tmp_path, 60_000, 60_000, 10_000)
    keys = KeySchema(cfg.namespace)
    client = redis.Redis.from_url(redis_url)
    t0 = to_ms("2026-01-01T00:00:00.000Z") * 1000
    client.xadd(keys.events, Event("A", "p1", t0).fields())
    client.xadd(keys.events, {PAYLOAD_FIELD: b"{broken"})
    client.xadd(keys.events, {"unexpected": b"1"})
    client.xadd(keys.events, {PAYLOAD_FIELD: b'{"server": "A", "player_id": "p2", "event_time": "soon"}'})
    bad_ids = [e[0] for e in client.xrange(keys.events)][1:]
    query = start_query(spark, cfg, trigger_ms=0)
    try:
        query.processAllAvailable()
        client.xadd(keys.events, Event("A", "p3", t0 + 1_000_000).fields())
        query.processAllAvailable()
        assert query.isActive
    finally:
        query.stop()
    totals = {k.decode(): int(v) for k, v in client.hgetall(keys.totals).items()}
    assert totals["input"] == 5 and totals["parsed"] == 2 and totals["quarantined"] == 3
    assert (totals["bad|malformed_json"], totals["bad|missing_payload"], totals["bad|bad_timestamp"]) == (1, 1, 1)
    dead = client.xrange(keys.dead)
    assert [d[0] for d in dead] == bad_ids  # same IDs as in the input stream: nothing lost, traceable
    assert dead[0][1][b"raw"] == b"{broken" and dead[0][1][b"reason"] == b"malformed_json"
    doc = build_document(client, keys)
    assert doc["windows"][0]["events"] == 2 and doc["windows"][0]["players"] == 2


def test_max_events_per_batch_caps_each_batch(spark: SparkSession, redis_url: str, tmp_path: Path) -> None:
    cfg = cfg_for(redis_url, tmp_path, 60_000, 60_000, 10_000, max_events_per_batch=7)
    keys = KeySchema(cfg.namespace)
    client = redis.Redis.from_url(redis_url)
    t0 = to_ms("2026-01-01T00:00:00.000Z") * 1000
    pipe = client.pipeline()
    for i in range(20):
        pipe.xadd(keys.events, Event("B", f"p{i}", t0 + i * 1_000_000).fields())
    pipe.execute()
    query = start_query(spark, cfg, trigger_ms=0)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    doc = build_document(client, keys)
    assert [b["input"] for b in doc["batches"]] == [7, 7, 6]
    # offsets are entry IDs: consecutive batches meet exactly, with no gap or overlap
    ids = [e[0].decode() for e in client.xrange(keys.events)]
    records = [json.loads(client.hget(keys.batch(b), "sink")) for b in range(3)]
    assert [r["end_id"] for r in records] == [ids[6], ids[13], ids[19]]
    assert [r["start_id"] for r in records] == ["0-0", ids[6], ids[13]]


def test_batch_read_of_an_id_range(spark: SparkSession, redis_url: str) -> None:
    stream = f"test-{uuid.uuid4().hex[:8]}:events"
    client = redis.Redis.from_url(redis_url)
    t0 = to_ms("2026-01-01T00:00:00.000Z") * 1000
    for i in range(10):
        client.xadd(stream, Event("C", f"p{i}", t0 + i).fields(), id=f"{1000 + i}-0")
    df = (spark.read.format("redis_stream").option("url", redis_url).option("stream", stream)
          .option("startId", "1003-0").option("endId", "1007-0").option("partitions", "3").load())
    rows = sorted(df.select("entry_id", "player_id", "ingest_time").collect())
    assert [r.entry_id for r in rows] == [f"{1000 + i}-0" for i in range(3, 8)]
    assert [r.player_id for r in rows] == [f"p{i}" for i in range(3, 8)]
    # the entry ID's millisecond part is the ingest time
    assert (rows[0].ingest_time - datetime(1970, 1, 1)) // timedelta(milliseconds=1) == 1003


@pytest.mark.parametrize("start, expected", [
    ("0-0", range(100)),       # the first batch: split from the first entry, not from 1970
    ("1049-0", range(50, 100)),  # a later batch: its start offset is exclusive
])
def test_stream_partitions_share_a_backlog(redis_url: str, start: str, expected: range) -> None:
    stream = f"test-{uuid.uuid4().hex[:8]}:events"
    client = redis.Redis.from_url(redis_url)
    t0 = to_ms("2026-01-01T00:00:00.000Z") * 1000
    for i in range(100):
        client.xadd(stream, Event("C", f"p{i}", t0 + i).fields(), id=f"{1000 + i}-0")
    reader = RedisStreamReader({"url": redis_url, "stream": stream, "partitions": "2"})
    parts = reader.partitions({"id": start}, {"id": "1099-0"})
    read = [[e for b in read_range(redis_url, stream, part) for e in b.column("entry_id").to_pylist()]
            for part in parts]
    assert sorted(e for ids in read for e in ids) == sorted(f"{1000 + i}-0" for i in expected)
    assert [len(ids) for ids in read] == [len(expected) // 2] * 2  # even IDs: an even split
    assert reader.partitions({"id": "1099-0"}, {"id": "1099-0"}) == []


def test_replay_command_line(redis_url: str, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "streaming.apps.replay", str(DATA / "handmade.jsonl"), "--window", "10m",
         "--delay", "5m", "--out", str(out)], env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(out.read_text()) == HANDMADE_EXPECTED


def test_replay_rejects_a_line_without_batch(tmp_path: Path) -> None:
    line = {"server": "A", "player_id": "p", "event_time": "2026-01-01T00:00:00Z"}
    path = write_lines(tmp_path / "bad.jsonl", [line])
    proc = subprocess.run([sys.executable, "-m", "streaming.apps.replay", str(path), "--window", "10m",
                           "--delay", "5m"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "bad.jsonl:1: 'batch' must be an integer" in proc.stderr


def test_a_flood_of_new_names_is_quarantined_past_the_minutes_limit(spark: SparkSession, redis_url: str,
                                                                    tmp_path: Path) -> None:
    """Three servers with players and ten one-off names in one batch, against a limit of five new names a minute:
    the busiest five are admitted, the other eight names' events are quarantined as ``name_flood`` under their
    entry IDs, nothing of theirs reaches a window, the seen servers or the online view, and one NameFlood alert
    names the burst. The refused events still moved Spark's watermark, and so the sink's."""
    from streaming.alerting.conditions import evaluate
    from streaming.alerting.config import AlertConfig
    from streaming.alerting.observation import Memory
    from streaming.store.commit import read_guard
    from streaming.store.observe import read_stack

    cfg = cfg_for(redis_url, tmp_path, 60_000, 60_000, 10_000, new_servers_per_minute=5)
    keys = KeySchema(cfg.namespace)
    client = redis.Redis.from_url(redis_url)
    t0 = to_ms("2026-01-01T00:00:00.000Z") * 1000
    pipe = client.pipeline()
    for server in "ABC":
        for p in range(4):
            pipe.xadd(keys.events, Event(server, f"{server}{p}", t0 + p * 1_000_000, kind="login").fields())
    for i in range(10):  # f09 is the batch's newest event
        pipe.xadd(keys.events, Event(f"f{i:02}", "x", t0 + (50 + i) * 1_000_000).fields())
    pipe.execute()
    flood_ids = [e[0] for e in client.xrange(keys.events)][12 + 2:]
    query = start_query(spark, cfg, trigger_ms=0)
    try:
        query.processAllAvailable()
        client.xadd(keys.events, Event("A", "A9", t0 + 61_000_000).fields())
        query.processAllAvailable()
    finally:
        query.stop()
    totals = {k.decode(): int(v) for k, v in client.hgetall(keys.totals).items()}
    assert (totals["input"], totals["parsed"], totals["bad|name_flood"]) == (23, 15, 8)
    dead = client.xrange(keys.dead)
    assert [d[0] for d in dead] == flood_ids and {d[1][b"reason"] for d in dead} == {b"name_flood"}
    assert json.loads(dead[-1][1][b"raw"])["server"] == "f09"
    known = {k.decode() for k in client.hkeys(keys.seen)}
    assert known == {"A", "B", "C", "f00", "f01"}
    assert {w["server"] for w in build_document(client, keys)["windows"]} == known
    assert {k.decode() for k in client.hkeys(keys.online_counts)} <= known
    first, second = (json.loads(client.hget(keys.batch(b), "sink")) for b in (0, 1))
    assert first["refused"] == [f"f{i:02}" for i in range(2, 10)] and second["refused"] == []
    assert second["watermark_ms"] == first["next_watermark_ms"] == t0 // 1000 + 59_000 - 10_000
    # read again for a follower, batch 0 refuses what it refused then
    assert read_guard(client, keys, 0, {"f05": 1}).committed_refusal == tuple(first["refused"])
    reading = read_stack(client, keys, {}, now_ms=first["batch_ts_ms"] + 1_000, after_online_batch=None,
                         online_reach=0)
    memory = Memory(started_ms=0, reach_ms=60_000)
    memory.remember(reading.obs)
    flood = [f for f in evaluate(reading.obs, memory, AlertConfig()) if f.rule == "name_flood"]
    assert [f.active for f in flood] == [True] and flood[0].value == 8
    assert "f02, f03, f04, f05, f06" in flood[0].summary
