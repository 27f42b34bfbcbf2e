"""Typed records that go through Redis from one process to another, each defined once with its encoder and
decoder (msgspec). A malformed record read back raises :class:`RecordError` naming the record and what is wrong
with it, where it is read, never a ``KeyError`` three calls later. Each record is in the module of what it is
for (``batch``, ``state``, ``online``, ``annotation``, ``control``), their shared codec in ``codec``; they are
imported from here.

* :class:`BatchRecord`: the pipeline's record of one batch, ``{ns}:batch:{id}`` field ``sink``, written by the
  sink's commit (``streaming.store.commit``) and read by the dashboard, the Events page and the reports.
* :class:`CommitEntry`: one entry of ``{ns}:commits`` (and ``{ns}:online:commits``): the batch and the last
  input entry it covered.
* :class:`DeadEntry`: one entry of ``{ns}:dead``, a quarantined input entry (same ID) with its reason.
* :class:`OnlineRecord`: the online view's record of one batch, a member of ``{ns}:online:history``.
* a lab lane the job runs, a field of ``{ns}:lanes``: :class:`streaming.schema.config.Lane`.
* :class:`StateRecord`: a pipeline's commit record, the hash ``{ns}:state`` (with :class:`StateParams`), written
  by its commit (``streaming.store.commit``) and by the job when it stops; read by the commits, the sink's lanes,
  the dashboard and the reports.
* :class:`OnlineStateRecord`: the online view's commit record, the hash ``{ns}:online:state``.
* :class:`Annotation`: a deploy, maintenance or incident someone marked (``wm-annotate``, ``POST /annotations``),
  a member of ``{ns}:annotations``, drawn over every time chart.
* :class:`Control` and :class:`GeneratorStatus`: the lab's request (``{ns}:control``) and what the following
  generator applied (``{ns}:generator``), hashes a field per value (``streaming.store.control_store``).

Fields added after the first release have defaults, so records written by an older job still read back. The two
state records stay hashes, a field per attribute (``to_hash``, ``from_hash``): a commit reads back only the
fields it needs, and the job writes ``stopped_ms`` alone.
"""

from __future__ import annotations

from streaming.schema.records.annotation import ANNOTATION_KINDS, Annotation
from streaming.schema.records.batch import (
    BatchRecord,
    CommitEntry,
    DeadEntry,
    LagRecord,
    NameGuardRecord,
    ServerRecord,
)
from streaming.schema.records.codec import RecordError, decode_json
from streaming.schema.records.control import (
    ACHIEVED_OVER_MS,
    RUNNING,
    STOPPED,
    Control,
    ControlChange,
    GeneratorStatus,
    check_delay_ms,
    check_rate,
)
from streaming.schema.records.online import ClockRecord, HandoffBatch, OnlinePart, OnlineRecord, OnlineStateRecord
from streaming.schema.records.state import NONE_CLOSED_MS, StateParams, StateRecord

__all__ = ["ACHIEVED_OVER_MS", "ANNOTATION_KINDS", "NONE_CLOSED_MS", "RUNNING", "STOPPED", "Annotation", "BatchRecord",
           "ClockRecord", "CommitEntry", "Control", "ControlChange", "DeadEntry", "GeneratorStatus", "HandoffBatch",
           "LagRecord", "NameGuardRecord", "OnlinePart", "OnlineRecord", "OnlineStateRecord", "RecordError",
           "ServerRecord", "StateParams", "StateRecord", "check_delay_ms", "check_rate", "decode_json"]
