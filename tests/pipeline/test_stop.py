"""A requested stop is quiet and quick, and loses nothing: the real commands, the real signals.

Ctrl-C in a terminal sends SIGINT to the foreground process group; ``wm-stack`` (``./run.sh``) then sends SIGTERM
to each process's group. Each must end within its grace period (5 s, after which it SIGKILLs), print no
traceback, and leave its data where the next start finds it.

Then ``wm-stack`` killed in every way a machine kills one: SIGKILL of the stack itself (a process manager's
timeout, the OOM killer), SIGKILL of any one of its processes (``wm-redis`` and its ``redis-server`` included), a
hang-up of the terminal. Each time, every process it started must be gone and every port it held free, and the
next start on the same data must find the data; a second start on the same data, or on a port another program
holds, says so in one line.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import uuid
from pathlib import Path

import psutil
import pytest
import redis

from streaming.apps.redis_server import free_port
from streaming.schema.keys import KeySchema
from tests.procs import ROOT, Proc

STOP_LIMIT_S = 10  # the bound for the whole stack
MAX_LINES = 20


def _embedded_redis(tmp_path: Path, port: int, name: str) -> Proc:
    env = {"REDIS_PORT": str(port), "REDIS_DATA_DIR": str(tmp_path / "redis"), "REDIS_URL": ""}
    proc = Proc.python(name, ["streaming.apps.redis_server"], env, tmp_path)
    proc.wait_for(r"embedded Redis ready", timeout=60)
    return proc


def _output_after(proc: Proc, mark: int) -> list[str]:
    proc._reader.join(timeout=10)  # the whole output, up to its end
    with proc._cond:
        return [line.rstrip("\n") for line in proc._lines[mark:]]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_embedded_redis_exits_on_a_signal_with_its_data_flushed(tmp_path: Path, sig: signal.Signals) -> None:
    port = free_port()
    proc = _embedded_redis(tmp_path, port, "redis")
    try:
        client = redis.Redis(port=port)
        client.set("written-before-the-stop", "kept")
        mark = len(proc._lines)
        os.killpg(proc.popen.pid, sig)  # what wm-stack (SIGTERM) or a terminal (SIGINT) does to its group
        code = proc.popen.wait(timeout=STOP_LIMIT_S)
    finally:
        proc.stop()
    out = _output_after(proc, mark)
    assert code == 0, out
    assert out == ["embedded Redis stopped (append-only file flushed)"]

    again = _embedded_redis(tmp_path, port, "redis-again")
    try:
        assert redis.Redis(port=port).get("written-before-the-stop") == b"kept"
    finally:
        again.stop()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_with_redis_url_set_wm_redis_waits_and_a_stop_is_quiet(tmp_path: Path, redis_url: str,
                                                               sig: signal.Signals) -> None:
    """With ``REDIS_URL`` (an external Redis, a cluster) the Procfile's ``redis`` only waits; a stop ends it with
    0, not by the signal (it was ``rc=-15`` in wm-stack's log)."""
    proc = Proc.python("redis-url", ["streaming.apps.redis_server"], {"REDIS_URL": redis_url}, tmp_path)
    try:
        proc.wait_for(r"REDIS_URL is set", timeout=60)
        os.killpg(proc.popen.pid, sig)
        code = proc.popen.wait(timeout=STOP_LIMIT_S)
    finally:
        proc.stop()
    assert code == 0


def test_the_embedded_redis_takes_its_maxmemory_and_never_evicts(tmp_path: Path) -> None:
    port = free_port()
    env = {"REDIS_PORT": str(port), "REDIS_DATA_DIR": str(tmp_path / "redis"), "REDIS_URL": "",
           "REDIS_MAXMEMORY_MB": "64"}
    proc = Proc.python("redis-capped", ["streaming.apps.redis_server"], env, tmp_path)
    try:
        proc.wait_for(r"embedded Redis ready", timeout=60)
        got = redis.Redis(port=port).config_get("maxmemory*")
        assert got["maxmemory"] == str(64 * 2**20) and got["maxmemory-policy"] == "noeviction", got
    finally:
        assert proc.stop() == 0


@pytest.mark.spark
def test_ctrl_c_on_run_sh_ends_every_process_quietly(tmp_path: Path) -> None:
    ns = f"stop-{uuid.uuid4().hex[:6]}"
    redis_port = free_port()
    env = {"PORT": str(free_port()), "REDIS_PORT": str(redis_port), "REDIS_DATA_DIR": str(tmp_path / "redis"),
           "REDIS_URL": "", "CHECKPOINT_DIR": str(tmp_path / "ck"), "PIPELINE_NAMESPACE": ns,
           "METRICS_PORT": str(free_port()),
           "SPARK_MASTER": "local[2]"}
    run = Proc("run.sh", ["bash", str(ROOT / "run.sh")], env, tmp_path)
    keys = KeySchema(ns)
    try:
        run.wait_for(rf"query watermark-{ns} running", timeout=240)
        run.wait_for(r"You can now view", timeout=120)
        client = redis.Redis(port=redis_port, socket_timeout=130)
        assert client.xread({keys.commits: "0-0"}, block=120_000), "no batch committed"
        family = [c.pid for c in psutil.Process(run.popen.pid).children(recursive=True)]
        mark = len(run._lines)
        os.killpg(run.popen.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the foreground group
        code = run.popen.wait(timeout=STOP_LIMIT_S)
    finally:
        run.stop()
    out = _output_after(run, mark)
    text = "\n".join(out)
    assert code in (0, 130), text  # wm-stack's exit after a Ctrl-C is 128 + SIGINT, as a shell's
    assert len(out) <= MAX_LINES, text
    assert "WARN" not in text and "stopped (rc=0)" in text, text
    assert "Traceback" not in text and "Exception" not in text and "SIGKILL" not in text, text
    # the store last: the job stopping its queries slowly still reaches Redis (on a loaded machine it once retried
    # against a stopped one until it was killed)
    redis_asked = next(i for i, line in enumerate(out) if "sending SIGTERM to redis.1" in line)
    assert all(i < redis_asked for i, line in enumerate(out) if "stopped (rc=" in line and "redis.1" not in line), text
    # Nothing left behind, the JVM (in a session of its own) included.
    _gone, alive = psutil.wait_procs(_processes(family), timeout=STOP_LIMIT_S)
    assert not alive, [p.cmdline()[:3] for p in alive]

    again = _embedded_redis(tmp_path, redis_port, "redis-again")
    try:
        assert redis.Redis(port=redis_port).hget(keys.state, "last_batch") is not None
    finally:
        again.stop()


def _processes(pids: list[int]) -> list[psutil.Process]:
    out = []
    for pid in pids:
        try:
            out.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    return out


GONE_WITHIN_S = 15  # every process of the stack, after the stack or one of them is killed
VENV_BIN = str(Path(sys.executable).parent)
CHEAP = {"redis": "exec wm-redis", "monitor": "exec wm-monitor"}
"""The stack's lines that need no Spark: enough to prove what the stack does with its processes."""


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class Setup:
    def __init__(self, tmp_path: Path, lines: dict[str, str]) -> None:
        self.tmp = tmp_path
        self.redis_port, self.metrics_port = free_port(), free_port()
        self.ns = f"stk-{uuid.uuid4().hex[:6]}"
        self.procfile = tmp_path / "Procfile"
        self.procfile.write_text("".join(f"{k}: {v}\n" for k, v in lines.items()))
        self.env = {"PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}", "REDIS_PORT": str(self.redis_port),
                    "REDIS_DATA_DIR": str(tmp_path / "redis"), "REDIS_URL": "",
                    "CHECKPOINT_DIR": str(tmp_path / "ck" / self.ns), "PIPELINE_NAMESPACE": self.ns,
                    "METRICS_PORT": str(self.metrics_port), "SPARK_MASTER": "local[2]"}
        self.runs = 0

    def start(self, wait: bool = True) -> Proc:
        self.runs += 1
        proc = Proc(f"stack-{self.runs}", [sys.executable, "-m", "streaming.apps.stack", "-f", str(self.procfile)],
                    self.env, self.tmp)
        if wait:
            proc.wait_for(r"embedded Redis ready", timeout=60)
            if "monitor" in self.procfile.read_text():
                proc.wait_for(r"monitor: /metrics on", timeout=60)
        return proc

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.redis_port, socket_timeout=30)


def family(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


def assert_all_gone(procs: list[psutil.Process], setup: Setup) -> None:
    _gone, alive = psutil.wait_procs(procs, timeout=GONE_WITHIN_S)
    assert not alive, [" ".join(p.cmdline()[:3]) for p in alive if p.is_running()]
    for port in (setup.redis_port, setup.metrics_port):
        assert _port_free(port), f"port {port} still held"


@pytest.fixture()
def cheap(tmp_path: Path) -> Setup:
    return Setup(tmp_path, CHEAP)


def test_a_stack_killed_with_sigkill_leaves_nothing_running_and_starts_again_on_its_data(cheap: Setup) -> None:
    stack = cheap.start()
    try:
        cheap.client().config_set("appendfsync", "always")  # not the last second of AOF a crash may cost
        cheap.client().set("written-before-the-crash", "kept")
        procs = family(stack.popen.pid)
        assert any("redis-server" in " ".join(p.cmdline()) for p in procs)
        os.kill(stack.popen.pid, signal.SIGKILL)
        assert_all_gone(procs, cheap)
    finally:
        stack.stop()
    again = cheap.start()
    try:
        assert cheap.client().get("written-before-the-crash") == b"kept"
    finally:
        assert again.stop() == 0


@pytest.mark.parametrize("victim", ["wm-redis", "redis-server", "wm-monitor"])
def test_sigkill_of_any_one_process_stops_the_stack_with_nothing_left(cheap: Setup, victim: str) -> None:
    stack = cheap.start()
    try:
        procs = family(stack.popen.pid)
        (target,) = [p for p in procs if victim in " ".join(p.cmdline())]
        target.kill()
        code = stack.popen.wait(timeout=GONE_WITHIN_S)
        assert_all_gone(procs, cheap)
    finally:
        stack.stop()
    assert code != 0, stack.tail()  # a crash is not a requested stop
    assert "Traceback" not in stack.tail(200), stack.tail(200)


def test_a_hang_up_stops_every_process_quietly(cheap: Setup) -> None:
    stack = cheap.start()
    try:
        procs = family(stack.popen.pid)
        os.killpg(stack.popen.pid, signal.SIGHUP)  # a closed terminal: its foreground group, the stack
        code = stack.popen.wait(timeout=GONE_WITHIN_S)
        assert_all_gone(procs, cheap)
    finally:
        stack.stop()
    assert code == 0, stack.tail()
    out = stack.tail(200)
    assert "embedded Redis stopped (append-only file flushed)" in out, out
    assert "SIGKILL" not in out and "Traceback" not in out, out


def test_a_second_stack_on_the_same_data_says_so_in_one_line_and_leaves_the_first_alone(cheap: Setup) -> None:
    first = cheap.start()
    try:
        second = cheap.start(wait=False)
        assert second.popen.wait(timeout=30) == 1
        second._reader.join(timeout=10)
        lines = [ln for ln in second.tail().splitlines() if ln.strip()]
        assert lines == [f"error: a stack is already running on the data in {cheap.tmp / 'redis'} "
                         f"(pid {first.popen.pid}): stop it first (Ctrl-C in its terminal, or kill "
                         f"{first.popen.pid})"], lines
        assert first.running() and cheap.client().ping()
    finally:
        assert first.stop() == 0


def test_a_port_another_program_holds_is_said_before_anything_starts(cheap: Setup) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", cheap.metrics_port))
        squatter.listen()
        stack = cheap.start(wait=False)
        assert stack.popen.wait(timeout=30) == 1
        stack._reader.join(timeout=10)
    lines = [ln for ln in stack.tail().splitlines() if ln.strip()]
    assert lines == [f"error: port {cheap.metrics_port} (the monitor's /metrics) is in use by another program: "
                     "stop it, or choose another port for the stack"], lines
    assert _port_free(cheap.redis_port)  # nothing was started


@pytest.mark.spark
def test_a_stack_with_the_job_killed_with_sigkill_leaves_no_jvm_and_no_worker(tmp_path: Path) -> None:
    """Spark's JVM runs in a session of its own: it leaves when the driver does (its standard input closes), the
    driver when the stack does."""
    setup = Setup(tmp_path, {**CHEAP, "job": "LAB_LANES= exec wm-job"})
    stack = setup.start()
    try:
        stack.wait_for(rf"query watermark-{setup.ns} running", timeout=240)
        procs = family(stack.popen.pid)
        assert any("java" in " ".join(p.cmdline()[:1]) for p in procs), [p.cmdline()[:2] for p in procs]
        os.kill(stack.popen.pid, signal.SIGKILL)
        assert_all_gone(procs, setup)
    finally:
        stack.stop()
