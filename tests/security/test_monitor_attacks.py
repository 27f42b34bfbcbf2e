"""The monitor cannot be knocked over, and takes no cross-site writes: each attack of issue 63 against a real
``wm-monitor`` on real sockets, written as the attacker's raw bytes. Each test fails if its attack works again."""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from streaming.apps.annotate import annotations_app, beside
from streaming.apps.monitor.http import MAX_CONNECTIONS, Gate, serve
from streaming.apps.redis_server import free_port
from streaming.schema.keys import KeySchema
from streaming.store.annotation_store import read_annotations
from tests.procs import Proc

TOKEN = "t0ken-for-the-attack-tests-0123456789"
NO_TOKEN = {"ANNOTATIONS_TOKEN": "", "ANNOTATIONS_TOKEN_FILE": ""}
NOTE = b'{"text": "planted", "kind": "note"}'


class Monitor:
    def __init__(self, proc: Proc, port: int, keys: KeySchema, client: redis.Redis) -> None:
        self.proc, self.port, self.keys, self.client = proc, port, keys, client

    def status(self, field: str) -> int:
        """A number of ``/proc/<pid>/status``: ``Threads``, ``VmRSS`` (KiB)."""
        for line in Path(f"/proc/{self.proc.popen.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
        raise AssertionError(f"no {field} in /proc/{self.proc.popen.pid}/status")

    def fds(self) -> int:
        return len(list(Path(f"/proc/{self.proc.popen.pid}/fd").iterdir()))

    def stored(self) -> list[str]:
        return [a.text for a in read_annotations(self.client, self.keys, 0, 2**53)]


def start_monitor(redis_url: str, tmp_path: Path, env: dict[str, str]) -> Monitor:
    keys, port = KeySchema(f"t-{uuid.uuid4().hex[:8]}"), free_port()
    proc = Proc.python(f"monitor-{port}", ["streaming.apps.monitor"], {
        "REDIS_URL": redis_url, "PIPELINE_NAMESPACE": keys.namespace, "METRICS_ADDRESS": "127.0.0.1",
        "METRICS_PORT": str(port), **NO_TOKEN, **env}, tmp_path)
    proc.wait_for(r"monitor: /metrics on", 60)
    return Monitor(proc, port, keys, redis.Redis.from_url(redis_url))


@pytest.fixture()
def open_monitor(redis_url: str, tmp_path: Path) -> Iterator[Monitor]:
    """The local demo's monitor: loopback, no token."""
    m = start_monitor(redis_url, tmp_path, {"METRICS_HOSTS": "monitor.example"})
    yield m
    m.proc.stop()


@pytest.fixture()
def token_monitor(redis_url: str, tmp_path: Path) -> Iterator[Monitor]:
    m = start_monitor(redis_url, tmp_path, {"ANNOTATIONS_TOKEN": TOKEN})
    yield m
    m.proc.stop()


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    return s


def answer(s: socket.socket) -> tuple[int, bytes]:
    """The status and body of the reply on ``s``, read until the server closes."""
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 "), data[:200]
    return int(head.split()[1]), body


def ask(port: int, request: bytes) -> tuple[int, bytes]:
    with connect(port) as s:
        s.sendall(request)
        return answer(s)


def post(headers: dict[str, str], body: bytes = NOTE, target: str = "/annotations") -> bytes:
    lines = [f"POST {target} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def metrics_answer(port: int) -> bool:
    status, body = ask(port, b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    return status == 200 and b"# HELP wm_redis_up" in body


def test_the_token_is_checked_before_the_body_is_read(token_monitor: Monitor) -> None:
    """Headers that promise a body, and no body: the refusal comes at once (before, the server waited for it)."""
    with connect(token_monitor.port) as s:
        s.sendall(b"POST /annotations HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 16000\r\n\r\n")
        status, body = answer(s)
    assert status == 401 and b"needs the monitor's token" in body
    with connect(token_monitor.port) as s:
        s.sendall(post({"Host": "127.0.0.1", "Content-Length": "16000", "Authorization": "Bearer nope"}, b""))
        assert answer(s)[0] == 401
    assert token_monitor.stored() == []


@pytest.mark.parametrize(("length", "want"), [
    ("-1", 400), ("abc", 400), (" 1e3", 400), ("+5", 400), ("99999999999999999999", 413), ("16385", 413),
    (None, 411), ("chunked", 411)])
def test_a_bad_content_length_is_refused_without_reading(open_monitor: Monitor, length: str | None, want: int) -> None:
    headers = {"Host": "127.0.0.1", "Content-Type": "application/json"}
    if length == "chunked":
        headers["Transfer-Encoding"] = "chunked"
    elif length is not None:
        headers["Content-Length"] = length
    assert ask(open_monitor.port, post(headers, b""))[0] == want
    assert open_monitor.stored() == []


def test_a_stream_of_hundreds_of_mib_is_cut_off_and_memory_stays_flat(token_monitor: Monitor) -> None:
    """``Content-Length: -1`` and then 256 MiB, no token: the server answers 400 and closes; the sender is cut off
    after what the sockets' buffers hold (before, the monitor read it all: +459 MiB)."""
    before = token_monitor.status("VmRSS")
    sent = 0
    chunk = b"x" * (1 << 20)
    with connect(token_monitor.port) as s:
        s.sendall(b"POST /annotations HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n")
        with pytest.raises(OSError):  # BrokenPipe or ConnectionReset: the server closed
            while sent < 256 << 20:
                s.sendall(chunk)
                sent += len(chunk)
    assert sent < 64 << 20, f"{sent >> 20} MiB were taken"
    assert token_monitor.status("VmRSS") - before < 32 * 1024  # KiB
    assert metrics_answer(token_monitor.port)


def test_held_posts_and_idle_connections_bound_threads_and_files(open_monitor: Monitor) -> None:
    """300 POSTs whose body never comes and 900 idle connections: the monitor keeps at most MAX_CONNECTIONS open
    and a fixed number of threads, and ``/metrics`` still answers (before: 304 threads, 1,108 descriptors)."""
    assert metrics_answer(open_monitor.port)  # its threads are all started
    threads = open_monitor.status("Threads")
    held = []
    try:
        for _ in range(300):
            s = connect(open_monitor.port)
            s.sendall(b"POST /annotations HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 1000\r\n\r\n{")
            held.append(s)
        held.extend(connect(open_monitor.port) for _ in range(900))
        assert metrics_answer(open_monitor.port)  # the oldest held ones made room
        assert open_monitor.status("Threads") <= threads  # workers are a fixed pool, started with the first scrape
        assert open_monitor.fds() <= MAX_CONNECTIONS + 40  # Redis connections, logs, the listener
    finally:
        for s in held:
            s.close()
    assert metrics_answer(open_monitor.port)
    assert open_monitor.stored() == []


def test_a_request_that_never_ends_is_timed_out(redis_url: str) -> None:
    """A client that sends half a request line and waits is answered 408 and closed (here after 0.5 s)."""
    client = redis.Redis.from_url(redis_url)
    app = annotations_app(client, KeySchema(f"t-{uuid.uuid4().hex[:8]}"), 8)
    server = serve("127.0.0.1", 0, beside(app, app), Gate(), timeout_s=0.5)
    try:
        for partial in (b"GET /metr", b"POST /annotations HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                                     b"application/json\r\nContent-Length: 10\r\n\r\n{"):
            with connect(server.port) as s:
                s.sendall(partial)
                assert answer(s)[0] == 408
    finally:
        server.close()


@pytest.mark.parametrize(("headers", "want"), [
    # a form on attacker.example, posted to the monitor by a DNS name that now points at 127.0.0.1
    ({"Host": "attacker.example", "Origin": "http://attacker.example", "Content-Type": "text/plain"}, 421),
    # the same page posting to http://127.0.0.1:9108 (a "simple" request: no preflight)
    ({"Host": "127.0.0.1", "Origin": "http://attacker.example", "Content-Type": "text/plain"}, 403),
    ({"Host": "127.0.0.1", "Origin": "http://attacker.example", "Content-Type": "application/json"}, 403),
    ({"Host": "127.0.0.1", "Origin": "null", "Content-Type": "text/plain"}, 403),  # a sandboxed frame, a file
    # a page served by an address, or by another port of this machine (a dev server), is another site too
    ({"Host": "127.0.0.1", "Origin": "http://203.0.113.7", "Content-Type": "application/json"}, 403),
    ({"Host": "127.0.0.1", "Origin": "http://127.0.0.1:3000", "Content-Type": "application/json"}, 403),
    ({"Host": "localhost", "Origin": "http://localhost:3000", "Content-Type": "application/json"}, 403),
    ({"Origin": "http://attacker.example", "Content-Type": "application/json"}, 400),  # no Host at all
    ({"Content-Type": "application/json"}, 400),
    ({"Host": "localhost", "Content-Type": "text/plain"}, 415),  # no Origin (an older browser): still no
    ({"Host": "localhost", "Content-Type": "application/x-www-form-urlencoded"}, 415),
    ({"Host": "localhost", "Content-Type": "multipart/form-data; boundary=x"}, 415),
])
def test_cross_site_posts_are_refused(open_monitor: Monitor, headers: dict[str, str], want: int) -> None:
    assert ask(open_monitor.port, post({**headers, "Content-Length": str(len(NOTE))}))[0] == want
    assert open_monitor.stored() == []


def test_what_the_monitor_serves_still_works(open_monitor: Monitor) -> None:
    """Loopback names, IP addresses and METRICS_HOSTS are served; a JSON POST from this machine is stored."""
    for host in ("127.0.0.1:%d", "localhost:%d", "[::1]:%d", "monitor.example:%d", "10.1.2.3:%d"):
        status, _ = ask(open_monitor.port, f"GET /metrics HTTP/1.1\r\nHost: {host % open_monitor.port}\r\n\r\n"
                        .encode())
        assert status == 200, host
    status, _ = ask(open_monitor.port, b"GET /metrics HTTP/1.0\r\n\r\n")  # no Host: named nothing, served not
    assert status == 400
    for host in ("attacker.example", "monitor.example.evil", "localhost.attacker.example", ""):
        for target in ("/metrics", "/annotations?since=7d"):
            status, body = ask(open_monitor.port, f"GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            assert status == 421 and b"METRICS_HOSTS" in body, (host, target)
    same_site = {"Host": f"localhost:{open_monitor.port}", "Origin": f"http://localhost:{open_monitor.port}",
                 "Content-Type": "application/json; charset=utf-8", "Content-Length": str(len(NOTE))}
    status, body = ask(open_monitor.port, post(same_site))
    assert status == 201 and json.loads(body)["text"] == "planted"
    assert open_monitor.stored() == ["planted"]


@pytest.mark.parametrize("token", ["x" * 31, "s3cret-token"])
def test_a_short_token_stops_the_monitor_at_start(redis_url: str, token: str) -> None:
    """A guessable token is refused where it would be used: the monitor itself exits 2 naming it, never serving."""
    import os
    import subprocess
    import sys

    from tests.procs import ROOT

    env = {**os.environ, "PYTHONPATH": str(ROOT), "REDIS_URL": redis_url, "ANNOTATIONS_TOKEN": token}
    env.pop("ANNOTATIONS_TOKEN_FILE", None)
    done = subprocess.run([sys.executable, "-m", "streaming.apps.monitor", "--port", "0"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and f"is {len(token)} characters: at least 32 are needed" in done.stderr, done.stderr
