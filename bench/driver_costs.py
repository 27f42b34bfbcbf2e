"""Where a batch's time goes on the driver, 3 servers against 300, side by side in one run, without Spark.

    python -m bench.driver_costs [--rate 50000] [--seconds 30] [--trigger-ms 500] [--servers 3,300] [--groups N]

For each server count, the generator's steady game (``--servers N --regions 6`` past 3) is written at ``--rate``
events/s with explicit entry IDs (arrival = the simulated time) into a scratch Redis, then cut into batches of
``--trigger-ms`` of arrival and put through the sink's own steps, one after the other, as the job's driver does: the
partition read (what Spark's executors do: read, parse, pre-aggregate, count the windows' players into Redis and
pack, here in this process), the driver's sum, the pipeline's judgement and commit, the two default lanes
(``per-server-min``, ``per-server-min-idle``) and the online view (with ``--groups N``: the job's hand-off, then each
group's fold as ``wm-online`` does it, decision 0020; ``all`` sums the driver's steps only). Each step's median and
p95 over the batches after the first 10 s (the players all online by then) is printed side by side. It measures CPU
work in one process: on the job's two shared cores the same steps take longer (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
import redis

from bench.run import scratch_redis
from streaming.rules.online.groups import Group
from streaming.rules.online.table import OnlineBatch
from streaming.rules.scenarios import game
from streaming.rules.simulate import Simulator
from streaming.rules.windows import next_watermark
from streaming.schema.config import Config
from streaming.schema.keys import KeySchema
from streaming.schema.params import params_for
from streaming.spark import local_agg
from streaming.spark.checkpoint import OffsetEntry
from streaming.spark.query import source_options
from streaming.spark.sink import LaneSink
from streaming.spark.source import SourceOptions, StreamRange, read_partition
from streaming.store.batch.arrow_pack import ARROW_SCHEMA
from streaming.store.batch.window_players import read_added
from streaming.store.commit import commit_batch
from streaming.store.online.commit import OnlineMirror, commit_online
from streaming.store.online.handoff import hand_off
from streaming.store.online.runner import GroupRunner
from streaming.store.stream_writer import write

LANES = ("per-server-min", "per-server-min-idle")
GROUP_STEP = "online: group "
WARMUP_S = 10.0


@dataclass
class Costs:
    servers: int
    players: int = 0
    events: int = 0
    ms: dict[str, list[float]] = field(default_factory=dict)

    def add(self, step: str, seconds: float) -> None:
        self.ms.setdefault(step, []).append(seconds * 1000)


def _timed(costs: Costs | None, step: str, fn: Callable[[], object]) -> object:
    t = time.perf_counter()
    out = fn()
    if costs is not None:
        costs.add(step, time.perf_counter() - t)
    return out


def measure(url: str, servers: int, rate: int, seconds: float, trigger_ms: int, groups: int = 0) -> Costs:
    ns = f"drv-{uuid.uuid4().hex[:6]}"
    cfg = Config(redis_url=url, embedded_redis=False, namespace=ns, checkpoint_dir=f"/tmp/{ns}",
                 online_timeout_ms=30_000, lanes=LANES)
    keys = KeySchema(ns)
    client = redis.Redis.from_url(url)
    scenario = game("steady", servers, 6, daily=False) if servers > 3 else game("steady")  # a full house
    start_ms = int(time.time() * 1000) - int(seconds * 1000) - 60_000
    sim = Simulator(scenario, seed=1, start_us=start_ms * 1000, rate=rate, count=int(rate * seconds))
    write(client, keys.events, sim, explicit_ids=True)
    params = params_for(cfg)
    opts = SourceOptions(source_options(cfg, pre_aggregate=True))
    lanes = [LaneSink(KeySchema(c.namespace), params_for(c)) for c in cfg.lane_configs()]
    mirror = OnlineMirror()
    runners = [GroupRunner(client, keys, Group(g, groups), params) for g in range(groups)]
    costs = Costs(servers)
    first = int(client.xrange(keys.events, count=1)[0][0].split(b"-")[0])
    last = int(client.xrevrange(keys.events, count=1)[0][0].split(b"-")[0])
    watermark_ms, running_us, lo = 0, None, "0-0"
    for batch_id, hi_ms in enumerate(range(first + trigger_ms, last + trigger_ms, trigger_ms)):
        hi = f"{hi_ms}-999999"
        c = costs if hi_ms - first >= WARMUP_S * 1000 else None
        rows = _timed(c, "read (executors)", lambda lo=lo, hi=hi: pa.Table.from_batches(
            list(read_partition(opts, StreamRange(lo, hi, batch_end=hi))), schema=ARROW_SCHEMA).select(
                [*local_agg.COLUMNS, "blob"]))
        table = _timed(c, "sum", lambda rows=rows: local_agg.aggregate_arrow(rows))
        entry = OffsetEntry(batch_id, watermark_ms, hi_ms, ({"id": hi},))

        def judge(table=table, entry=entry, batch_id=batch_id, lo=lo, hi=hi):  # noqa: ANN001, ANN202
            batch = local_agg.read(table, batch_id, entry, params, read_added(client, keys, hi), online=True)
            summary = batch.summary(batch_id, entry.watermark_ms, entry.batch_ts_ms, lo, hi, params)
            summary.late_events = batch.late
            return batch, summary

        batch, summary = _timed(c, "judge", judge)
        _timed(c, "commit", lambda summary=summary: commit_batch(client, keys, summary, params))
        for lane in lanes:
            _timed(c, f"lane {lane.keys.namespace.rsplit('.', 1)[-1]}",
                   lambda lane=lane, batch=batch, summary=summary: lane.commit(client, batch, summary))
        events = local_agg.online_events(batch.aggregate)
        online = OnlineBatch(batch_id, watermark_ms, hi_ms, hi, events, params.delay_ms, None)
        if groups:  # decision 0020: the driver hands off; each group folds its share in wm-online
            handed = online.record(groups, 30_000)
            _timed(c, "online: hand off", lambda h=handed, e=events: hand_off(client, keys, h, e, params.ttl_s))
            for g, runner in enumerate(runners):
                _timed(c, f"{GROUP_STEP}{g}", runner.step)
        else:
            _timed(c, "online", lambda online=online: commit_online(client, keys, online, params, 30_000, mirror))
        if c is not None:
            costs.events += sum(s.rows for s in summary.servers.values())
        tops = [s.max_event_us for s in summary.servers.values() if s.max_event_us is not None]
        running_us = max([running_us, *tops]) if running_us is not None else max(tops, default=None)
        watermark_ms = next_watermark(watermark_ms, running_us, params.delay_ms)
        lo = hi
    costs.players = sum(m.players.count() for m in [mirror, *(r.mirror for r in runners)])
    return costs


def report(runs: list[Costs]) -> str:
    steps = list(dict.fromkeys(s for r in runs for s in r.ms))
    head = "| step (ms a batch, p50 / p95) | " + " | ".join(f"{r.servers} servers" for r in runs) + " |"
    lines = [head, "| --- |" + " --- |" * len(runs)]
    for step in [*steps, "all"]:  # all: the driver's steps (a group's fold runs in a process of its own)
        cells = []
        for r in runs:
            driver = [v for k, v in r.ms.items() if not k.startswith(GROUP_STEP)]  # groups run in wm-online
            values = [sum(v) for v in zip(*driver, strict=True)] if step == "all" else r.ms.get(step, [])
            if not values:
                cells.append("")
                continue
            q = statistics.quantiles(values, n=20) if len(values) > 1 else values * 19
            cells.append(f"{statistics.median(values):.1f} / {q[18]:.1f}")
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    lines.append("| players online, events measured | " + " | ".join(f"{r.players:,}, {r.events:,}" for r in runs)
                 + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=int, default=50_000)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--trigger-ms", type=int, default=500)
    p.add_argument("--groups", type=int, default=0, help="ONLINE_GROUPS: hand the online view over to N groups")
    p.add_argument("--servers", default="3,300")
    args = p.parse_args(argv)
    with scratch_redis() as (_, server):
        runs = [measure(server.url, int(n), args.rate, args.seconds, args.trigger_ms, args.groups)
                for n in args.servers.split(",")]
    print(f"{args.rate:,} events/s, batches of {args.trigger_ms} ms of arrival, after {WARMUP_S:.0f} s:")
    print(report(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
