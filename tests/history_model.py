"""An independent model of a week of players online: per-minute counts per server, region and total, the day's
and the highest peaks, written from the rule in docs/decisions/0012 alone (no import of streaming.rules).

Input: the batches in order, each its arrival (ms) and the players online per server after it; the servers'
regions. A minute (of arrival time) holds the counts after its last batch and, per series, the highest count
one batch left; a day's peak (UTC) is the highest count of a batch in the day, at the arrival of the first batch
reaching it; the highest ever likewise over every batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

MINUTE = 60_000
DAY = 86_400_000


def series_of(counts: Mapping[str, int], regions: Mapping[str, str]) -> dict[str, int]:
    out = dict(counts)
    for region in set(regions.values()):
        out[f"region|{region}"] = sum(n for s, n in counts.items() if regions.get(s) == region)
    out["*"] = sum(counts.values())
    return out


SERVER_SERIES = 16
"""A minute is kept for the total, each region and this many servers: those with the most players online at its
end (the first by name among equals)."""


def minutes(batches: Sequence[tuple[int, Mapping[str, int]]],
            regions: Mapping[str, str]) -> dict[str, dict[int, tuple[int, int]]]:
    """series -> minute start -> (last, peak)."""
    out: dict[str, dict[int, tuple[int, int]]] = {}
    last: dict[int, Mapping[str, int]] = {}
    for at, counts in batches:
        minute = at // MINUTE * MINUTE
        last[minute] = counts
        for key, n in series_of(counts, regions).items():
            prior = out.setdefault(key, {}).get(minute)
            out[key][minute] = (n, n if prior is None else max(prior[1], n))
    for minute, counts in last.items():  # a server's minute only where it was among the busiest at the end
        busiest = sorted(counts, key=lambda s: (-counts[s], s))[:SERVER_SERIES]
        for server in counts:
            if server not in busiest:
                out[server].pop(minute, None)
    return {k: v for k, v in out.items() if v}


def peaks(batches: Sequence[tuple[int, Mapping[str, int]]], regions: Mapping[str, str],
          per_day: bool) -> dict[int | None, dict[str, tuple[int, int]]]:
    """day start (None: ever) -> series -> (count, first reached at)."""
    out: dict[int | None, dict[str, tuple[int, int]]] = {}
    for at, counts in batches:
        day = at // DAY * DAY if per_day else None
        mine = out.setdefault(day, {})
        for key, n in series_of(counts, regions).items():
            if key not in mine or n > mine[key][0]:
                mine[key] = (n, at)
    return out
