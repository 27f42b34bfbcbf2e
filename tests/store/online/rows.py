"""The online view's tests' batches and reads: a batch's events from rows, a server's players as Redis holds them."""

from __future__ import annotations

import numpy as np
import redis

from streaming.rules.online.fold import KIND_CODES
from streaming.rules.online.table import OnlineEvents


def events(*rows: tuple) -> OnlineEvents:
    """(server, player, event ms, kind[, arrival ms]) in arrival order (no arrival: 0)."""
    return OnlineEvents(np.array([r[0] for r in rows], object), np.array([r[1] for r in rows], object),
                        np.array([r[2] * 1000 for r in rows], np.int64), np.arange(len(rows), dtype=np.int64),
                        np.array([KIND_CODES[r[3]] for r in rows], np.int8),
                        np.array([r[4] if len(r) > 4 else 0 for r in rows], np.int64))


def members(r: redis.Redis, key: str) -> dict[str, int]:
    """A player hash as ``{player: ms}``."""
    return {m.decode(): int(v) for m, v in r.hgetall(key).items()}
