"""A primary, a replica and three Sentinels for each test that asks (:mod:`bench.failover.sentinels`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.failover.sentinels import SentinelGroup


@pytest.fixture()
def group(tmp_path: Path) -> Iterator[SentinelGroup]:
    servers = SentinelGroup(tmp_path / "sentinel-group")
    servers.start()
    yield servers
    servers.stop()
