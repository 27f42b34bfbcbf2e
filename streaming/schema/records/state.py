"""A pipeline's commit record, the hash ``{ns}:state`` (:class:`StateRecord`), and how its namespace was built
(:class:`StateParams`)."""

from __future__ import annotations

import json

import msgspec

from streaming.schema.key_fields import parse_total_field, total_field
from streaming.schema.records.batch import NameGuardRecord
from streaming.schema.records.codec import HashRecord, hash_text, json_field


class StateParams(msgspec.Struct, frozen=True, kw_only=True):
    """How a namespace was built (``params`` of ``{ns}:state``): window, slide and watermark mode never change
    on restart (``streaming.store.commit.check_params``); the delay may. ``None``: not recorded (a namespace
    older than the field)."""

    window_ms: int | None = None
    slide_ms: int | None = None
    delay_ms: int | None = None
    mode: str = "global"
    policy: str = "min"

    def to_json(self) -> str:
        # json.dumps with sorted keys, not msgspec: the text the commits have always written.
        return json.dumps({k: v for k, v in msgspec.structs.asdict(self).items() if v is not None}, sort_keys=True)


NONE_CLOSED_MS = -(2**62)
"""``sets_closed_below_ms`` when no window is closed yet: events may be from before 1970 (exact as a Lua number)."""


class StateRecord(HashRecord, frozen=True, kw_only=True):
    """A pipeline's commit record, ``{ns}:state``: what the last committed batch left and how the namespace is
    built. ``last_batch`` is the commit guard (``None``: nothing committed yet)."""

    last_batch: int | None = None
    watermark_ms: int = 0
    """In force for ``last_batch``."""
    next_watermark_ms: int = 0
    """In force for the next batch: windows ending at or below it are final."""
    max_event_us: int | None = None
    """The running max event time."""
    server_max_event_us: dict[str, int] = {}
    """Per-server mode: each server's input max so far, fields ``max_event_us|S``."""
    server_watermarks: dict[str, int] | None = None
    """Per-server mode: Spark's per-input watermark map after ``last_batch`` (JSON; not written otherwise)."""
    server_heard_ms: dict[str, int] | None = None
    """A lane following the fleet (no KNOWN_SERVERS): when each server in ``server_watermarks`` last sent a real
    event, by its batch's trigger time (JSON); a server retired by it leaves the map (``rules.watermarks``)."""
    delay_ms: int | None = None
    """The delay ``last_batch`` ran with."""
    committed_id: str = "0-0"
    """The last input entry committed."""
    lost_at_batch: int | None = None
    """Redis came back empty before this batch: totals and windows open then are partial."""
    lost_from_batch: int | None = None
    """The first of the batches whose commits Redis lost while keeping older ones (a failover to a replica that did
    not have them; decision 0023), found when a later batch was committed and not rebuilt: their events are missing.
    The latest such run is kept."""
    lost_to_batch: int | None = None
    """... and the last of them (the batch after it committed on top)."""
    stopped_ms: int | None = None
    """The job was stopped on request then, after ``last_batch``; the next commit clears it."""
    sets_closed_below_ms: int = NONE_CLOSED_MS
    """The pipeline's: windows ending at or below this are closed for it and for every lane, their players' sets
    gone (decision 0019); the partitions add no player to such a window. A lane's stays where it was."""
    params: StateParams | None = None
    trigger_ms: int = 1_000
    updated_ms: int = 0
    """When ``last_batch`` was committed."""
    name_guard: NameGuardRecord | None = None
    """The flood guard's minute (JSON; None when writing: the field is left as it was)."""

    def _fields(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for f in self.__struct_fields__:
            value = getattr(self, f)
            if f == "server_max_event_us":
                out.update({total_field(_SERVER_MAX, s): str(v) for s, v in value.items()})
            elif f in ("server_watermarks", "server_heard_ms"):
                if value is not None:  # a global pipeline has never written the field
                    out[f] = json.dumps(value, sort_keys=True)
            elif f in ("lost_from_batch", "lost_to_batch"):
                if value is not None:  # written once commits were lost, and kept: never written otherwise
                    out[f] = str(value)
            elif f == "params":
                out[f] = "" if value is None else value.to_json()
            elif f == "name_guard":
                if value is not None:
                    out[f] = value.encode().decode()
            else:
                out[f] = hash_text(value)
        return out

    @classmethod
    def _doc(cls, fields: dict[str, str], where: str) -> dict[str, object]:
        doc: dict[str, object] = {}
        per_server: dict[str, str] = {}
        for f, v in fields.items():
            metric, server = parse_total_field(f)
            if server is not None:
                if metric == _SERVER_MAX:
                    per_server[server] = v
            elif f in ("params", "server_watermarks", "server_heard_ms", "name_guard"):
                doc[f] = json_field(v, f, cls.__name__, where)
            elif f in cls.__struct_fields__ and f != "server_max_event_us":
                doc[f] = v
        return {**doc, "server_max_event_us": per_server}


_SERVER_MAX = "max_event_us"
