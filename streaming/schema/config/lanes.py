"""The lab lanes: extra pipelines over the same input, each with a watermark strategy of its own; the catalogue
``LAB_LANES`` names them from (:data:`LANES`), and the one lane type that crosses processes (:class:`Lane`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from streaming.schema.config.settings import Config

DEFAULT_IDLE_TIMEOUT_MS = 20_000


class Lane(msgspec.Struct, frozen=True, kw_only=True):
    """A lab lane: an extra pipeline over the same input with a watermark strategy of its own; or, named
    :data:`MAIN`, the configured pipeline itself. The one lane type: the catalogue's entries (:data:`LANES`), what
    the job registers in ``{ns}:lanes`` and what the dashboard reads back.

    A lane's output is a whole pipeline's (its keys in ``{ns}.{lane}``), so every page can show it. It reads
    nothing itself: the job's sink judges each batch's aggregate against the lane's own watermark
    (``streaming.spark.sink.LaneSink``), so a lane adds no read of the input."""

    name: str
    mode: str = "global"
    policy: str = "min"
    idle: bool = False
    description: str = ""
    namespace: str = ""
    """Where its output goes: ``{parent}.{name}``; empty in the catalogue (:meth:`under` fills it)."""
    input_namespace: str = ""
    """The namespace whose input stream it reads: its parent's."""
    idle_timeout_ms: int | None = None
    """With ``idle``: how long a server is silent before the job's markers stop it holding the watermark (the
    job's ``IDLE_TIMEOUT``, as it registered the lane: pages show the job's, never their own)."""

    @classmethod
    def main(cls, namespace: str) -> Lane:
        """The configured pipeline, as the dashboard shows it beside its lanes."""
        return cls(name=MAIN, namespace=namespace, input_namespace=namespace)

    def under(self, parent: Config) -> Lane:
        """This catalogue entry as a lane of ``parent``."""
        return msgspec.structs.replace(self, namespace=lane_namespace(parent.namespace, self.name),
                                       input_namespace=parent.input_namespace or parent.namespace,
                                       idle_timeout_ms=(parent.idle_timeout_ms or DEFAULT_IDLE_TIMEOUT_MS)
                                       if self.idle else None)

    def config(self, parent: Config) -> Config:
        """``parent``'s configuration with this lane's watermark strategy, namespace and checkpoint."""
        idle = (parent.idle_timeout_ms or DEFAULT_IDLE_TIMEOUT_MS) if self.idle else None
        placed = self.under(parent)
        return parent.with_(
            namespace=placed.namespace,
            checkpoint_dir=f"{parent.checkpoint_dir.rstrip('/')}.{self.name}",
            input_namespace=placed.input_namespace,
            watermark_mode=self.mode, watermark_policy=self.policy, idle_timeout_ms=idle, lanes=(),
        )

    @property
    def label(self) -> str:
        return "configured pipeline" if self.name == MAIN else self.name


MAIN = "main"

LANES: dict[str, Lane] = {s.name: s for s in (
    Lane(name="global", mode="global", policy="min", description="one watermark over all servers"),
    Lane(name="per-server-min", mode="per-server", policy="min",
         description="each server its own watermark, combined by min: the slowest or an idle server holds windows "
                     "open"),
    Lane(name="per-server-min-idle", mode="per-server", policy="min", idle=True,
         description="per-server min, and a server silent for IDLE_TIMEOUT stops holding the watermark back"),
    Lane(name="per-server-max", mode="per-server", policy="max",
         description="per-server max: the fastest server drives the watermark, a slow server's data is dropped"),
)}
"""The lanes ``LAB_LANES`` may name."""


def lane_namespace(parent: str, lane: str) -> str:
    return f"{parent}.{lane}"


def lane_config(parent: Config, lane: str) -> Config:
    """The parent's configuration for its lane named ``lane``."""
    return LANES[lane].config(parent)
