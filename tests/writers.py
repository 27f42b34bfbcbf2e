"""Driving the generator's writer through lost connections, as its command does (``streaming.apps.generator``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from streaming.store.stream_writer import LOST_REDIS, StreamWriter


def write_through_losses(writer: StreamWriter, it: Iterator[Any]) -> int:
    """Resume ``writer`` on ``it`` after every lost connection until it is done; how many times it was lost."""
    lost = 0
    while True:
        try:
            writer.resume(it, raw=False)
            return lost
        except LOST_REDIS:
            lost += 1
