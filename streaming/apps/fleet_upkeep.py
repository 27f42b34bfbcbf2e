"""What the job does for the fleet beside its query, from its supervising loop (``streaming.apps.job``): idle
markers for servers silent too long, each with its decision (:func:`tick_idle`), and forgetting the per-server
fields of retired servers (:func:`forget_retired`); both best effort, on Redis' clock (:func:`redis_now_ms`)."""

from __future__ import annotations

import logging

import redis
from redis.commands.core import Script

from streaming.rules.fleet import IDLENESS_KEEP, IdleTicker
from streaming.rules.fleet import summary as idle_summary
from streaming.schema.config import Config
from streaming.schema.keys import KeySchema
from streaming.store.commit import forget_servers
from streaming.store.redis_conn import same_slot
from watermark_client.connection import is_cluster
from watermark_client.events import PAYLOAD_FIELD, parse_entry_id
from watermark_client.stream import input_shard_key, shard_of

log = logging.getLogger("streaming.apps.job")  # the job's own lines, in its log as before


def idle_ticker(client: redis.Redis, watcher: Config) -> IdleTicker:
    return IdleTicker(tuple(sorted(watcher.known_servers or ())), watcher.idle_timeout_ms or 0,
                      max(1_000, watcher.trigger_ms), started_ms=redis_now_ms(client),
                      retire_after_ms=watcher.retire_after_ms)


# The marker and its decision record in one step: a reader who sees the marker finds why it was written.
IDLE_LUA = """
local id = redis.call('XADD', KEYS[1], '*', ARGV[1], ARGV[2])
local record = {}
for i = 4, #ARGV, 2 do
  record[#record + 1] = ARGV[i]
  record[#record + 1] = (ARGV[i] == 'marker_id') and id or ARGV[i + 1]
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', unpack(record))
return id
"""


def tick_idle(client: redis.Redis, ticker: IdleTicker, watcher: Config, key: bytes, keys: KeySchema,
              script: Script) -> None:
    """Append signed idle markers for servers silent too long (judged on Redis' clock, the ingest clock), each
    with its decision and reason in the job's ``{ns}:idleness``, by ``script`` (:data:`IDLE_LUA` registered).
    Each marker goes to its server's input shard (``shard_of``), as a producer sends the server's events."""
    try:
        seen = {k.decode(): int(v) for k, v in client.hgetall(KeySchema(watcher.namespace).seen).items()}
        before = ticker.idle
        for decision in ticker.due(redis_now_ms(client), seen):
            # the server's shard: a marker is read in order with its server's events
            shard = input_shard_key(watcher.input_stream, shard_of(decision.server, watcher.stream_shards))
            if is_cluster(client) and not same_slot(shard, keys.idleness):
                # A shard on a slot of its own (decision 0018): the marker, then its record (a reader may see the
                # marker a moment before its reason; a crash between them loses the reason, never the marker).
                marker_id = client.xadd(shard, {PAYLOAD_FIELD: decision.marker(key)}).decode()
                client.xadd(keys.idleness, decision.record(marker_id), maxlen=IDLENESS_KEEP, approximate=True)
            else:
                record = [x for kv in decision.record("").items() for x in kv]
                marker_id = script(keys=[shard, keys.idleness],
                                   args=[PAYLOAD_FIELD, decision.marker(key), IDLENESS_KEEP, *record]).decode()
            log.debug("server %s is idle: %s (marker %s)", decision.server, decision.reason(), marker_id)
        line = idle_summary(before, ticker.idle)
        if line is not None:
            log.info("%s", line)
    except redis.RedisError as exc:  # markers are best effort: the next tick tries again
        log.warning("idle markers: %s", exc)


FORGET_EVERY_S = 60.0
"""How often the job forgets the per-server fields of retired servers: bounded work, a minute's churn at a time."""


def forget_retired(client: redis.Redis, namespaces: list[tuple[KeySchema, bool]], retire_after_ms: int) -> None:
    """The pipeline's and each lane's per-server fields of the servers retired (:func:`forget_servers`), so they
    are bounded by the live fleet and its churn within RETIRE_AFTER, not by every name ever seen. Only while the
    input is live (its newest committed arrival within RETIRE_AFTER of Redis' clock): a job reading a recorded
    stream of another day judges nobody retired by today's clock."""
    try:
        now = redis_now_ms(client)
        committed = client.hget(namespaces[0][0].state, "committed_id")
        newest = max((parse_entry_id(i)[0] for i in committed.decode().split(",")), default=0) if committed else 0
        if now - newest >= retire_after_ms:
            return
        gone = sum(forget_servers(client, k, now, retire_after_ms, follows_fleet) for k, follows_fleet in namespaces)
        if gone:
            log.info("forgot the per-server fields of %d retired server(s)", gone)
    except redis.RedisError as exc:  # best effort: the next minute tries again
        log.warning("forgetting retired servers: %s", exc)


def redis_now_ms(client: redis.Redis) -> int:
    secs, micros = client.time()
    return secs * 1000 + micros // 1000
