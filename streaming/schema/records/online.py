"""The online view's records: its record of a batch, the hand-off of a batch to its groups, a group's part,
each server's clock and the view's commit record ``{ns}:online:state``."""

from __future__ import annotations

import msgspec

from streaming.schema.records.codec import ENCODER, HashRecord, JsonRecord, hash_text, json_field


class OnlineRecord(JsonRecord, frozen=True, kw_only=True):
    """Players online per server after one batch, and the batch's transitions."""

    batch: int
    watermark_ms: int
    """The watermark the batch's expiries used (the one after it)."""
    in_force_ms: int = 0
    batch_ts_ms: int
    counts: dict[str, int]
    online: int
    """Transitions to online in the batch."""
    offline: int
    causes: dict[str, dict[str, int]] = {}
    """Per server, transitions per cause (login, heartbeat, logout, timeout, ...)."""
    ahead_ms: dict[str, int] = {}
    """Per server whose events ran ahead of their arrival in the batch: by how much at most (ms)."""


class HandoffBatch(JsonRecord, frozen=True, kw_only=True):
    """One batch handed by the job to the online view's groups (``{ns}:handoff:batches``, decision 0020): what
    their folds need besides the events (``{ns}:handoff:rows:{batch}:{group}``)."""

    batch: int
    groups: int
    """How many groups the job split the batch's events among: a group process configured otherwise refuses."""
    watermark_ms: int
    """The pipeline's watermark in force for the batch."""
    batch_ts_ms: int
    end_id: str
    delay_ms: int
    timeout_ms: int
    next_watermark_ms: int | None = None
    """Per-server pipelines: Spark's combined watermark after the batch, from the sink's model."""
    newest_arrival_ms: int | None = None
    """The whole batch's newest arrival (None: it had no event)."""


class OnlinePart(JsonRecord, frozen=True, kw_only=True):
    """What one group of servers' fold did to one batch (``{ns}:online:parts:{batch}``, a field per group), until
    the last group's part is in and the parts are merged into the online view's record of the batch
    (``streaming.store.online.merge``). Every group's part carries the batch's own record (the same in each), so
    whoever merges needs nothing else."""

    group: int
    of: HandoffBatch
    """The batch: its id, the pipeline's watermark in force and after it, its arrival, the fold's delay and timeout."""
    counts: dict[str, int]
    """Players online after the batch, per server of the group."""
    causes: dict[str, dict[str, int]] = {}
    came_online: int = 0
    went_offline: int = 0
    ahead_ms: dict[str, int] = {}
    """Per server of the group with events in the batch that ran ahead of their arrival: by how much (ms)."""
    clocks: dict[str, ClockRecord] = {}
    """Each server's clock after the batch."""
    newest_event_us: int | None = None
    """The newest event of the group's share of the batch (None: it had none)."""
    lost: bool = False
    """Redis came back empty while the group's fold still held its players: the group wrote them all again."""
    rebuilt: bool = False
    """Redis came back empty and the fold had no copy either: the group starts from the batch's events."""
    forgotten: tuple[str, ...] = ()
    """Servers of the group the fold forgot with this batch (``streaming.rules.fleet.forgotten``): no player kept,
    silent for RETIRE_AFTER. The view's counts drop them."""
    erased: tuple[str, ...] = ()
    """Those of them an operator asked to forget (``{ns}:forget``, a test server): the merge erases their own
    history too, peaks and per-minute series."""


class ClockRecord(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    """One server's clock for the online view (``streaming.rules.server_clock``): its watermark in force for the
    next batch (ms), its clock (us), when its newest event arrived (Redis' clock, ms) and its clock then (us)."""

    watermark_ms: int
    clock_us: int
    heard_ms: int
    clock_at_heard_us: int
    ahead_ms: int = 0
    """How far its events ran ahead of their arrival in the last batch that had any (0: not ahead)."""
    behind_since_ms: int = 0
    """Arrival time since which every batch of its events has been far behind its clock (0: not behind)."""
    drained_ms: int = 0
    """The arrival of its newest event when that event's batch left it with no player online: its players all
    logged out before it fell silent (``streaming.rules.fleet``); 0 while it has players, or lost them otherwise."""


class OnlineStateRecord(HashRecord, frozen=True, kw_only=True):
    """The online view's commit record, ``{ns}:online:state``. ``last_batch`` is its own commit guard
    (``None``: nothing committed yet)."""

    last_batch: int | None = None
    watermark_ms: int = 0
    """The watermark the batch's expiries used (the one after it)."""
    in_force_ms: int = 0
    batch_ts_ms: int = 0
    timeout_ms: int = 0
    updated_ms: int = 0
    max_event_us: int | None = None
    committed_id: str = "0-0"
    lost_at_batch: int | None = None
    """Redis came back empty before this batch: the history before it is gone."""
    minute: str | None = None
    """The open minute as JSON, read by ``streaming.rules.online.rollup.Minute`` (a rule: this floor cannot
    name it)."""
    partial_until_ms: int | None = None
    """Rebuilt from new events after a loss: whole once the watermark passes this."""
    clocks: dict[str, ClockRecord] = {}
    """Each server's clock and watermark for the online view (JSON; absent before per-server clocks)."""

    def _fields(self) -> dict[str, str]:
        out = {f: hash_text(getattr(self, f)) for f in self.__struct_fields__ if f != "clocks"}
        out["clocks"] = ENCODER.encode(self.clocks).decode()
        return out

    @classmethod
    def _doc(cls, fields: dict[str, str], where: str) -> dict[str, object]:
        doc: dict[str, object] = {f: v for f, v in fields.items() if f in cls.__struct_fields__}
        if "clocks" in doc:
            doc["clocks"] = json_field(str(doc["clocks"]), "clocks", cls.__name__, where)
        return doc
