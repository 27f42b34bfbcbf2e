"""The ``Procfile``'s processes as ``./run.sh`` starts them, in a scratch directory (:class:`Stack`), the job
started until its queries run (:func:`start_job`), and the CPU and memory of a process tree, by part for the job."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tarfile
import time
import tomllib
from pathlib import Path

import psutil
import redis

HERE = Path(__file__).resolve().parents[2]

from streaming.apps.redis_server import free_port  # noqa: E402
from streaming.runtime.children import die_with_parent  # noqa: E402


def procfile(code_root: Path) -> dict[str, str]:
    lines = (code_root / "Procfile").read_text().splitlines()
    return dict(line.split(":", 1) for line in lines if line.strip() and not line.startswith("#"))


def export(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "archive", "--format=tar", rev], cwd=HERE, check=True, capture_output=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def commands_of(code_root: Path, into: Path) -> Path:
    """A directory of the tree's own ``wm-*`` commands, from its ``pyproject.toml``: this checkout's installed
    commands import this checkout's packages, where a tree exported at another revision (``--base``) must run its
    own (before issue 64 its pipeline was ``watermark``, which the installed ``wm-job`` does not import)."""
    scripts = tomllib.loads((code_root / "pyproject.toml").read_text())["project"]["scripts"]
    into.mkdir(parents=True, exist_ok=True)
    for name, target in scripts.items():
        module, func = target.split(":")
        path = into / name
        path.write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import {func}\n"
                        f"sys.exit({func}())\n")
        path.chmod(0o755)
    return into


KEEP_OVERRIDE = int(os.environ.get("BENCH_KEEP_ENTRIES", "0"))
"""``STREAM_KEEP_ENTRIES`` for the stack (0: the bench's own, 200 s of input, so every entry of the window is
measured)."""


class Stack:
    """The Procfile's processes in their own process groups, logs in the scratch directory."""

    def __init__(self, code_root: Path, tmp: Path, rate: int, redis_nodes: int = 1) -> None:
        self.code_root, self.tmp = code_root, tmp
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.redis_nodes = redis_nodes
        self.ns = "{wm}" if redis_nodes > 1 else "wm"  # a cluster's pipeline keeps its keys in one slot (0018)
        self.redis_pids: list[int] = []  # a cluster's nodes (the Procfile's redis then only waits)
        venv_bin = str(Path(sys.executable).parent)
        own_bin = commands_of(code_root, tmp / "bin")
        self.env = {**os.environ, "PATH": f"{own_bin}:{venv_bin}:{os.environ.get('PATH', '')}",
                    "PYTHONPATH": str(code_root), "REDIS_PORT": str(self.port),
                    "REDIS_DATA_DIR": str(tmp / "redis"), "CHECKPOINT_DIR": str(tmp / "checkpoints" / "wm"),
                    "PIPELINE_NAMESPACE": self.ns, "SCENARIO": "steady", "RATE": str(rate),
                    # Freshness is measured per entry after the window (entry_keys): the trim must keep the
                    # window's entries until then, where it would keep about 20 s of them at 50,000 events/s.
                    # BENCH_KEEP_ENTRIES: keep what the product keeps instead (freshness then covers the entries
                    # still kept when the window ends, its last STREAM_KEEP_ENTRIES or so: Redis' AOF rewrites copy
                    # what is kept, a cost that 200 s of input inflates).
                    "STREAM_KEEP_ENTRIES": str(KEEP_OVERRIDE or max(1_000_000, rate * 200)),
                    # The writers' bound stays above what is kept (the configuration refuses it otherwise).
                    "STREAM_MAX_ENTRIES": str(2 * (KEEP_OVERRIDE or max(1_000_000, rate * 200))),
                    # A fleet's players follow the time of day; the load measured must not depend on the hour.
                    "DAILY_CURVE": "off",
                    "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
        for name in ("REDIS_URL", "KNOWN_SERVERS", "LAB_LANES", "PYSPARK_PYTHON"):
            self.env.pop(name, None)
        self.metrics_port = free_port()
        self.env["METRICS_PORT"] = str(self.metrics_port)
        self.shards = int(self.env.get("STREAM_SHARDS", "1"))  # the input's streams, as the stack reads them
        self.master = "local[2]"  # as ./run.sh runs the job here (local[*] on two cores)
        self.commands = procfile(code_root)
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(["bash", "-c", self.commands[name]], cwd=self.code_root, env=self.env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=die_with_parent())  # a bench killed leaves no stack behind
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")

    def stop(self, name: str, grace_s: float = 15.0) -> None:
        proc = self.procs.get(name)
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def stop_all(self) -> None:
        for name in ("dashboard", "generator", "monitor", "online", "job", "redis"):
            self.stop(name)

def tree_cpu_s(pid: int, named: str = "") -> float:
    """CPU seconds of a process and every descendant, reaped ones included; only the processes whose name holds
    ``named`` when given (``chrom``: a browser the process started, its renderers gone meanwhile included)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for p in procs:
        try:
            if named not in p.name():
                continue
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            pass
    return total


JOB_PARTS = ("driver", "jvm", "workers", "planner")
"""Where the job's CPU goes (:func:`job_cpu_parts`): the driver's Python (``wm-job``: the sink's sum, the online
view's fold and commits, the listener), the JVM (Spark's driver and, in local mode, its executors), the Python workers
(``pyspark.worker``: the source partitions' read, parse and pre-aggregation) and the planners (the streaming
source's runner: offsets and partitions; the data source look-ups)."""


def _job_part(cmdline: list[str], name: str) -> str:
    text = " ".join(cmdline)
    if name == "java" or text.split(" ", 1)[0].endswith("/java"):
        return "jvm"
    if "pyspark.worker" in text and "pyspark.daemon" in text and "sql.worker" not in text:
        return "workers"
    if "pyspark" in text:
        return "planner"
    return "driver"


def job_cpu_parts(pid: int) -> dict[str, float]:
    """CPU seconds of the job's process tree by part (:data:`JOB_PARTS`), reaped children counted with their
    parent (a Python worker's forks with the worker daemon)."""
    out = dict.fromkeys(JOB_PARTS, 0.0)
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return out
    for p in procs:
        try:
            t = p.cpu_times()
            out[_job_part(p.cmdline(), p.name())] += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            pass
    return out


def sum_parts(pids: list[int]) -> dict[str, float]:
    out = dict.fromkeys(JOB_PARTS, 0.0)
    for pid in pids:
        for k, v in job_cpu_parts(pid).items():
            out[k] += v
    return out


def executor_pids() -> list[int]:
    """The executor JVMs a standalone cluster runs (``CoarseGrainedExecutorBackend``; their Python workers are
    their children); none in local mode, where the job's JVM is the executor."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        if "CoarseGrainedExecutorBackend" in " ".join(p.info["cmdline"] or ()):
            out.append(p.pid)
    return out


def tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and its descendants; one that ends while they are counted is left out (it
    made a whole sample read 0 before)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 2**20


def wait_for(predicate, timeout_s: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


def start_job(stack: Stack, client: redis.Redis) -> subprocess.Popen:
    """Redis, then the job, until its queries have all started."""
    def redis_up() -> bool:
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False

    redis_proc = stack.procs["redis"]
    wait_for(lambda: redis_up() or redis_proc.poll() is not None, 30, "the embedded Redis")
    if redis_proc.poll() is not None:  # a configuration error, a port taken: say what it said
        raise SystemExit(f"the embedded Redis exited ({redis_proc.returncode}):\n{stack.log('redis')[-2000:]}")
    job = stack.start("job")
    # Every query logs "query <name> running" once started; give the job until they stop coming.
    wait_for(lambda: "running" in stack.log("job") or job.poll() is not None, 120, "the job's first query")
    last, quiet_since = stack.log("job").count(" running"), time.monotonic()
    while time.monotonic() - quiet_since < 5:
        time.sleep(0.5)
        n = stack.log("job").count(" running")
        if n != last:
            last, quiet_since = n, time.monotonic()
    if job.poll() is not None:
        raise SystemExit("the job exited:\n" + stack.log("job")[-3000:])
    return job


def describe(root: Path) -> str:
    proc = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=root, capture_output=True, text=True)
    return proc.stdout.strip() or str(root)
