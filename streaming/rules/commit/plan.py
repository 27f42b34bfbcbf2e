"""The pure half of a batch's commit: every write of the batch decided from the batch and what Redis held before it
(:func:`plan_commit`), before :func:`streaming.store.commit.commit_batch` applies them in one transaction. Also
what the read-back says about Redis' own losses (:func:`losses`). Pure: no Spark, no Redis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from streaming.rules.commit.batch import BadRow, BatchSummary, WindowAgg
from streaming.rules.late import LateEvent
from streaming.rules.tradeoff import bucket, hist_field
from streaming.rules.watermarks import policy_max
from streaming.rules.windows import advance_pipeline, event_ms
from streaming.schema.keys import total_field
from streaming.schema.params import Params
from streaming.schema.records import BatchRecord, StateRecord
from streaming.schema.shards import START, Position, lowest
from watermark_client.events import parse_entry_id

SERVER_METRICS = ("events", "dropped", "late", "rows", "ticks")
"""The per-server fields of ``{ns}:totals`` (:func:`_totals`)."""


def batch_record(s: BatchSummary, next_wm_ms: int, running_max_us: int | None, delay_ms: int) -> BatchRecord:
    """The deterministic per-batch record stored at ``{ns}:batch:{id}`` field ``sink``."""
    return BatchRecord(
        batch=s.batch_id, watermark_ms=s.watermark_ms, next_watermark_ms=next_wm_ms, delay_ms=delay_ms,
        server_watermarks=s.server_watermarks, ticks=s.ticks, batch_ts_ms=s.batch_ts_ms, start_id=s.start_id,
        end_id=s.end_id, input=s.input, parsed=s.parsed, quarantined=len(s.bad),
        events=sum(w.events for w in s.windows), dropped=sum(w.dropped for w in s.windows),
        late=sum(w.late for w in s.windows), min_event_us=s.min_event_us, max_event_us=s.max_event_us,
        running_max_event_us=running_max_us,
        servers=dict(sorted(s.servers.items())),
        bad=_count_reasons(s.bad), aggregation=s.aggregation, refused=s.refused)


def _tradeoff_counts(windows: Sequence[WindowAgg], driver_ms: int | None) -> dict[str, int]:
    """This batch's (event, window) pairs per server and slack bucket (see :mod:`streaming.rules.tradeoff`)."""
    out: dict[str, int] = {}
    for w in windows:
        n = w.events + w.dropped
        if n:
            f = hist_field(w.server, bucket(None if driver_ms is None else driver_ms - w.end_ms))
            out[f] = out.get(f, 0) + n
    return out


def players_closed(next_wm: int, prior: Prior) -> int:
    """The pipeline's bound below which every window is closed for it and for every lane (decision 0019): the
    lowest watermark any of them applies to its next batch, never lower than before. A lane that has not committed
    yet holds it where it is (its first watermark is not known)."""
    if any(v is None for v in prior.lanes_next_ms):
        return prior.sets_closed_below_ms
    return max(prior.sets_closed_below_ms, min([next_wm, *(v for v in prior.lanes_next_ms if v is not None)]))


def players_added_done(batch_id: int, prior: Prior) -> int:
    """Batches up to this one have been committed by the pipeline and every lane that has a commit: their counts of
    players added can go (a lane without one starts with the batch being committed, from the sink's table)."""
    return min([batch_id, *(v for v in prior.lanes_last if v is not None)])


def keep_ms(s: BatchSummary, params: Params) -> int:
    """How much committed input (ms of arrival time before the batch time) the trim keeps: ``stream_keep_ms``,
    or less when at the batch's own arrival rate that would be more than ``stream_keep_entries`` entries, so
    that at game scale the stream (Redis' memory, its append-only file) stays bounded. Counting entries
    exactly would mean walking them; the rate of the batch just read is known for free."""
    start_ms = Position.of(s.start_id).newest_ms()
    span_ms = Position.of(s.end_id).newest_ms() - start_ms
    if s.input <= 0 or span_ms <= 0 or start_ms == 0:
        return params.stream_keep_ms
    return min(params.stream_keep_ms, params.stream_keep_entries * span_ms // s.input)


def _count_reasons(bad: list[BadRow]) -> dict[str, int]:
    out: dict[str, int] = {}
    for b in bad:
        out[b.reason] = out.get(b.reason, 0) + 1
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class Prior:
    """What a batch's commit reads back (under ``WATCH``) before deciding its writes."""

    lost_at: int | None
    """The batch Redis came back empty before (kept, or found now), else None."""
    max_event_us: int | None
    sets_closed_below_ms: int
    server_max: dict[str, int]
    """Per-server mode: each server's input max so far (``max_event_us|S``)."""
    late_top: dict[int, tuple[int, int]]
    """Per shard the batch has late events of, the newest late event kept there (``(0, 0)``: none)."""
    readers_done: tuple[str, ...]
    """Each other reader's committed position (``0-0``: nothing yet): the trim keeps what they have not committed."""
    lanes_next_ms: tuple[int | None, ...] = ()
    """The pipeline's: each lane's watermark for its next batch (None: no commit yet)."""
    lanes_last: tuple[int | None, ...] = ()
    """The pipeline's: each lane's last committed batch (None: none)."""
    lost_commits: tuple[int, int] | None = None
    """The first and last batch whose commits Redis lost while keeping an older one (kept, or found now), else
    None."""


@dataclass(frozen=True)
class PlayersWrites:
    """The pipeline's upkeep of its windows' players' sets (decision 0019)."""

    added: str | None
    """The batch's end position, whose count of players added is indexed under the batch (None: it read nothing)."""
    added_done: int
    """Counts of batches up to this one go."""
    closed_ms: int
    """Sets of windows ending at or below this go."""


@dataclass(frozen=True)
class BatchWrites:
    """Every write of one batch, decided (:func:`plan_commit`) before one transaction applies them
    (:func:`apply_writes`)."""

    batch_id: int
    end_id: str
    totals: dict[str, int]
    servers: tuple[str, ...]
    seen: dict[str, int]
    regions: dict[str, str]
    tradeoff: dict[str, int]
    windows: list[WindowAgg]
    players: PlayersWrites | None
    windows_end_below_ms: int
    """Windows starting below this leave the index (they ended a whole retention before the watermark)."""
    late: list[LateEvent]
    bad: list[BadRow]
    record: BatchRecord
    state: StateRecord
    trim_below: str | None


def losses(last_batch: int | None, lost_at: int | None, lost_commits: tuple[int, int] | None, batch_id: int,
           trims: bool) -> tuple[int | None, tuple[int, int] | None]:
    """What Redis lost, called as a batch's commit reads back the namespace's record (``last_batch``, and the losses
    it says already: ``lost_at``, ``lost_commits``): the batch Redis came back empty before, and the first and last
    batch whose commits it lost while keeping an older one. Only the pipeline judges (``trims``): a lane starts its
    record with its first batch, whenever it was added.

    - No commit record, yet Spark ran batches before this one: Redis came back empty before this batch.
    - A record behind this batch by more than one, though every batch Spark runs commits (an empty one too): Redis
      lost the commits between and kept an older one (a failover to a replica that did not have them yet: decision
      0023). The sink commits them again from the input first where it can (``streaming.spark.recovery``: its
      ``Recovery.mend``); here they are said.

    >>> losses(None, None, None, 5, True), losses(2, None, None, 5, True), losses(4, None, None, 5, True)
    ((5, None), (None, (3, 4)), (None, None))
    """
    if last_batch is None and batch_id > 0 and trims:
        return batch_id, lost_commits
    if last_batch is not None and batch_id > last_batch + 1 and trims:
        return lost_at, (last_batch + 1, batch_id - 1)
    return lost_at, lost_commits


def plan_commit(s: BatchSummary, params: Params, prior: Prior, now_ms: int) -> BatchWrites:
    """The batch's writes, decided from the batch and what Redis held before it (``prior``, read under the batch's
    guard by :func:`streaming.store.commit.read_prior`); called once a batch, in its commit's transaction."""
    # per server, the next watermark is combined from each input's by the sink (s.next_watermark_ms)
    running_max, next_wm = advance_pipeline(s.watermark_ms, prior.max_event_us, (s.max_event_us,), params.delay_ms,
                                            s.next_watermark_ms)
    record = batch_record(s, next_wm, running_max, params.delay_ms)
    if params.per_server:
        driver = policy_max({k: event_ms(v) for k, v in prior.server_max.items()}, params.servers, params.policy)
    else:
        driver = event_ms(prior.max_event_us) if prior.max_event_us is not None else None
    server_max = dict(prior.server_max)
    for srv, st in s.servers.items():
        top = st.input_max_us(params.idle_timeout_ms is not None)
        if (srv in params.servers or not params.servers) and top is not None:
            server_max[srv] = max(top, server_max.get(srv, top))
    # Entries before this batch's start are in a batch Spark has committed, and so are those below every
    # other reader's committed ID: safe to trim. Shard by shard; the look-back kept is arrival time, the same for all.
    look_back = f"{max(0, s.batch_ts_ms - keep_ms(s, params))}-0"
    start = Position.of(s.start_id)
    keep_from = Position.of(lowest([s.start_id, ",".join([look_back] * start.shards), *prior.readers_done]))
    players = None if params.players_lanes is None else PlayersWrites(
        added=s.end_id if s.end_id != s.start_id else None, added_done=players_added_done(s.batch_id, prior),
        closed_ms=players_closed(next_wm, prior))
    closed = prior.sets_closed_below_ms if players is None else players.closed_ms
    state = StateRecord(
        last_batch=s.batch_id, watermark_ms=s.watermark_ms, next_watermark_ms=next_wm, max_event_us=running_max,
        server_max_event_us=server_max, server_watermarks=s.server_watermarks, server_heard_ms=s.server_heard_ms,
        delay_ms=params.delay_ms,
        committed_id=s.end_id, lost_at_batch=prior.lost_at,
        lost_from_batch=prior.lost_commits[0] if prior.lost_commits else None,
        lost_to_batch=prior.lost_commits[1] if prior.lost_commits else None,
        stopped_ms=None,  # running again
        sets_closed_below_ms=closed, params=params.semantic(),
        trigger_ms=params.trigger_ms, updated_ms=now_ms, name_guard=s.name_guard)
    return BatchWrites(
        batch_id=s.batch_id, end_id=s.end_id, totals=_totals(s, record), servers=tuple(s.servers),
        seen={srv: st.max_ingest_us // 1000 for srv, st in s.servers.items() if st.max_ingest_us is not None},
        regions=dict(s.regions),
        tradeoff=_tradeoff_counts(s.windows, driver), windows=s.windows, players=players,
        windows_end_below_ms=next_wm - params.retention_ms - params.window_ms,
        late=[e for e in s.late_events if parse_entry_id(e.entry_id) > prior.late_top.get(e.shard, (0, 0))],
        bad=s.bad,
        record=record, state=state,
        trim_below=str(keep_from) if params.trims and any(i != START for i in keep_from.ids) else None)


def _totals(s: BatchSummary, record: BatchRecord) -> dict[str, int]:
    """The increments of ``{ns}:totals``: overall, per server and per quarantine reason."""
    totals: dict[str, int] = {"input": s.input, "parsed": s.parsed, "quarantined": len(s.bad),
                              "events": record.events, "dropped": record.dropped, "late": record.late,
                              "ticks": s.ticks}
    for name, st in s.servers.items():
        for metric in SERVER_METRICS:
            totals[total_field(metric, name)] = getattr(st, metric)
    for reason, n in record.bad.items():
        totals[total_field("bad", reason)] = n
    return totals
