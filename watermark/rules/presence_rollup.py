"""The online view over time, per minute and per day: pure, so the dashboard's trend, peaks and transition
rates are tested as tables.

Each batch of the online view ends with players-online counts per server and its transitions per server
and cause. Minutes are those of the batch's trigger time (processing time: a minute is final once it has
passed, whatever event time its batches covered). A :class:`Minute` accumulates the batches of one minute:
the counts after its last batch, the highest count per server and for all servers together, and the
transitions per server and cause; when a batch of a later minute comes, the minute is closed and kept as a
record. A day's peak (UTC) per server and in total keeps its count and the batch time it was first
reached. One dashboard refresh reads an hour of closed minutes, the open one and the day's peaks: a few
commands, whatever the number of players.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

MINUTE_MS = 60_000
DAY_MS = 86_400_000
TOTAL = "*"
"""The key of all servers together, in peaks and in a minute's peak (no server is named ``*``: names are
``[A-Za-z0-9_]``)."""


@dataclass
class Minute:
    minute_ms: int
    last: dict[str, int] = field(default_factory=dict)  # counts after the minute's last batch
    peak: dict[str, int] = field(default_factory=dict)  # the highest count per server, and TOTAL
    causes: dict[str, dict[str, int]] = field(default_factory=dict)  # server -> cause -> transitions

    def to_json(self) -> str:
        # Not dataclasses.asdict: it deep-copies every dict first (8 ms a batch at 300 servers).
        return json.dumps({"causes": self.causes, "last": self.last, "minute_ms": self.minute_ms, "peak": self.peak},
                          separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, raw: str | bytes) -> Minute:
        d = json.loads(raw)
        try:
            return cls(int(d["minute_ms"]), {str(k): int(v) for k, v in d["last"].items()},
                       {str(k): int(v) for k, v in d["peak"].items()},
                       {str(s): {str(c): int(n) for c, n in cs.items()} for s, cs in d["causes"].items()})
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a minute record of the online view: {raw!r} ({exc})") from None

    def add(self, counts: Mapping[str, int], causes: Mapping[str, Mapping[str, int]]) -> None:
        self.last = dict(counts)
        for server, n in counts.items():
            self.peak[server] = max(n, self.peak.get(server, n))
        total = sum(counts.values())
        self.peak[TOTAL] = max(total, self.peak.get(TOTAL, total))
        for server, by_cause in causes.items():
            mine = self.causes.setdefault(server, {})
            for cause, n in by_cause.items():
                mine[cause] = mine.get(cause, 0) + n


def roll(current: Minute | None, batch_ts_ms: int, counts: Mapping[str, int],
         causes: Mapping[str, Mapping[str, int]]) -> tuple[Minute | None, Minute]:
    """Add one batch: the minute it closes (if the batch is of a later minute than ``current``), and the
    open minute with the batch in it."""
    minute_ms = batch_ts_ms - batch_ts_ms % MINUTE_MS
    closed = None
    if current is None or current.minute_ms != minute_ms:
        closed, current = current, Minute(minute_ms)
    current.add(counts, causes)
    return closed, current


def raise_peaks(peaks: Mapping[str, tuple[int, int]], counts: Mapping[str, int],
                at_ms: int) -> dict[str, tuple[int, int]]:
    """The day's peaks this batch raises: server (or :data:`TOTAL`) -> (count, ``at_ms``). A count equal to
    the peak keeps the time it was first reached."""
    out = {}
    for key, n in (*counts.items(), (TOTAL, sum(counts.values()))):
        if key not in peaks or n > peaks[key][0]:
            out[key] = (n, at_ms)
    return out


def day_of(at_ms: int) -> int:
    """The UTC day (its first millisecond) a batch time falls in."""
    return at_ms - at_ms % DAY_MS


def parse_peaks(raw: Mapping[bytes, bytes]) -> dict[str, tuple[int, int]]:
    """The peaks hash: server -> ``count|at_ms``."""
    out = {}
    for k, v in raw.items():
        count, _, at = v.decode().partition("|")
        out[k.decode()] = (int(count), int(at))
    return out


def format_peak(count: int, at_ms: int) -> str:
    return f"{count}|{at_ms}"
