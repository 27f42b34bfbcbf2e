"""A server's life, read from its events: game servers are cattle (pods replaced on every deploy, a server per
match), so each one is judged by what it did last, and what a fleet pays for is bounded by the servers alive.

The rule, in words:

- **Live**: it sent an event within ``silent_after`` (the ServerSilent alert's ``after``) of arrival time.
- **Drained**: the batch holding its newest event left it with no player online: every player logged out (or it
  said it was going away by logging them out, docs/ingest.md) before it fell silent. A drained server leaves the
  live views at once and is not silent: a rolling deploy or a match's end is not an incident.
- **Silent**: no event for ``silent_after`` while players were still online on it: what ServerSilent is for (a
  crash, a cut link). Its players time out by its own clock.
- **Retired**: no event for ``retire_after`` (RETIRE_AFTER): out of the live views and the alerts until its next
  event, drained or not.
- **Forgotten**: retired and no player kept by the online view (none online, no logout the watermark has not
  passed): the online view drops its clock, its count and every per-server write, so what a batch costs is
  bounded by the servers alive, not by every name ever seen. An operator may forget a server before it retires
  (``wm-control forget``: a test server's traces), once no player is kept. A forgotten server that speaks again
  starts afresh.

Any event brings a server back to live. Arrival time is Redis' clock (stream entry IDs), as for every other
silence in the product; nothing here reads a wall clock.

>>> life(last_arrival_ms=1_000, drained_ms=0, now_ms=30_000, silent_after_ms=60_000, retire_after_ms=600_000)
<Life.LIVE: 'live'>
>>> life(last_arrival_ms=1_000, drained_ms=0, now_ms=90_000, silent_after_ms=60_000, retire_after_ms=600_000)
<Life.SILENT: 'silent'>
>>> life(last_arrival_ms=1_000, drained_ms=1_000, now_ms=2_000, silent_after_ms=60_000, retire_after_ms=600_000)
<Life.DRAINED: 'drained'>

Idleness
--------

Idleness, like Flink's ``withIdleness``: a silent server stops holding the per-server watermark back.

Spark has no notion of an idle input: under ``multipleWatermarkPolicy=min`` a
server that sends nothing keeps the combined watermark where its last event
left it, and windows stop closing. The job's remedy is an *idle marker*: when
a server has not been heard from (ingest time of its newest event) for
``timeout_ms``, the job appends ``{"server": S, "kind": "idle", "event_time": now}``
to the input, once per ``interval_ms`` while the silence lasts, signed (:func:`sign`) so that only the job can
declare a server idle, and records the decision with its reason in ``{ns}:idleness``. In a lane with
idleness on the marker is part of S's input, so S's watermark follows the
clock; it is never counted as an event or a player. When S's data returns the
markers stop and S holds the watermark back again as its events dictate.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

import orjson
from msgspec.structs import replace as renew

from streaming.rules.online.rollup import MINUTE_MS
from streaming.schema.records import NameGuardRecord
from watermark_client.events import IDLE_KIND, IDLE_PLAYER, sign
from watermark_client.timeutil import iso_from_us


class Life(StrEnum):
    LIVE = "live"
    DRAINED = "drained"
    SILENT = "silent"
    RETIRED = "retired"


def life(*, last_arrival_ms: int | None, drained_ms: int, now_ms: int, silent_after_ms: int,
         retire_after_ms: int | None) -> Life:
    """Where a server is in its life now. ``last_arrival_ms``: its newest event's arrival (None: none committed
    yet, live until it has one); ``drained_ms``: the online view's mark (:func:`drained_after`), 0 for none;
    ``retire_after_ms`` None: retirement is judged by the caller (:func:`retired`)."""
    if last_arrival_ms is None:
        return Life.LIVE
    quiet = now_ms - last_arrival_ms
    if retire_after_ms is not None and quiet >= retire_after_ms:
        return Life.RETIRED
    if drained(last_arrival_ms, drained_ms):
        return Life.DRAINED
    return Life.SILENT if quiet >= silent_after_ms else Life.LIVE


@dataclass(frozen=True)
class FleetSilence:
    """Of the servers in play (live or silent: neither drained nor retired), how many are silent, and the newest
    arrival of any of them: the pipeline's health says "stalled" when most are silent (:mod:`streaming.alerting.
    health`), and a number that has not moved since then is shown "as of" that arrival."""

    in_play: int = 0
    silent: int = 0
    heard_ms: int | None = None

    @property
    def most_silent(self) -> bool:
        return 2 * self.silent > self.in_play > 0


def fleet_silence(servers: Iterable[tuple[int | None, int]], now_ms: int, silent_after_ms: int) -> FleetSilence:
    """The fleet's silence from each server's ``(last_arrival_ms, drained_ms)``, retired ones left out by the
    caller, by :func:`life`: the one rule of "silent" that ServerSilent, the Servers table and the status line use.

    >>> fleet_silence([(1_000, 0), (2_000, 0), (89_000, 0), (5_000, 5_000)], 90_000, 60_000)
    FleetSilence(in_play=3, silent=2, heard_ms=89000)
    >>> _.most_silent
    True
    """
    in_play = silent = 0
    newest: int | None = None
    for last, drained_ms in servers:
        state = life(last_arrival_ms=last, drained_ms=drained_ms, now_ms=now_ms, silent_after_ms=silent_after_ms,
                     retire_after_ms=None)
        if state is Life.DRAINED:
            continue
        in_play += 1
        silent += state is Life.SILENT
        if last is not None and (newest is None or last > newest):
            newest = last
    return FleetSilence(in_play, silent, newest)


def in_view(*, retired: bool, drained: bool, players: int) -> bool:
    """Whether a server is in the live views (the pages' per-server rows, windows and charts, ``/metrics``' per-server
    series): neither drained nor retired, or players still online on it. So what they cost is bounded by the live
    fleet, not by the names seen."""
    return players > 0 or not (retired or drained)


def heard(seen: Mapping[str, int], clock_heard: Mapping[str, int]) -> dict[str, int]:
    """Each server's newest arrival: the pipeline's (``{ns}:seen``), else the online view's clock's (a server the job
    has forgotten while the online view still keeps a logout of it must not look as if it had never spoken)."""
    return {**clock_heard, **seen}


def drained(last_arrival_ms: int | None, drained_ms: int) -> bool:
    """Whether the online view's drained mark stands for the server's newest event (a later event that the online
    view has not folded yet, or that left players on it, does not drain it)."""
    return bool(drained_ms) and last_arrival_ms is not None and drained_ms >= last_arrival_ms


def drained_after(prior_ms: int, *, had_events: bool, online_after: int, newest_arrival_ms: int) -> int:
    """The drained mark after a batch: set to the arrival of the server's newest event when the batch had its
    events and left nobody online on it; cleared when its events left someone online; kept as it was when the
    batch had none of its events (players timing out on a silent server do not drain it: they were there)."""
    if not had_events:
        return prior_ms
    return newest_arrival_ms if online_after == 0 else 0


def forgotten(*, had_events: bool, players_kept: int, heard_ms: int | None, now_ms: int | None,
              retire_after_ms: int, asked_ms: int | None = None) -> bool:
    """Whether the online view forgets the server with this batch: none of its events in it, no player kept, and
    its newest event ``retire_after_ms`` or more of arrival time ago (``heard_ms`` None: it never had a clock), or
    at or before an operator asked to forget it (``asked_ms``, Redis' clock: ``wm-control forget``, a test server).
    A server that spoke after the request is kept: the request was about what it had sent before.

    >>> forgotten(had_events=False, players_kept=0, heard_ms=5_000, now_ms=9_000, retire_after_ms=600_000,
    ...           asked_ms=6_000)
    True
    >>> forgotten(had_events=False, players_kept=0, heard_ms=7_000, now_ms=9_000, retire_after_ms=600_000,
    ...           asked_ms=6_000)
    False
    """
    if had_events or players_kept:
        return False
    if heard_ms is None or (asked_ms is not None and heard_ms <= asked_ms):
        return True
    return now_ms is not None and now_ms - heard_ms >= retire_after_ms


IDLENESS_KEEP = 10_000
"""Decisions kept in ``{ns}:idleness`` (about: the stream is trimmed approximately)."""


@dataclass
class IdleTicker:
    servers: tuple[str, ...]
    timeout_ms: int
    interval_ms: int
    started_ms: int
    """A server never heard from counts as last heard from when the ticker started."""
    last_marker_ms: dict[str, int] = field(default_factory=dict)
    idle: frozenset[str] = frozenset()
    """The servers silent for ``timeout_ms`` at the last :meth:`due`."""
    retire_after_ms: int | None = None
    """With no fixed ``servers``: a server silent this long is retired (:func:`life`) and gets no more markers (a
    lane following the fleet retires it too, ``rules.watermarks``): markers are bounded by the live fleet. Judged
    only while the input is live (its newest arrival within this of now)."""

    def __post_init__(self) -> None:
        if self.timeout_ms <= 0 or self.interval_ms <= 0:
            raise ValueError(f"timeout and interval must be positive, got {self.timeout_ms} and {self.interval_ms}")

    def due(self, now_ms: int, seen_ms: Mapping[str, int]) -> list[IdleDecision]:
        """The servers that get a marker now, as decisions; records that they got one. With no fixed
        ``servers`` (no KNOWN_SERVERS), every server heard from (``seen_ms``) is watched."""
        out = []
        idle = set()
        # Retirement is judged while the input is live: a recorded stream of another day (every server "silent"
        # since) is marked as before.
        live = self.retire_after_ms is not None and bool(seen_ms) and \
            now_ms - max(seen_ms.values()) < self.retire_after_ms
        watched = self.servers or sorted(s for s, t in seen_ms.items()
                                         if not live or now_ms - t < self.retire_after_ms)  # type: ignore[operator]
        for s in [s for s in self.last_marker_ms if s not in watched]:  # retired: forgotten here too
            del self.last_marker_ms[s]
        for s in watched:
            seen = seen_ms.get(s)
            heard = max(seen if seen is not None else self.started_ms, self.started_ms)
            last = self.last_marker_ms.get(s)
            if now_ms - heard >= self.timeout_ms:
                idle.add(s)
            if now_ms - heard >= self.timeout_ms and (last is None or now_ms - last >= self.interval_ms):
                self.last_marker_ms[s] = now_ms
                out.append(IdleDecision(s, now_ms, heard, heard == seen))
        self.idle = frozenset(idle)
        return out


def summary(before: frozenset[str], now: frozenset[str], shown: int = 5) -> str | None:
    """One log line when the set of idle servers changes, None when it does not: at hundreds of servers a
    line per server per marker is thousands a minute."""
    if now == before:
        return None
    names = sorted(now)
    more = f" (+{len(names) - shown} more)" if len(names) > shown else ""
    back = sorted(before - now)
    back_more = f" (+{len(back) - shown} more)" if len(back) > shown else ""
    back_text = f"; back: {', '.join(back[:shown])}{back_more}" if back else ""
    return (f"idle: {len(names)} server(s) silent, each getting a marker{': ' if names else ''}"
            f"{', '.join(names[:shown])}{more}; newly idle: {len(now - before)}{back_text}")


@dataclass(frozen=True, slots=True)
class IdleDecision:
    """The job's decision that ``server`` is idle at ``at_ms`` (Redis' clock): it was last heard from
    (ingest time of its newest event) at ``last_heard_ms``, or never since the job started then."""

    server: str
    at_ms: int
    last_heard_ms: int
    heard: bool = True

    @property
    def silent_ms(self) -> int:
        return self.at_ms - self.last_heard_ms

    def reason(self) -> str:
        since = "its last event arrived" if self.heard else "the job started and it has sent nothing since"
        return f"silent for {self.silent_ms / 1000:.1f} s: {since} {self.silent_ms / 1000:.1f} s before"

    def marker(self, key: bytes) -> bytes:
        """The marker's payload for the input stream (``watermark_client.events``' wire format, signed)."""
        event_us = self.at_ms * 1000
        return orjson.dumps({"server": self.server, "player_id": IDLE_PLAYER, "kind": IDLE_KIND,
                             "event_time": iso_from_us(event_us), "silent_ms": self.silent_ms,
                             "sig": sign(key, self.server, event_us, self.silent_ms)})

    def record(self, marker_id: str) -> dict[str, str]:
        """The decision's entry in ``{ns}:idleness``."""
        return {"server": self.server, "at_ms": str(self.at_ms), "last_heard_ms": str(self.last_heard_ms),
                "heard": "1" if self.heard else "0", "marker_id": marker_id, "reason": self.reason()}

    @classmethod
    def from_record(cls, fields: Mapping[bytes, bytes]) -> IdleDecision:
        try:
            return cls(fields[b"server"].decode(), int(fields[b"at_ms"]), int(fields[b"last_heard_ms"]),
                       fields.get(b"heard", b"1") == b"1")
        except (KeyError, ValueError) as exc:
            raise ValueError(f"not an idle decision record: {dict(fields)!r} ({exc})") from None


def retired(seen: Mapping[str, int], now_ms: int, after_ms: int) -> dict[str, int]:
    """Servers retired from the live views: no event arrived from them for ``after_ms`` or longer (``seen``: each
    server's newest arrival, ms). A match server that ended, a shard taken down: they leave the per-server
    charts and columns (the pages name them) and silence alerts, and are back with their next event. Totals
    keep counting them."""
    return {s: t for s, t in sorted(seen.items()) if now_ms - t >= after_ms}


FLOOD_REASON = "name_flood"
BURST_SAMPLE = 5


def admit(new: Mapping[str, int], prior: NameGuardRecord, now_ms: int, limit: int
          ) -> tuple[frozenset[str], NameGuardRecord]:
    """The flood guard: which of a batch's new server names are refused, and the guard's minute after it.

    The rule, in words: a server name the job does not know (never heard, or forgotten once retired) is *new*.
    Each minute of the job's clock (the batch's trigger time) admits at most ``limit`` new names; the rest of
    that minute's new names are refused, their events quarantined as ``name_flood``, and they stay unknown (a
    refused name that keeps sending is new again next minute). Within a batch the busiest names come first
    (``new``: each name's events in the batch), then by name: a real server with players outsends a one-off
    name. ``limit`` 0: no guard. Deterministic: a batch run again from the same prior record decides the same.

    >>> refused, after = admit({"a": 9, "b": 1, "c": 1}, NameGuardRecord(), now_ms=61_000, limit=2)
    >>> sorted(refused), after.admitted, after.refused, after.burst_sample
    (['c'], 2, 1, ('c',))
    >>> admit({"d": 1}, after, now_ms=119_999, limit=2)[0]
    frozenset({'d'})
    >>> admit({"d": 1}, after, now_ms=120_000, limit=2)[0]
    frozenset()
    """
    minute = now_ms - now_ms % MINUTE_MS
    if limit <= 0 or not new:
        return frozenset(), prior
    if prior.minute_ms != minute:
        prior = renew(prior, minute_ms=minute, admitted=0, refused=0)
    ranked = sorted(new, key=lambda name: (-new[name], name))
    room = max(0, limit - prior.admitted)
    admitted, refused = ranked[:room], ranked[room:]
    after = renew(prior, admitted=prior.admitted + len(admitted), refused=prior.refused + len(refused))
    if refused:
        same = after.burst_minute_ms == minute
        after = renew(
            after, burst_minute_ms=minute, limit=limit,
            burst_names=(after.burst_names if same else 0) + len(refused),
            burst_events=(after.burst_events if same else 0) + sum(new[n] for n in refused),
            burst_sample=((after.burst_sample if same else ()) + tuple(refused))[:BURST_SAMPLE])
    return frozenset(refused), after
