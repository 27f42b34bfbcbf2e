"""Simulated game servers feeding the input Redis Stream.

Each server has its own player population and its own network: an event
happens at ``event_time`` on the server and reaches Redis only after that
server's delay, so arrival order differs from event-time order, and an overseas
server's events can arrive far behind the watermark. That disorder is what the
dashboard exists to show, so the simulator makes it explicit and reproducible.

Two layers, so tests and replays never sleep:

* :class:`Simulator` is pure: given a scenario, seed, start time and rate it
  yields ``(arrival_us, Event)`` in arrival order, holding each event back
  until its arrival time. Same inputs, same sequence.
* :class:`StreamWriter` XADDs every event whose arrival time has come on an
  injected :class:`Clock`, many per round trip, then sleeps until the next one.

``wm-generator --scenario overseas-lag --rate 1000``; see
``--help``. With ``--follow`` it runs whatever ``{ns}:control`` asks for
(``streaming.apps.follow``). Scenarios live in :data:`SCENARIOS`; a new one is a new
:class:`Scenario` value, usually :meth:`Scenario.replace_server` of an old one.
"""

from __future__ import annotations

import argparse
import logging
import random
import signal
import sys
import threading
import time
from collections.abc import Callable

import redis

from streaming.apps import config_or_exit
from streaming.rules.scenarios import SCENARIOS, game, scenarios_help
from streaming.rules.simulate import Simulator
from streaming.runtime.clock import RealClock
from streaming.runtime.signals import on_stop_signals
from streaming.schema.config import Config, ConfigError
from streaming.schema.keys import KeySchema
from streaming.store.redis_conn import connect
from streaming.store.stream_writer import LOST_REDIS, StreamWriter, WriteError, WriteStats
from watermark_client.timeutil import iso_from_us, parse_iso_us

log = logging.getLogger("streaming.apps.generator")
SHOWN_SERVERS = 12
"""Servers named in a progress line; the rest are summed."""

class _Progress:
    """The periodic one-line summary; throttled here so the writer stays clock-agnostic."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self.t0 = self.t_last = time.monotonic()
        self.n_last = 0

    def __call__(self, stats: WriteStats, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.t_last < self.every_s:
            return
        rate = (stats.written - self.n_last) / max(now - self.t_last, 1e-9)
        if final:
            rate = stats.written / max(now - self.t0, 1e-9)
        per = sorted(stats.per_server.items())
        servers = " ".join(f"{k}={v}" for k, v in per[:SHOWN_SERVERS])
        if len(per) > SHOWN_SERVERS:  # readable at hundreds of servers
            servers += f" (+{len(per) - SHOWN_SERVERS} servers, {sum(v for _, v in per[SHOWN_SERVERS:])} events)"
        log.info("%s written=%d rate=%.0f/s %s lag=%dms last_id=%s", "done" if final else "progress",
                 stats.written, rate, servers, max(0, stats.lag_us) // 1000, stats.last_id)
        self.t_last, self.n_last = now, stats.written


def _nonneg_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _positive_int(text: str) -> int:
    value = _nonneg_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be positive, got 0")
    return value


def parse_args(argv: list[str] | None = None, settings: Config | None = None) -> argparse.Namespace:
    """The command line; its defaults are the environment's, as ``settings`` (:class:`Config`) read it."""
    settings = settings or Config()
    p = argparse.ArgumentParser(
        prog="wm-generator",
        description="Simulated game servers writing events to the input Redis Stream (REDIS_URL, "
                    "PIPELINE_NAMESPACE from the environment).",
        epilog=scenarios_help(),
    )
    p.add_argument("--scenario", default="steady", help="one of: " + ", ".join(SCENARIOS) + " (default: steady)")
    p.add_argument("--seed", type=int, default=None, help="random seed; the same seed, scenario, rate and start "
                   "give the same events in the same order (default: random, logged)")
    p.add_argument("--rate", type=float, default=1000.0,
                   help="events per second across all servers; 0 = as fast as possible (default: 1000)")
    p.add_argument("--count", type=_nonneg_int, default=None, help="stop after this many events (default: run until "
                   "SIGTERM); in-flight events are still delivered")
    p.add_argument("--start", default=None, help="ISO-8601 event time of the first event (default: now)")
    p.add_argument("--stream", default=None, help="stream key (default: {namespace}:events)")
    p.add_argument("--explicit-ids", action="store_true",
                   help="entry IDs from the simulated arrival time instead of Redis' clock")
    p.add_argument("--batch-size", type=_positive_int, default=2_000, help="max XADDs per round trip (default: 2000)")
    p.add_argument("--log-every", type=float, default=5.0, help="seconds between summary lines (default: 5)")
    p.add_argument("--timeline-scale", type=float, default=settings.timeline_scale,
                   help="run the scenario's timeline (when outages, exoduses and late bursts start, last and recur, "
                        "how late a burst arrives, how long a day of the fleet's daily curve lasts) this many times "
                        "as slow: 0.1 makes a 90 s outage 9 s, 0.001 a week about 10 minutes "
                        "(default: $TIMELINE_SCALE, else 1)")
    p.add_argument("--servers", type=_positive_int, default=settings.generator_servers,
                   help="play the steady game on this many servers named like eu-017, each event carrying its "
                        "region, players online following each region's evening (default: $SERVERS, else the "
                        "scenario's three)")
    p.add_argument("--regions", type=_positive_int, default=settings.generator_regions,
                   help="with --servers: deal them over this many regions, each with its own network delay "
                        "(default: $REGIONS, else 6)")
    p.add_argument("--daily-curve", choices=("on", "off"), default="on" if settings.daily_curve else "off",
                   help="with --servers: players come in through each region's evening and leave at night (on), or "
                        "a full house all day (off: a benchmark's load must not depend on the hour) "
                        "(default: $DAILY_CURVE, else on)")
    p.add_argument("--follow", action="store_true",
                   help="follow {namespace}:control (the dashboard's Lab control page, wm-control): "
                        "--scenario and --rate only fill in what it does not set yet; a change of scenario or rate "
                        "restarts the simulation from now, stop pauses; status in {namespace}:generator")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s generator %(message)s")
    cfg = config_or_exit("generator")
    args = parse_args(argv, cfg)
    stop = threading.Event()
    clock = RealClock(stop)
    try:
        start_us = parse_iso_us(args.start) if args.start else clock.now_us()
        seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
        if args.follow and (args.count is not None or args.start):
            raise ConfigError("--count and --start do not apply with --follow (it runs until stopped, from now)")
        sim = Simulator(game(args.scenario, args.servers, args.regions, args.daily_curve == "on").scaled(
            args.timeline_scale), seed=seed,
                        start_us=start_us,
                        rate=args.rate, count=args.count)
    except (ConfigError, ValueError) as exc:
        print(f"generator: error: {exc}", file=sys.stderr)
        return 2
    key = args.stream or KeySchema(cfg.namespace).events
    progress = _Progress(args.log_every)

    # A second signal gives up on the current batch.
    on_stop_signals(note=lambda signum: log.info("%s: stopping after the current batch", signal.Signals(signum).name),
                    interrupt_again=True, event=stop)
    if args.follow:
        return _follow(args, cfg, seed, clock, stop, progress)
    log.info("scenario=%s seed=%d rate=%s count=%s start=%s stream=%s ids=%s", sim.scenario.name, seed,
             sim.rate or "max", sim.count if sim.count is not None else "endless", iso_from_us(sim.start_us),
             key, "explicit" if args.explicit_ids else "*")
    writer: StreamWriter | None = None

    def nap(seconds: float) -> None:
        stop.wait(seconds)

    def run() -> WriteStats:
        nonlocal writer
        client = connect(cfg.redis_url, sleep=nap)
        writer = StreamWriter(client, key, explicit_ids=args.explicit_ids, batch_size=args.batch_size,
                              clock=None if sim.rate == 0 else clock, offset_us=clock.now_us() - sim.start_us,
                              stop=stop, on_batch=progress, max_stream_entries=cfg.stream_max_entries,
                              shards=cfg.stream_shards)
        records = sim.records()
        while True:
            try:
                return writer.resume(records, raw=True)
            except LOST_REDIS as exc:
                if stop.is_set():
                    return writer.stats
                # The writer settles the batches in flight on the new connection: each written exactly once.
                log.warning("lost Redis (%s); reconnecting, then the batches in flight are written exactly once",
                            exc)
                writer.client = connect(cfg.redis_url, sleep=nap, attempts=1_000, max_delay_s=5.0)

    return _exit_code(run, lambda: None if writer is None else writer.stats, progress, stop)


def _exit_code(run: Callable[[], WriteStats], written: Callable[[], WriteStats | None], progress: _Progress,
               stop: threading.Event) -> int:
    """Run the writing loop; the process's exit code, with a last progress line whatever happened:
    130 on a second Ctrl-C, 1 on a write or Redis error (0 if stopped while still waiting for Redis)."""
    try:
        stats = run()
    except KeyboardInterrupt:
        if (so_far := written()) is not None:
            progress(so_far, final=True)
        return 130
    except (WriteError, ConnectionError, redis.RedisError) as exc:
        so_far = written()
        if so_far is not None:
            progress(so_far, final=True)
        if stop.is_set() and so_far is None:
            return 0  # stopped while still waiting for Redis
        print(f"generator: error: {exc}", file=sys.stderr)
        return 1
    progress(stats, final=True)
    return 0


def _follow(args: argparse.Namespace, cfg: Config, seed: int, clock: RealClock, stop: threading.Event,
            progress: _Progress) -> int:
    """``--follow``: run what ``{ns}:control`` asks for (see ``streaming.apps.follow``)."""
    from streaming.apps.follow import Follower  # imported here because it imports this module

    def nap(seconds: float) -> None:
        stop.wait(seconds)

    log.info("following %s:control (seeding scenario=%s rate=%s where unset) seed=%d", cfg.namespace, args.scenario,
             args.rate or "max", seed)
    follower: Follower | None = None

    def run() -> WriteStats:
        nonlocal follower
        client = connect(cfg.redis_url, sleep=nap)
        follower = Follower(
            client, KeySchema(cfg.namespace), clock=clock, scenario=args.scenario, rate=args.rate, seed=seed,
            reconnect=lambda: connect(cfg.redis_url, sleep=nap, attempts=1_000, max_delay_s=5.0), stop=stop,
            explicit_ids=args.explicit_ids, batch_size=args.batch_size, stream_key=args.stream, on_batch=progress,
            timeline_scale=args.timeline_scale, servers=args.servers, regions=args.regions,
            daily=args.daily_curve == "on", max_stream_entries=cfg.stream_max_entries, shards=cfg.stream_shards)
        return follower.follow()

    return _exit_code(run, lambda: None if follower is None else follower.writer.stats, progress, stop)


if __name__ == "__main__":
    sys.exit(main())
