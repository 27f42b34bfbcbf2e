"""The delay trade-off: what each candidate watermark delay would have dropped, exactly.

Under delay ``d`` the watermark in force for a batch is ``M - d``, where ``M``
is the running maximum of the event times that drive the watermark, taken over
the batches before it (per-server lanes: the policy's min or max over each
server's running maximum). A window is closed, and an (event, window) pair
dropped, iff ``window.end <= M - d``, i.e. iff ``d <= M - window.end``: the
pair's *slack*. The slack depends only on the window and the batch, so the sink
adds each window's pairs of a batch to one histogram bucket per server: bucket
``b`` counts pairs whose slack reaches exactly the first ``b`` grid delays.
Pairs dropped under ``GRID_MS[i]`` are then the pairs in buckets above ``i``:
exact for every grid delay, over the whole history, at no cost in Spark.

Histogram field format (``{ns}:tradeoff``): ``{server}|{bucket}`` -> pairs,
plus ``grid`` (JSON list of the delays it was built with); see
:func:`hist_field` / :func:`parse_hist_field`.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from watermark.schema.keys import SEP

GRID_MS: tuple[int, ...] = (
    0, 1_000, 2_000, 5_000, 10_000, 15_000, 20_000, 30_000, 45_000, 60_000, 90_000, 120_000, 180_000,
    300_000, 600_000, 900_000, 1_800_000, 3_600_000,
)
GRID_FIELD = "grid"
RETIRED_SERVERS = "*"
"""The histogram the buckets of retired servers are added to when they are forgotten (``*`` is never a server's
name: ``watermark.schema.events.bad_name``), so a day of match servers is a bounded hash."""


def bucket(slack_ms: int | None, grid: tuple[int, ...] = GRID_MS) -> int:
    """How many grid delays would drop a pair with this slack (``None``: no watermark yet, none would)."""
    if slack_ms is None:
        return 0
    return bisect_right(grid, slack_ms)


def hist_field(server: str, b: int) -> str:
    return f"{server}{SEP}{b}"


def parse_hist_field(field: str | bytes) -> tuple[str, int]:
    """Inverse of :func:`hist_field`; the server name may contain ``|``."""
    text = field.decode() if isinstance(field, bytes) else field
    server, _, b = text.rpartition(SEP)
    return server, int(b)


@dataclass(frozen=True)
class Candidate:
    delay_ms: int
    pairs: int
    dropped: int

    @property
    def dropped_share(self) -> float:
        return self.dropped / self.pairs if self.pairs else 0.0


@dataclass(frozen=True)
class Tradeoff:
    """Per server, the histogram of slack buckets; read from ``{ns}:tradeoff``."""

    grid: tuple[int, ...]
    hist: dict[str, dict[int, int]]

    @classmethod
    def from_hash(cls, raw: Mapping[bytes | str, bytes | str]) -> Tradeoff:
        grid: tuple[int, ...] = GRID_MS
        hist: dict[str, dict[int, int]] = {}
        for k, v in raw.items():
            key = k.decode() if isinstance(k, bytes) else k
            if key == GRID_FIELD:
                grid = tuple(json.loads(v))
                continue
            server, b = parse_hist_field(key)
            hist.setdefault(server, {})[b] = int(v)
        return cls(grid, hist)

    @property
    def servers(self) -> list[str]:
        return sorted(self.hist)

    def candidates(self, servers: Iterable[str] | None = None) -> list[Candidate]:
        """Pairs dropped under each grid delay, over the given servers (all by default)."""
        chosen = self.servers if servers is None else list(servers)
        counts = [0] * (len(self.grid) + 1)
        for s in chosen:
            for b, n in self.hist.get(s, {}).items():
                counts[min(b, len(self.grid))] += n
        total = sum(counts)
        out, above = [], total - counts[0]
        for i, d in enumerate(self.grid):
            out.append(Candidate(d, total, above))  # dropped under grid[i]: pairs in buckets > i
            above -= counts[i + 1]
        return out

    def recommend(self, completeness: float, servers: Iterable[str] | None = None) -> int | None:
        """The smallest grid delay keeping at least ``completeness`` of the pairs.

        None when there is no data, or when even the largest grid delay keeps less."""
        if not 0 < completeness <= 1:
            raise ValueError(f"completeness must be in (0, 1], got {completeness}")
        cands = self.candidates(servers)
        if not cands or not cands[0].pairs:
            return None  # no data: nothing to recommend
        allowed = math.floor((1 - completeness) * cands[0].pairs + 1e-9)
        return next((c.delay_ms for c in cands if c.dropped <= allowed), None)
