"""The control plane's tests' fixtures: a namespace of their own and a client that decodes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from streaming.schema.keys import KeySchema


@pytest.fixture()
def keys() -> KeySchema:
    return KeySchema(f"ctl-{uuid.uuid4().hex[:8]}")


@pytest.fixture()
def rd(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()
