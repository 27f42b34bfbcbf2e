"""The Node.js producer's fixtures (``node_stand``): Node.js ready once a session, a fresh Redis a test."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from streaming.apps.redis_server import RedisServer, server_version
from streaming.schema.acl import part_rules, user_name
from tests.client.node_stand import NS, Stand, ready_node


@pytest.fixture(scope="session")
def node() -> str:
    return ready_node()


@pytest.fixture()
def stand(tmp_path: Path) -> Iterator[Stand]:
    server = RedisServer(data_dir=str(tmp_path / "redis"), port=0)
    server.start()
    admin = redis.Redis(port=server.port, socket_timeout=10)
    url = server.url
    if server_version(server.binary) >= (7, 0):  # production's users need Redis 7 (streaming.schema.acl)
        password = secrets.token_urlsafe(16)
        line = part_rules(NS)["producer"].line(user_name("producer"), password)
        admin.execute_command("ACL", "SETUSER", *line.split()[1:])
        url = f"redis://{user_name('producer')}:{password}@{server.bind}:{server.port}/0"
    yield Stand(server, admin, url)
    admin.close()
    server.stop()
