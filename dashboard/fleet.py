"""Many servers on one chart: past :data:`MAX_SERIES` servers a chart draws regions (or the busiest servers and
the rest summed), never a line per server.

A chart with 300 traces and a 300-entry legend tells an operator nothing; a line per region, with the servers
that matter named in a table beside it, does. The grouping is decided once per page from the servers, their
regions (``{ns}:regions``, as the events carry them) and a weight (players online), and applied to each kind of
data the charts take: every group's value is the exact sum of its servers' values. A past value is summed over
the servers of its time, not today's: a fleet of matches replaces a third of its servers within the hour. A minute
keeps its regions' counts, so its lines are exact; a past batch or window of a server gone since is in its region's
line while the page still knows the region (until RETIRE_AFTER forgets it: docs/operations.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

import msgspec

from streaming.rules.online.rollup import TOTAL, Minute, region_key
from streaming.schema.keys import WindowKey
from streaming.schema.records import ServerRecord
from streaming.store.report import WindowRow
from streaming.store.views.online import OnlinePoint
from streaming.store.views.snapshot import BatchPoint, Snapshot

MAX_SERIES = 8
"""The most lines or bar groups a chart draws; past it, servers are grouped."""
_V = TypeVar("_V")
NO_REGION = "no region"
"""The group of servers whose events carry no region."""


@dataclass(frozen=True)
class Grouping:
    """Chart series (labels) and the servers each one sums; ``by`` says what a label is."""

    members: dict[str, tuple[str, ...]]
    by: str
    """``server`` (a line per server), ``region`` or ``top`` (the busiest servers, the rest summed)."""
    regions: Mapping[str, str] = field(default_factory=dict)
    """The servers' regions as the page read them: gone servers' too, until they are forgotten (RETIRE_AFTER)."""

    @property
    def labels(self) -> list[str]:
        return list(self.members)

    @property
    def grouped(self) -> bool:
        return self.by != "server"

    def label_of(self) -> dict[str, str]:
        return {s: label for label, servers in self.members.items() for s in servers}

    def counts(self, counts: Mapping[str, int]) -> dict[str, int]:
        return {label: sum(counts.get(s, 0) for s in servers) for label, servers in self.members.items()}

    def labeller(self) -> Callable[[str], str | None]:
        """The label a server's past values are drawn in: its group's; for a server gone since, its region's or
        the rest's; None when no line draws it (a line per server, or its region forgotten with it)."""
        of = self.label_of()
        if self.by == "region":
            return lambda s: of.get(s) or (self.regions.get(s) if self.regions.get(s) in self.members else None)
        if self.by == "top":
            rest = self.labels[-1]
            return lambda s: of.get(s, rest)
        return of.get

    def past_counts(self, counts: Mapping[str, int]) -> dict[str, int]:
        """Each group's sum of past per-server counts (:meth:`labeller`): a fleet of matches replaces its servers
        within the hour, and a past count belongs to the servers of its time, not today's."""
        label, out = self.labeller(), dict.fromkeys(self.members, 0)
        for s, n in counts.items():
            if (lb := label(s)) is not None:
                out[lb] += n
        return out

    def windows(self, rows: Sequence[WindowRow]) -> list[WindowRow]:
        """Each window's rows summed per group; a group's window is final when all of its servers' are."""
        if not self.grouped:
            return list(rows)
        of = self.labeller()
        out: dict[WindowKey, WindowRow] = {}
        for w in rows:
            label = of(w.server)
            if label is None:
                continue
            key = WindowKey(w.start_ms, w.end_ms, label)
            prior = out.get(key)
            out[key] = replace(w, key=key) if prior is None else replace(
                prior, events=prior.events + w.events, dropped=prior.dropped + w.dropped, late=prior.late + w.late,
                players=prior.players + w.players, final=prior.final and w.final)
        return sorted(out.values(), key=lambda w: (w.start_ms, w.server, w.end_ms))

    def current(self, current: Mapping[str, WindowRow | None]) -> dict[str, WindowRow | None]:
        rows = self.windows([w for w in current.values() if w is not None])
        by_label: dict[str, WindowRow | None] = dict.fromkeys(self.members)
        by_label.update({w.server: w for w in rows})
        return by_label

    def history(self, points: Sequence[OnlinePoint]) -> list[OnlinePoint]:
        return list(points) if not self.grouped else [replace(p, counts=self.past_counts(p.counts)) for p in points]

    def minutes(self, minutes: Sequence[Minute]) -> list[Minute]:
        """Minutes with each group's count at the minute's end; a group's peak within the minute is not kept
        (the servers' peaks came at different moments: their sum is no count that ever was)."""
        if not self.grouped:
            return list(minutes)
        return [Minute(m.minute_ms, last=self.minute_counts(m), peak={}, causes={}) for m in minutes]

    def minute_counts(self, m: Minute) -> dict[str, int]:
        """Each group's count at ``m``'s end, from the servers of that minute: a region's is the minute's own (by
        the regions then: exact however many of its servers are gone), no region's the rest of its total; else
        :meth:`past_counts` (the busiest servers and the rest; a minute recorded without its regions)."""
        if self.by == "region" and m.regions is not None:
            total = sum(m.last.values())
            return {label: total - sum(m.regions.values()) if label == NO_REGION else m.regions.get(label, 0)
                    for label in self.members}
        return self.past_counts(m.last)


def grouping(servers: Sequence[str], regions: Mapping[str, str], weights: Mapping[str, int],
             limit: int = MAX_SERIES) -> Grouping:
    """A line per server up to ``limit`` servers; past it a line per region when the servers fall into at most
    ``limit`` regions (those without one together); else the ``limit - 1`` heaviest servers and the rest summed."""
    if len(servers) <= limit:
        return Grouping({s: (s,) for s in servers}, "server")
    by_region: dict[str, list[str]] = {}
    for s in servers:
        by_region.setdefault(regions.get(s) or NO_REGION, []).append(s)
    if len(by_region) <= limit and len(by_region) > 1:
        return Grouping({r: tuple(by_region[r]) for r in sorted(by_region, key=lambda r: (r == NO_REGION, r))},
                        "region", regions)
    ranked = sorted(servers, key=lambda s: (-weights.get(s, 0), s))
    top, rest = ranked[:limit - 1], ranked[limit - 1:]
    return Grouping({**{s: (s,) for s in top}, f"other {len(rest)} servers": tuple(rest)}, "top", regions)


def latest_per_server(batches: Sequence[BatchPoint], servers: Sequence[str]) -> dict[str, tuple[int, ServerRecord]]:
    """Each server's figures from the newest batch that had its events (and so its lags): the Lag page's rows and
    Live ops' slowest clocks."""
    out: dict[str, tuple[int, ServerRecord]] = {}
    for b in reversed(batches):
        for s in servers:
            sb = b.servers.get(s)
            if s not in out and sb is not None and sb.ingest_lag_ms is not None:
                out[s] = (b.batch, sb)
        if len(out) == len(servers):
            break
    return out


ALL_REGIONS = "All regions"
"""The region filter's first choice: no filter."""


def total_label(region: str | None) -> str:
    """What the total of players online is called: the fleet's, or under the region filter that region's."""
    return "All servers" if region is None else f"All servers in {region}"


def in_region(snap: Snapshot, region: str | None) -> Snapshot:
    """The snapshot a page draws with the region filter set to ``region`` (None or :data:`ALL_REGIONS`: the
    whole fleet): every per-server part keeps the servers whose events carry that region (:data:`NO_REGION`: those
    that carry none); what is the pipeline's own (the watermark, the batches' totals, the stream) stays whole. The
    status line is judged on the whole snapshot before this (one truth about health, whatever the filter)."""
    if region is None or region == ALL_REGIONS:
        return snap

    def keep(s: str) -> bool:
        return (snap.regions.get(s) or NO_REGION) == region

    def only(m: Mapping[str, _V]) -> dict[str, _V]:
        return {s: v for s, v in m.items() if keep(s)}

    batches = tuple(msgspec.structs.replace(b, servers=only(b.servers)) for b in snap.batches)
    online = snap.online
    if online is not None:
        key = region_key(region)

        def peaks_of(peaks: Mapping[str, _V]) -> dict[str, _V]:  # the region's own peak is the total's now
            return {**only(peaks), **({TOTAL: peaks[key]} if key in peaks else {})}

        online = replace(online, counts=only(online.counts), clocks=only(online.clocks),
                         peaks=peaks_of(online.peaks), peaks_ever=peaks_of(online.peaks_ever),
                         history=tuple(replace(p, counts=only(p.counts)) for p in online.history),
                         minutes=tuple(replace(m, last=only(m.last), peak=only(m.peak),
                                               causes=only(m.causes), regions=None) for m in online.minutes))
    return replace(snap, servers=tuple(s for s in snap.servers if keep(s)),
                   windows=tuple(w for w in snap.windows if keep(w.server)), batches=batches, online=online,
                   retired=only(snap.retired), drained=only(snap.drained), seen=only(snap.seen),
                   regions=only(snap.regions))
