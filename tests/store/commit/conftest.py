"""The commit tests' fixtures."""

from __future__ import annotations

import uuid

import pytest

from streaming.schema.keys import KeySchema


@pytest.fixture()
def keys() -> KeySchema:
    return KeySchema(f"t-{uuid.uuid4().hex[:8]}")
