"""The Node.js producer's test stand: ``node`` with the client's dependencies, a redis-server with production's
producer user, ``send.js`` run on events as game servers send them, what the stream must then hold, and a proxy
that loses a transaction's request or reply on purpose."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import redis

from streaming.apps.redis_server import RedisServer
from streaming.schema.keys import KeySchema
from streaming.spark.rows import FAST_SHAPE
from tests.procs import until
from watermark_client import encode_event
from watermark_client.events import KINDS, Event, parse_entry, parse_payload

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / "clients" / "node"
NS = "wm"
KEYS = KeySchema(NS)
T0_MS = 1_795_860_000_000  # 2026-11-28T10:00:00Z


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


@dataclass
class Stand:
    server: RedisServer
    admin: redis.Redis
    url: str
    """The producer's address: production's ``wm-producer`` user (Redis 7), with only its rights."""


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


wait_until = partial(until, timeout=30, every=0.01)
"""Polls a condition until it holds (``what`` names it in the failure)."""


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
