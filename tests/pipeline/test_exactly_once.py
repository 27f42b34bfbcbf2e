"""SIGKILL the real job process at random moments: Redis ends up exactly as after an uninterrupted run,
and for every (window, server) accepted + dropped equals the raw events in the stream."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from streaming.apps.replay import route
from streaming.rules.simulate import generate
from streaming.schema.keys import KeySchema
from streaming.store.report import WindowKey
from streaming.store.report import wait_for_commit as online_committed
from tests.oracle import T0_MS, to_ms, windows_of
from tests.procs import kill_tree
from tests.seed import arrival_ids
from watermark_client.connection import home, open_client
from watermark_client.events import PAYLOAD_FIELD

pytestmark = [pytest.mark.spark, pytest.mark.long]
from tests.paths import ROOT  # noqa: E402

BATCH_CAP = 60
COMMIT_WAIT_MS = 180_000
KILLS = 5
WINDOW_MS, SLIDE_MS, DELAY_MS = 60_000, 30_000, 10_000


def start_job(redis_url: str, ns: str, checkpoint: Path, log: Path, shards: int = 1,
              groups: int = 0, module: str = "streaming.apps.job") -> subprocess.Popen[bytes]:
    """The job (or, with ``module="streaming.apps.online"``, ``wm-online`` with every group as a child, as
    ``./run.sh`` starts it) in its own process group; kill() takes what it started (the JVM, in a session of its
    own; the groups) down with it: a real crash."""
    return subprocess.Popen([sys.executable, "-m", module], env=job_env(redis_url, ns, checkpoint, shards, groups),
                            cwd=ROOT, start_new_session=True, stdout=log.open("ab"), stderr=subprocess.STDOUT)


def start_online(redis_url: str, ns: str, checkpoint: Path, log: Path, shards: int,
                 groups: int) -> subprocess.Popen[bytes] | None:
    """``wm-online`` beside the job when the online view is folded by groups (None without them)."""
    return start_job(redis_url, ns, checkpoint, log, shards, groups, "streaming.apps.online") if groups else None


def job_env(redis_url: str, ns: str, checkpoint: Path, shards: int, groups: int) -> dict[str, str]:
    return {
        **os.environ, "PYTHONPATH": str(ROOT), "REDIS_URL": redis_url, "PIPELINE_NAMESPACE": ns,
        "CHECKPOINT_DIR": str(checkpoint), "WINDOW": f"{WINDOW_MS}ms", "SLIDE": f"{SLIDE_MS}ms",
        "WATERMARK_DELAY": f"{DELAY_MS}ms", "MAX_FUTURE_SKEW": "off",
        "MAX_EVENTS_PER_BATCH": str(BATCH_CAP), "TRIGGER_INTERVAL": "200ms", "SPARK_MASTER": "local[2]",
        "RETENTION": "36500d", "STREAM_SHARDS": str(shards), "ONLINE_GROUPS": str(groups),
    }


def kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the driver and, at the same moment, everything it started: the JVM runs in a session of its
    own (so that a stop's signal reaches the driver alone), and a crash of the machine takes it down too."""
    kill_tree(proc.pid)
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


def load(client: redis.Redis, keys: KeySchema, entries: list[tuple[str, bytes]], shards: int = 1) -> str:
    """The entries in the input, each in its server's shard; returns the position of the last of each."""
    pipe = client.pipeline()
    last = ["0-0"] * shards
    for entry_id, payload in entries:
        k = route(payload, shards)
        pipe.xadd(keys.input_shard(k), {PAYLOAD_FIELD: payload}, id=entry_id)
        last[k] = entry_id
    pipe.execute()
    return ",".join(last)


def snapshot(client: redis.Redis, keys: KeySchema) -> dict:
    """Everything the sink wrote except wall-clock facts (batch trigger time, processing lag, progress and the
    batch durations' histogram, the sink's phase timings, when the job was stopped, the flood guard's minute, how
    much input the trim took by time, and the online view's minutes and day's peaks, which are kept by batch
    time): the windows, and the online view's players, counts and per-batch history."""
    out: dict = {}
    skip = {*(keys.input_shard(k) for k in range(256)), *(keys.trimmed_of(k) for k in range(256)), keys.commits,
            keys.online_commits,
            keys.online_minutes, keys.batch_seconds}
    for raw in home(client, keys.state).keys(keys.namespace + ":*"):  # a cluster's: the namespace's one node
        key = raw.decode()
        if key in skip or key.startswith(tuple(keys.namespace + k for k in (":online:peak:", ":online:group:",
                                                                             ":handoff:"))):
            continue  # (the groups' guards and the hand-off are how the view was folded, not what it says)
        name = key[len(keys.namespace):]
        kind = client.type(raw)
        if kind == b"hash":
            h = {f.decode(): v.decode() for f, v in client.hgetall(raw).items()}
            # the flood guard's minute counts new names by batch time: a run across a minute counts them in two
            for wall_clock in ("updated_ms", "progress", "phases", "batch_ts_ms", "minute", "stopped_ms",
                               "name_guard"):
                h.pop(wall_clock, None)
            if "sink" in h:
                rec = json.loads(h["sink"])
                rec.pop("batch_ts_ms")
                for st in rec["servers"].values():
                    st.pop("processing_lag_ms")
                h["sink"] = rec
            out[name] = h
        elif kind == b"set":
            out[name] = sorted(client.smembers(raw))
        elif key == keys.online_history:
            records = [json.loads(m) for m in client.zrange(raw, 0, -1)]
            out[name] = [{k: v for k, v in rec.items() if k != "batch_ts_ms"} for rec in records]
        elif kind == b"zset":
            out[name] = client.zrange(raw, 0, -1, withscores=True)
        elif kind == b"stream":
            out[name] = client.xrange(raw)
    return out


def seeded_entries(seed: int, count: int) -> list[tuple[str, bytes]]:
    """The late-burst scenario, with entry IDs at the simulated arrival times, and one bad entry."""
    events = generate("late-burst", seed=seed, start_us=T0_MS * 1000, rate=10, count=count)
    entries = [(entry_id, ev.payload()) for (_, ev), entry_id in zip(events, arrival_ids(events), strict=True)]
    entries.append((f"{events[-1][0] // 1000 + 1}-0", b"{not json"))
    return entries


def kill_entries() -> list[tuple[str, bytes]]:
    """What every SIGKILL case and its uninterrupted run read."""
    return seeded_entries(seed=5, count=1_800)


def raw_per_window(payloads: list[bytes], window_ms: int = WINDOW_MS, slide_ms: int = SLIDE_MS) -> dict[str, int]:
    """Raw events per (window, server) of what was written to the stream (the sink trims what it has committed)."""
    out: dict[str, int] = {}
    for payload in payloads:
        try:
            ev = json.loads(payload)
        except ValueError:
            continue
        t = to_ms(ev["event_time"][:23] + "Z")
        for start, end in windows_of(t, window_ms, slide_ms):
            member = f"{start}:{end}:{ev['server']}"
            out[member] = out.get(member, 0) + 1
    return out


def counted_per_window(client: redis.Redis, keys: KeySchema) -> dict[str, int]:
    """Accepted + dropped per (window, server), as the sink wrote them."""
    return {m.decode(): sum(int(v or 0) for v in client.hmget(keys.window(WindowKey.parse(m)), ["events", "dropped"]))
            for m in client.zrange(keys.windows, 0, -1)}


@pytest.fixture(scope="module")
def uninterrupted(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], tuple[KeySchema, str]]:
    """The entries through the job with no kill, on one Redis, once per shard count: every crashed run with that
    many shards (on a Redis Cluster, or with the view folded by groups) must end exactly as it. Returns its
    namespace and the position of the last entry of each shard."""
    runs: dict[int, tuple[KeySchema, str]] = {}

    def run(shards: int) -> tuple[KeySchema, str]:
        if shards not in runs:
            client = redis.Redis.from_url(redis_url, socket_timeout=COMMIT_WAIT_MS / 1000 + 10)
            clean = KeySchema(f"clean-{uuid.uuid4().hex[:6]}")
            last_id = load(client, clean, kill_entries(), shards)
            tmp = tmp_path_factory.mktemp(f"clean-{shards}")
            proc = start_job(redis_url, clean.namespace, tmp / "ck", tmp / "job.log", shards)
            try:
                wait_for_commit(client, clean, "0-0", until_id=last_id)
                assert online_committed(client, clean, last_id, timeout_s=COMMIT_WAIT_MS / 1000, online=True)
            finally:
                proc.terminate()
                proc.wait(timeout=60)
            runs[shards] = clean, last_id
        return runs[shards]

    return run


# Two cases: one shard on one Redis with the job folding the view, and every other part at once (four shards, a
# Redis Cluster, the view folded by two groups). Each part's own behaviour without kills is tested apart
# (tests/pipeline/test_pipeline.py, tests/cluster, tests/store/online); a kill cycle costs seven job starts.
@pytest.mark.parametrize(("shards", "where", "groups"), [(1, "redis", 0), (4, "cluster", 2)])
def test_sigkill_at_random_moments_changes_nothing(redis_url: str, tmp_path: Path, shards: int, where: str,
                                                   groups: int, request: pytest.FixtureRequest,
                                                   uninterrupted: Callable[[int], tuple[KeySchema, str]]) -> None:
    """The second case takes four shards (each shard's offsets in the checkpoint and the guard's position shard by
    shard) in a Redis Cluster of three primaries (decision 0018), with the online view folded by two ``wm-online``
    groups (decision 0020) killed with the job: under a braced namespace, its input shards on at least two nodes,
    it ends exactly as the uninterrupted run on one Redis, whose job folded the view itself."""
    rng = random.Random(20261122)
    entries = kill_entries()
    client_clean = redis.Redis.from_url(redis_url, socket_timeout=COMMIT_WAIT_MS / 1000 + 10)
    crashed_url = request.getfixturevalue("redis_cluster").url if where == "cluster" else redis_url
    client = open_client(crashed_url, socket_timeout=COMMIT_WAIT_MS / 1000 + 10)
    clean, last_id = uninterrupted(shards)
    run = uuid.uuid4().hex[:6]
    crashed = KeySchema(f"{{crashed-{run}}}" if where == "cluster" else f"crashed-{run}")
    assert load(client, crashed, entries, shards) == last_id
    if where == "cluster":
        assert len({client.get_node_from_key(crashed.input_shard(k)).port for k in range(4)}) >= 2
    if shards > 1:  # the late-burst servers A, B, C read from two shards, the bad entry from a third
        assert sum(i != "0-0" for i in last_id.split(",")) == 3
    log = tmp_path / "job.log"

    seen, kills = "0-0", 0
    while kills < KILLS:
        proc = start_job(crashed_url, crashed.namespace, tmp_path / "ck-crashed", log, shards, groups)
        online = start_online(crashed_url, crashed.namespace, tmp_path / "ck-crashed", log, shards, groups)
        seen = wait_for_commit(client, crashed, seen)
        try:  # a random moment after a commit: mid-batch, mid-commit, or between batches
            proc.wait(timeout=rng.uniform(0.0, 1.5))
        except subprocess.TimeoutExpired:
            pass
        kill(proc)
        if online is not None:  # the groups a moment later (they fold what was handed off meanwhile)
            try:
                online.wait(timeout=rng.uniform(0.0, 0.5))
            except subprocess.TimeoutExpired:
                pass
            kill(online)
        kills += 1
        if client.hget(crashed.state, "committed_id") == last_id.encode():
            break
    assert client.hget(crashed.state, "committed_id") != last_id.encode(), "the kills came too late to matter"

    proc = start_job(crashed_url, crashed.namespace, tmp_path / "ck-crashed", log, shards, groups)
    online = start_online(crashed_url, crashed.namespace, tmp_path / "ck-crashed", log, shards, groups)
    try:
        if client.hget(crashed.state, "committed_id") != last_id.encode():
            wait_for_commit(client, crashed, seen, until_id=last_id)
        assert online_committed(client, crashed, last_id, timeout_s=COMMIT_WAIT_MS / 1000, online=True)
    finally:
        for p in (proc, online):
            if p is not None:
                p.terminate()
                p.wait(timeout=60)
    if groups:  # each group folded every batch, and nothing was left for them
        assert {int(client.hget(crashed.online_group(g, groups), "last_batch")) for g in range(groups)} == {
            int(client.hget(crashed.online_state, "last_batch"))}
        assert not list(client.scan_iter(f"{crashed.namespace}:handoff:rows:*"))
        assert not client.zcard(crashed.online_parts_index)

    assert kills == KILLS
    expected, actual = snapshot(client_clean, clean), snapshot(client, crashed)
    assert int(expected[":state"]["last_batch"]) >= len(entries) // BATCH_CAP
    assert actual == expected
    assert sum(int(v) for v in expected[":online:counts"].values()) > 0  # the online view was compared too
    # Nothing lost, nothing counted twice: every raw event is accepted or dropped, once per window.
    assert counted_per_window(client, crashed) == raw_per_window([p for _, p in entries])
    assert int(client.hget(crashed.totals, "dropped")) > 0, "the late bursts must be dropped for this to mean much"
