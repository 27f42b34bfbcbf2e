"""The online-players query: per-player state in Spark (transformWithStateInPandas), transitions to Redis.

A second streaming query of the job, next to the stateless main one: the same
source and watermark (:func:`streaming.query.read_events`), quarantined rows
filtered out, then ``groupBy(server, player_id).transformWithStateInPandas``
in event-time mode. The state of each player (online, latest event) lives in
Spark's RocksDB state store under its own checkpoint ``{CHECKPOINT_DIR}/online``,
so it survives restarts; the rule is :mod:`streaming.presence`. Each batch's
transitions go to Redis once (:func:`streaming.presence_store.commit_online`).

When timers fire: Spark runs a batch's input rows first, then the timers whose
expiry is at or below that batch's watermark (the one in ``offsets/N``). After
a batch that moves the watermark, Spark runs a no-data batch with the new
watermark, so expiries do not wait for the next event.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle, StreamingQuery
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

from streaming.checkpoint import read_offset_log
from streaming.commit import Params
from streaming.config import Config
from streaming.events import IDLE_KIND, parse_entry_id
from streaming.keys import KeySchema
from streaming.presence import Outcome, PlayerState, Seen, apply_events, on_timer
from streaming.presence_store import OnlineBatch, PlayerTransition, commit_online
from streaming.query import params_of, read_events, with_trigger
from streaming.redis_conn import DriverClient, with_retry

log = logging.getLogger(__name__)

OUTPUT = "server string, player_id string, online boolean, at_us long, cause string, seq int"
STATE = "online boolean, last_us long, entry_ms long, entry_seq long, timer_ms long"


def online_checkpoint(cfg: Config) -> str:
    return f"{cfg.checkpoint_dir.rstrip('/')}/online"


class PresenceProcessor(StatefulProcessor):
    """Glue between Spark's state and timers and the pure rule; one ValueState per (server, player)."""

    def __init__(self, timeout_ms: int) -> None:
        self.timeout_ms = timeout_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.player = handle.getValueState("player", STATE)

    def _load(self) -> tuple[PlayerState | None, int | None]:
        if not self.player.exists():  # get() on a new key would log a warning per player
            return None, None
        v = self.player.get()
        if v is None:
            return None, None
        return PlayerState(bool(v[0]), int(v[1]), (int(v[2]), int(v[3]))), int(v[4])

    def _save(self, state: PlayerState | None, timer: int | None) -> None:
        if state is None:
            self.player.clear()
            return
        assert timer is not None
        self.player.update((state.online, state.last_us, state.last_entry[0], state.last_entry[1], timer))

    def _emit(self, key: tuple[str, str], outcome: Outcome) -> Iterator[pd.DataFrame]:
        ts = outcome.transitions
        if ts:
            yield pd.DataFrame({
                "server": [key[0]] * len(ts), "player_id": [key[1]] * len(ts), "online": [t.online for t in ts],
                "at_us": [t.at_us for t in ts], "cause": [t.cause for t in ts], "seq": list(range(len(ts))),
            })

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        events = [
            Seen(int(t), parse_entry_id(e), k if isinstance(k, str) else None)
            for pdf in rows for t, e, k in zip(pdf["event_us"], pdf["entry_id"], pdf["kind"], strict=True)
        ]
        old, old_timer = self._load()
        outcome = apply_events(old, events, timerValues.getCurrentWatermarkInMs(), self.timeout_ms)
        new_timer = outcome.state.timer_ms(self.timeout_ms) if outcome.state else None
        if old_timer is not None and old_timer != new_timer:
            self.handle.deleteTimer(old_timer)
        if new_timer is not None and new_timer != old_timer:
            self.handle.registerTimer(new_timer)
        self._save(outcome.state, new_timer)
        yield from self._emit(key, outcome)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[pd.DataFrame]:
        # Spark deletes the fired timer itself after this returns.
        state, _ = self._load()
        outcome, next_timer = on_timer(state, timerValues.getCurrentWatermarkInMs(), self.timeout_ms)
        if next_timer is not None:
            self.handle.registerTimer(next_timer)
        self._save(outcome.state, next_timer)
        yield from self._emit(key, outcome)

    def close(self) -> None:
        pass


def transitions(events: DataFrame, timeout_ms: int) -> DataFrame:
    """``events``: the watermarked source rows. Quarantined rows and idle markers never reach the state."""
    return (
        events.where(F.col("error").isNull() & ~F.coalesce(F.col("kind") == IDLE_KIND, F.lit(False)))
        .select("server", "player_id", "kind", "entry_id", "event_time", F.unix_micros("event_time").alias("event_us"))
        .groupBy("server", "player_id")
        .transformWithStateInPandas(PresenceProcessor(timeout_ms), OUTPUT, "Append", "EventTime")
    )


class OnlineSink(DriverClient):
    """The ``foreachBatch`` callable: collects the (few) transitions and commits them once."""

    def __init__(self, redis_url: str, keys: KeySchema, params: Params, checkpoint_dir: str,
                 timeout_ms: int) -> None:
        self.redis_url = redis_url
        self.keys = keys
        self.params = params
        self.checkpoint_dir = checkpoint_dir
        self.timeout_ms = timeout_ms

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        entry = read_offset_log(self.checkpoint_dir, batch_id, df.sparkSession)
        rows = df.toArrow().to_pylist()
        batch = OnlineBatch(batch_id, entry.watermark_ms, entry.batch_ts_ms,
                            [PlayerTransition(**r) for r in rows])
        applied = with_retry(lambda: commit_online(self.client, self.keys, batch, self.params, self.timeout_ms),
                             f"online commit of batch {batch_id}")
        if not applied:
            log.info("online batch %d already in Redis (replayed after a restart): skipped", batch_id)


def start_online_query(spark: SparkSession, cfg: Config, trigger_ms: int | None = None,
                       query_name: str | None = None) -> StreamingQuery:
    checkpoint = online_checkpoint(cfg)
    sink = OnlineSink(cfg.redis_url, KeySchema(cfg.namespace), params_of(cfg), checkpoint, cfg.online_timeout_ms)
    writer = (transitions(read_events(spark, cfg), cfg.online_timeout_ms).writeStream.foreachBatch(sink)
              .option("checkpointLocation", checkpoint))
    return with_trigger(writer, cfg, trigger_ms).queryName(query_name or f"online-{cfg.namespace}").start()
