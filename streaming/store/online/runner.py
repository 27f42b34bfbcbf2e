"""One group's fold of the online view, batch after batch (what ``wm-online`` runs, decision 0020)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import redis

from streaming.rules.online.groups import Group
from streaming.rules.online.table import OnlineBatch, OnlineEvents
from streaming.schema.config import ConfigError
from streaming.schema.keys import KeySchema
from streaming.schema.params import Params
from streaming.schema.records import HandoffBatch
from streaming.store.online.commit import OnlineMirror, commit_online, last_committed
from streaming.store.online.handoff import ROWS_KEPT_S, batches_after, rows_of
from streaming.store.redis_conn import with_retry

log = logging.getLogger("streaming.store.online")


class GroupRunner:
    """Folds ``group``'s share of every batch the job hands off, in order, once each: the batches of
    ``{ns}:handoff:batches`` after the last the group committed, its share of each from ``{ns}:handoff:rows``. Keeps
    its players between batches (:class:`OnlineMirror`), as the job's own fold does; a new runner (a restart)
    loads them from Redis. Every step is idempotent (the commits are guarded), so Redis going away is waited
    out and the step tried again."""

    def __init__(self, client: redis.Redis, keys: KeySchema, group: Group, params: Params,
                 now_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.client, self.keys, self.group, self.params, self.now_ms = client, keys, group, params, now_ms
        self.mirror = OnlineMirror()
        self.cursor = "0-0"  # the last entry of the handed-over batches looked at

    def step(self, block_ms: int | None = None) -> list[int]:
        """Fold what was handed off since the last step, waiting up to ``block_ms`` when nothing was; returns
        the batches this group committed."""
        return with_retry(lambda: self._step(block_ms), f"the online view's group {self.group.index}")

    def _step(self, block_ms: int | None) -> list[int]:
        last = last_committed(self.client, self.keys, self.group)
        done = []
        for entry_id, b in batches_after(self.client, self.keys, self.cursor, block_ms=block_ms):
            if last is None or b.batch > last:  # (batches before: folded, perhaps by another number of groups)
                if b.groups != self.group.of:
                    raise ConfigError(f"ONLINE_GROUPS: the job splits the online view among {b.groups} groups "
                                      f"(batch {b.batch}), this process is group {self.group.index} of "
                                      f"{self.group.of}")
                self._fold(b, last)
                last = b.batch
                done.append(b.batch)
            self.cursor = entry_id
        return done

    def _fold(self, b: HandoffBatch, last: int | None) -> None:
        missed = last is not None and b.batch > last + 1
        if missed:
            log.warning("group %d: batches %d to %d were handed off and are no longer kept (the group was away "
                        "longer than the hand-off keeps them): the online view is partial from batch %d",
                        self.group.index, last + 1, b.batch - 1, b.batch)
        rows = rows_of(self.client, self.keys, b.batch, self.group.index)
        if rows is None:
            log.error("group %d: its share of batch %d is gone from Redis (it waited longer than %d s, or Redis lost "
                      "it): the online view is partial from this batch", self.group.index, b.batch, ROWS_KEPT_S)
            rows, missed = OnlineEvents.empty(), True
        share = OnlineBatch.of(b, rows, missed, (self.keys.handoff_rows(b.batch, self.group.index),))
        commit_online(self.client, self.keys, share, self.params, b.timeout_ms, self.mirror, self.now_ms,
                        self.group)
