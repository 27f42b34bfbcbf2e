"""Child processes for end-to-end tests: output kept in a log and waited on by content, never by sleeping; and the
class-data-sharing archive every test JVM starts with.

A Spark driver reads and checks its classes from the jars at every start; each job the tests start pays that again.
The JVM can map the classes from an archive it wrote at the exit of an earlier run (``-XX:ArchiveClassesAtExit``, read
back with ``-XX:SharedArchiveFile``): a job's start to its first commit takes about 30% less CPU (docs/testing.md).
The archive is built once for each Python environment, from a real job's run on a few events, and kept in the
user's cache (``$XDG_CACHE_HOME/watermark-dashboard``, else ``~/.cache/watermark-dashboard``) under a key of the JVM
and Spark's jars. It names each jar by its path, and a JVM whose class path differs ignores it without a word (CDS
checks each entry): so the key holds the jars' directory, and an archive is checked to map before it is used. It
makes a start faster, never different. The product sets no such option; only the JVMs the tests start use it, with
the stacks they start.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import psutil
import redis

from streaming.spark.standalone import spark_home

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


BASE_OPTS = "-XX:TieredStopAtLevel=1"
"""C1 only: a test's JVM lives for seconds to a minute, where the optimising compiler costs CPU it never pays back."""
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
"""An archive that does not fit (another JDK, other jars) is ignored without a word in the jobs' logs."""
TRAINING_EVENTS = 120


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else (shutil.which("java") or "java")


def key(home: Path | None = None) -> str:
    """What the archive depends on: the JVM (its version and binary) and every Spark jar (its path, name, size and
    modification time, which the JVM checks too): a checkout of its own, with a virtual environment of its own, has
    jars of its own, and so has a checkout made again at the same path (a fresh clone's jars are newer)."""
    import pyspark

    version = subprocess.run([java(), "-version"], capture_output=True, text=True, check=True).stderr
    home = home or spark_home()
    jars = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in (home / "jars").glob("*.jar"))
    text = repr((version, os.path.realpath(java()), pyspark.__version__, str(home), jars, BASE_OPTS))
    return hashlib.sha256(text.encode()).hexdigest()[:16]  # (java() ran: it exists)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "watermark-dashboard"


def spark_submit_opts() -> str:
    """The options every test JVM starts with: the archive's when it is there or can be built (built once, by
    whichever pytest worker asks first; the others wait for it) and maps, otherwise C1 only."""
    try:
        cache = cache_dir()
        cache.mkdir(parents=True, exist_ok=True)
        archive = cache / f"spark-{key()}.jsa"
        with (cache / "jvm-archive.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            prune(cache, archive)
            if not archive.exists():
                build(archive)
                archive.with_suffix(".home").write_text(str(spark_home()))
        maps(archive)
    except (OSError, subprocess.SubprocessError, redis.RedisError, psutil.Error, AssertionError) as exc:
        warnings.warn(f"no JVM class archive ({exc}): the test JVMs start without one", stacklevel=1)
        return BASE_OPTS
    return f"{BASE_OPTS} -XX:SharedArchiveFile={archive} {QUIET}"


def prune(cache: Path, current: Path | None = None) -> None:
    """Removes the archives of environments that are gone (a deleted checkout's), and those of this environment's
    place that are not ``current`` (built for the jars of a checkout made there before): about 170 MB each."""
    here = str(spark_home()) if current is not None else None
    for archive in cache.glob("spark-*.jsa"):
        home = archive.with_suffix(".home")
        if not (home.exists() and Path(home.read_text()).is_dir()) or (
                archive != current and home.read_text() == here):
            archive.unlink(missing_ok=True)
            home.unlink(missing_ok=True)


def maps(archive: Path) -> None:
    """A JVM started as the jobs' are (Spark's launcher, its class path) maps the archive, or this raises: a JVM
    that cannot use it would start without it and say nothing (``-Xshare:on`` makes it say)."""
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{BASE_OPTS} -Xshare:on -XX:SharedArchiveFile={archive} {QUIET}"}
    run = subprocess.run([str(spark_home() / "bin" / "spark-submit"), "--version"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, f"{archive.name} does not map: {(run.stdout + run.stderr).strip()[-300:]}"


def build(archive: Path) -> None:
    """A real job on an embedded Redis commits a few events and is stopped as an operator stops it; its JVM
    writes the classes it loaded as it exits. Written under another name and renamed: never used half-written."""
    from streaming.apps.redis_server import RedisServer, free_port
    from streaming.rules.simulate import generate
    from streaming.schema.keys import KeySchema
    from streaming.store.report import wait_for_commit
    from watermark_client.events import PAYLOAD_FIELD

    with tempfile.TemporaryDirectory(prefix="jvm-archive-") as tmp_dir:
        tmp = Path(tmp_dir)
        server = RedisServer(data_dir=str(tmp / "redis"), port=free_port())
        server.start()
        try:
            client = redis.Redis.from_url(server.url, socket_timeout=30)
            keys = KeySchema("archive")
            events = generate("late-burst", seed=1, start_us=1_767_225_600_000_000, rate=10, count=TRAINING_EVENTS)
            last = ""
            for _, event in events:
                last = client.xadd(keys.input_shard(0), {PAYLOAD_FIELD: event.payload()}).decode()
            partial = archive.with_suffix(".part")
            env = {**os.environ, "PYTHONPATH": str(ROOT), "REDIS_URL": server.url, "PIPELINE_NAMESPACE": "archive",
                   "CHECKPOINT_DIR": str(tmp / "ck"), "SPARK_MASTER": "local[2]", "TRIGGER_INTERVAL": "200ms",
                   "SPARK_SUBMIT_OPTS": f"{BASE_OPTS} -XX:ArchiveClassesAtExit={partial}"}
            with (tmp / "job.log").open("wb") as log:
                job = subprocess.Popen([sys.executable, "-m", "streaming.apps.job"], env=env, cwd=ROOT,
                                       start_new_session=True, stdout=log, stderr=subprocess.STDOUT)
            jvms: list[psutil.Process] = []
            try:
                assert wait_for_commit(client, keys, last, timeout_s=300), (tmp / "job.log").read_text()[-2000:]
                jvms = psutil.Process(job.pid).children(recursive=True)
                job.send_signal(signal.SIGTERM)  # the job stops its queries; its JVM exits when the job has
                job.wait(timeout=120)
                _, alive = psutil.wait_procs(jvms, timeout=300)  # the archive is written as the JVM exits
                assert not alive, "the job's JVM did not exit"
            finally:  # nothing left running when the build failed
                if job.poll() is None:
                    kill_tree(job.pid)
                    job.wait()
                for jvm in jvms:
                    if jvm.is_running():  # (psutil tells a reused process id apart)
                        jvm.kill()
            partial.rename(archive)
        finally:
            server.stop()
