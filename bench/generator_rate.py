"""How many events/s one generator process produces, alone and with XADD into a fresh Redis.

    python bench/generator_rate.py [--count 1000000] [--scenario overseas-lag]

Four figures: simulation alone (``Simulator.records``, what the writer
consumes, plus the public ``(arrival, Event)`` iterator), simulation + XADD as
fast as possible (``--rate 0``) by the writer's hand-packed RESP and, side by
side, through redis-py's public pipeline API, and a paced run at
``--paced-rate`` on the real clock, which shows whether that rate is sustained
(achieved rate and lag).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import redis  # noqa: E402

from streaming.apps.redis_server import RedisServer  # noqa: E402
from streaming.rules.scenarios import SCENARIOS  # noqa: E402
from streaming.rules.simulate import Simulator  # noqa: E402
from streaming.runtime.clock import RealClock  # noqa: E402
from streaming.store.stream_writer import LINGER_US, write  # noqa: E402


def rate_of(n: int, seconds: float) -> str:
    return f"{n / seconds:>10,.0f} events/s  ({n:,} in {seconds:.2f} s)"


def redis_cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def bench_generation(scenario: str, count: int, start_us: int) -> None:
    t, cpu = time.perf_counter(), time.process_time()
    n = sum(1 for _ in Simulator(scenario, seed=1, start_us=start_us, rate=0, count=count).records())
    print(f"generation (records)           {rate_of(n, time.perf_counter() - t)}; "
          f"CPU {(time.process_time() - cpu) / n * 1e6:.2f} us/event")
    t = time.perf_counter()
    n = sum(1 for _ in Simulator(scenario, seed=1, start_us=start_us, rate=0, count=count))
    print(f"generation ((arrival, Event))  {rate_of(n, time.perf_counter() - t)}")


def bench_write(client: redis.Redis, scenario: str, count: int, start_us: int, batch_size: int) -> None:
    for explicit in (False, True):
        key = f"bench:{scenario}:{'explicit' if explicit else 'star'}"
        client.delete(key)
        sim = Simulator(scenario, seed=1, start_us=start_us, rate=0, count=count)
        t, cpu, rcpu = time.perf_counter(), time.process_time(), redis_cpu_s(client)
        stats = write(client, key, sim, batch_size=batch_size, explicit_ids=explicit)
        elapsed = time.perf_counter() - t
        cpu, rcpu = time.process_time() - cpu, redis_cpu_s(client) - rcpu
        assert stats.written == client.xlen(key) == count, (stats.written, client.xlen(key))
        label = "generation + XADD (explicit)" if explicit else "generation + XADD (*)"
        print(f"{label:<30} {rate_of(stats.written, elapsed)}; CPU {cpu / count * 1e6:.2f} us/event here, "
              f"{rcpu / count * 1e6:.2f} in redis-server")
        client.delete(key)


def bench_public_api(client: redis.Redis, scenario: str, count: int, start_us: int, batch_size: int) -> None:
    """The same events through redis-py's public API (XADDs batched by a non-transactional ``pipeline()``), the
    alternative to the writer's hand-packed RESP: side by side with ``bench_write``."""
    key = f"bench:{scenario}:public"
    client.delete(key)
    events = Simulator(scenario, seed=1, start_us=start_us, rate=0, count=count)
    t, cpu, rcpu = time.perf_counter(), time.process_time(), redis_cpu_s(client)
    pipe, n = client.pipeline(transaction=False), 0
    for _, ev in events:
        pipe.xadd(key, ev.fields())
        n += 1
        if n % batch_size == 0:
            pipe.execute()
    pipe.execute()
    elapsed = time.perf_counter() - t
    cpu, rcpu = time.process_time() - cpu, redis_cpu_s(client) - rcpu
    assert client.xlen(key) == count
    print(f"{'generation + XADD (public)':<30} {rate_of(count, elapsed)}; CPU {cpu / count * 1e6:.2f} us/event here, "
          f"{rcpu / count * 1e6:.2f} in redis-server")
    client.delete(key)


def bench_paced(client: redis.Redis, rate: int, seconds: float, batch_size: int, linger_us: int = LINGER_US) -> None:
    """Steady scenario (max delay 150 ms), so the run ends right after its last event time; the writer's and
    Redis' CPU per event beside the batches it took (each a transaction)."""
    key = "bench:paced"
    client.delete(key)
    clock = RealClock()
    start = clock.now_us()
    sim = Simulator("steady", seed=1, start_us=start, rate=rate, count=int(rate * seconds))
    worst_lag = 0

    def on_batch(stats: object) -> None:
        nonlocal worst_lag
        worst_lag = max(worst_lag, getattr(stats, "lag_us", 0))

    t, cpu, redis0 = time.perf_counter(), time.process_time(), redis_cpu_s(client)
    stats = write(client, key, sim, clock=clock, offset_us=clock.now_us() - sim.start_us, batch_size=batch_size,
                  on_batch=on_batch, linger_us=linger_us)
    elapsed, cpu, in_redis = time.perf_counter() - t, time.process_time() - cpu, redis_cpu_s(client) - redis0
    assert stats.written == client.xlen(key)
    print(f"paced at {rate:,}/s for {seconds:g} s, linger {linger_us / 1000:g} ms  {rate_of(stats.written, elapsed)}; "
          f"{stats.batches:,} batches, worst lag {worst_lag / 1000:.1f} ms; CPU {cpu / stats.written * 1e6:.2f} "
          f"us/event here, {in_redis / stats.written * 1e6:.2f} in redis-server")
    client.delete(key)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=1_000_000)
    p.add_argument("--scenario", default="overseas-lag", choices=list(SCENARIOS))
    p.add_argument("--batch-size", type=int, default=2_000)
    p.add_argument("--paced-rate", type=int, default=100_000, help="0 skips the paced run")
    p.add_argument("--paced-seconds", type=float, default=5.0)
    p.add_argument("--lingers", default=str(LINGER_US // 1000),
                   help="the paced run at each of these lingers, ms, comma-separated (default: the writer's)")
    args = p.parse_args()

    start_us = 1_767_225_600_000_000  # 2026-01-01: fixed, so runs are comparable
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"scenario {args.scenario}, {args.count:,} events, batch {args.batch_size}; "
          f"{os.cpu_count()} CPUs, load average {load}")
    bench_generation(args.scenario, args.count, start_us)
    with tempfile.TemporaryDirectory(prefix="bench-redis-") as tmp:
        server = RedisServer(data_dir=tmp, port=0)
        server.start()
        try:
            client = redis.Redis.from_url(server.url)
            bench_write(client, args.scenario, args.count, start_us, args.batch_size)
            bench_public_api(client, args.scenario, args.count, start_us, args.batch_size)
            if args.paced_rate:
                for ms in args.lingers.split(","):
                    bench_paced(client, args.paced_rate, args.paced_seconds, args.batch_size, int(float(ms) * 1000))
            client.close()
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
