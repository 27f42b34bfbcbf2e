"""docs/wire-format.md, the protocol a producer in any language follows, and the Node.js producer written from it
(clients/node), against a real redis-server through production's producer user: each event it writes is the one
the pipeline's own parser reads, on its fast path; none is doubled or lost when replies are lost on purpose, when
Redis is full or when the stream is at its bound. The page's numbers are the code's, so it cannot drift."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import redis

from streaming.apps.redis_server import RedisServer, server_version
from streaming.schema.acl import CONNECTION, part_rules, user_name
from streaming.schema.config import Config, ConfigError
from streaming.schema.keys import KeySchema
from streaming.spark.rows import FAST_SHAPE
from watermark_client import encode_event
from watermark_client.batch_channel import MARKER_TTL_S
from watermark_client.events import KINDS, NAME_LIMITS, Event, bad_name, parse_entry, parse_payload
from watermark_client.producer import FIELDS
from watermark_client.stream import input_shard_key, producer_marker_key, shard_of

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / "clients" / "node"
SPEC = ROOT / "docs" / "wire-format.md"
NS = "wm"
KEYS = KeySchema(NS)
T0_MS = 1_795_860_000_000  # 2026-11-28T10:00:00Z


# ---------------------------------------------------------------------------------------------- the page's numbers


def between(tag: str) -> str:
    """The text the page holds between ``<!-- tag -->`` and ``<!-- /tag -->``, on one line."""
    m = re.search(rf"<!-- {tag} -->(.*?)<!-- /{tag} -->", SPEC.read_text(), re.S)
    assert m, f"docs/wire-format.md has no <!-- {tag} --> mark"
    return " ".join(m.group(1).split())


def code_value(ref: str) -> object:
    """``module.name``, ``module.Class.name``, ``module.name["key"]`` or ``module.Callable(param)`` (that
    parameter's default)."""
    m = re.fullmatch(r"([\w.]+)(?:\[\"(\w+)\"\]|\((\w+)\))?", ref)
    assert m, ref
    path, key, param = m.groups()
    parts = path.split(".")
    n = len(parts) - 1
    while True:  # the longest prefix that is a module; the rest are attributes
        try:
            value: Any = importlib.import_module(".".join(parts[:n]))
            break
        except ModuleNotFoundError:
            n -= 1
    for name in parts[n:]:
        value = getattr(value, name)
    if key is not None:
        value = value[key]
    if param is not None:
        value = inspect.signature(value).parameters[param].default
    return value


def numbers() -> list[tuple[str, str, str]]:
    table = SPEC.read_text().split("\n## Numbers\n")[1]
    rows = re.findall(r"^\| ([^|]+) \| ([^|]+) \| `([^`]+)` \|$", table, re.M)
    assert len(rows) >= 15, rows
    return rows


@pytest.mark.parametrize(("what", "said", "ref"), numbers(), ids=[r[0] for r in numbers()])
def test_each_number_the_page_states_is_the_codes(what: str, said: str, ref: str) -> None:
    value, said = code_value(ref), said.strip("` ")
    if isinstance(value, (tuple, list)):
        assert [w.strip() for w in said.split(",")] == list(value), what
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        assert said == value, what
    else:
        assert float(said.replace(",", "")) == value, what


def test_the_page_says_its_numbers_where_it_uses_them() -> None:
    for field, limit in NAME_LIMITS.items():
        assert re.search(rf"^\| `{field}` \|[^\n]*at most {limit} characters", SPEC.read_text(), re.M), field
    text = " ".join(SPEC.read_text().split())
    assert f"SET {{marker}} {{seq}} EX {MARKER_TTL_S}" in text and f"{MARKER_TTL_S} s = 7 days" in text
    assert f"`MAX_FUTURE_SKEW` (default {Config.max_future_skew_ms:,} ms" in text
    assert f"`STREAM_MAX_ENTRIES` (default {Config.stream_max_entries:,})" in text
    assert between("order") == ", ".join(f"`{f}`" for f in FIELDS)
    assert re.findall(r"\?P<(\w+)>", FAST_SHAPE) == list(FIELDS)  # the fast path's order is the producer's
    assert between("producer") == ", ".join(f"`{c[1:].upper()}`" for c in part_rules(NS)["producer"].commands
                                             if c not in CONNECTION)


def code_points(text: str) -> set[int]:
    out: set[int] = set()
    for first, last in re.findall(r"U\+([0-9A-F]{4,6})(?:–U\+([0-9A-F]{4,6}))?", text):
        out.update(range(int(first, 16), int(last or first, 16) + 1))
    return out


def test_the_characters_the_page_forbids_are_the_parsers() -> None:
    """Every code point the parser refuses inside a name, and every one it refuses only at a name's edge (a space),
    is the page's list: scanned over all of Unicode through ``bad_name`` itself."""
    invisible, spaces = set(), set()
    for cp in (*range(0xD800), *range(0xE000, 0x110000)):
        c = chr(cp)
        if bad_name("server", f"a{c}a"):
            invisible.add(cp)
        elif bad_name("server", f"{c}a"):
            spaces.add(cp)
    assert code_points(between("invisible")) == invisible
    assert code_points(between("spaces")) == spaces


def test_the_namespace_the_page_describes_is_the_configs() -> None:
    for ok in ("wm", "a" * 64, "{wm}", "{wm}.lab", "my-game_1.eu"):
        assert Config.from_env({"PIPELINE_NAMESPACE": ok}).namespace == ok
    for bad in ("a" * 65, "wm:x", "w m", "{}", "x{wm}"):
        with pytest.raises(ConfigError):
            Config.from_env({"PIPELINE_NAMESPACE": bad})


def test_the_page_s_shard_example_holds() -> None:
    assert shard_of("A", 4) == 3 and input_shard_key("{wm}:events", 3) == "{wm:events:3}"
    assert producer_marker_key("{wm:events:3}", "i") == "{wm:events:3}:producer:i"
    assert producer_marker_key("wm:events:3", "i") == "wm:events:3:producer:i"


# -------------------------------------------------------------------------------------------------- Node and Redis


def ready_node() -> str:
    """The ``node`` binary, with the client's dependencies installed from its lock file (``npm ci``) if they are
    not, one installer at a time across the test workers (a file lock). No Node.js fails the tests, saying what is
    missing: they must not pass by not running."""
    import fcntl

    exe = shutil.which("node")
    if exe is None:
        pytest.fail("no `node` on the PATH: the Node.js producer's tests need Node.js 18.19 or newer and npm "
                    "(Debian: apt-get install nodejs npm)", pytrace=False)
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    if tuple(int(n) for n in version.lstrip("v").split(".")[:2]) < (18, 19):
        pytest.fail(f"node {version} is too old: clients/node needs Node.js 18.19 or newer", pytrace=False)
    with open(NODE_DIR / "package-lock.json") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when closed
        if not (NODE_DIR / "node_modules" / "redis" / "package.json").exists():
            npm = shutil.which("npm")
            if npm is None:
                pytest.fail("no `npm` on the PATH to install clients/node's dependencies (npm ci)", pytrace=False)
            done = subprocess.run([npm, "ci", "--prefix", str(NODE_DIR), "--no-audit", "--no-fund"],
                                  capture_output=True, text=True, timeout=600, check=False)
            assert done.returncode == 0, f"npm ci --prefix clients/node failed:\n{done.stdout}\n{done.stderr}"
    return exe


@pytest.fixture(scope="session")
def node() -> str:
    return ready_node()


@dataclass
class Stand:
    server: RedisServer
    admin: redis.Redis
    url: str
    """The producer's address: production's ``wm-producer`` user (Redis 7), with only its rights."""


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


def run_send(node: str, url: str, events: list[dict[str, Any]], **env: str) -> subprocess.Popen[str]:
    """``node send.js`` (the client's example) with ``events`` on its stdin, one JSON object a line."""
    proc = subprocess.Popen([node, "send.js"], cwd=NODE_DIR, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "REDIS_URL": url, "PIPELINE_NAMESPACE": NS, **env})
    assert proc.stdin is not None
    proc.stdin.write("".join(json.dumps(e) + "\n" for e in events))
    proc.stdin.close()
    return proc


def finished(proc: subprocess.Popen[str], timeout_s: float = 60) -> dict[str, int]:
    """The producer's counts, once it has flushed and closed."""
    assert proc.stdout is not None and proc.stderr is not None
    code = proc.wait(timeout=timeout_s)
    out, err = proc.stdout.read(), proc.stderr.read()
    assert code == 0, f"send.js exited with {code}: {err}"
    return json.loads(out.strip().splitlines()[-1])


def wait_until(pred: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def events(n: int, start: int = 0) -> list[dict[str, Any]]:
    """Events as game servers send them: every optional key sometimes missing, some integer player ids."""
    out = []
    for i in range(start, start + n):
        e: dict[str, Any] = {"event_id": f"e{i}", "server": f"srv-{i % 7}", "player_id": f"p{i % 101}",
                             "kind": KINDS[i % 3], "event_time": iso(T0_MS + 10 * i)}
        if i % 5 == 0:
            e["region"] = "eu-west"
        if i % 13 == 0:
            del e["kind"]
        if i % 17 == 0:
            e["player_id"] = i
        out.append(e)
    return out


def entries(client: redis.Redis, key: str = KEYS.events) -> list[tuple[str, dict[bytes, bytes]]]:
    return [(i.decode(), f) for i, f in client.xrange(key)]


def assert_exactly(sent: list[dict[str, Any]], got: list[tuple[str, dict[bytes, bytes]]]) -> None:
    """The stream holds each event sent once, in order, and the parser reads each as the Python producer's
    own validation reads the event (an entry without ``event_id`` takes its entry ID)."""
    assert len(got) == len(sent), f"{len(got)} entries for {len(sent)} events"
    for e, (entry_id, fields) in zip(sent, got, strict=True):
        assert list(fields) == [b"e"], fields
        parsed = parse_entry(fields, entry_id)
        assert isinstance(parsed, Event), parsed
        assert parsed == parse_payload(encode_event(e), entry_id), (e, fields)


def fast(payloads: list[bytes]) -> list[bool]:
    """Whether each payload takes the job's vectorised path (the job's own expression, RE2 through Arrow)."""
    return pc.fill_null(pc.extract_regex(pa.array([p.decode() for p in payloads], pa.string()), FAST_SHAPE)
                        .is_valid(), False).to_pylist()


# ------------------------------------------------------------------------------------------------------ the tests


def test_node_writes_the_exact_events_on_the_fast_path_with_the_producers_rights(node: str, stand: Stand) -> None:
    names = [{"server": "サーバー-1", "player_id": "joueur-é", "event_time": iso(T0_MS)},
             {"server": "🎮" * NAME_LIMITS["server"], "player_id": "p 1", "event_time": iso(T0_MS), "kind": "logout"}]
    sent = events(1_500) + names
    stats = finished(run_send(node, stand.url, sent, BATCH_SIZE="200"))
    got = entries(stand.admin)
    assert_exactly(sent, got)
    assert fast([f[b"e"] for _, f in got]) == [all(str(v).isascii() for v in e.values()) for e in sent]
    assert stats["written"] == len(sent) and stats["resent"] == stats["recovered"] == 0
    (marker,) = list(stand.admin.scan_iter(f"{NS}:producer:*"))
    assert stand.admin.get(marker) == str(stats["batches"]).encode() and 0 < stand.admin.ttl(marker) <= MARKER_TTL_S
    if stand.url != stand.server.url:  # production's producer user: it may write the stream and nothing else
        with pytest.raises(redis.exceptions.NoPermissionError):
            redis.Redis.from_url(stand.url).xrange(KEYS.events)


class LossyProxy:
    """Between a producer and Redis: bytes pass both ways until an EXEC named in ``cuts`` (counted from 1 over every
    connection), where the connection is lost. ``"reply"``: the EXEC reaches Redis and runs (a PING behind it is
    answered), then the connection closes with none of the transaction's replies passed back: the batch is in Redis
    and the producer cannot know. ``"request"``: the connection closes before the EXEC reaches Redis, which then
    discards the transaction: the batch is not in Redis."""

    EXEC = b"$4\r\nEXEC\r\n"

    def __init__(self, upstream: tuple[str, int], cuts: dict[int, str]) -> None:
        self.upstream, self.cuts, self.execs, self.cut = upstream, cuts, 0, []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            state = {"muted": False, "pong": threading.Event()}
            threading.Thread(target=self._up, args=(client, server, state), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, state), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket, state: dict) -> None:
        tail = b""
        try:
            while chunk := client.recv(65536):
                data, start = tail + chunk, len(tail)
                at = data.find(self.EXEC, max(0, start - len(self.EXEC) + 1))
                while at >= 0:
                    self.execs += 1
                    how = self.cuts.get(self.execs)
                    end = at + len(self.EXEC)
                    if how == "request":
                        server.sendall(data[start:max(start, data.rfind(b"*", 0, at))])
                    elif how == "reply":
                        state["muted"] = True
                        server.sendall(data[start:end] + b"*1\r\n$4\r\nPING\r\n")
                        state["pong"].wait(10)
                    if how:
                        self.cut.append((self.execs, how))
                        raise ConnectionAbortedError
                    at = data.find(self.EXEC, end)
                server.sendall(chunk)
                tail = data[-len(self.EXEC):]
        except OSError:
            pass
        for s in (client, server):
            s.close()

    def _down(self, server: socket.socket, client: socket.socket, state: dict) -> None:
        try:
            while chunk := server.recv(65536):
                if state["muted"]:
                    if b"+PONG\r\n" in chunk:
                        state["pong"].set()
                    continue
                client.sendall(chunk)
        except OSError:
            pass


def test_a_lost_reply_is_neither_written_twice_nor_lost(node: str, stand: Stand) -> None:
    """Batches of 100: the 3rd EXEC's reply is lost (the marker says 3: not sent again), the 6th EXEC never reaches
    Redis (the marker says 5: sent again), and the reply of that resend, the 7th EXEC, is lost too (the marker says
    6: done). 2,000 events, each once, in order."""
    proxy = LossyProxy((stand.server.bind, stand.server.port), {3: "reply", 6: "request", 7: "reply"})
    url = stand.url.replace(f":{stand.server.port}/", f":{proxy.port}/")
    sent = events(2_000)
    try:
        stats = finished(run_send(node, url, sent, BATCH_SIZE="100"))
    finally:
        proxy.close()
    assert proxy.cut == [(3, "reply"), (6, "request"), (7, "reply")]
    assert_exactly(sent, entries(stand.admin))
    assert (stats["recovered"], stats["resent"], stats["written"]) == (2, 1, 2_000)
    (marker,) = list(stand.admin.scan_iter(f"{NS}:producer:*"))
    assert stand.admin.get(marker) == str(stats["batches"]).encode()


def test_a_full_redis_holds_the_batch_and_sends_it_once_there_is_room(node: str, stand: Stand) -> None:
    stand.admin.config_set("maxmemory", "1")  # every write refused: OOM command not allowed when used memory
    sent = events(300)
    proc = run_send(node, stand.url, sent, BATCH_SIZE="100")
    wait_until(lambda: "errorstat_OOM" in stand.admin.info("errorstats"), "Redis to refuse a batch")
    assert stand.admin.xlen(KEYS.events) == 0
    stand.admin.config_set("maxmemory", "0")
    stats = finished(proc)
    assert stats["refusedFull"] >= 1 and stats["written"] == 300
    assert_exactly(sent, entries(stand.admin))


def test_a_stream_at_its_bound_holds_the_producer_until_the_readers_catch_up(node: str, stand: Stand) -> None:
    old = events(5, start=10_000)
    for e in old:
        stand.admin.xadd(KEYS.events, {"e": encode_event(e)})
    sent = events(300)
    proc = run_send(node, stand.url, sent, BATCH_SIZE="100", STREAM_MAX_ENTRIES="5")
    wait_until(lambda: stand.admin.info("commandstats").get("cmdstat_xlen", {}).get("calls", 0) >= 2,
               "the producer to look at the stream's length again")
    assert stand.admin.xlen(KEYS.events) == 5 and proc.poll() is None  # held: nothing written past the bound
    stand.admin.xtrim(KEYS.events, maxlen=0)  # the readers caught up and the job trimmed
    stats = finished(proc)
    assert stats["heldBack"] >= 1 and stats["written"] == 300
    assert_exactly(sent, entries(stand.admin))


def test_a_batch_redis_refuses_stops_the_producer_saying_why(node: str, stand: Stand) -> None:
    """An XADD that fails as EXEC runs it (the key is not a stream): the rest of the transaction ran, marker included,
    and sending again would not help: the producer stops with Redis' reason."""
    stand.admin.set(KEYS.events, "not a stream")
    proc = run_send(node, stand.url, events(10), STREAM_MAX_ENTRIES="0")  # (no bound: XLEN would fail first)
    assert proc.wait(timeout=60) == 1
    assert proc.stderr is not None and "WRONGTYPE" in proc.stderr.read()
    (marker,) = list(stand.admin.scan_iter(f"{NS}:producer:*"))
    assert stand.admin.get(marker) == b"1"


def test_node_checks_each_name_as_the_parser_does_and_routes_as_the_pipeline(node: str) -> None:
    """The same events through Node's ``encodeEvent`` and the pipeline's parser: accepted or refused alike (every
    forbidden character, every space, each limit in characters, lone surrogates, reserved servers); and Node's
    shards, keys and constants are Python's."""
    probes = {*code_points(between("invisible")), *code_points(between("spaces"))}
    probes |= {cp + d for cp in probes for d in (-1, 1) if 0 <= cp + d < 0x110000} - set(range(0xD800, 0xE000))
    values = [f"a{chr(cp)}a" for cp in sorted(probes)] + [f"{chr(cp)}a" for cp in sorted(probes)]
    values += ["*", "region|eu", "region", "\ud800", "ok\udc00", "p 1", "サーバー", "42"]
    values += [c * n for c in ("x", "é", "🎮") for limit in (64, 128) for n in (limit, limit + 1)]
    base = {"event_id": "e1", "server": "A", "player_id": "p", "kind": "login", "event_time": "2026-11-22T10:00:01Z"}
    cases = [{**base, field: v} for field in NAME_LIMITS for v in values]
    cases += [{**base, "player_id": 7}, {**base, "kind": "idle"}, {**base, "player_id": True},
              {**base, "event_time": "2026-02-30T00:00:00Z"}, {**base, "event_time": "2026-11-22T10:00:01.1234567Z"}]
    shards = [(s, n) for s in ("A", "eu-1", "サーバー", "🎮", "") for n in (1, 2, 4, 16, 17)]
    keys = [(k, i) for k in ("wm:events", "{wm}:events", "{wm}.lab:events", "x.y:events") for i in (0, 1, 5)]
    script = """
const p = require('./producer');
const input = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const verdict = e => { try { p.encodeEvent(e); return true; } catch (err) { return false; } };
console.log(JSON.stringify({
  accepted: input.cases.map(verdict),
  shards: input.shards.map(([s, n]) => p.shardOf(s, n)),
  keys: input.keys.map(([k, i]) => p.inputShardKey(k, i)),
  markers: input.keys.map(([k, i]) => p.markerKey(p.inputShardKey(k, i), 'id')),
  constants: [p.FIELDS, p.KINDS, p.NAME_LIMITS, p.MARKER_TTL_S, p.MAX_STREAM_ENTRIES],
}));
"""
    stdin = json.dumps({"cases": cases, "shards": shards, "keys": keys})  # (ASCII: lone surrogates as \\u escapes)
    done = subprocess.run([node, "-e", script], cwd=NODE_DIR, input=stdin, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    parser = [isinstance(parse_payload(json.dumps(c).encode(), "1-0"), Event) for c in cases]
    stricter = [i for i, c in enumerate(cases) if c.get("kind") == "idle" or len(c["event_time"]) > 27]
    differ = [(cases[i], out["accepted"][i]) for i in range(len(cases)) if out["accepted"][i] != parser[i]]
    assert [cases.index(c) for c, _ in differ] == stricter  # Node refuses idle markers and 7 fraction digits
    assert 100 < sum(parser) < len(cases) - 100  # both verdicts, many times
    assert out["shards"] == [shard_of(s, n) for s, n in shards]
    assert out["keys"] == [input_shard_key(k, i) for k, i in keys]
    assert out["markers"] == [producer_marker_key(input_shard_key(k, i), "id") for k, i in keys]
    assert out["constants"] == [list(FIELDS), list(KINDS), NAME_LIMITS, MARKER_TTL_S, Config.stream_max_entries]


def test_the_page_s_node_example_runs_as_written(node: str, stand: Stand) -> None:
    (code,) = re.findall(r"^```js\n(.*?)^```", SPEC.read_text(), re.S | re.M)
    done = subprocess.run([node, "-e", code], cwd=NODE_DIR, capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "REDIS_URL": stand.url})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2"
    got = [parse_entry(f, i) for i, f in entries(stand.admin)]
    assert [(e.event_id, e.kind, e.region) for e in got if isinstance(e, Event)] == [
        ("A-1", "login", None), (got[1].event_id, "heartbeat", "eu-west")]


def test_the_node_client_s_lock_file_pins_its_dependency() -> None:
    package = json.loads((NODE_DIR / "package.json").read_text())
    lock = json.loads((NODE_DIR / "package-lock.json").read_text())
    (version,) = package["dependencies"].values()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), "pin the exact version"
    assert lock["packages"]["node_modules/redis"]["version"] == version
    assert "clients/node/node_modules/" in (ROOT / ".gitignore").read_text().splitlines()
    assert package["engines"]["node"] == ">= 18.19"
