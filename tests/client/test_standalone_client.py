"""The game servers' client installs alone: ``pip install ./clients/python`` into an empty virtualenv gives
``watermark_client`` with only redis, hiredis and orjson (no Spark, no Streamlit, nothing of the pipeline), and its
``Producer`` writes events the pipeline's own parser reads back exactly (docs/ingest.md, *Installing the client*)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from streaming.apps.redis_server import RedisServer
from tests.client.test_ingest_doc import DOC, FENCE
from watermark_client.events import Event, parse_entry

ROOT = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent("""
    import importlib.metadata, importlib.util, sys
    from datetime import UTC, datetime

    from watermark_client import Producer

    absent = [m for m in ("pyspark", "streamlit", "pandas", "pyarrow", "streaming", "dashboard")
              if importlib.util.find_spec(m) is not None]
    installed = sorted(d.metadata["Name"].lower() for d in importlib.metadata.distributions())
    with Producer(sys.argv[1], namespace=sys.argv[2]) as producer:
        producer.send({"event_id": "s-1", "server": "eu-9", "player_id": "p1", "kind": "login",
                       "event_time": datetime.now(UTC), "region": "eu"})
        producer.send({"event_id": "s-2", "server": "eu-9", "player_id": "p1", "kind": "logout",
                       "event_time": datetime.now(UTC), "region": "eu"})
    print("present:", absent)
    print("installed:", " ".join(installed))
""")


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty virtualenv with the client installed as a game server would: from its folder, nothing else."""
    base = tmp_path_factory.mktemp("client")
    shutil.copytree(ROOT / "clients" / "python", base / "clients" / "python",  # pip builds in place: not the clone
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    (line,) = [b.split("#")[0].split() for tag, b in FENCE.findall(DOC.read_text()) if tag == "sh"]
    assert line == ["pip", "install", "./clients/python"], line  # the docs' install line, run as written there
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *line[2:]],
                          cwd=base, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"pip install ./clients/python failed:\n{done.stdout}\n{done.stderr}"
    return python


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[RedisServer]:
    srv = RedisServer(data_dir=str(tmp_path / "redis"), port=0)
    srv.start()
    yield srv
    srv.stop()


def test_the_client_installs_alone_and_writes_what_the_pipeline_reads(client_venv: Path,
                                                                      server: RedisServer) -> None:
    ns = f"alone-{uuid.uuid4().hex[:6]}"
    run = subprocess.run([str(client_venv), "-c", PROBE, server.url, ns], capture_output=True, text=True,
                         timeout=120, cwd="/")
    assert run.returncode == 0, run.stderr
    lines = dict(line.split(": ", 1) for line in run.stdout.strip().splitlines())
    assert lines["present"] == "[]", f"the client's virtualenv holds {lines['present']}"
    installed = set(lines["installed"].split())
    assert {"watermark-client", "redis", "hiredis", "orjson"} <= installed
    assert not installed & {"pyspark", "streamlit", "pandas", "pyarrow", "watermark-dashboard"}
    got = []
    for entry_id, fields in redis.Redis.from_url(server.url).xrange(f"{ns}:events"):
        parsed = parse_entry(fields, entry_id.decode())
        assert isinstance(parsed, Event), parsed
        got.append((parsed.event_id, parsed.server, parsed.player_id, parsed.kind, parsed.region))
    assert got == [("s-1", "eu-9", "p1", "login", "eu"), ("s-2", "eu-9", "p1", "logout", "eu")]
