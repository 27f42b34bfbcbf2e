"""The monitor's HTTP port under the attacks of issue 63, against a real ``wm-monitor``: its memory, threads and
open files before and after each, and whether ``/metrics`` still answers.

    python -m bench.spikes.monitor_attacks [--checkout DIR] [--stream-mib 200] [--held 300] [--idle 1100]

``--checkout`` runs the monitor of another checkout (``git worktree add /tmp/base <commit>``) against the same
attacks, for a side-by-side. The attacks, in order: ``Content-Length: -1`` then ``--stream-mib`` MiB with no token;
``--held`` POSTs whose body never comes; ``--idle`` connections that send nothing. Each row: the monitor's RSS
and peak RSS (MiB), threads and open files after the attack, the bytes it took, and whether ``/metrics``
answered within 10 s.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from bench.run import scratch_redis
from streaming.apps.redis_server import free_port

TOKEN = "bench-token-of-at-least-thirty-two-characters"


def status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return -1


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def metrics_answer(port: int) -> str:
    t0 = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
    except OSError as exc:
        return f"no ({type(exc).__name__})"
    return f"{data[9:12].decode()} in {time.monotonic() - t0:.2f} s"


def row(name: str, pid: int, port: int, extra: str) -> None:
    answered = metrics_answer(port)
    rss, peak = status(pid, "VmRSS") / 1024, status(pid, "VmHWM") / 1024
    print(f"| {name} | {rss:.0f} | {peak:.0f} | {status(pid, 'Threads')} | {fds(pid)} | {extra} | {answered} |",
          flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkout", default=str(Path(__file__).resolve().parents[2]))
    p.add_argument("--stream-mib", type=int, default=200)
    p.add_argument("--held", type=int, default=300)
    p.add_argument("--idle", type=int, default=1100)
    args = p.parse_args()
    with scratch_redis() as (_, server):
        url = server.url
        port = free_port()
        env = {**os.environ, "PYTHONPATH": args.checkout, "REDIS_URL": url, "METRICS_PORT": str(port),
               "PIPELINE_NAMESPACE": f"b-{uuid.uuid4().hex[:6]}", "ANNOTATIONS_TOKEN": TOKEN}
        proc = subprocess.Popen([sys.executable, "-m", "streaming.apps.monitor"], cwd=args.checkout, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if "monitor: /metrics on" in line:
                    break
            metrics_answer(port)
            print("| after | RSS MiB | peak MiB | threads | files | taken | /metrics |\n|---|---|---|---|---|---|---|")
            row("start", proc.pid, port, "")
            sent = 0
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                s.sendall(b"POST /annotations HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n")
                chunk = b"x" * (1 << 20)
                try:
                    while sent < args.stream_mib << 20:
                        s.sendall(chunk)
                        sent += len(chunk)
                    s.shutdown(socket.SHUT_WR)
                    s.recv(100)
                except OSError:
                    pass
            row(f"Content-Length -1, {args.stream_mib} MiB", proc.pid, port, f"{sent >> 20} MiB sent")
            held = []
            for _ in range(args.held):
                s = socket.create_connection(("127.0.0.1", port), timeout=30)
                s.sendall(b"POST /annotations HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          b"Authorization: Bearer " + TOKEN.encode() + b"\r\nContent-Length: 1000\r\n\r\n{")
                held.append(s)
            row(f"{args.held} held POSTs (with the token)", proc.pid, port, "")
            for _ in range(args.idle):
                held.append(socket.create_connection(("127.0.0.1", port), timeout=30))
            row(f"and {args.idle} idle connections", proc.pid, port, "")
            for s in held:
                s.close()
            row("all closed", proc.pid, port, "")
        finally:
            proc.terminate()
            proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
