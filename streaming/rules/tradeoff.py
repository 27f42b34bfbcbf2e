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

from streaming.schema.keys import SEP

GRID_MS: tuple[int, ...] = (
    0, 1_000, 2_000, 5_000, 10_000, 15_000, 20_000, 30_000, 45_000, 60_000, 90_000, 120_000, 180_000,
    300_000, 600_000, 900_000, 1_800_000, 3_600_000,
)
GRID_FIELD = "grid"
RETIRED_SERVERS = "*"
"""The histogram the buckets of retired servers are added to when they are forgotten (``*`` is never a server's
name: ``watermark_client.events.bad_name``), so a day of match servers is a bounded hash."""


MIN_TAIL = 10
"""Pairs a recommendation stands on: at least this many late ones, and enough pairs that the share a target
allows to drop is this many."""


@dataclass(frozen=True)
class Evidence:
    """What the history holds to recommend a delay on: all pairs, the late ones (those a 0 s delay drops: their
    window had closed by the newest event time when they arrived) and the target completeness.

    A recommendation needs :data:`MIN_TAIL` late pairs (with fewer, "0 s" only says that nothing was late yet)
    and enough pairs that the target's allowed share is :data:`MIN_TAIL` pairs (99.9 %: 10,000 pairs).

    >>> Evidence(pairs=50_000, late=0, completeness=0.999).enough
    False
    >>> Evidence(pairs=50_000, late=10, completeness=0.999).enough
    True
    >>> Evidence(pairs=9_999, late=500, completeness=0.999).enough
    False
    """

    pairs: int
    late: int
    completeness: float

    @property
    def pairs_needed(self) -> int:
        return math.ceil(MIN_TAIL / (1 - self.completeness) - 1e-9) if self.completeness < 1 else 0

    @property
    def enough(self) -> bool:
        return self.late >= MIN_TAIL and self.completeness < 1 and self.pairs >= self.pairs_needed

    def why_not(self) -> str:
        """Why no delay is recommended, in words (empty when one is)."""
        if self.enough:
            return ""
        if self.late < MIN_TAIL:
            return (f"too few late events to recommend a delay: {self.late:,} of {self.pairs:,} (event, window) "
                    f"pairs arrived after their window had closed at 0 s delay; a recommendation needs at least "
                    f"{MIN_TAIL}")
        return (f"too few events to recommend a delay for {100 * self.completeness:g}%: {self.pairs:,} pairs, and "
                f"at least {self.pairs_needed:,} are needed for the {100 * (1 - self.completeness):g}% it allows to "
                f"drop to be {MIN_TAIL} pairs")


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

    def evidence(self, completeness: float, servers: Iterable[str] | None = None) -> Evidence:
        """Whether the history says enough about late data to recommend a delay for ``completeness``
        (:class:`Evidence`)."""
        cands = self.candidates(servers)
        if not cands:
            return Evidence(0, 0, completeness)
        return Evidence(cands[0].pairs, cands[0].dropped, completeness)

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
