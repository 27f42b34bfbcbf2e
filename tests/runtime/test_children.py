"""A child started with ``die_with_parent`` gets SIGTERM when its parent dies; only from the main thread, where
the parent's death is the process's (streaming.runtime.children)."""

from __future__ import annotations

import subprocess
import sys
import threading

from streaming.runtime.children import die_with_parent

# The child reports the signal the kernel will send it when its parent dies (PR_GET_PDEATHSIG).
REPORT = ("import ctypes; v = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(v)); print(v.value)")


def started_from(main: bool) -> int:
    out: list[str] = []

    def start() -> None:
        out.append(subprocess.run([sys.executable, "-c", REPORT], preexec_fn=die_with_parent(), capture_output=True,
                                  text=True, check=True, timeout=60).stdout.strip())

    if main:
        start()
    else:
        t = threading.Thread(target=start)
        t.start()
        t.join()
    return int(out[0])


def test_a_child_of_the_main_thread_gets_sigterm_when_its_parent_dies() -> None:
    assert started_from(main=True) == 15


def test_a_child_of_another_thread_is_not_tied_to_that_thread() -> None:
    """The kernel would send the signal when the thread ends, while the process lives on."""
    assert started_from(main=False) == 0
