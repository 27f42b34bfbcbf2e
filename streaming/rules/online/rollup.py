"""The online view over time, per minute and per day: pure, so the dashboard's trend, peaks and transition
rates are tested as tables.

Each batch of the online view ends with players-online counts per server and its transitions per server
and cause. Minutes are those of the batch's arrival time (the newest stream entry of the batch, Redis' clock;
live, the trigger time to within a batch; a replay's entries carry the events' time, so a replayed week is a
week of minutes: docs/decisions/0012). A minute is final once a batch of a later minute came, whatever event
time its batches covered. A :class:`Minute` accumulates the batches of one minute:
the counts after its last batch, the highest count per server, per region and for all servers together, and the
transitions per server and cause; when a batch of a later minute comes, the minute is closed and kept as a
record. A day's peak (UTC) per server, per region and in total keeps its count and the arrival it was first
reached at; so does the highest ever. One dashboard refresh reads an hour of closed minutes, the open one and the
peaks: a few commands, whatever the number of players.

A week of minutes is kept per *series*: a server, a region (:func:`region_key`) or the total (:data:`TOTAL`).
Each series has one record per UTC day: 1440 slots of :data:`SLOT_BYTES`, slot ``i`` the minute starting ``i``
minutes after midnight, holding the players online at the minute's end (``last``) and the highest count of a batch
within it (``peak``), each as ``count + 1`` in a little-endian uint32, so the zero bytes of a slot never written
read as *no data* (the job was down, or no batch came that minute) rather than as zero players. A minute's slot is
written once, when the minute closes, with the values its :class:`Minute` accumulated; a day is written in place,
never grows past :data:`DAY_BYTES` and never needs a read to be written. A chart longer than a day reads it back
in 5-minute buckets (:func:`resample`).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from streaming.schema.shards import Position

MINUTE_MS = 60_000
DAY_MS = 86_400_000
TOTAL = "*"
"""The key of all servers together, in peaks and in a minute's peak (no server is named ``*``: the name is reserved,
``watermark_client.events.bad_name``)."""
REGION = "region|"
"""The prefix of a region's key in peaks and in a minute's peak (:func:`region_key`): a region and a server may
share a name."""


def region_key(region: str) -> str:
    return REGION + region


def series_counts(counts: Mapping[str, int], regions: Mapping[str, str] | None = None) -> dict[str, int]:
    """Every series one set of per-server counts gives: each server, each region (the sum of its servers, by
    ``regions``; servers without one are in the total only) and :data:`TOTAL`."""
    out = dict(counts)
    for server, n in counts.items():
        region = (regions or {}).get(server)
        if region is not None:
            key = region_key(region)
            out[key] = out.get(key, 0) + n
    out[TOTAL] = sum(counts.values())
    return out


@dataclass
class Minute:
    minute_ms: int
    last: dict[str, int] = field(default_factory=dict)  # counts after the minute's last batch
    peak: dict[str, int] = field(default_factory=dict)  # the highest count per server, and TOTAL
    causes: dict[str, dict[str, int]] = field(default_factory=dict)  # server -> cause -> transitions
    regions: dict[str, int] | None = None
    """Each region's count after the minute's last batch, by the servers' regions then (servers without one are in
    no region's). Kept because a fleet moves on: an hour later most of the minute's servers are gone, and their
    regions forgotten with them. None in a record written before it was kept."""

    def to_json(self) -> str:
        # Not dataclasses.asdict: it deep-copies every dict first (8 ms a batch at 300 servers).
        d = {"causes": self.causes, "last": self.last, "minute_ms": self.minute_ms, "peak": self.peak}
        if self.regions is not None:
            d["regions"] = self.regions
        return json.dumps(d, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, raw: str | bytes) -> Minute:
        d = json.loads(raw)
        try:
            regions = d.get("regions")
            return cls(int(d["minute_ms"]), {str(k): int(v) for k, v in d["last"].items()},
                       {str(k): int(v) for k, v in d["peak"].items()},
                       {str(s): {str(c): int(n) for c, n in cs.items()} for s, cs in d["causes"].items()},
                       None if regions is None else {str(k): int(v) for k, v in regions.items()})
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a minute record of the online view: {raw!r} ({exc})") from None

    def without(self, servers: Collection[str]) -> Minute:
        """The minute without ``servers``' own entries (forgotten at an operator's request): its regions' and the
        total's stay, which counted their players.

        >>> Minute(0, {"a": 1, "b": 2}, {"a": 1, "b": 2, "*": 3}, {"a": {"login": 1}}, {"eu": 3}).without({"a"})
        Minute(minute_ms=0, last={'b': 2}, peak={'b': 2, '*': 3}, causes={}, regions={'eu': 3})
        """
        return Minute(self.minute_ms, {k: v for k, v in self.last.items() if k not in servers},
                      {k: v for k, v in self.peak.items() if k not in servers},
                      {k: v for k, v in self.causes.items() if k not in servers}, self.regions)

    def add(self, counts: Mapping[str, int], causes: Mapping[str, Mapping[str, int]],
            regions: Mapping[str, str] | None = None) -> None:
        """``last`` keeps the servers' counts (the total follows from them) and ``regions`` each region's, by the
        regions of this batch; ``peak`` keeps every series' own, the total's and each region's of one batch (a sum
        of the servers' peaks is no count that ever was)."""
        self.last = dict(counts)
        series = series_counts(counts, regions)
        self.regions = {k.removeprefix(REGION): n for k, n in series.items() if k.startswith(REGION)}
        for key, n in series.items():
            self.peak[key] = max(n, self.peak.get(key, n))
        for server, by_cause in causes.items():
            mine = self.causes.setdefault(server, {})
            for cause, n in by_cause.items():
                mine[cause] = mine.get(cause, 0) + n


def roll(current: Minute | None, at_ms: int, counts: Mapping[str, int],
         causes: Mapping[str, Mapping[str, int]],
         regions: Mapping[str, str] | None = None) -> tuple[Minute | None, Minute]:
    """Add one batch (at ``at_ms``, its arrival: :func:`arrival_ms`): the minute it closes
    (if the batch is of a later minute than ``current``), and the open minute with the batch in it."""
    minute_ms = at_ms - at_ms % MINUTE_MS
    closed = None
    if current is None or current.minute_ms != minute_ms:
        closed, current = current, Minute(minute_ms)
    current.add(counts, causes, regions)
    return closed, current


def raise_peaks(peaks: Mapping[str, tuple[int, int]], counts: Mapping[str, int],
                at_ms: int, regions: Mapping[str, str] | None = None) -> dict[str, tuple[int, int]]:
    """The peaks (a day's, or the highest ever) this batch raises: server, region (:func:`region_key`) or
    :data:`TOTAL` -> (count, ``at_ms``). A count equal to the peak keeps the time it was first reached."""
    out = {}
    for key, n in series_counts(counts, regions).items():
        if key not in peaks or n > peaks[key][0]:
            out[key] = (n, at_ms)
    return out


def day_of(at_ms: int) -> int:
    """The UTC day (its first millisecond) a batch's arrival falls in."""
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


# --------------------------------------------------------------------------- a week of minutes

SLOT_BYTES = 8
MINUTES_PER_DAY = DAY_MS // MINUTE_MS
DAY_BYTES = SLOT_BYTES * MINUTES_PER_DAY
"""11,520 bytes: one series' day at most."""
WEEK_MS = 7 * DAY_MS
COARSE_MS = 5 * MINUTE_MS
"""The resolution a chart longer than :data:`FINE_SPAN_MS` is drawn at (5-minute buckets: 2,016 points a week)."""
FINE_SPAN_MS = DAY_MS
_SLOT = struct.Struct("<II")


def arrival_ms(end_id: str, fallback_ms: int) -> int:
    """A batch's time for the history: the millisecond part of its newest stream entry ID (Redis' clock when the
    entry arrived, or the time a replay or a producer gave it explicitly; with shards, the newest of the shards'
    IDs). ``fallback_ms`` (the trigger time) when the batch names no entry."""
    try:
        ms = Position.of(end_id).newest_ms()
    except ValueError:
        ms = 0
    return ms if ms > 0 else fallback_ms


@dataclass(frozen=True, slots=True)
class Point:
    """One minute (or one bucket of minutes) of one series."""

    at_ms: int
    last: int  # players online at its end
    peak: int  # the highest count a batch within it left


def encode_slot(last: int, peak: int) -> bytes:
    return _SLOT.pack(last + 1, peak + 1)


def slot_offset(minute_ms: int) -> int:
    """Where a minute's slot starts in its day's record."""
    return (minute_ms % DAY_MS) // MINUTE_MS * SLOT_BYTES


SERVER_SERIES = 16
"""Servers with a week of history of their own: the busiest at each minute. The pages draw a server's own line only
for a fleet of a few servers without regions, or its busiest few (``dashboard.fleet``); a fleet of matches names
20,000 servers a day, and a day record each (11.5 KB) would be 230 MB a day. The total and every region have theirs
always."""


def kept_series(m: Minute, regions: Mapping[str, str] | None = None) -> dict[str, int]:
    """The series a closed minute is kept for: the total, every region, and the :data:`SERVER_SERIES` servers with
    the most players online at its end (the first by name among equals). A region's count is the minute's own
    (:attr:`Minute.regions`, by the regions of its last batch), as Live ops draws the last hour; ``regions``, the
    servers' regions now, only sums a record written before minutes kept theirs."""
    if m.regions is None:
        counts = series_counts(m.last, regions)
    else:
        counts = series_counts(m.last) | {region_key(r): n for r, n in m.regions.items()}
    busiest = set(sorted(m.last, key=lambda s: (-m.last[s], s))[:SERVER_SERIES])
    return {k: n for k, n in counts.items() if k == TOTAL or k.startswith(REGION) or k in busiest}


def minute_slots(m: Minute, regions: Mapping[str, str] | None = None) -> dict[str, bytes]:
    """A closed minute's slot for every series kept (:func:`kept_series`): the servers' counts at its end, each
    region's and the total; each series' own peak within it."""
    return {key: encode_slot(n, max(n, m.peak.get(key, n))) for key, n in kept_series(m, regions).items()}


def minute_points(m: Minute, regions: Mapping[str, str] | None = None) -> dict[str, Point]:
    """The same as :func:`minute_slots`, decoded: the open minute, read from the online view's state."""
    return {key: Point(m.minute_ms, n, max(n, m.peak.get(key, n))) for key, n in kept_series(m, regions).items()}


def days(start_ms: int, end_ms: int) -> list[int]:
    """The UTC days (their first ms) a range ``[start_ms, end_ms)`` touches, oldest first."""
    first = start_ms - start_ms % DAY_MS
    return list(range(first, end_ms, DAY_MS)) if end_ms > start_ms else []


def day_span(day_ms: int, start_ms: int, end_ms: int) -> tuple[int, int]:
    """The byte range (inclusive, as GETRANGE takes it) of one day's record that ``[start_ms, end_ms)`` covers."""
    lo = max(start_ms, day_ms)
    hi = min(end_ms, day_ms + DAY_MS) - 1
    return slot_offset(lo - lo % MINUTE_MS), slot_offset(hi - hi % MINUTE_MS) + SLOT_BYTES - 1


def decode(first_minute_ms: int, raw: bytes) -> list[Point]:
    """Slots read from ``first_minute_ms`` on: the minutes with data, in order (a record shorter than asked for
    ends in minutes never written; a torn trailing slot is ignored)."""
    out = []
    for i in range(len(raw) // SLOT_BYTES):
        last, peak = _SLOT.unpack_from(raw, i * SLOT_BYTES)
        if last:
            out.append(Point(first_minute_ms + i * MINUTE_MS, last - 1, max(last, peak) - 1))
    return out


def resample(points: Sequence[Point], step_ms: int) -> list[Point]:
    """Buckets of ``step_ms`` (aligned to UTC midnight): a bucket's players at its end are those of its last
    minute with data, its peak the highest of its minutes'. ``step_ms`` of a minute returns the points as they are."""
    if step_ms <= MINUTE_MS:
        return list(points)
    out: list[Point] = []
    for p in points:
        at = p.at_ms - p.at_ms % step_ms
        if out and out[-1].at_ms == at:
            out[-1] = Point(at, p.last, max(out[-1].peak, p.peak))
        else:
            out.append(Point(at, p.last, p.peak))
    return out


def step_for(span_ms: int) -> int:
    """A chart's resolution: a minute up to a day, 5 minutes beyond (a week in 2,016 points a line)."""
    return MINUTE_MS if span_ms <= FINE_SPAN_MS else COARSE_MS


def shifted(points: Sequence[Point], by_ms: int) -> list[Point]:
    """The same points ``by_ms`` later: a week ago drawn over today."""
    return [Point(p.at_ms + by_ms, p.last, p.peak) for p in points]


def expire_in_s(day_ms: int, keep_days: int, now_ms: int, floor_s: int) -> int:
    """How long a day's records (and its peaks) are kept from ``now_ms``, in seconds: until ``keep_days`` whole days
    after the day has ended, so a week-ago overlay of any minute today still finds its day with ``keep_days`` >= 7;
    at least ``floor_s`` (the namespace's TTL), so a replay of an older week is kept as long as its other keys."""
    return max(floor_s, (day_ms + (keep_days + 1) * DAY_MS - now_ms) // 1000)
