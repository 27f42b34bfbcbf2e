"""The online view's decisions around a batch's commit and merge: whether Redis lost the view, what a group's part
of a batch says, and what the merged parts make of the view. Pure: :mod:`streaming.store.online.commit` and
:mod:`streaming.store.online.merge` read Redis, call these and write what they decide.

- **Lost.** Redis has no commit of the group (``last_batch`` None) while the job's copy (its mirror) holds a batch
  and is trusted: Redis came back empty, and the group writes every player it keeps again.
- **Rebuilt.** Redis has no commit and the job no copy, yet batches ran before (a batch id above 0: a restart
  after Redis came back empty): the view starts from the batch's events and is partial until every online player
  has sent one more, ``newest event + timeout`` (:func:`partial_until`).
- **The mirror is loaded** from Redis first unless the view was lost or the mirror reflects the batch Redis last
  committed.
- **A batch's parts** are merged once every group's part is in; dropped when the view has the batch already, or
  when a group without a part has committed a later batch (its part can never come: Redis lost it with the rest
  and the group went on); otherwise waited for (:func:`merge_step`).
- **Merged,** the groups' parts make one record: their counts, causes, clocks and lags by server, their
  transitions summed, and the pipeline's watermark advanced over their newest events
  (:func:`streaming.rules.windows.advance_pipeline`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from streaming.rules.online.decide import ServerWrites
from streaming.rules.online.groups import Group
from streaming.rules.windows import advance_pipeline
from streaming.schema.records import ClockRecord, HandoffBatch, OnlinePart, OnlineRecord

_V = TypeVar("_V")


@dataclass(frozen=True)
class Resume:
    """How a group's commit of a batch starts, from what Redis and the job's mirror hold (:func:`resume`)."""

    applied: bool
    """The group committed the batch already: nothing to do."""
    lost: bool
    rebuilt: bool
    load: bool
    """The mirror does not reflect Redis' last commit: loaded from Redis before the batch is folded."""


def resume(committed: int | None, batch_id: int, mirror_batch: int | None, mirror_valid: bool) -> Resume:
    """Called under the group's guard, before its fold: ``committed`` is the group's last batch in Redis (None: none),
    ``mirror_batch`` the last committed batch the job's mirror reflects (None: nothing yet) and ``mirror_valid``
    whether it is trusted (not after a failed commit).

    >>> resume(committed=None, batch_id=6, mirror_batch=5, mirror_valid=True)
    Resume(applied=False, lost=True, rebuilt=False, load=False)
    >>> resume(committed=None, batch_id=6, mirror_batch=None, mirror_valid=True)
    Resume(applied=False, lost=False, rebuilt=True, load=False)
    """
    if committed is not None and committed >= batch_id:
        return Resume(applied=True, lost=False, rebuilt=False, load=False)
    lost = committed is None and mirror_batch is not None and mirror_valid
    return Resume(applied=False, lost=lost, rebuilt=committed is None and not lost and batch_id > 0,
                  load=not lost and (not mirror_valid or mirror_batch != committed))


def group_part(group: Group, of: HandoffBatch, writes: Mapping[str, ServerWrites], clocks: Mapping[str, ClockRecord],
               asked: Mapping[str, int], batch_servers: Iterable[str], newest_event_us: int | None, lost: bool,
               rebuilt: bool) -> OnlinePart:
    """The group's part of the batch for the merge, called once its fold has decided ``writes`` and ``clocks``:
    the counts of the servers it keeps and those it forgot (``erased`` too when an operator asked, ``asked``), the
    transitions summed, and the lag of the servers with events in the batch (``batch_servers``) that ran ahead."""
    with_events = set(batch_servers)
    return OnlinePart(
        group=group.index, of=of,
        counts={s: w.count for s, w in writes.items() if not w.forget},
        forgotten=tuple(s for s, w in writes.items() if w.forget),
        erased=tuple(s for s, w in writes.items() if w.forget and s in asked),
        causes={s: w.causes for s, w in writes.items() if w.causes},
        came_online=sum(w.came_online for w in writes.values()),
        went_offline=sum(w.went_offline for w in writes.values()),
        ahead_ms={s: c.ahead_ms for s, c in clocks.items() if c.ahead_ms > 0 and s in with_events},
        clocks=dict(clocks), newest_event_us=newest_event_us, lost=lost, rebuilt=rebuilt)


def requests_done(asked: Mapping[str, int], writes: Mapping[str, ServerWrites],
                  clocks: Mapping[str, ClockRecord]) -> list[str]:
    """The operator's requests to forget a server (``asked``: server -> when) the batch ends: done once the server is
    forgotten, void once it spoke after it.

    >>> requests_done({"a": 100, "b": 100}, {}, {"a": ClockRecord(watermark_ms=0, clock_us=0, heard_ms=101,
    ...                                                            clock_at_heard_us=0)})
    ['a']
    """
    return [s for s, at in asked.items() if (s in writes and writes[s].forget)
            or (s in clocks and clocks[s].heard_ms > at)]


@dataclass(frozen=True)
class Merged:
    """What a batch's parts make of the online view (:func:`merge`)."""

    record: OnlineRecord
    running_us: int | None
    """The running maximum event time after the batch (None: no event yet)."""
    lost_at_batch: int | None
    partial_until_ms: int | None
    clocks: dict[str, ClockRecord]
    forgotten: list[str]
    erased: list[str]
    """Forgotten at an operator's request: their history goes too."""


def merge(parts: Sequence[OnlinePart], max_event_us: int | None, lost_at_batch: int | None,
          partial_until_ms: int | None) -> Merged:
    """Called once every group's part of a batch is in (``parts``, in group order), with the view's state before it
    (its running maximum event time, the batch Redis was last found empty at and the time it is partial until)."""
    first = parts[0].of  # the batch's own record is the same in every part
    running, next_wm = advance_pipeline(first.watermark_ms, max_event_us, (p.newest_event_us for p in parts),
                                        first.delay_ms, first.next_watermark_ms)
    if any(p.rebuilt for p in parts):
        partial_until_ms = partial_until(running, next_wm, first.delay_ms, first.timeout_ms)
    counts, causes = by_server(p.counts for p in parts), by_server(p.causes for p in parts)
    record = OnlineRecord(batch=first.batch, watermark_ms=next_wm, in_force_ms=first.watermark_ms,
                          batch_ts_ms=first.batch_ts_ms, counts=counts, online=sum(p.came_online for p in parts),
                          offline=sum(p.went_offline for p in parts), causes=causes,
                          ahead_ms=by_server(p.ahead_ms for p in parts))
    lost = any(p.lost or p.rebuilt for p in parts)
    return Merged(record=record, running_us=running, lost_at_batch=first.batch if lost else lost_at_batch,
                  partial_until_ms=partial_until_ms, clocks=by_server(p.clocks for p in parts),
                  forgotten=[s for p in parts for s in p.forgotten], erased=[s for p in parts for s in p.erased])


def merge_step(batch_id: int, merged_last: int | None, groups: int, parts: Iterable[int],
               groups_last: Mapping[int, int | None]) -> str:
    """What becomes of batch ``batch_id``'s parts, ``parts`` the groups whose part is in, ``merged_last`` the
    view's last merged batch, ``groups_last`` each group's last committed batch (read for the groups without a
    part): ``"merge"``, ``"drop"`` (merged already, or never whole) or ``"wait"``.

    >>> merge_step(7, 6, 2, [0, 1], {}), merge_step(7, 7, 2, [0], {}), merge_step(7, 6, 2, [0], {1: 8})
    ('merge', 'drop', 'drop')
    >>> merge_step(7, 6, 2, [0], {1: 6}), merge_step(7, None, 2, [], {0: None, 1: None})
    ('wait', 'wait')
    """
    if merged_last is not None and merged_last >= batch_id:
        return "drop"
    have = set(parts)
    if len(have) == groups:
        return "merge"
    missing = (groups_last.get(g) for g in range(groups) if g not in have)
    return "drop" if any(last is not None and last >= batch_id for last in missing) else "wait"


def partial_until(running_us: int | None, next_wm: int, delay_ms: int, timeout_ms: int) -> int:
    """A view rebuilt from new events is whole once every player online before has sent one more or timed out: at
    the newest event time seen (ms; without one, what the next watermark implies) plus the timeout.

    >>> partial_until(200_000_000, 170_000, 30_000, 10_000), partial_until(None, 170_000, 30_000, 10_000)
    (210000, 210000)
    """
    newest_ms = running_us // 1000 if running_us is not None else next_wm + delay_ms
    return newest_ms + timeout_ms


def by_server(maps: Iterable[Mapping[str, _V]]) -> dict[str, _V]:
    """The groups' maps of their servers as one, in server order: the order one fold of every server writes.

    >>> by_server([{"b": 2}, {"a": 1}])
    {'a': 1, 'b': 2}
    """
    return dict(sorted((s, v) for m in maps for s, v in m.items()))
