"""The check document: what Redis says the pipeline computed, in a form anyone can diff.

``wm-report [--out OUT.json]`` writes it for the live
pipeline; ``streaming.apps.replay`` writes the same document for a replayed event
set. A window is ``final`` when its end is at or below the watermark that will
be in force for the next batch: no later event can change it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

import msgspec
import redis

from streaming.schema.config import Config, ConfigError
from streaming.schema.keys import KeySchema, WindowKey
from streaming.schema.records import BatchRecord, OnlineRecord, StateRecord
from streaming.schema.shards import Position
from watermark_client.connection import open_client
from watermark_client.timeutil import iso_from_ms


@dataclass(frozen=True)
class WindowRow:
    key: WindowKey
    events: int
    dropped: int
    late: int
    players: int
    final: bool
    """The window's end is at or below the next batch's watermark: no later event can change it."""

    @property
    def start_ms(self) -> int:
        return self.key.start_ms

    @property
    def end_ms(self) -> int:
        return self.key.end_ms

    @property
    def server(self) -> str:
        return self.key.server


def read_state(client: redis.Redis, keys: KeySchema) -> StateRecord:
    return StateRecord.from_hash(client.hgetall(keys.state), keys.state)


def queue_window_reads(pipe: redis.client.Pipeline, keys: KeySchema, members: list[WindowKey]) -> None:
    """One reply per window, parsed by :func:`window_rows`; lets a caller share one round trip. A window's distinct
    players are a count in its hash, open or closed (decision 0019)."""
    for wk in members:
        pipe.hmget(keys.window(wk), ["events", "dropped", "late", "players"])


def window_rows(members: list[WindowKey], replies: list, final_below_ms: int) -> list[WindowRow]:
    rows = []
    for wk, (events, dropped, late, players) in zip(members, replies, strict=True):
        rows.append(WindowRow(wk, int(events or 0), int(dropped or 0), int(late or 0), int(players or 0),
                              wk.end_ms <= final_below_ms))
    rows.sort(key=lambda w: (w.start_ms, w.server, w.end_ms))
    return rows


def read_windows(client: redis.Redis, keys: KeySchema, min_start_ms: float = float("-inf"),
                 max_start_ms: float = float("inf")) -> list[WindowRow]:
    members = [WindowKey.parse(m) for m in client.zrangebyscore(keys.windows, min_start_ms, max_start_ms)]
    final_below = read_state(client, keys).next_watermark_ms
    pipe = client.pipeline(transaction=False)
    queue_window_reads(pipe, keys, members)
    return window_rows(members, pipe.execute() if members else [], final_below)


def read_batches(client: redis.Redis, keys: KeySchema, last: int | None = None) -> list[dict]:
    """Batch records, oldest first; each has the sink's fields and, once the listener
    has reported, ``progress``."""
    ids = client.zrange(keys.batches, -last if last else 0, -1)
    pipe = client.pipeline(transaction=False)
    for b in ids:
        pipe.hmget(keys.batch(int(b)), ["sink", "progress"])
    out = []
    for b, (sink, progress) in zip(ids, pipe.execute(), strict=True):
        if sink is None:
            continue
        rec = msgspec.to_builtins(BatchRecord.decode(sink, f"{keys.batch(int(b))} (sink)"))
        if progress is not None:
            rec["progress"] = json.loads(progress)
        out.append(rec)
    return out


def wait_for_commit(client: redis.Redis, keys: KeySchema, last_id: str, timeout_s: float,
                    online: bool = False) -> bool:
    """Block on ``{ns}:commits`` (no polling) until the pipeline has committed up to entry ``last_id`` (a position:
    with shards, up to each shard's ID in it);
    False if it has not within ``timeout_s``. With ``online``, until the online view has, on its own stream
    (it commits after the windows of the same batch, in the job on a thread of its own)."""
    want = Position.of(last_id)
    state, commits = (keys.online_state, keys.online_commits) if online else (keys.state, keys.commits)
    deadline = time.monotonic() + timeout_s
    cursor = "0-0"
    while True:
        committed = client.hget(state, "committed_id")
        if committed and Position.of(committed).covers(want):
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        for _stream, entries in client.xread({commits: cursor}, block=max(1, int(min(left, 5) * 1000))) or []:
            cursor = entries[-1][0]


def build_document(client: redis.Redis, keys: KeySchema,
                   batch_labels: Mapping[int, int] | None = None) -> dict:
    batches = [
        {
            "batch": batch_labels.get(b["batch"], b["batch"]) if batch_labels else b["batch"],
            "watermark": iso_from_ms(b["watermark_ms"]),
            "input": b["input"],
            "dropped": b["dropped"],
        }
        for b in read_batches(client, keys)
    ]
    windows = [
        {
            "server": w.key.server,
            "start": iso_from_ms(w.key.start_ms),
            "end": iso_from_ms(w.key.end_ms),
            "events": w.events,
            "players": w.players,
            "dropped": w.dropped,
            "final": w.final,
        }
        for w in read_windows(client, keys)
    ]
    doc: dict = {"batches": batches, "windows": windows}
    online = online_document(client, keys, batch_labels)
    if online:
        doc["online"] = online
    return doc


def online_document(client: redis.Redis, keys: KeySchema, batch_labels: Mapping[int, int] | None = None) -> list:
    """One item per batch of the online view: ``{"batch", "watermark_ms", "online": {server: count}}``, where
    ``watermark_ms`` is the watermark the batch's expiries used (the one after it) and ``online`` holds the
    servers with at least one player online after it."""
    out = []
    for raw in client.zrange(keys.online_history, 0, -1):
        rec = OnlineRecord.decode(raw, f"a member of {keys.online_history}")
        out.append({"batch": batch_labels.get(rec.batch, rec.batch) if batch_labels else rec.batch,
                    "watermark_ms": rec.watermark_ms,
                    "online": {s: n for s, n in sorted(rec.counts.items()) if n}})
    return out


def write_document(doc: dict, out: str | None) -> None:
    text = json.dumps(doc, indent=2) + "\n"
    if out:
        with open(out, "w") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wm-report", description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the JSON here instead of stdout")
    args = parser.parse_args(argv)
    try:
        cfg = Config.from_env(os.environ)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    client = open_client(cfg.redis_url)
    try:
        doc = build_document(client, KeySchema(cfg.namespace))
    except redis.RedisError as exc:
        print(f"cannot read Redis: {exc}", file=sys.stderr)
        return 1
    write_document(doc, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
