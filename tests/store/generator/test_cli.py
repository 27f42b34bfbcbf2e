"""The generator's command line: its errors, a run to a count, a stop on SIGTERM."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
import redis

from streaming.apps.generator import main
from streaming.rules.simulate import generate
from tests.paths import ROOT as REPO
from tests.store.generator import START


def test_cli_config_errors_exit_2_without_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--scenario", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown scenario 'nope'; choose one of: steady, overseas-lag, late-burst" in err
    assert "Traceback" not in err
    assert main(["--rate", "-3"]) == 2
    assert "rate must be a number >= 0" in capsys.readouterr().err
    assert main(["--start", "yesterday"]) == 2
    assert "yesterday" in capsys.readouterr().err
    assert main(["--follow", "--count", "5"]) == 2
    assert "--count and --start do not apply with --follow" in capsys.readouterr().err


def cli(redis_url: str, namespace: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "REDIS_URL": redis_url, "PIPELINE_NAMESPACE": namespace,
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "streaming.apps.generator", *args], cwd=REPO, env=env,
                            stderr=subprocess.PIPE, text=True)


def test_cli_exits_0_after_count(r: redis.Redis, redis_url: str) -> None:
    ns = f"gen{uuid.uuid4().hex[:8]}"
    proc = cli(redis_url, ns, "--scenario", "overseas-lag", "--seed", "5", "--rate", "0", "--count", "2500",
               "--start", "2026-01-01T00:00:00Z")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert r.xlen(f"{ns}:events") == 2500
    expected = [e.payload() for _, e in generate("overseas-lag", seed=5, start_us=START, rate=0, count=2500)]
    assert [f[b"e"] for _, f in r.xrange(f"{ns}:events")] == expected
    assert re.search(r"done written=2500 .*A=\d+ B=\d+ C=\d+", err)


def test_cli_stops_cleanly_on_sigterm(r: redis.Redis, redis_url: str) -> None:
    ns = f"gen{uuid.uuid4().hex[:8]}"
    proc = cli(redis_url, ns, "--rate", "2000", "--log-every", "0.1", "--seed", "1")
    assert proc.stderr is not None
    lines: Iterator[str] = iter(proc.stderr.readline, "")
    try:
        assert any(" progress written=" in line for line in lines)  # blocks until it has written
        proc.terminate()
        rest = "".join(lines)
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
    done = re.search(r"done written=(\d+)", rest)
    assert "SIGTERM" in rest and done and "Traceback" not in rest, rest
    assert r.xlen(f"{ns}:events") == int(done.group(1)) > 0
