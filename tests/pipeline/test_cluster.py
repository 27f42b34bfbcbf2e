"""Beyond one machine: the unchanged job on a Spark standalone cluster (a master and two workers of one core each on
127.0.0.1, started with the pip package's ``sbin/spark-daemon.sh``), with its input in four shards, and against a
Redis over TLS (``rediss://``, a CA made by the test), gives the same check document as local mode over plain TCP
and the oracle."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from streaming.apps.redis_server import free_port
from streaming.rules.simulate import generate
from streaming.schema.keys import KeySchema
from streaming.schema.shards import share
from streaming.spark.cluster import CLIENT_DIR, PACKAGE_DIR, is_local_master, package_zip
from streaming.spark.standalone import Standalone, can_start, standalone
from streaming.store.report import build_document, wait_for_commit
from tests.oracle import T0_MS, oracle
from tests.pipeline.test_exactly_once import load
from tests.procs import Proc
from tests.seed import arrival_ids
from watermark_client.stream import shard_of
from watermark_client.timeutil import iso_from_us

pytestmark = pytest.mark.long  # (its Spark tests are marked one by one)
START_TIMEOUT_S = 120
COMMIT_TIMEOUT_S = 300
EVENTS, BATCH_CAP = 600, 200  # all written before the job starts: three micro-batches of exactly 200 entries
WINDOW_MS, SLIDE_MS, DELAY_MS = 60_000, 30_000, 10_000


@pytest.mark.parametrize(
    ("master", "local"),
    [
        ("local", True),  # one thread
        ("local[2]", True),
        ("local[*]", True),
        ("local[2,3]", True),  # with task retries: still one process
        (" local[*] ", True),  # stray spaces from an env file
        ("spark://10.0.0.5:7077", False),  # standalone cluster
        ("spark://a:7077,b:7077", False),  # standalone with standby masters
        ("local-cluster[2,1,1024]", False),  # separate executor processes: they need the package too
        ("yarn", False),
        ("k8s://https://kube:6443", False),
        ("localhost", False),  # not a local master, whatever it looks like
    ],
)
def test_which_masters_run_executors_elsewhere(master: str, local: bool) -> None:
    assert is_local_master(master) is local


def test_package_zip_is_importable_alone_and_named_by_content(tmp_path: Path) -> None:
    first, again = package_zip(out_dir=tmp_path / "a"), package_zip(out_dir=tmp_path / "b")
    assert first.name == again.name and first.read_bytes() == again.read_bytes()  # same code, same file
    assert first.name.startswith("streaming-") and first.suffix == ".zip"
    client = package_zip(CLIENT_DIR, out_dir=tmp_path / "a")  # shipped beside it: the event format's package
    probe = "import watermark_client.events as e; print(e.__file__)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(client)},
                         capture_output=True, text=True, timeout=120)
    assert client.name.startswith("watermark_client-") and out.stdout.strip() == str(
        client / "watermark_client" / "events.py"), out.stderr
    # Only the zip on the path, run from elsewhere: how an executor's Python worker imports the source.
    probe = "import streaming.spark.source.read as s, streaming.spark.sink; print(s.__file__)"  # a sub-package too
    env = {**os.environ, "PYTHONPATH": str(first)}  # ahead of the installed package, as on an executor
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(first / "streaming" / "spark" / "source" / "read.py")

    changed = tmp_path / "copy" / "streaming"
    shutil.copytree(PACKAGE_DIR, changed, ignore=shutil.ignore_patterns("__pycache__"))
    (changed / "rules" / "windows.py").write_text((changed / "rules" / "windows.py").read_text() + "\n# changed\n")
    assert package_zip(changed, out_dir=tmp_path / "a").name != first.name  # new code, new name: shipped anew


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """A master and two workers of one core each: the job's two executors on two "machines". The port picked for
    the first worker's web UI is taken before it binds, as a test beside it once took one: the worker binds the
    next, and the cluster names the port it bound (a socket that never answers holds the taken one)."""
    why = can_start()
    if why is not None:
        pytest.skip(f"cannot start Spark daemons: {why}")
    picks = iter(range(4))
    with socket.create_server(("127.0.0.1", 0)) as taken, pytest.MonkeyPatch.context() as mp:
        held = taken.getsockname()[1]
        mp.setattr("streaming.spark.standalone.free_port", lambda: held if next(picks, None) == 2 else free_port())
        with standalone(tmp_path_factory.mktemp("spark-cluster"), workers=2, cores=1,
                        timeout_s=START_TIMEOUT_S) as cluster:
            assert held not in {int(ui.rsplit(":", 1)[1]) for ui in cluster.worker_uis}, cluster
            yield cluster


def start_job(name: str, redis_url: str, master: str, entries: list[tuple[str, bytes]],
              tmp_path: Path, shards: int = 1) -> tuple[KeySchema, Proc, str]:
    """The real job process on ``master``, over the entries loaded into a fresh namespace (each in its server's
    shard); with the position of the last entry of each shard."""
    keys = KeySchema(f"{name}-{uuid.uuid4().hex[:6]}")
    last = load(redis.Redis.from_url(redis_url), keys, entries, shards)
    env = {
        "STREAM_SHARDS": str(shards),
        "REDIS_URL": redis_url, "PIPELINE_NAMESPACE": keys.namespace, "CHECKPOINT_DIR": str(tmp_path / f"ck-{name}"),
        "WINDOW": f"{WINDOW_MS}ms", "SLIDE": f"{SLIDE_MS}ms", "WATERMARK_DELAY": f"{DELAY_MS}ms",
        "MAX_FUTURE_SKEW": "off", "MAX_EVENTS_PER_BATCH": str(BATCH_CAP), "TRIGGER_INTERVAL": "200ms",
        "SPARK_MASTER": master, "RETENTION": "36500d",
    }
    return keys, Proc.python(name, ["streaming.apps.job"], env, tmp_path), last


def sharded_batches(servers: list[str], shards: int, cap: int) -> list[int]:
    """Each entry's batch when the entries (of these servers, in arrival order) are all in their servers' shards
    before the job starts and batches are capped at ``cap``: each batch takes, shard by shard, the first of what
    is left, as many as ``share`` gives the shard of the backlogs counted to one past the cap (decision 0017)."""
    left = [[i for i, s in enumerate(servers) if shard_of(s, shards) == k] for k in range(shards)]
    out = [0] * len(servers)
    batch = 0
    while any(left):
        for k, n in enumerate(share([min(len(q), cap + 1) for q in left], cap)):
            for i in left[k][:n]:
                out[i] = batch
            left[k] = left[k][n:]
        batch += 1
    return out


@pytest.mark.spark
# Four shards only: one stream cut into partitions is local mode's case everywhere else, and what a cluster adds
# (the shipped package, executors reading Redis on other workers) four shards take too.
@pytest.mark.parametrize("shards", [4])
def test_job_on_a_standalone_cluster_matches_local_mode_and_the_oracle(
        spark_cluster: Standalone, redis_url: str, tmp_path: Path, shards: int) -> None:
    """Two workers of one core each; the input in four shards (a partition or more a shard, the cap shared by
    backlog): the same document as local mode, and the oracle's for the same batches."""
    events = generate("late-burst", seed=3, start_us=T0_MS * 1000, rate=10, count=EVENTS)
    entries = [(entry_id, ev.payload()) for entry_id, (_, ev) in zip(arrival_ids(events), events, strict=True)]
    batch_of = sharded_batches([ev.server for _, ev in events], shards, BATCH_CAP)
    lines = [{"batch": batch_of[i], "server": ev.server, "player_id": ev.player_id,
              "event_time": iso_from_us(ev.event_time_us)} for i, (_, ev) in enumerate(events)]
    client = redis.Redis.from_url(redis_url, socket_timeout=30)  # above wait_for_commit's 5 s blocks
    # Both jobs at once (their batches are fixed by the cap, not by timing): the test takes one job's time.
    runs = {name: start_job(name, redis_url, master, entries, tmp_path, shards)
            for name, master in (("cluster", spark_cluster.master_url), ("local", "local[2]"))}
    try:
        for name, (keys, proc, last) in runs.items():
            assert wait_for_commit(client, keys, last, COMMIT_TIMEOUT_S), \
                f"{name} did not commit the last entry:\n{proc.tail()}"
        runs["cluster"][1].wait_for(rf"master {spark_cluster.master_url}", timeout=10)
        master = spark_cluster.state(spark_cluster.master_ui)
        workers = [spark_cluster.state(ui) for ui in spark_cluster.worker_uis]
    finally:
        codes = {name: proc.stop() for name, (_, proc, _) in runs.items()}
    for name, code in codes.items():
        assert code == 0, f"{name} job exited {code}:\n{runs[name][1].tail(80)}"
    clustered, local = (build_document(client, runs[name][0]) for name in ("cluster", "local"))

    expected = oracle(lines, WINDOW_MS, SLIDE_MS, DELAY_MS)
    assert len(expected["batches"]) == (EVENTS // BATCH_CAP if shards == 1 else max(batch_of) + 1)
    assert clustered == local
    assert clustered["batches"] == expected["batches"]
    assert clustered["windows"] == expected["windows"]
    assert sum(b["dropped"] for b in clustered["batches"]) > 0, "the late bursts must be dropped"
    if shards > 1:  # A and C share shard 3, B is in 1: batches mix two shards' entries
        assert {shard_of(ev.server, shards) for _, ev in events} == {1, 3}

    # The work really ran on the cluster: the master granted the job a core on each worker, and each worker's
    # executor received the shipped `streaming` package.
    apps = [a for a in master["activeapps"] if a["name"] == "watermark-pipeline"]
    assert len(apps) == 1 and apps[0]["cores"] == 2, master
    assert [w["state"] for w in master["workers"]] == ["ALIVE", "ALIVE"]
    for worker, work_dir in zip(workers, spark_cluster.work_dirs, strict=True):
        assert [e["appid"] for e in worker["executors"]] == [apps[0]["id"]], worker
        app_dir = work_dir / apps[0]["id"]
        shipped = [len(list(app_dir.glob(f"*/{name}-*.zip"))) for name in ("streaming", "watermark_client")]
        assert shipped == [1, 1], sorted(p.name for p in app_dir.rglob("*"))  # the pipeline and its client package


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server that speaks only TLS, its certificate signed by a CA made here: the URL to reach it, the
    CA to check it by in the URL (``ssl_ca_certs``) as a user would write it."""
    from streaming.apps.redis_server import redis_server_binary

    if shutil.which("openssl") is None:
        pytest.fail("openssl is missing: apt-get install openssl")
    d = tmp_path_factory.mktemp("tls")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
             "-subj", "/CN=watermark test CA", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj",
             "/CN=127.0.0.1", cwd=d)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out",
             "server.crt", "-days", "2", "-extfile", "san.ext", cwd=d)
    port = free_port()
    server = Proc("redis-tls", [redis_server_binary(), "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
                                "--tls-cert-file", str(d / "server.crt"), "--tls-key-file", str(d / "server.key"),
                                "--tls-ca-cert-file", str(d / "ca.crt"), "--tls-auth-clients", "no", "--dir", str(d),
                                "--save", "", "--appendonly", "no"], {}, d)
    try:
        server.wait_for(r"Ready to accept connections", timeout=60)
        yield f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={d / 'ca.crt'}&ssl_cert_reqs=required"
    finally:
        server.stop()


@pytest.mark.spark
def test_the_job_over_tls_gives_what_it_gives_over_tcp_and_the_oracle(tls_redis: str, redis_url: str,
                                                                      tmp_path: Path) -> None:
    """The same events through the real job on each transport at once: the check documents are equal, and the
    oracle's; the producer's raw transactions (decision 0010) and the monitor's reading go over TLS as well."""
    from streaming.store.observe import read_stack
    from watermark_client import Producer

    assert redis.Redis.from_url(tls_redis).connection_pool.connection_class is redis.SSLConnection
    with pytest.raises(redis.ConnectionError):  # it speaks TLS only: plain TCP to it gets nowhere
        redis.Redis(port=int(tls_redis.split(":")[2].split("/")[0]), socket_timeout=5).ping()
    events = generate("late-burst", seed=3, start_us=T0_MS * 1000, rate=10, count=EVENTS)
    entries = [(entry_id, ev.payload()) for entry_id, (_, ev) in zip(arrival_ids(events), events, strict=True)]
    lines = [{"batch": i // BATCH_CAP, "server": ev.server, "player_id": ev.player_id,
              "event_time": iso_from_us(ev.event_time_us)} for i, (_, ev) in enumerate(events)]
    runs = {name: (url, *start_job(name, url, "local[2]", entries, tmp_path)[:2])
            for name, url in (("tcp", redis_url), ("tls", tls_redis))}
    try:
        for name, (url, keys, proc) in runs.items():
            client = redis.Redis.from_url(url, socket_timeout=30)
            assert wait_for_commit(client, keys, entries[-1][0], COMMIT_TIMEOUT_S), \
                f"{name} did not commit the last entry:\n{proc.tail()}"
    finally:
        codes = {name: proc.stop() for name, (_, _, proc) in runs.items()}
    for name, code in codes.items():
        assert code == 0, f"{name} job exited {code}:\n{runs[name][2].tail(80)}"
    docs = {name: build_document(redis.Redis.from_url(url, socket_timeout=30), keys)
            for name, (url, keys, _) in runs.items()}
    expected = oracle(lines, WINDOW_MS, SLIDE_MS, DELAY_MS)
    assert docs["tls"] == docs["tcp"]
    assert docs["tls"]["batches"] == expected["batches"] and docs["tls"]["windows"] == expected["windows"]

    tls = redis.Redis.from_url(tls_redis, socket_timeout=30)
    keys = runs["tls"][1]
    reading = read_stack(tls, keys, {}, int(tls.time()[0]) * 1000, None, 0)
    assert reading.obs.redis_error is None and reading.obs.main is not None
    assert reading.obs.main.last_batch == len(expected["batches"]) - 1
    with Producer(tls_redis, stream_key=f"{keys.namespace}:produced") as producer:
        for i in range(500):
            producer.send({"server": "A", "player_id": f"p{i}", "kind": "login", "event_time": "2026-11-26T10:00:00Z",
                           "event_id": f"tls-{i}"})
    assert tls.xlen(f"{keys.namespace}:produced") == 500 and producer.stats.written == 500

