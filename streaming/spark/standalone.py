"""A Spark standalone cluster on this machine: a master and workers started with the pip package's
``sbin/spark-daemon.sh``, to run the unchanged job on a cluster (``tests/pipeline/test_cluster.py``) and to
measure what a second worker buys (``bench/stack.py --workers``).

Each worker is a separate daemon with its own cores, work directory and web UI, as a machine of its own would be;
the cluster is ready when the master's JSON API lists every worker ALIVE.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from streaming.runtime.ports import free_port

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


class StandaloneError(RuntimeError):
    """A daemon would not start, or the workers did not register in time; the message has what it said."""


@dataclass(frozen=True)
class Standalone:
    master_url: str
    master_ui: str
    worker_uis: tuple[str, ...]
    work_dirs: tuple[Path, ...]
    log_dir: Path

    def state(self, ui: str) -> dict:
        """A daemon's state from its JSON API (``{ui}/json``)."""
        with urllib.request.urlopen(f"{ui}/json", timeout=10) as reply:
            return json.load(reply)

    def alive_workers(self) -> int:
        try:
            return sum(w["state"] == "ALIVE" for w in self.state(self.master_ui)["workers"])
        except (urllib.error.URLError, OSError, ValueError, KeyError):  # not up yet
            return 0

    def logs(self) -> str:
        """The daemons' logs, for an error message."""
        return _tails(self.log_dir, "*.out")


def _tails(log_dir: Path, pattern: str) -> str:
    """The ends of the daemons' logs named by ``pattern``, for an error message."""
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(log_dir.glob(pattern)))


_MASTER_AT = re.compile(r"Starting Spark master at (spark://\S+)")
_UI_AT = re.compile(r"Bound \w+WebUI to \S+, and started at https?://[^\s/]+:(\d+)")


def _logged(log_dir: Path, cls: str, instance: int, pattern: re.Pattern[str], deadline: float) -> str:
    """What ``pattern`` captures in a daemon's log once the daemon has written it (its address as bound)."""
    name = f"*-{cls}-{instance}-*.out"
    while True:
        for log in log_dir.glob(name):
            if (m := pattern.search(log.read_text(errors="replace"))) is not None:
                return m.group(1)
        if time.monotonic() > deadline:
            raise StandaloneError(f"the Spark {cls.rsplit('.', 1)[1]} {instance} did not say where it listens:\n"
                                  f"{_tails(log_dir, name)}")
        time.sleep(0.2)  # a daemon coming up: nothing to block on but its log


def spark_home() -> Path:
    """The Spark the package brings (its ``bin``, ``sbin``, ``jars`` and ``conf``): the one every JVM here runs."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def can_start() -> str | None:
    """Why the daemons cannot start here (no ``sbin/spark-daemon.sh`` in the package, no Java), or None."""
    daemon = spark_home() / "sbin" / "spark-daemon.sh"
    if not daemon.exists():
        return f"{daemon} is missing"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "java is missing"
    return None


@contextmanager
def standalone(base: Path, workers: int = 2, cores: int = 1, memory: str = "1g",
               timeout_s: float = 120.0) -> Iterator[Standalone]:
    """A master and ``workers`` workers of ``cores`` cores each, all on 127.0.0.1, their logs and work directories
    under ``base``; stopped (workers first) on leaving. The executors get no ``PYTHONPATH``: they must receive the
    ``streaming`` and ``watermark_client`` packages from the job, as on a real cluster (``streaming.spark.cluster``)."""
    why = can_start()
    if why is not None:
        raise StandaloneError(f"cannot start Spark daemons: {why}")
    home = spark_home()
    daemon = str(home / "sbin" / "spark-daemon.sh")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(SPARK_HOME=str(home), SPARK_LOG_DIR=str(base / "logs"), SPARK_PID_DIR=str(base / "pids"),
               SPARK_LOCAL_IP="127.0.0.1", SPARK_IDENT_STRING=f"wm{os.getpid()}")
    # Ports picked here may be taken by the time a daemon binds (Spark then takes the next one): each daemon's
    # addresses are read back from its log, as it bound them.
    port, master_ui = free_port(), free_port()
    work_dirs = tuple(base / f"work-{i + 1}" for i in range(workers))
    started: list[tuple[str, int]] = []
    deadline = time.monotonic() + timeout_s

    def start(cls: str, instance: int, args: list[str]) -> None:
        out = subprocess.run([daemon, "start", cls, str(instance), *args], env=env, capture_output=True, text=True,
                             timeout=60)
        if out.returncode != 0:
            raise StandaloneError(f"cannot start the Spark {cls.rsplit('.', 1)[1]}: {out.stdout}{out.stderr}")
        started.append((cls, instance))

    try:
        start(MASTER, 1, ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(master_ui)])
        master_url = _logged(base / "logs", MASTER, 1, _MASTER_AT, deadline)
        master_ui_url = f"http://127.0.0.1:{_logged(base / 'logs', MASTER, 1, _UI_AT, deadline)}"
        for i in range(workers):
            start(WORKER, i + 1, [master_url, "--host", "127.0.0.1", "--cores", str(cores), "--memory", memory,
                                  "--webui-port", str(free_port()), "--work-dir", str(work_dirs[i])])
        worker_uis = tuple(f"http://127.0.0.1:{_logged(base / 'logs', WORKER, i + 1, _UI_AT, deadline)}"
                           for i in range(workers))
        cluster = Standalone(master_url, master_ui_url, worker_uis, work_dirs, base / "logs")
        while cluster.alive_workers() < workers:  # the master's own view: every worker registered
            if time.monotonic() > deadline:
                raise StandaloneError(f"{workers} workers did not register with {cluster.master_url} within "
                                      f"{timeout_s:.0f} s:\n{cluster.logs()}")
            time.sleep(0.2)  # a daemon coming up: nothing to block on but its HTTP API
        yield cluster
    finally:
        for cls, instance in reversed(started):
            subprocess.run([daemon, "stop", cls, str(instance)], env=env, capture_output=True, timeout=60)
