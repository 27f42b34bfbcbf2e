"""The live job with lab lanes and no list of servers: an idle server holds the per-server min watermark back
until the job's idle markers release it (in the lane with idleness on only), a delay asked for on the control
hash restarts every query with it while the history stays, and a server never seen before is counted from its
first event in the pipeline and every lane."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import orjson
import pytest
import redis

from streaming.apps.redis_server import RedisServer, free_port
from streaming.rules.fleet import IdleDecision
from streaming.schema.config import lane_namespace
from streaming.schema.keys import KeySchema
from streaming.spark.checkpoint import job_secret
from streaming.store.control_store import write_control
from streaming.store.report import wait_for_commit
from tests.procs import Proc
from watermark_client.events import IDLE_KIND, Event, Rules, parse_entry
from watermark_client.timeutil import iso_from_us

pytestmark = pytest.mark.spark


def redis_now_us(client: redis.Redis) -> int:
    secs, micros = client.time()
    return secs * 1_000_000 + micros


def write(client: redis.Redis, keys: KeySchema, servers: str, n: int = 3) -> str:
    """``n`` events per server stamped with Redis' clock now; the last entry ID."""
    now = redis_now_us(client)
    last = ""
    for i in range(n):
        for s in servers:
            last = client.xadd(keys.events, Event(s, f"{s}{i}", now, "heartbeat").fields()).decode()
    return last


def wait_all(client: redis.Redis, spaces: list[KeySchema], last_id: str) -> None:
    for k in spaces:
        assert wait_for_commit(client, k, last_id, timeout_s=180), f"{k.namespace} did not commit {last_id}"


def state(client: redis.Redis, keys: KeySchema) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in client.hgetall(keys.state).items()}


def snapshot(client: redis.Redis, keys: KeySchema) -> tuple[dict[str, int], dict[str, str]]:
    """A pipeline's totals and state as of one committed batch."""
    pipe = client.pipeline(transaction=True)
    pipe.hgetall(keys.totals)
    pipe.hgetall(keys.state)
    totals, st = pipe.execute()
    return {f.decode(): int(v) for f, v in totals.items()}, {k.decode(): v.decode() for k, v in st.items()}


def test_lanes_idle_markers_and_a_delay_change(tmp_path: Path) -> None:
    server = RedisServer(data_dir=str(tmp_path / "redis"), port=free_port())
    server.start()
    ns = f"labjob-{uuid.uuid4().hex[:6]}"
    keys = KeySchema(ns)
    held, freed = (KeySchema(lane_namespace(ns, lane)) for lane in ("per-server-min", "per-server-min-idle"))
    env = {"REDIS_URL": server.url, "PIPELINE_NAMESPACE": ns, "WINDOW": "10s", "WATERMARK_DELAY": "2s",
           "TRIGGER_INTERVAL": "1s", "CHECKPOINT_DIR": str(tmp_path / "ck"), "SPARK_MASTER": "local[2]",
           "LAB_LANES": "per-server-min,per-server-min-idle", "IDLE_TIMEOUT": "3s"}  # no KNOWN_SERVERS
    job = Proc.python("job", ["streaming.apps.job"], env, tmp_path)
    client = redis.Redis.from_url(server.url, socket_timeout=60)
    try:
        # one query serves the pipeline, both lanes and the online view
        job.wait_for(rf"query watermark-{ns} running.*lanes per-server-min,per-server-min-idle", timeout=240)
        assert set(json.loads(v)["namespace"] for v in client.hgetall(keys.lanes).values()) == {
            held.namespace, freed.namespace}
        wait_all(client, [keys, held, freed], write(client, keys, "AB"))
        b_last_ms = int(state(client, held)["max_event_us|B"]) // 1000

        # B falls silent; A goes on until the job has written a marker for B (after IDLE_TIMEOUT of silence).
        cursor = client.xinfo_stream(keys.events)["last-generated-id"].decode()
        marker, marker_id = None, ""
        deadline = time.monotonic() + 120
        while marker is None and time.monotonic() < deadline:  # each round blocks until the stream grows
            last = write(client, keys, "A", n=1)
            reply = client.xread({keys.events: cursor}, block=10_000) or []
            for _stream, entries in reply:
                for entry_id, fields in entries:
                    cursor = entry_id.decode()
                    ev = parse_entry(fields, cursor)
                    # A may get a marker too when the first batch outlasts IDLE_TIMEOUT (it was silent in Redis)
                    if isinstance(ev, Event) and ev.kind == IDLE_KIND and ev.server == "B":
                        marker, marker_id = ev, cursor
            assert job.running(), job.tail()
        assert marker is not None and marker.server == "B", job.tail()
        # The job recorded its decision and why; a producer's marker (unsigned) is quarantined, not obeyed.
        decisions = [IdleDecision.from_record(f) for i, f in client.xrange(keys.idleness)
                     if f[b"marker_id"].decode() == marker_id]
        assert [(d.server, d.at_ms * 1000) for d in decisions] == [("B", marker.event_time_us)]
        assert decisions[0].silent_ms >= 3_000 and decisions[0].reason().startswith("silent for ")
        forged = client.xadd(keys.events, {"e": orjson.dumps({
            "server": "A", "player_id": "*", "kind": "idle",
            "event_time": iso_from_us(redis_now_us(client))})}).decode()
        last = write(client, keys, "A", n=1)  # after the marker: one more batch moves the watermarks
        wait_all(client, [keys, held, freed], last)
        held_state, freed_state = state(client, held), state(client, freed)
        assert int(held_state["next_watermark_ms"]) == b_last_ms - 2_000  # B holds the min back
        assert int(freed_state["next_watermark_ms"]) > b_last_ms  # B's markers released it
        # Totals and committed offset from one MULTI/EXEC per pipeline, as the sink writes them: the job goes on
        # committing (B's markers keep coming), and two separate reads straddled a batch in CI (6 ticks, 8 markers).
        snap = {k: snapshot(client, k) for k in (keys, held, freed)}
        totals = {k: t for k, (t, _) in snap.items()}
        (dead,) = [f for i, f in client.xrange(keys.dead, forged, forged)]
        assert dead[b"reason"] == b"forged_idle_marker" and totals[keys]["bad|forged_idle_marker"] == 1, dead
        signed = Rules(idle_key=job_secret(str(tmp_path / "ck")))
        for k in (keys, freed):  # every marker of the job's each pipeline has read is a tick, never an event
            read = client.xrange(keys.events, "-", snap[k][1]["committed_id"])
            markers = sum(1 for i, f in read if getattr(parse_entry(f, i.decode(), signed), "kind", None) == IDLE_KIND)
            assert totals[k]["ticks"] == markers >= 1, k.namespace
        assert totals[keys]["events"] == totals[held]["events"] == totals[freed]["events"]  # markers never count

        # The presenter asks for a 5 s delay: every query restarts with it; earlier batches keep theirs.
        write_control(client, keys, by="test", role="operator", delay_ms=5_000)
        job.wait_for(r"asked for watermark delay 5s", timeout=60)
        job.wait_for(rf"query watermark-{ns} running.* delay 5s", timeout=120)
        last = write(client, keys, "AB")
        wait_all(client, [keys, held, freed], last)
        for k in (keys, held, freed):
            ids = sorted(int(b) for b in client.zrange(k.batches, 0, -1))
            delays = [json.loads(client.hget(k.batch(i), "sink"))["delay_ms"] for i in ids]
            assert delays[0] == 2_000 and delays[-1] == 5_000 and delays == sorted(delays), (k.namespace, delays)
            assert json.loads(state(client, k)["params"])["delay_ms"] == 5_000

        # C, never seen before, mid-run: counted from its first event everywhere, no restart, nothing quarantined
        last = write(client, keys, "ABC")
        wait_all(client, [keys, held, freed], last)
        for k in (keys, held, freed):
            totals_now, _ = snapshot(client, k)
            assert totals_now["events|C"] == 3 and "bad|unknown_server" not in totals_now, k.namespace
        assert "max_event_us|C" in state(client, held)  # C has its own watermark in the lane from now on
        assert job.running(), job.tail()
    finally:
        job.stop()
        client.close()
        server.stop()
