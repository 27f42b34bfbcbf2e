"""``wm-stack``: the Procfile's processes, started, watched and stopped together; what ``./run.sh`` runs.

    wm-stack [-f Procfile]

Each line ``name: command`` runs as ``bash -c command`` in a session of its own, its output prefixed
``HH:MM:SS name.1 | `` as honcho did before it. Besides, what a stack left alone for weeks needs:

- **One stack per data.** The stack's state (the embedded Redis' data directory, the job's checkpoint) is locked
  while it runs: a second ``./run.sh`` on the same data says so in one line, naming the running stack's pid, and
  exits 1. A port the stack needs that another program holds is said the same way, before anything starts.
- **Stops together.** Ctrl-C, SIGTERM or a hang-up (a closed terminal) asks every process to stop (SIGTERM to its
  group), waits :data:`GRACE_S`, then SIGKILLs what is left; the embedded Redis after the others have left. One
  process ending on its own stops the others and the stack exits with its code.
- **No orphans.** Each process gets SIGTERM from the kernel when ``wm-stack`` dies, even by SIGKILL
  (:func:`streaming.runtime.children.die_with_parent`); ``wm-redis`` does the same for its ``redis-server``, and
  Spark's JVM leaves when the job's driver does (its standard input closes).
- **Starts after a crash.** The locks are the kernel's (``flock``): a crashed stack holds none.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from streaming.runtime.children import die_with_parent
from streaming.runtime.signals import on_stop_signals
from streaming.schema.config import Config, ConfigError

GRACE_S = 5.0
"""How long a stop waits for the processes before SIGKILL: first every one but the store, then the store (the whole
stack within 10 s)."""
STOPS_LAST = ("redis",)
"""Procfile lines stopped after the others: the embedded Redis every other process writes to."""


@dataclass
class Line:
    name: str
    command: str
    proc: subprocess.Popen[bytes] | None = None
    reader: threading.Thread | None = None


def read_procfile(path: Path) -> list[Line]:
    lines = []
    for raw in path.read_text().splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        name, sep, command = raw.partition(":")
        if not sep or not name.strip() or not command.strip():
            raise ValueError(f"{path}: not 'name: command': {raw!r}")
        lines.append(Line(name.strip(), command.strip()))
    return lines


class Busy(Exception):
    """The stack cannot start: another holds its data or a port (the one-line reason)."""


@contextmanager
def locked(path: Path, what: str) -> Iterator[None]:
    """Hold ``path``'s lock while the stack runs; :class:`Busy` naming the holder's pid when another has it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            raise Busy(f"a stack is already running on {what} (pid {holder}): stop it first (Ctrl-C in its "
                       f"terminal, or kill {holder})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # the lock goes with the descriptor; a crash releases it too


def check_port(port: int, what: str) -> None:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            raise Busy(f"port {port} ({what}) is in use by another program: stop it, or choose another port "
                       f"for the stack") from None


class Stack:
    def __init__(self, lines: list[Line], out: IO[str] = sys.stdout) -> None:
        self.lines = lines
        self.out = out
        self.width = max(len(f"{ln.name}.1") for ln in lines) if lines else 6
        self._print = threading.Lock()
        self.stopping = threading.Event()
        self.exited: list[tuple[Line, int]] = []
        self._changed = threading.Condition()

    def say(self, name: str, text: str) -> None:
        with self._print:
            self.out.write(f"{time.strftime('%H:%M:%S')} {name.ljust(self.width)} | {text}\n")
            self.out.flush()

    def start(self) -> None:
        for ln in self.lines:
            ln.proc = subprocess.Popen(["bash", "-c", ln.command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, start_new_session=True,
                                       preexec_fn=die_with_parent())
            self.say("system", f"{ln.name}.1 started (pid={ln.proc.pid})")
            ln.reader = threading.Thread(target=self._follow, args=(ln,), daemon=True, name=f"out-{ln.name}")
            ln.reader.start()

    def _follow(self, ln: Line) -> None:
        assert ln.proc is not None and ln.proc.stdout is not None
        for raw in ln.proc.stdout:
            self.say(f"{ln.name}.1", raw.decode(errors="replace").rstrip("\n"))
        code = ln.proc.wait()
        self.say("system", f"{ln.name}.1 stopped (rc={code})")
        with self._changed:
            self.exited.append((ln, code))
            self._changed.notify_all()

    def wait_first(self) -> None:
        """Until a stop is asked for or one process ends."""
        with self._changed:
            while not self.exited and not self.stopping.is_set():
                self._changed.wait(0.5)

    def stop(self) -> None:
        """Every process asked to stop, the store last (:data:`STOPS_LAST`): a job stopping its queries slowly
        still reaches Redis until it has left, instead of retrying against a stopped one until it is killed."""
        alive = [ln for ln in self.lines if ln.proc is not None and ln.proc.poll() is None]
        self._stop([ln for ln in alive if ln.name not in STOPS_LAST])
        self._stop([ln for ln in alive if ln.name in STOPS_LAST])

    def _stop(self, alive: list[Line]) -> None:
        """SIGTERM to each process' group, :data:`GRACE_S` for all of them, then SIGKILL to what is left."""
        for ln in alive:
            assert ln.proc is not None
            self.say("system", f"sending SIGTERM to {ln.name}.1 (pid {ln.proc.pid})")
            _signal_group(ln.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        for ln in alive:
            assert ln.proc is not None
            try:
                ln.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.say("system", f"sending SIGKILL to {ln.name}.1 (pid {ln.proc.pid})")
                _signal_group(ln.proc.pid, signal.SIGKILL)
                ln.proc.wait()
        for ln in alive:  # their last words said before the next group is asked
            if ln.reader is not None:
                ln.reader.join(timeout=2)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def state_locks(cfg: Config) -> list[tuple[Path, str]]:
    """The stack's state, one lock each: the embedded Redis' data, the job's checkpoint."""
    out = [(Path(cfg.checkpoint_dir).parent / f".{Path(cfg.checkpoint_dir).name}.lock",
            f"the checkpoint {cfg.checkpoint_dir}")]
    if cfg.embedded_redis:
        out.insert(0, (Path(cfg.redis_data_dir) / "wm-stack.lock", f"the data in {cfg.redis_data_dir}"))
    return out


def ports(cfg: Config, lines: list[Line]) -> list[tuple[int, str]]:
    names = {ln.name for ln in lines}
    out = []
    if cfg.embedded_redis and "redis" in names:
        out.append((int(cfg.redis_url.rsplit(":", 1)[1].split("/")[0]), "Redis"))
    if "dashboard" in names and cfg.dashboard_port:
        out.append((cfg.dashboard_port, "the dashboard"))
    if "monitor" in names and cfg.metrics_port is not None:
        out.append((cfg.metrics_port, "the monitor's /metrics"))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-f", "--procfile", type=Path, default=Path("Procfile"))
    args = p.parse_args(argv)
    try:
        cfg = Config.from_env(os.environ)
        lines = read_procfile(args.procfile)
    except (ConfigError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stack = Stack(lines)
    requested = on_stop_signals((signal.SIGINT, signal.SIGTERM, signal.SIGHUP), event=stack.stopping)
    with ExitStack() as held:
        try:
            for path, what in state_locks(cfg):
                held.enter_context(locked(path, what))
            for port, what in ports(cfg, lines):
                check_port(port, what)
        except Busy as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        stack.start()
        stack.wait_first()
        stack.stop()
    if requested.received:
        return 130 if requested.first == signal.SIGINT else 0
    first = stack.exited[0][1] if stack.exited else 0
    return first if first >= 0 else 128 - first  # killed by a signal: as a shell says it


if __name__ == "__main__":
    sys.exit(main())
