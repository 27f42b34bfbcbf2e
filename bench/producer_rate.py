"""What the idempotent write path costs (decision 0010): CPU per event of the generator's writer and of the public
Producer, each with one MULTI/EXEC + marker per batch and without (plain batched XADDs), into a fresh Redis.

    python bench/producer_rate.py [--count 100000] [--batch-size 2000]
    python bench/producer_rate.py --replica [--rounds 3]

Runs in about 10 s for the default count. With ``--replica``, a replica of the Redis (a second ``redis-server``
on the loopback) and the Producer without and with ``wait_replicas=1`` (each batch followed by ``WAIT``), in turn.

"here" is this process's CPU per event (for the Producer: the
caller's send(), which validates and packs, plus its sending thread), "redis" the server's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import redis

from streaming.apps.redis_server import RedisServer, redis_server_binary
from streaming.rules.simulate import Simulator
from streaming.runtime.ports import free_port
from streaming.store.stream_writer import StreamWriter
from watermark_client import Producer

START_US = 1_767_225_600_000_000  # 2026-01-01: fixed, so runs are comparable


def redis_cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def report(label: str, n: int, wall: float, cpu: float, rcpu: float) -> None:
    print(f"{label:<38} {n / wall:>9,.0f} ev/s; CPU {cpu / n * 1e6:5.2f} us/event here, "
          f"{rcpu / n * 1e6:5.2f} in redis-server")


def bench_writer(client: redis.Redis, count: int, batch: int, idempotent: bool) -> None:
    key = f"bench:writer:{idempotent}:events"
    sim = Simulator("overseas-lag", seed=1, start_us=START_US, rate=0, count=count)
    records = list(sim.records())  # generation is not what is measured here
    t, cpu, rcpu = time.perf_counter(), time.process_time(), redis_cpu_s(client)

    stats = StreamWriter(client, key, batch_size=batch, idempotent=idempotent).resume(iter(records), raw=True)
    wall, cpu, rcpu = time.perf_counter() - t, time.process_time() - cpu, redis_cpu_s(client) - rcpu
    assert stats.written == client.xlen(key) == count
    report(f"writer, {'MULTI + marker' if idempotent else 'plain XADDs'}", count, wall, cpu, rcpu)
    client.delete(key)


def bench_producer(client: redis.Redis, url: str, count: int, batch: int, idempotent: bool,
                   wait_replicas: int = 0) -> None:
    ns = f"bench-producer-{idempotent}-{wait_replicas}"
    events = [{"event_id": e.event_id, "server": e.server, "player_id": e.player_id, "kind": e.kind,
               "event_time": e.payload().decode().rsplit('"event_time":"', 1)[1][:-2]}
              for _, e in Simulator("overseas-lag", seed=1, start_us=START_US, rate=0, count=count)]
    t, cpu, rcpu = time.perf_counter(), time.process_time(), redis_cpu_s(client)
    with Producer(url, namespace=ns, batch_size=batch, max_pending=20 * batch, idempotent=idempotent,
                  wait_replicas=wait_replicas) as p:
        send = p.send
        for e in events:
            send(e)
    wall, cpu, rcpu = time.perf_counter() - t, time.process_time() - cpu, redis_cpu_s(client) - rcpu
    assert client.xlen(f"{ns}:events") == count
    how = f"WAIT {wait_replicas}" if wait_replicas else "MULTI + marker" if idempotent else "plain XADDs"
    report(f"Producer.send, {how}", count, wall, cpu, rcpu)
    client.delete(f"{ns}:events")


def with_replica(client: redis.Redis, server: RedisServer, tmp: str, args: argparse.Namespace) -> None:
    """The Producer with a replica attached, without and with waiting for it, ``args.rounds`` times in turn."""
    port = free_port()
    replica = subprocess.Popen([redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no", "--dir", tmp, "--dbfilename", "replica.rdb",
                                "--replicaof", "127.0.0.1", str(server.port)], stdout=subprocess.DEVNULL)
    try:
        r = redis.Redis(port=port)
        deadline = time.monotonic() + 30
        while not _in_sync(r):
            if time.monotonic() > deadline:
                raise SystemExit("the replica did not sync with the primary within 30 s")
            time.sleep(0.1)
        for _ in range(args.rounds):
            for wait in (0, 1):
                bench_producer(client, server.url, args.count, args.batch_size, True, wait)
    finally:
        replica.terminate()
        replica.wait(10)


def _in_sync(r: redis.Redis) -> bool:
    try:
        return r.info("replication").get("master_link_status") == "up"
    except redis.ConnectionError:
        return False


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=100_000)
    p.add_argument("--batch-size", type=int, default=2_000)
    p.add_argument("--replica", action="store_true", help="the Producer without and with WAIT for a replica")
    p.add_argument("--rounds", type=int, default=3, help="with --replica: rounds of the two, in turn")
    args = p.parse_args()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{args.count:,} events, batch {args.batch_size}; {os.cpu_count()} CPUs, load average {load}")
    with tempfile.TemporaryDirectory(prefix="bench-redis-") as tmp:
        server = RedisServer(data_dir=tmp, port=0)
        server.start()
        try:
            client = redis.Redis.from_url(server.url)
            if args.replica:
                with_replica(client, server, tmp, args)
                return 0
            for idempotent in (False, True, False, True):  # twice, interleaved: the machine is shared
                bench_writer(client, args.count, args.batch_size, idempotent)
            for idempotent in (False, True):
                bench_producer(client, server.url, args.count, args.batch_size, idempotent)
            client.close()
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
