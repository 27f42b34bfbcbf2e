"""Child processes for end-to-end tests: output kept in a log and waited on by content, never by sleeping."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent


def until(check: Callable[[], object], timeout: float, what: str | Callable[[], str], every: float = 0.5) -> object:
    """Polls a condition on live processes until it holds (truthy) and returns it. Only for what has nothing to
    block on (Prometheus' API, three views of one state); a process's output is waited on by content instead."""
    deadline = time.monotonic() + timeout
    while (got := check()) in (None, False, [], {}):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what if isinstance(what, str) else what()}")
        time.sleep(every)
    return got


def kill_tree(pid: int) -> None:
    """SIGKILL a process and everything it started, wherever their sessions are (the job's JVM runs in one
    of its own): all are frozen first, so none acts on another's death before it dies too."""
    try:
        family = [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
    except psutil.NoSuchProcess:
        return
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for p in family:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass


class Proc:
    """A child process whose combined output is kept; :meth:`wait_for` blocks until a line matches."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._lines: list[str] = []
        self._cond = threading.Condition()
        self._closed = False
        full_env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **env}
        self.popen = subprocess.Popen(args, cwd=ROOT, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, start_new_session=True)
        self._reader = threading.Thread(target=self._read, name=f"{name}-output", daemon=True)
        self._reader.start()

    @classmethod
    def python(cls, name: str, module_args: list[str], env: dict[str, str], log_dir: Path) -> Proc:
        return cls(name, [sys.executable, "-m", *module_args], env, log_dir)

    def _read(self) -> None:
        assert self.popen.stdout is not None
        with open(self.log_path, "w") as log:
            for line in self.popen.stdout:
                log.write(line)
                log.flush()
                with self._cond:
                    self._lines.append(line)
                    self._cond.notify_all()
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def wait_for(self, pattern: str, timeout: float) -> str:
        """The first output line matching ``pattern``; fails with the log tail if the process ends first."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for line in self._lines[seen:]:
                    if rx.search(line):
                        return line
                seen = len(self._lines)
                if self._closed:
                    raise AssertionError(f"{self.name} exited ({self.popen.wait()}) before printing /{pattern}/:\n"
                                         + self.tail())
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{self.name} did not print /{pattern}/ within {timeout:.0f} s:\n"
                                         + self.tail())
                self._cond.wait(left)

    def tail(self, n: int = 40) -> str:
        with self._cond:
            return "".join(self._lines[-n:])

    def running(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = 30) -> int:
        if self.running():
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                return self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                kill_tree(self.popen.pid)
                os.killpg(self.popen.pid, signal.SIGKILL)
        return self.popen.wait()
