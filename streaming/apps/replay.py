"""Replay a hand-written event set through the real pipeline and print the check document.

``wm-replay EVENTS.jsonl --window 10m [--slide 5m] --delay 10m [--online-timeout 30s]
[--out OUT.json]``

Each line is a JSON object with ``server``, ``player_id``, ``event_time``
(ISO-8601 UTC), optionally ``kind`` (login, heartbeat, logout), ``arrival``
(when it reached Redis: ISO-8601 UTC, or a recorded stream's entry ID
``ms-seq``) and ``batch`` (an integer). Lines with the same ``batch`` are
written to the stream in one transaction and processed as one micro-batch,
in increasing batch order, by the same source, query and sink as the live job,
in a fresh namespace of the configured Redis (an embedded one is started for
the run when none is configured and none is running). The document's
``online`` lists the players online per server after each batch
(:func:`streaming.store.report.online_document`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import orjson
import redis

from streaming.schema.config import Config, ConfigError, redact_url
from streaming.schema.keys import KeySchema
from streaming.spark.checkpoint import job_secret
from streaming.store.report import build_document, read_state, write_document
from watermark_client.connection import is_cluster, open_client
from watermark_client.events import IDLE_KIND, PAYLOAD_FIELD, sign
from watermark_client.stream import input_shard_key, shard_of
from watermark_client.timeutil import parse_duration_ms, parse_iso_us

log = logging.getLogger("streaming.apps.replay")
REPLAY_TTL_MS = 86_400_000
NO_TRIM_MS = 100 * 365 * 86_400_000


class ReplayInputError(ValueError):
    pass


@dataclass(frozen=True)
class ReplayBatch:
    label: int
    payloads: list[bytes]
    ids: list[str] | None = None
    """Explicit stream entry IDs (increasing), so ingest times are the simulated arrival times."""


def load_batches(path: str) -> list[ReplayBatch]:
    """Group lines by ``batch``; a line that is not a JSON object with an integer batch is an
    input error (reported with its line number). Everything else about the event is left to the
    pipeline, which quarantines what it cannot use.

    A line's ``arrival`` is its stream entry ID's time, as the live job's ingest time: the online view judges
    each server's clock by arrival (``streaming.rules.server_clock``), so an event 90 s ahead of its arrival
    is a clock running fast there, not 90 s passing. A line without one arrives with its batch: at the newest
    event time of the set so far (the assumption when the file recorded no arrivals: arrival time passes as
    the events' time does, so one event far ahead moves every silent server's clock with it). Entry IDs are
    kept increasing, 1 ms after the one before at the least, whatever the replay's own speed: every run gives
    the same answer."""
    groups: dict[int, list[bytes]] = defaultdict(list)
    arrivals: dict[int, list[int | None]] = defaultdict(list)
    newest: dict[int, int] = {}
    with open(path, "rb") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                doc = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise ReplayInputError(f"{path}:{n}: not JSON: {exc}") from None
            if not isinstance(doc, dict):
                raise ReplayInputError(f"{path}:{n}: expected a JSON object")
            label = doc.pop("batch", None)
            if isinstance(label, bool) or not isinstance(label, int):
                raise ReplayInputError(f"{path}:{n}: 'batch' must be an integer, got {label!r}")
            doc.setdefault("event_id", f"line-{n}")
            arrivals[label].append(_arrival_ms(doc.pop("arrival", None), f"{path}:{n}"))
            groups[label].append(orjson.dumps(doc))
            newest[label] = max(newest.get(label, 0), _event_ms(doc.get("event_time")))
    out, last = [], (0, 0)
    for label in sorted(groups):
        default = max(last[0] + 1, max(newest[b] for b in newest if b <= label))
        ids = []
        for at in arrivals[label]:
            ms = max(at if at is not None else default, last[0])
            last = (ms, last[1] + 1 if ms == last[0] else 0)
            ids.append(f"{last[0]}-{last[1] + 1}")
        out.append(ReplayBatch(label, groups[label], ids))
    return out


def _arrival_ms(value: object, where: str) -> int | None:
    """A line's ``arrival``: ISO-8601, or a stream entry ID (``1764000000000-3``); None when it has none."""
    if value is None:
        return None
    if isinstance(value, str) and value.partition("-")[0].isdigit() and value.count("-") == 1:
        return int(value.partition("-")[0])
    try:
        if isinstance(value, str):
            return parse_iso_us(value) // 1000
    except (ValueError, OverflowError):
        pass
    raise ReplayInputError(f"{where}: 'arrival' must be an ISO-8601 time or a stream entry ID, got {value!r}")


def _event_ms(value: object) -> int:
    """An event time for the arrival clock; 0 for one the pipeline will quarantine."""
    try:
        return parse_iso_us(value) // 1000 if isinstance(value, str) else 0
    except (ValueError, OverflowError):
        return 0


def replay(batches: list[ReplayBatch], cfg: Config) -> dict:
    """Run the batches through the pipeline in ``cfg.namespace``; returns the check document."""
    from streaming.spark.listener import Progress, write_progress
    from streaming.spark.query import build_session, start_query  # pyspark only when replaying

    # A replay's ingest time is the wall clock of the replay, unrelated to the event set's times; its minutes
    # hold hours of the file's names, so the flood guard, judged by the job's minute, is off.
    cfg = cfg.with_(max_future_skew_ms=None, new_servers_per_minute=0)
    client = open_client(cfg.redis_url)
    keys = KeySchema(cfg.namespace)
    ttl_s = max(1, (cfg.key_ttl_ms or cfg.retention_ms) // 1000)
    spark = build_session(cfg, app_name=f"replay-{cfg.namespace}", ui=False)
    secret = job_secret(cfg.checkpoint_dir, spark)
    query = start_query(spark, cfg, trigger_ms=0)
    labels: dict[int, int] = {}
    try:
        for index, batch in enumerate(batches):
            write_batch(client, keys, batch, cfg.stream_shards, secret)
            started = time.perf_counter()
            query.processAllAvailable()
            log.info("batch %s: %d events in %.2fs", batch.label, len(batch.payloads), time.perf_counter() - started)
            last = read_state(client, keys).last_batch
            if last != index:
                raise RuntimeError(f"batch {batch.label} was not processed as micro-batch {index} (state: {last})")
            # The live job's listener is asynchronous; a replay writes the same progress records synchronously.
            for p in query.recentProgress:
                if p.batchId == index:
                    write_progress(client, keys, Progress.from_json(json.loads(p.json)), ttl_s)
            labels[index] = batch.label
    finally:
        query.stop()
    return build_document(client, keys, batch_labels=labels)


def write_batch(client: redis.Redis, keys: KeySchema, batch: ReplayBatch, shards: int, secret: bytes) -> None:
    """The batch's lines, each in its shard: one transaction, so all of a batch becomes visible at once. In a
    Redis Cluster a transaction stays in one slot: one per shard there, so a batch may become visible shard by
    shard (a micro-batch may then split it: the same events, other batch boundaries)."""
    cluster = is_cluster(client)
    groups: dict[int, list[tuple[int, int]]] = {}  # transaction -> (line, its shard)
    for i, payload in enumerate(batch.payloads):
        k = route(payload, shards)
        groups.setdefault(k if cluster else 0, []).append((i, k))
    for rows in groups.values():
        pipe = client.pipeline(transaction=True)
        for i, k in rows:
            pipe.xadd(input_shard_key(keys.events, k), {PAYLOAD_FIELD: signed(batch.payloads[i], secret)},
                      id=batch.ids[i] if batch.ids else "*")
        pipe.execute()


def route(payload: bytes, shards: int) -> int:
    """The shard a line goes to, as a producer would send it: its server's (``shard_of``); a line with no server
    to read (the pipeline will quarantine it) to shard 0. Explicit IDs stay increasing within each shard."""
    if shards == 1:
        return 0
    try:
        server = orjson.loads(payload).get("server")
    except (orjson.JSONDecodeError, AttributeError):
        return 0
    return shard_of(server, shards) if isinstance(server, str) else 0


def signed(payload: bytes, key: bytes) -> bytes:
    """An idle line of the event set is the scenario's declaration that a server is idle, as the job would
    make it: signed with the replay's own secret. Anything else, or an idle line the parser will refuse
    anyway, goes in as it is."""
    if b'"idle"' not in payload:
        return payload
    doc = orjson.loads(payload)
    server, ts = doc.get("server"), doc.get("event_time")
    if doc.get("kind") != IDLE_KIND or not isinstance(server, str) or not isinstance(ts, str):
        return payload
    try:
        event_us = parse_iso_us(ts)
    except (ValueError, OverflowError):
        return payload
    silent = doc.get("silent_ms")
    doc["silent_ms"] = silent if isinstance(silent, int) and not isinstance(silent, bool) else 0
    doc["sig"] = sign(key, server, event_us, doc["silent_ms"])
    return orjson.dumps(doc)


def _reachable(url: str) -> bool:
    try:
        open_client(url, socket_connect_timeout=1).ping()
        return True
    except redis.RedisError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wm-replay", description=__doc__.splitlines()[0])
    parser.add_argument("events", help="JSON lines: server, player_id, event_time, batch")
    parser.add_argument("--window", required=True, help="window length, e.g. 10m")
    parser.add_argument("--slide", help="slide (default: the window length, i.e. tumbling)")
    parser.add_argument("--delay", required=True, help="watermark delay, e.g. 10m")
    parser.add_argument("--online-timeout", help="event time without an event after which a player counts as "
                        "offline (default: ONLINE_TIMEOUT, 30s)")
    parser.add_argument("--out", help="write the JSON here instead of stdout")
    parser.add_argument("--namespace", help="namespace to use (default: a fresh replay-<id>)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)

    try:
        window = parse_duration_ms(args.window)
        slide = parse_duration_ms(args.slide) if args.slide else window
        delay = parse_duration_ms(args.delay)
        timeout = parse_duration_ms(args.online_timeout) if args.online_timeout else None
        if timeout is not None and timeout <= 0:
            raise ValueError(f"--online-timeout must be positive, got {args.online_timeout}")
        batches = load_batches(args.events)
        with ExitStack() as stack:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="replay-")))
            ns = args.namespace or f"replay-{uuid.uuid4().hex[:10]}"
            cfg = Config.from_env(os.environ).with_(
                namespace=ns, window_ms=window, slide_ms=slide, delay_ms=delay,
                checkpoint_dir=str(tmp / "checkpoint"), max_events_per_batch=0,
                retention_ms=NO_TRIM_MS, key_ttl_ms=REPLAY_TTL_MS, progress_history=max(10, len(batches) + 10),
            )
            if timeout is not None:
                cfg = cfg.with_(online_timeout_ms=timeout)
            if cfg.embedded_redis and not _reachable(cfg.redis_url):
                from streaming.apps.redis_server import RedisServer

                server = RedisServer(str(tmp / "redis"), port=0)
                server.start()
                stack.callback(server.stop)
                cfg = cfg.with_(redis_url=server.url)
                log.info("no Redis running: started an embedded one for this replay")
            log.info("replaying %d batches into namespace %s at %s", len(batches), ns, redact_url(cfg.redis_url))
            doc = replay(batches, cfg)
    except (ConfigError, ReplayInputError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (OSError, redis.RedisError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    write_document(doc, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
