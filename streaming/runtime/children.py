"""Children that die with the process that started them, however it dies."""

from __future__ import annotations

import ctypes
import os
import signal
import threading
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets ``sig`` when the process that started it dies, however it dies (Linux;
    elsewhere nothing). A SIGKILLed ``wm-redis`` or ``wm-stack`` cannot stop its children itself: the kernel
    asks them to, and each stops as on a requested stop (redis-server flushes its append-only file). Made before
    the fork: after it, the child only calls ``prctl``.

    Only from the main thread: the kernel's "parent" is the *thread* that forked, so a child started by a
    worker thread would be stopped when that thread ends (a test's fault injector restarting Redis lost its
    Redis as soon as it returned). Started elsewhere, the child is left as any child is."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    parent = os.getpid()
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        return lambda: None

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(sig))
        if os.getppid() != parent:  # the parent died before the request took effect
            os.kill(os.getpid(), sig)

    return preexec
