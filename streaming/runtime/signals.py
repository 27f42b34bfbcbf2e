"""A requested stop (SIGTERM, SIGINT, SIGHUP) as a :class:`threading.Event`, set without a lock in the handler.

Python runs a signal handler in the main thread between two bytecodes, possibly inside ``Event.wait`` while that
thread holds the event's own lock: an ``Event.set()`` in the handler then waits for itself, forever (a monitor
SIGTERMed by the kernel when its stack died stayed asleep that way). A handler that logs can likewise interrupt a
write to the same stream. So the handler here only writes the signal's number to a pipe, which takes no lock;
a daemon thread reads it, sets the event and says why, outside the handler.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


@dataclass
class StopRequest:
    """What the signals asked for: ``event`` is set on the first, ``received`` lists them in order."""

    event: threading.Event = field(default_factory=threading.Event)
    received: list[int] = field(default_factory=list)
    note: Callable[[int], None] | None = None
    """Called on the watcher thread for each signal (logging is safe there)."""

    @property
    def first(self) -> int | None:
        return self.received[0] if self.received else None


_lock = threading.Lock()
_write_fd: int | None = None
_targets: dict[int, StopRequest] = {}


def _watch(read_fd: int) -> None:
    while chunk := os.read(read_fd, 64):
        for signum in chunk:
            with _lock:
                target = _targets.get(signum)
            if target is None:
                continue
            target.received.append(signum)
            target.event.set()
            if target.note is not None:
                target.note(signum)


def _pipe() -> int:
    global _write_fd
    with _lock:
        if _write_fd is None:
            read_fd, _write_fd = os.pipe()
            os.set_blocking(_write_fd, False)  # a handler never waits; 64 KiB of unread signals is not a case
            threading.Thread(target=_watch, args=(read_fd,), name="stop-signals", daemon=True).start()
        return _write_fd


def on_stop_signals(signals: Iterable[int] = (signal.SIGTERM, signal.SIGINT), *,
                    note: Callable[[int], None] | None = None, interrupt_again: bool = False,
                    event: threading.Event | None = None) -> StopRequest:
    """Install handlers for ``signals`` (in the main thread) and return the request they fill. With
    ``interrupt_again``, a signal after the first raises KeyboardInterrupt where the main thread is (a second
    Ctrl-C gives up on the work in hand). ``event``: the one to set, when the caller made it already."""
    request = StopRequest(note=note) if event is None else StopRequest(event=event, note=note)
    write_fd = _pipe()
    # Counted in the handler itself, without a lock (a list's append is atomic): the watcher may not have run yet.
    seen: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        seen.append(signum)
        if interrupt_again and len(seen) > 1:
            raise KeyboardInterrupt
        try:
            os.write(write_fd, bytes([signum]))
        except BlockingIOError:
            pass

    with _lock:
        for signum in signals:
            _targets[int(signum)] = request
    for signum in signals:
        signal.signal(signum, handler)
    return request
