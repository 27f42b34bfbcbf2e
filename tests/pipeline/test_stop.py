"""A requested stop is quiet and quick, and loses nothing: the real commands, the real signals.

Ctrl-C in a terminal sends SIGINT to the foreground process group; honcho (``./run.sh``) then sends SIGTERM to
each process's group. Each must end within honcho's grace period (5 s, after which it SIGKILLs), print no
traceback, and leave its data where the next start finds it.
"""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import psutil
import pytest
import redis

from tests.procs import ROOT, Proc
from watermark.schema.keys import KeySchema
from watermark.store.redis_server import free_port

STOP_LIMIT_S = 10  # the bound for the whole stack
MAX_LINES = 20


def _embedded_redis(tmp_path: Path, port: int, name: str) -> Proc:
    env = {"REDIS_PORT": str(port), "REDIS_DATA_DIR": str(tmp_path / "redis"), "REDIS_URL": ""}
    proc = Proc.python(name, ["watermark.store.redis_server"], env, tmp_path)
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
        os.killpg(proc.popen.pid, sig)  # what honcho (SIGTERM) or a terminal (SIGINT) does to its group
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
    assert code in (0, 130), text  # honcho's exit after a Ctrl-C is 128 + SIGINT, as a shell's
    assert len(out) <= MAX_LINES, text
    assert "WARN" not in text and "stopped (rc=0)" in text, text
    assert "Traceback" not in text and "Exception" not in text and "SIGKILL" not in text, text
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
