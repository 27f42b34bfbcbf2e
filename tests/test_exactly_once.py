"""SIGKILL the real job process at random moments: Redis ends up exactly as after an uninterrupted run."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis

from streaming.events import PAYLOAD_FIELD
from streaming.keys import KeySchema
from tests.oracle import random_event_set

pytestmark = pytest.mark.spark
ROOT = Path(__file__).parents[1]
BATCH_CAP = 40
COMMIT_WAIT_MS = 180_000


def start_job(redis_url: str, ns: str, checkpoint: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ, "PYTHONPATH": str(ROOT), "REDIS_URL": redis_url, "PIPELINE_NAMESPACE": ns,
        "CHECKPOINT_DIR": str(checkpoint), "WINDOW": "10m", "SLIDE": "5m", "WATERMARK_DELAY": "5m",
        "MAX_EVENTS_PER_BATCH": str(BATCH_CAP), "TRIGGER_INTERVAL": "200ms", "SPARK_MASTER": "local[2]",
        "RETENTION": "36500d",
    }
    # Its own process group, so SIGKILL takes the JVM down with the Python driver: a real crash.
    return subprocess.Popen([sys.executable, "-m", "streaming.job"], env=env, cwd=ROOT, start_new_session=True,
                            stdout=log.open("ab"), stderr=subprocess.STDOUT)


def kill(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def wait_for_commit(client: redis.Redis, keys: KeySchema, after: str, until_id: str | None = None) -> str:
    """Block on the commits stream (no polling) until a commit arrives, or the one ending at until_id."""
    last = after
    while True:
        reply = client.xread({keys.commits: last}, block=COMMIT_WAIT_MS)
        assert reply, f"no commit within {COMMIT_WAIT_MS} ms"
        for entry_id, fields in reply[0][1]:
            last = entry_id.decode()
            if until_id is None or fields[b"end_id"].decode() == until_id:
                return last


def load(client: redis.Redis, keys: KeySchema, entries: list[tuple[str, bytes]]) -> None:
    pipe = client.pipeline()
    for entry_id, payload in entries:
        pipe.xadd(keys.events, {PAYLOAD_FIELD: payload}, id=entry_id)
    pipe.execute()


def snapshot(client: redis.Redis, keys: KeySchema) -> dict:
    """Everything the sink wrote except wall-clock facts (batch trigger time, processing lag, progress)."""
    out: dict = {}
    skip = {keys.events, keys.commits}
    for raw in client.keys(keys.namespace + ":*"):
        key = raw.decode()
        if key in skip:
            continue
        name = key[len(keys.namespace):]
        kind = client.type(raw)
        if kind == b"hash":
            h = {f.decode(): v.decode() for f, v in client.hgetall(raw).items()}
            h.pop("updated_ms", None)
            h.pop("progress", None)
            if "sink" in h:
                rec = json.loads(h["sink"])
                rec.pop("batch_ts_ms")
                for st in rec["servers"].values():
                    st.pop("processing_lag_ms")
                h["sink"] = rec
            out[name] = h
        elif kind == b"set":
            out[name] = sorted(client.smembers(raw))
        elif kind == b"zset":
            out[name] = client.zrange(raw, 0, -1, withscores=True)
        elif kind == b"stream":
            out[name] = client.xrange(raw)
    return out


def test_sigkill_at_random_moments_changes_nothing(redis_url: str, tmp_path: Path) -> None:
    rng = random.Random(20261122)
    lines = random_event_set(7, batches=10, per_batch=60)
    entries = [(f"{1_767_225_600_000 + i}-0", json.dumps({k: v for k, v in ln.items() if k != "batch"}).encode())
               for i, ln in enumerate(lines)]
    entries.insert(len(entries) // 2, (f"{1_767_225_600_000 + len(lines)}-1", b"{not json"))  # one bad entry too
    entries.sort()
    last_id = entries[-1][0]
    client = redis.Redis.from_url(redis_url, socket_timeout=COMMIT_WAIT_MS / 1000 + 10)
    run = uuid.uuid4().hex[:6]
    clean, crashed = KeySchema(f"clean-{run}"), KeySchema(f"crashed-{run}")
    load(client, clean, entries)
    load(client, crashed, entries)
    log = tmp_path / "job.log"

    proc = start_job(redis_url, clean.namespace, tmp_path / "ck-clean", log)
    try:
        wait_for_commit(client, clean, "0-0", until_id=last_id)
    finally:
        proc.terminate()
        proc.wait(timeout=60)

    seen, kills = "0-0", 0
    while kills < 3:
        proc = start_job(redis_url, crashed.namespace, tmp_path / "ck-crashed", log)
        seen = wait_for_commit(client, crashed, seen)
        try:  # a random moment after a commit: mid-batch, mid-commit, or between batches
            proc.wait(timeout=rng.uniform(0.0, 1.5))
        except subprocess.TimeoutExpired:
            pass
        kill(proc)
        kills += 1
        if client.hget(crashed.state, "committed_id") == last_id.encode():
            break
    assert client.hget(crashed.state, "committed_id") != last_id.encode(), "the kills came too late to matter"

    proc = start_job(redis_url, crashed.namespace, tmp_path / "ck-crashed", log)
    try:
        if client.hget(crashed.state, "committed_id") != last_id.encode():
            wait_for_commit(client, crashed, seen, until_id=last_id)
    finally:
        proc.terminate()
        proc.wait(timeout=60)

    expected, actual = snapshot(client, clean), snapshot(client, crashed)
    assert int(expected[":state"]["last_batch"]) >= len(entries) // BATCH_CAP
    assert actual == expected
