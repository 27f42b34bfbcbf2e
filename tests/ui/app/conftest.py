"""The seeded pipeline every AppTest module of this package reads (seeded once for them all), the dashboard's
environment pointing at it, and a client reading Redis directly."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from pyspark.sql import SparkSession

from streaming.schema.keys import KeySchema
from tests.seed import Seeded, seed_pipeline


@pytest.fixture(scope="package")
def seeded(spark: SparkSession, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    return seed_pipeline(redis_url, tmp_path_factory.mktemp("dash"))


@pytest.fixture()
def env(seeded: Seeded, monkeypatch: pytest.MonkeyPatch) -> Seeded:
    monkeypatch.setenv("REDIS_URL", seeded.cfg.redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", seeded.cfg.namespace)
    # The pages judge retirement by the wall clock: the seed's servers stay live however long the module runs (on
    # a loaded machine it ran past the default 10 minutes, and two of the three servers left the pages). The
    # retirement test sets its own.
    monkeypatch.setenv("RETIRE_AFTER", "1d")
    return seeded


@pytest.fixture()
def direct(seeded: Seeded) -> Iterator[tuple[redis.Redis, KeySchema]]:
    client = redis.Redis.from_url(seeded.cfg.redis_url, decode_responses=True)
    yield client, KeySchema(seeded.cfg.namespace)
    client.close()
