"""The Redis key schema: every key the pipeline writes, built and parsed in one place.

All keys start with the namespace, so several pipelines (the live one, each
replay) share one Redis without touching each other. The dashboard reads
through this module and never imports pyspark.

=================================================  ======  =============================================
key                                                type    contents
=================================================  ======  =============================================
``{ns}:events``                                    stream  input: one game event per entry, field ``e``
                                                           (JSON, see ``streaming.events``); the entry
                                                           ID's millisecond part is the ingest time
``{ns}:dead``                                      stream  quarantined entries, same IDs as in
                                                           ``events``; fields ``reason``, ``detail``,
                                                           ``raw``, ``batch``
``{ns}:state``                                     hash    ``last_batch`` (the commit guard),
                                                           ``watermark_ms`` (in force for last_batch),
                                                           ``next_watermark_ms`` (in force for the next
                                                           batch; windows ending at or below it are
                                                           final), ``max_event_us``, ``committed_id``,
                                                           ``params`` (JSON window/slide/delay),
                                                           ``trigger_ms``, ``updated_ms`` (commit
                                                           time)
``{ns}:totals``                                    hash    ``input``, ``parsed``, ``events``,
                                                           ``dropped``, ``late``, ``quarantined``, and
                                                           per server ``events|S``, ``dropped|S``,
                                                           ``late|S``, per reason ``bad|R``
``{ns}:servers``                                   set     server names seen
``{ns}:windows``                                   zset    index of windows: member
                                                           ``{start_ms}:{end_ms}:{server}``, score
                                                           ``start_ms``
``{ns}:win:{start_ms}:{end_ms}:{server}``          hash    ``events`` (accepted), ``dropped``,
                                                           ``late`` (late but accepted)
``{ns}:players:{start_ms}:{end_ms}:{server}``      set     distinct accepted player ids (exact)
``{ns}:batches``                                   zset    index of batch records, score = batch id
``{ns}:batch:{id}``                                hash    ``sink``: JSON :class:`BatchRecord` fields;
                                                           ``progress``: JSON from the query listener
``{ns}:commits``                                   stream  one entry per committed batch (``batch``),
                                                           for anyone who wants to wait on commits
=================================================  ======  =============================================

Every key except the input stream expires ``RETENTION`` after its last write;
windows leave the index once they end ``RETENTION`` before the watermark, and
batch records beyond ``PROGRESS_HISTORY`` leave theirs.
"""

from __future__ import annotations

from dataclasses import dataclass

SEP = "|"


@dataclass(frozen=True, slots=True)
class WindowKey:
    start_ms: int
    end_ms: int
    server: str

    def member(self) -> str:
        return f"{self.start_ms}:{self.end_ms}:{self.server}"

    @classmethod
    def parse(cls, member: str | bytes) -> WindowKey:
        """Inverse of :meth:`member`; the server name may itself contain ``:``."""
        text = member.decode() if isinstance(member, bytes) else member
        start, end, server = text.split(":", 2)
        return cls(int(start), int(end), server)


@dataclass(frozen=True)
class KeySchema:
    namespace: str

    def _k(self, *parts: object) -> str:
        return ":".join((self.namespace, *map(str, parts)))

    @property
    def events(self) -> str:
        return self._k("events")

    @property
    def dead(self) -> str:
        return self._k("dead")

    @property
    def state(self) -> str:
        return self._k("state")

    @property
    def totals(self) -> str:
        return self._k("totals")

    @property
    def servers(self) -> str:
        return self._k("servers")

    @property
    def windows(self) -> str:
        return self._k("windows")

    @property
    def batches(self) -> str:
        return self._k("batches")

    @property
    def commits(self) -> str:
        return self._k("commits")

    def window(self, w: WindowKey) -> str:
        return self._k("win", w.member())

    def players(self, w: WindowKey) -> str:
        return self._k("players", w.member())

    def batch(self, batch_id: int) -> str:
        return self._k("batch", batch_id)

    def parse_window(self, key: str | bytes) -> WindowKey:
        """Inverse of :meth:`window` and :meth:`players`."""
        text = key.decode() if isinstance(key, bytes) else key
        prefix = self.namespace + ":"
        if not text.startswith(prefix):
            raise ValueError(f"{text!r} is not in namespace {self.namespace!r}")
        kind, member = text[len(prefix):].split(":", 1)
        if kind not in ("win", "players"):
            raise ValueError(f"{text!r} is not a window key")
        return WindowKey.parse(member)

    def parse_batch(self, key: str | bytes) -> int:
        """Inverse of :meth:`batch`."""
        text = key.decode() if isinstance(key, bytes) else key
        prefix = self._k("batch") + ":"
        if not text.startswith(prefix):
            raise ValueError(f"{text!r} is not a batch key of namespace {self.namespace!r}")
        return int(text[len(prefix):])


def total_field(metric: str, qualifier: str | None = None) -> str:
    """Field of ``{ns}:totals``: ``events`` overall, ``events|A`` for server A, ``bad|malformed_json``."""
    return metric if qualifier is None else f"{metric}{SEP}{qualifier}"


def parse_total_field(field: str | bytes) -> tuple[str, str | None]:
    """Inverse of :func:`total_field`."""
    text = field.decode() if isinstance(field, bytes) else field
    metric, _, qualifier = text.partition(SEP)
    return metric, (qualifier or None)
