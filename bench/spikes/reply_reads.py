"""This process' CPU for reading a batch's replies, three ways (decision 0026): off redis-py's private socket
(``conn._sock``, what the Producer did until then), through redis-py's public ``read_response`` one reply at a time
(hiredis parses underneath), and off a socket of our own (:class:`watermark_client.own_connection.OwnConnection`).

    python -m bench.spikes.reply_reads [--rounds 5] [--batches 40] [--batch-size 1000]

Each batch is the Producer's transaction (``MULTI``, ``--batch-size`` XADDs, ``SET`` of the marker, ``EXEC``: that
many replies plus three), sent whole, its replies read before the next is sent. The ways take turns batch by batch
group (A, B, C, A, B, C, ...) on a scratch redis-server on a free port, so a neighbour's load falls on all three alike;
only the reading is timed (``time.process_time``: waiting for Redis costs no CPU here).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import hiredis
import redis

from streaming.apps.redis_server import RedisServer
from watermark_client.connection import EXEC, MULTI
from watermark_client.own_connection import OwnConnection

Reader = Callable[[int], list[Any]]


def frames(stream: str, n: int) -> bytes:
    """A batch as the Producer sends it."""
    payload = b'{"event_id":"e","server":"s","player_id":"p","kind":"join","event_time":"2026-01-01T00:00:00Z"}'
    key = stream.encode()
    xadd = b"*5\r\n$4\r\nXADD\r\n$%d\r\n%s\r\n$1\r\n*\r\n$1\r\ne\r\n$%d\r\n%s\r\n" % (len(key), key, len(payload),
                                                                                    payload)
    marker = b"*5\r\n$3\r\nSET\r\n$6\r\nmarker\r\n$1\r\n1\r\n$2\r\nEX\r\n$2\r\n60\r\n"
    return b"".join((MULTI, xadd * n, marker, EXEC))


def private_socket(conn: redis.connection.Connection) -> Reader:
    """Today's path: a hiredis Reader fed from redis-py's own socket."""
    sock, reader = conn._sock, hiredis.Reader()  # noqa: SLF001 - what is measured

    def read(n: int) -> list[Any]:
        out: list[Any] = []
        while len(out) < n:
            reply = reader.gets()
            if reply is False:
                reader.feed(sock.recv(1 << 18))
                continue
            out.append(reply)
        return out
    return read


def public_api(conn: redis.connection.Connection) -> Reader:
    """redis-py's public ``read_response``, one call per reply; an error reply raised, caught and kept."""
    def read(n: int) -> list[Any]:
        out: list[Any] = []
        for _ in range(n):
            try:
                out.append(conn.read_response(disable_decoding=True))
            except redis.ResponseError as exc:
                out.append(exc)
        return out
    return read


def measure(send: Callable[[bytes], None], read: Reader, batch: bytes, n: int, batches: int) -> float:
    """CPU seconds spent reading ``batches`` batches' replies."""
    spent = 0.0
    for _ in range(batches):
        send(batch)
        t = time.process_time()
        replies = read(n + 3)
        spent += time.process_time() - t
        assert isinstance(replies[-1], list) and len(replies[-1]) == n + 1, replies[-1]
    return spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--batch-size", type=int, default=1000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(data_dir=tmp, port=0)
        server.start()
        try:
            client = redis.Redis.from_url(server.url)
            pool = client.connection_pool
            a, b = pool.get_connection(), pool.get_connection()
            a.connect()
            b.connect()
            own = OwnConnection.of(client)
            assert own is not None
            own.connect()
            ways: dict[str, tuple[Callable[[bytes], None], Reader]] = {
                "private _sock + hiredis": (lambda d: a.send_packed_command([d], check_health=False),
                                            private_socket(a)),
                "public read_response": (lambda d: b.send_packed_command([d], check_health=False), public_api(b)),
                "own socket + hiredis": (lambda d: own.send_packed_command([d]), own.read),
            }
            batch = frames("bench:replies", args.batch_size)
            per_reply: dict[str, list[float]] = {name: [] for name in ways}
            for _ in range(args.rounds):
                for name, (send, read) in ways.items():
                    spent = measure(send, read, batch, args.batch_size, args.batches)
                    per_reply[name].append(spent / (args.batches * (args.batch_size + 3)) * 1e6)
                client.delete("bench:replies")
            for name, us in per_reply.items():
                print(f"{name:<26} median {statistics.median(us):5.2f} us/reply "
                      f"(rounds: {', '.join(f'{u:.2f}' for u in us)})")
            own.disconnect()
            client.close()
        finally:
            server.stop()


if __name__ == "__main__":
    main()
