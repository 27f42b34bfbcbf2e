"""The groups of servers the online view is folded by (decision 0020).

Each server belongs to one group, by the CRC-32 of its name (decision 0017). Each group folds its own servers'
players, in a process of its own; one group of one (:data:`ALL`) is the job's own fold. Pure: no Redis, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from watermark_client.stream import shard_of


@dataclass(frozen=True)
class Group:
    """The servers one fold of the online view keeps (decision 0020): group ``index`` of ``of``, a server in group
    ``shard_of(server, of)``, the CRC-32 of decision 0017, so that with ``of`` dividing the input's shards each
    shard's servers are in one group. One group of one (:data:`ALL`): every server, the job's own fold."""

    index: int = 0
    of: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.of:
            raise ValueError(f"group {self.index} of {self.of}: a group is numbered from 0 to {self.of - 1}")

    def owns(self, server: str) -> bool:
        return group_of(server, self.of) == self.index


def group_of(server: str, groups: int) -> int:
    """The group of ``groups`` that folds ``server``'s players."""
    return shard_of(server, groups)


ALL = Group()
