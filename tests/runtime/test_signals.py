"""A stop signal sets its event without a lock in the handler (streaming.runtime.signals)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# Each case runs in a process of its own: a handler that deadlocks would otherwise hang the test run.
PROC_TIMEOUT_S = 60


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=PROC_TIMEOUT_S)


def test_a_signal_arriving_while_the_main_thread_holds_the_events_lock_still_sets_it() -> None:
    """What killed a monitor's stop: SIGTERM landing inside ``stop.wait()``, where the main thread holds the
    event's lock. Here the main thread holds it on purpose as the signal arrives; ``Event.set()`` in the handler
    would wait for itself forever."""
    done = run("""
        import os, signal, threading
        from streaming.runtime.signals import on_stop_signals
        request = on_stop_signals()
        with request.event._cond:             # as inside Event.wait
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):             # bytecodes: the handler runs among them, in this thread
                pass
            assert not request.event.is_set()  # the watcher cannot set it while the lock is held here
        assert request.event.wait(30)
        print("stopped by", signal.Signals(request.first).name, request.received)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stopped by SIGTERM [15]"


def test_the_note_is_said_once_per_signal_and_a_second_signal_can_interrupt() -> None:
    done = run("""
        import os, signal, threading
        from streaming.runtime.signals import on_stop_signals
        said = []
        noted = threading.Semaphore(0)
        request = on_stop_signals(note=lambda s: (said.append(s), noted.release()), interrupt_again=True)
        os.kill(os.getpid(), signal.SIGINT)
        assert request.event.wait(30)
        noted.acquire()
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass
            print("not interrupted")
        except KeyboardInterrupt:
            print("interrupted")
        print(said)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["interrupted", "[2]"]


def test_signals_not_asked_for_are_left_alone() -> None:
    """Compared with what the process had before, not with the defaults: under ``nohup`` or a shell's background
    job, SIGHUP or SIGINT come ignored, and they must stay so."""
    done = run("""
        import os, signal
        from streaming.runtime.signals import on_stop_signals
        before = {s: signal.getsignal(s) for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)}
        on_stop_signals((signal.SIGTERM,))
        assert signal.getsignal(signal.SIGHUP) is before[signal.SIGHUP]
        assert signal.getsignal(signal.SIGINT) is before[signal.SIGINT]
        assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]
        print("ok")
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
