"""Lab lanes: extra pipelines over the same input, each with its own watermark strategy.

A lane is the whole pipeline's output (Redis keys) in namespace ``{ns}.{lane}``,
so the dashboard can show any lane with the pages it already has and put lanes
side by side. A lane reads nothing itself: the pipeline's sink judges each
batch's aggregate against the lane's own watermark (:class:`watermark.spark.sink.LaneSink`),
so adding a lane adds no read of the input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the settings check lane names against this catalogue, so it cannot import them back
    from watermark.schema.config import Config

DEFAULT_IDLE_TIMEOUT_MS = 20_000


@dataclass(frozen=True)
class LaneSpec:
    """A watermark strategy of the catalogue (``LAB_LANES`` names them). The job registers each lane it runs as a
    ``records.LaneRecord`` (with its namespace), which the dashboard reads back as a ``store.views.lanes.Lane``;
    ``spark.sink.LaneSink`` commits it."""

    name: str
    mode: str
    policy: str
    idle: bool
    description: str


LANES: dict[str, LaneSpec] = {s.name: s for s in (
    LaneSpec("global", "global", "min", False, "one watermark over all servers"),
    LaneSpec("per-server-min", "per-server", "min", False,
             "each server its own watermark, combined by min: the slowest or an idle server holds windows open"),
    LaneSpec("per-server-min-idle", "per-server", "min", True,
             "per-server min, and a server silent for IDLE_TIMEOUT stops holding the watermark back"),
    LaneSpec("per-server-max", "per-server", "max", False,
             "per-server max: the fastest server drives the watermark, a slow server's data is dropped"),
)}


def lane_namespace(parent: str, lane: str) -> str:
    return f"{parent}.{lane}"


def lane_config(parent: Config, lane: str) -> Config:
    """The parent's configuration with the lane's watermark strategy and namespace."""
    spec = LANES[lane]
    idle = (parent.idle_timeout_ms or DEFAULT_IDLE_TIMEOUT_MS) if spec.idle else None
    return parent.with_(
        namespace=lane_namespace(parent.namespace, lane),
        checkpoint_dir=f"{parent.checkpoint_dir.rstrip('/')}.{lane}",
        input_namespace=parent.input_namespace or parent.namespace,
        watermark_mode=spec.mode, watermark_policy=spec.policy, idle_timeout_ms=idle, lanes=(),
    )
