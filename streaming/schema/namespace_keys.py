"""Every key of a namespace, built and parsed (:class:`KeySchema`), and a window's part of its keys
(:class:`WindowKey`); the table of what each key holds is ``streaming.schema.keys``'."""

from __future__ import annotations

from dataclasses import dataclass

from streaming.schema.shards import trimmed_key
from watermark_client.stream import events_key, input_shard_key, producer_key


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
        return events_key(self.namespace)

    @property
    def trimmed(self) -> str:
        return self._k("trimmed")

    def input_shard(self, shard: int) -> str:
        """The input's shard ``shard`` (:func:`streaming.schema.shards.input_shard_key`)."""
        return input_shard_key(self.events, shard)

    def trimmed_of(self, shard: int) -> str:
        """The count of entries trimmed from input shard ``shard`` (:func:`streaming.schema.shards.trimmed_key`)."""
        return trimmed_key(self.events, self.trimmed, shard)

    @property
    def dead(self) -> str:
        return self._k("dead")

    @property
    def late(self) -> str:
        return self._k("late")

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

    @property
    def seen(self) -> str:
        return self._k("seen")

    @property
    def forget(self) -> str:
        """Servers an operator asked to forget, with when (``streaming.store.online.forget``)."""
        return self._k("forget")

    @property
    def regions(self) -> str:
        """Each server's region, as its events carry it (HASH server -> region)."""
        return self._k("regions")

    @property
    def idleness(self) -> str:
        return self._k("idleness")

    @property
    def tradeoff(self) -> str:
        return self._k("tradeoff")

    @property
    def lanes(self) -> str:
        return self._k("lanes")

    @property
    def control(self) -> str:
        return self._k("control")

    @property
    def control_audit(self) -> str:
        return self._k("control", "audit")

    @property
    def generator_status(self) -> str:
        return self._k("generator")

    @property
    def online_state(self) -> str:
        return self._k("online", "state")

    @property
    def online_counts(self) -> str:
        return self._k("online", "counts")

    @property
    def online_history(self) -> str:
        return self._k("online", "history")

    @property
    def online_commits(self) -> str:
        return self._k("online", "commits")

    def online_group(self, group: int, of: int) -> str:
        """Group ``group`` of ``of``'s fold of the online view: its own commit guard ``last_batch`` and its servers'
        ``clocks`` (decision 0020). Named with the number of groups: another number groups the servers otherwise,
        and its groups start from the view."""
        return self._k("online", "group", f"{group}-{of}")

    def online_group_counts(self, group: int, of: int) -> str:
        """Players online per server of one group, as of its last commit (what it loads its servers from)."""
        return self._k("online", "group", f"{group}-{of}", "counts")

    def online_parts(self, batch_id: int) -> str:
        """The groups' parts of one batch (a field per group), until the last is in and they are merged."""
        return self._k("online", "parts", batch_id)

    @property
    def online_parts_index(self) -> str:
        """The batches with parts not merged yet, score = the batch id."""
        return self._k("online", "parts")

    def handoff_rows(self, batch_id: int, group: int) -> str:
        """One group's share of a batch's accepted events, handed off by the job (decision 0020)."""
        return self._k("handoff", "rows", batch_id, group)

    @property
    def handoff_batches(self) -> str:
        """The batches handed off to the online view's groups, in order (``HandoffBatch``)."""
        return self._k("handoff", "batches")

    @property
    def handoff_guard(self) -> str:
        """The hand-off's own guard, ``last_batch``."""
        return self._k("handoff", "guard")

    @property
    def online_minutes(self) -> str:
        return self._k("online", "minutes")

    def online_peak(self, day_ms: int) -> str:
        return self._k("online", "peak", day_ms)

    @property
    def online_peak_ever(self) -> str:
        return self._k("online", "peak", "ever")

    def history(self, day_ms: int, series: str) -> str:
        """One series' players online per minute of one UTC day (``streaming.rules.online.rollup``)."""
        return self._k("history", day_ms, series)

    @property
    def annotations(self) -> str:
        return self._k("annotations")

    @property
    def batch_seconds(self) -> str:
        return self._k("batch_seconds")

    @property
    def alerts(self) -> str:
        return self._k("alerts")

    @property
    def alerts_history(self) -> str:
        return self._k("alerts", "history")

    @property
    def alerts_outbox(self) -> str:
        return self._k("alerts", "outbox")

    @property
    def alerts_webhook(self) -> str:
        return self._k("alerts", "webhook")

    @property
    def alerts_delivered(self) -> str:
        return self._k("alerts", "delivered")

    @property
    def alerts_monitor(self) -> str:
        return self._k("alerts", "monitor")

    def producer(self, producer_id: str) -> str:
        """A producer's marker: the sequence number of its last batch written to :attr:`events`, set in the
        same transaction as the batch (decision 0010)."""
        return producer_key(self.namespace, producer_id)

    def online(self, server: str) -> str:
        """Hash of the players online now on ``server``: player -> event time (us) of their latest event.
        Under ``online:players``: a server may be called ``state``."""
        return self._k("online", "players", server)

    def logged_out(self, server: str) -> str:
        """Hash of players who logged out: player -> the logout's event time (us), kept until the watermark
        passes it so that an older straggler cannot bring them back."""
        return self._k("online", "loggedout", server)

    def window(self, w: WindowKey) -> str:
        return self._k("win", w.member())

    def players(self, w: WindowKey) -> str:
        """The window's players so far, shared by the configured pipeline and its lanes (decision 0019)."""
        return self._k("players", w.member())

    @property
    def players_index(self) -> str:
        """Index of the :meth:`players` sets by window end (their removal once every namespace closed the window)."""
        return self._k("players")

    def players_added(self, end_position: str) -> str:
        """How many players the batch ending at ``end_position`` added to each window's :meth:`players` set."""
        return self._k("added", end_position)

    @property
    def players_added_index(self) -> str:
        """Index of the :meth:`players_added` hashes by batch id."""
        return self._k("added")

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
