"""The generator's tests' fixtures: two scenarios' events, generated once a module, and a stream key of a test's
own."""

from __future__ import annotations

import uuid

import pytest

from streaming.rules.simulate import generate
from tests.store.generator import START
from watermark_client.events import Event


@pytest.fixture(scope="module")
def overseas() -> list[tuple[int, Event]]:
    return generate("overseas-lag", seed=7, start_us=START, rate=1000, count=10_000)


@pytest.fixture(scope="module")
def burst() -> list[tuple[int, Event]]:
    # 30 s of event time covers the first held-back chunk, [20 s, 25 s).
    return generate("late-burst", seed=3, start_us=START, rate=1000, count=30_000)


@pytest.fixture()
def key() -> str:
    return f"test:gen:{uuid.uuid4().hex}:events"
