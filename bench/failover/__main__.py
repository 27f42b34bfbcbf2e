"""Redis fails over under the whole stack: the fault test of issue 46 (decision 0023).

    python -m bench.failover [--rate 10000] [--seconds 150] [--kills 3] [--lag-s 0] [--seed 7] [--out FILE]
    python -m bench.failover --replicas 0 ...   (one Redis, no Sentinel: what the wait costs, side by side)
    python -m bench.failover --generator --kills 0 --rate 50000 [--replicas 0]   (the Procfile's generator writes)

A primary, two replicas and three Sentinels on the loopback (``bench/failover/sentinels.py``); the ``Procfile``'s
``job`` and ``monitor`` as ``bench/stack.py`` starts them, given the Sentinels (``REDIS_URL=redis+sentinel://``) and
``REDIS_WAIT_REPLICAS=1``; the job folds the online view. A ``Producer`` with ``wait_replicas=1`` writes a steady
fleet of 300 servers in 6 regions (``streaming.rules.simulate``, seeded) at ``--rate``. At ``--kills`` moments drawn
from the seed the primary is SIGKILLed; Sentinel promotes a replica (the other follows it) and the killed one is
started again as a replica. With ``--lag-s``, every replica is stopped (SIGSTOP) that long before each kill and let
go right after it: commits and producers wait ``REDIS_WAIT_TIMEOUT`` a try meanwhile, and what was acknowledged
before is on the replicas.

Reported per kill: seconds from the kill to Sentinel's promotion, and from the promotion to the job's next commit
(the issue asks for 10 s). At the end, once the job has committed the last entry:

- **exactly once**: every event the producer counted as delivered is in the stream once (its ``event_id``), and the
  pipeline's input count minus its idle markers equals them;
- **the online view equals an uninterrupted run**: the stream as the run left it, each entry labelled with the batch
  that committed it (``{ns}:commits``) and its arrival (its entry ID), replayed by ``wm-replay`` into a fresh
  Redis (one process, no fault): the players online per server after the last batch, compared.

Main freshness p95 (arrival to commit, ``bench/soak.py``'s measure) over the run, so that ``--replicas 0`` gives the
cost of the wait at the same rate.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import orjson
import redis

from bench.failover.sentinels import SentinelGroup, until
from bench.harness.soak_report import accounting, drained
from bench.harness.soak_sampling import Commits
from bench.stack import HERE, Stack, redis_ms, start_job
from streaming.apps.redis_server import RedisServer
from streaming.rules.scenarios import game
from streaming.rules.simulate import Simulator
from streaming.schema.config import Config
from streaming.schema.keys import KeySchema
from streaming.store.report import online_document
from watermark_client import Producer
from watermark_client.connection import open_client
from watermark_client.events import PAYLOAD_FIELD

KEYS = KeySchema("wm")
SERVERS, REGIONS = 300, 6


class Feed(threading.Thread):
    """The game servers: a seeded steady fleet, paced at ``rate`` by its arrival times, through one Producer."""

    def __init__(self, url: str, rate: int, seconds: float, seed: int, wait_replicas: int) -> None:
        super().__init__(daemon=True)
        self.url, self.rate, self.seconds, self.seed, self.wait = url, rate, seconds, seed, wait_replicas
        self.stats = None
        self.error: BaseException | None = None
        self.took_s = 0.0

    def run(self) -> None:
        try:
            start_us = time.time_ns() // 1000
            sim = Simulator(game("steady", SERVERS, REGIONS, daily=False), seed=self.seed, start_us=start_us,
                            rate=self.rate, count=int(self.rate * self.seconds))
            t0 = time.monotonic()
            with Producer(self.url, wait_replicas=self.wait, wait_timeout_s=1.0, max_backoff_s=0.5,
                          send_timeout_s=600, max_stream_entries=None) as producer:  # kept whole: judged at the end
                for arrival_us, event in sim:
                    ahead = (arrival_us - start_us) / 1e6 - (time.monotonic() - t0)
                    if ahead > 0.005:
                        time.sleep(ahead)  # pacing the fleet to its arrival times
                    producer.send(event)
                self.stats = producer.stats
                producer.flush()
            self.stats, self.took_s = producer.stats, time.monotonic() - t0
        except BaseException as exc:  # noqa: BLE001 - said by the report
            self.error = exc


def kill_times(seed: int, kills: int, seconds: float) -> list[float]:
    """``kills`` moments in the run, at least 25 s apart and 15 s from either end (the seed decides)."""
    rng = random.Random(seed)
    while True:
        ts = sorted(rng.uniform(15, seconds - 15) for _ in range(kills))
        if all(b - a >= 25 for a, b in zip(ts, ts[1:], strict=False)):
            return ts


def last_batch(client: redis.Redis) -> int:
    return int(client.hget(KEYS.state, "last_batch") or -1)


def fail_over(group: SentinelGroup, client: redis.Redis, lag_s: float) -> dict[str, float]:
    """Kill the primary (its replicas stopped ``lag_s`` before), wait for the promotion and the job's next commit;
    start the killed one again as a replica of the new primary."""
    old = group.node(group.primary_port())
    replicas = [n for n in group.nodes if n is not old]
    if lag_s:
        for n in replicas:
            n.signal(signal.SIGSTOP)
        time.sleep(lag_s)  # the replicas lag this long: what WAIT's timeout does meanwhile is the figure
    before = last_batch(open_client(f"redis://127.0.0.1:{old.port}/0"))
    old.signal(signal.SIGKILL)
    killed = time.monotonic()
    for n in replicas if lag_s else []:
        n.signal(signal.SIGCONT)
    new = group.promoted(old.port, timeout_s=60)
    promoted = time.monotonic()
    until(lambda: last_batch(client) > before, "the job committing on the new primary", timeout_s=120, every_s=0.02)
    committed = time.monotonic()
    old.stop()
    old.start(group._server(old, "--replicaof", "127.0.0.1", str(new.port)))
    return {"promoted_s": round(promoted - killed, 2), "committing_s": round(committed - promoted, 2),
            "batch_before": before}


def stream_entries(client: redis.Redis) -> list[tuple[str, dict]]:
    out, last = [], "-"
    while True:
        chunk = client.xrange(KEYS.events, last, "+", count=50_000)
        chunk = [c for c in chunk if c[0].decode() != last]
        if not chunk:
            return out
        out += [(i.decode(), orjson.loads(f[PAYLOAD_FIELD.encode()])) for i, f in chunk]
        last = chunk[-1][0].decode()


def replay_file(client: redis.Redis, entries: list[tuple[str, dict]], path: Path) -> int:
    """The stream as ``wm-replay`` lines: each entry with its arrival (entry ID) and the batch that committed it."""
    ends = sorted((int(f[b"batch"]), f[b"end_id"].decode()) for _, f in client.xrange(KEYS.commits))
    bounds = [tuple(map(int, e.split("-"))) for _, e in ends]
    with path.open("wb") as fh:
        k = 0
        for entry_id, doc in entries:
            at = tuple(map(int, entry_id.split("-")))
            while k < len(bounds) and at > bounds[k]:
                k += 1
            if k == len(bounds):  # after the last commit (the job's idle markers once the producer stopped)
                break
            fh.write(orjson.dumps({**doc, "arrival": entry_id, "batch": ends[k][0]}) + b"\n")
    return len(ends)


def online_after_replay(path: Path, tmp: Path, cfg: Config) -> dict[str, int]:
    """``wm-replay`` of the file into a Redis of its own: the players online per server after its last batch."""
    import subprocess

    server = RedisServer(data_dir=str(tmp / "replay-redis"), port=0)
    server.start()
    try:
        out = tmp / "replay.json"
        env = {**os.environ, "REDIS_URL": server.url, "CHECKPOINT_DIR": str(tmp / "replay-ckpt")}
        for name in ("REDIS_SENTINELS", "PIPELINE_NAMESPACE", "KNOWN_SERVERS", "LAB_LANES"):
            env.pop(name, None)
        subprocess.run([str(Path(sys.executable).parent / "wm-replay"), str(path), "--window", f"{cfg.window_ms}ms",
                        "--slide", f"{cfg.slide_ms}ms", "--delay", f"{cfg.delay_ms}ms", "--online-timeout",
                        f"{cfg.online_timeout_ms}ms", "--out", str(out)], env=env, check=True, cwd=HERE)
        return json.loads(out.read_text())["online"][-1]["online"]
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=int, default=10_000)
    p.add_argument("--seconds", type=float, default=150.0)
    p.add_argument("--kills", type=int, default=3)
    p.add_argument("--lag-s", type=float, default=0.0, help="stop every replica this long before each kill")
    p.add_argument("--replicas", type=int, default=2, help="0: one Redis, no Sentinel, no wait (the baseline)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--generator", action="store_true",
                   help="write with the Procfile's generator instead (the commits' wait alone, no kill)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if args.generator and args.kills:
        p.error("--generator measures the commits' wait alone: give --kills 0 (the generator does not wait)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="failover-") as tmpdir:
        result = run(args, Path(tmpdir))
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if result["exact"] and result.get("online_equal", True) else 1


def run(args: argparse.Namespace, tmp: Path) -> dict:
    group = SentinelGroup(tmp / "redis", replicas=args.replicas) if args.replicas else None
    stack = Stack(HERE, tmp, args.rate)
    stack.env.update({"STREAM_KEEP_ENTRIES": str(args.rate * int(args.seconds) * 2),
                      "STREAM_MAX_ENTRIES": str(args.rate * int(args.seconds) * 4)})
    try:
        if group is not None:
            group.start()
            stack.url = group.url
            stack.env.update({"REDIS_URL": group.url, "REDIS_WAIT_REPLICAS": "1"})
        stack.start("redis")  # the embedded Redis, or (given REDIS_URL) a line that only waits
        client = open_client(stack.url, socket_timeout=60)
        start_job(stack, client)
        stack.start("monitor")
        if args.generator:
            return generator_run(args, stack, client)
        feed = Feed(stack.url, args.rate, args.seconds, args.seed, 1 if group is not None else 0)
        lo_ms, t0 = redis_ms(client), time.monotonic()
        feed.start()
        kills = []
        for at in kill_times(args.seed, args.kills, args.seconds) if group is not None else []:
            time.sleep(max(0.0, at - (time.monotonic() - t0)))  # the moment drawn for the kill
            kills.append({"at_s": round(at, 1), **fail_over(group, client, args.lag_s)})
            print(f"kill {len(kills)}: {kills[-1]}", flush=True)
        feed.join()
        if feed.error is not None:
            raise SystemExit(f"the producer failed: {feed.error!r}")
        drain_s, fresh_ms = wind_down(stack, client, lo_ms)
        return judge(args, client, feed, kills, drain_s, fresh_ms, tmp)
    finally:
        stack.stop_all()
        if group is not None:
            group.stop()


def wind_down(stack: Stack, client: redis.Redis, lo_ms: int) -> tuple[float, float | None]:
    """Once the input has stopped: seconds until every query committed its last entry, then the job and the monitor
    stopped (what is judged stays as it is: the job's idle markers go on), and the main query's freshness p95 (ms)
    over the arrivals from 10 s after ``lo_ms`` to the last entry."""
    last = client.xinfo_stream(KEYS.events)["last-generated-id"]
    hi_ms = int((last.decode() if isinstance(last, bytes) else last).split("-")[0])  # the last entry's arrival
    drain_s = drained(client, 600)
    for name in ("monitor", "job"):
        stack.stop(name, grace_s=60)
    commits = Commits("wm")
    commits.read(client)
    return drain_s, commits.freshness_p95(lo_ms + 10_000, hi_ms)


def generator_run(args: argparse.Namespace, stack: Stack, client: redis.Redis) -> dict:
    """The cost of the commits' wait alone, at a rate one Python producer does not reach: the Procfile's generator
    (300 servers, 6 regions) for ``--seconds``, no kill; every entry counted once, the main query's freshness."""
    stack.env.update({"RATE": str(args.rate), "SERVERS": str(SERVERS), "REGIONS": str(REGIONS)})
    lo_ms = redis_ms(client)
    stack.start("generator")
    time.sleep(args.seconds)  # the run's length
    stack.stop("generator")
    drain_s, fresh = wind_down(stack, client, lo_ms)
    counts = accounting(client)
    return {"rate": args.rate, "achieved_rate": round(counts["entries_added"] / args.seconds), "generator": True,
            "seconds": args.seconds, "replicas": args.replicas, "exact": counts["exact"], "accounting": counts,
            "drain_s": drain_s, "main_fresh_p95_s": fresh and round(fresh / 1000, 2)}


def judge(args: argparse.Namespace, client: redis.Redis, feed: Feed, kills: list[dict], drain_s: float,
          fresh_p95_ms: float | None, tmp: Path) -> dict:
    assert feed.stats is not None
    entries = stream_entries(client)
    ids = [d.get("event_id") for _, d in entries if d.get("kind") != "idle"]
    totals = {k.decode(): int(v) for k, v in client.hgetall(KEYS.totals).items() if b"|" not in k}
    delivered = feed.stats.written
    exact = (len(ids) == len(set(ids)) == delivered == feed.stats.accepted
             and totals.get("input", 0) - totals.get("ticks", 0) == delivered and totals.get("quarantined", 0) == 0)
    out = {"rate": args.rate, "achieved_rate": round(delivered / feed.took_s) if feed.took_s else None,
           "seconds": args.seconds, "replicas": args.replicas, "lag_s": args.lag_s,
           "kills": kills, "delivered": delivered, "in_stream_once": len(set(ids)), "counted": totals,
           "exact": exact, "drain_s": drain_s, "main_fresh_p95_s": fresh_p95_ms and round(fresh_p95_ms / 1000, 2),
           "producer": {"reconnects": feed.stats.reconnects, "resent_batches": feed.stats.resent_batches,
                        "recovered_batches": feed.stats.recovered_batches, "short_waits": feed.stats.short_waits}}
    if args.replicas and kills:
        path = tmp / "replay.jsonl"
        out["batches"] = replay_file(client, entries, path)
        live = online_document(client, KEYS)[-1]["online"]
        replayed = online_after_replay(path, tmp, Config.from_env({}))
        out |= {"online_live": sum(live.values()), "online_replayed": sum(replayed.values()),
                "online_equal": live == replayed}
    return out


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
