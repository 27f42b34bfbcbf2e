"""Annotations: ``wm-annotate`` and ``POST /annotations`` on the monitor's real HTTP server (beside ``/metrics``)
write them to a real Redis, a range reads back those that overlap it, a bad one is refused with why, and the
store keeps them bounded. A ``POST`` needs the configured token, and beyond loopback one must be configured: a
real ``wm-monitor`` bound to 0.0.0.0 and a real ``wm-annotate`` show both, and ``/metrics`` staying open."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from streaming.alerting.config import AlertConfig
from streaming.apps import annotate
from streaming.apps.monitor import Monitor, serve_metrics
from streaming.apps.redis_server import free_port
from streaming.schema.config import ConfigError, annotations_token, is_loopback
from streaming.schema.keys import KeySchema
from streaming.schema.records import Annotation
from streaming.store import annotation_store
from streaming.store.annotation_store import add_annotation, read_annotations
from tests.procs import ROOT, Proc

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
HOUR = 3_600_000


def note(text: str, start: int, end: int | None = None, region: str | None = None) -> Annotation:
    return Annotation(id=text, text=text, kind="deploy", start_ms=start, end_ms=end, region=region, created_ms=start)


def test_a_range_reads_the_annotations_that_overlap_it(r: redis.Redis) -> None:
    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    for a in (note("before", T0 - 2 * HOUR), note("long maintenance", T0 - 2 * HOUR, T0 + HOUR),
              note("patch 1.4.2", T0 + 30 * 60_000, region="eu"), note("after", T0 + 3 * HOUR)):
        add_annotation(r, keys, a, 8, T0)
    got = read_annotations(r, keys, T0, T0 + 2 * HOUR)
    assert [(a.text, a.region) for a in got] == [("long maintenance", None), ("patch 1.4.2", "eu")]


def test_the_time_charts_read_the_annotations_and_the_alerts_of_their_range(r: redis.Redis) -> None:
    from streaming.alerting.lifecycle import Decision, Notice
    from streaming.store.alert_store import apply_decision
    from streaming.store.annotation_store import read_happenings

    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    add_annotation(r, keys, note("patch 1.4.2", T0 + HOUR), 8, T0)
    fired = [Notice(status="firing", rule="server_silent", subject=s, starts_at_ms=at, at_ms=at)
             for s, at in (("old", T0 - 3 * HOUR), ("eu-001", T0 + 2 * HOUR))]
    apply_decision(r, keys, Decision(states={}, removed=(), notices=tuple(fired)), T0 + 2 * HOUR, outbox=False)
    h = read_happenings(r, keys, T0, T0 + 3 * HOUR)
    assert [a.text for a in h.annotations] == ["patch 1.4.2"]
    assert [n.subject for n in h.notices] == ["eu-001"]  # the one before the range is left out


def test_old_annotations_leave_and_at_most_a_bound_are_kept(r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    add_annotation(r, keys, note("ten days ago", T0 - 10 * 86_400_000), 8, T0)
    add_annotation(r, keys, note("a week ago", T0 - 7 * 86_400_000), 8, T0)
    assert [a.text for a in read_annotations(r, keys, 0, T0)] == ["a week ago"]
    monkeypatch.setattr(annotation_store, "ANNOTATIONS_KEEP", 3)
    for i in range(5):
        add_annotation(r, keys, note(f"n{i}", T0 + i), 8, T0)
    assert [a.text for a in read_annotations(r, keys, 0, T0 + 10)] == ["n2", "n3", "n4"]


def test_the_command_adds_one_and_lists_them(redis_url: str, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    ns = f"t-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", ns)
    assert annotate.main(["patch 1.4.2", "--kind", "deploy", "--region", "eu", "--for", "30m"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert (made["text"], made["kind"], made["region"], made["end_ms"] - made["start_ms"]) == \
        ("patch 1.4.2", "deploy", "eu", 30 * 60_000)
    assert annotate.main(["--list", "--since", "1h"]) == 0
    assert [a["text"] for a in json.loads(capsys.readouterr().out)] == ["patch 1.4.2"]
    assert annotate.main(["oops", "--at", "yesterday"]) == 2
    assert "start must be an ISO-8601 time" in capsys.readouterr().err


def call(url: str, body: object | None = None) -> tuple[int, object]:
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_monitors_port_takes_annotations_over_http_beside_metrics(redis_url: str) -> None:
    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    client = redis.Redis.from_url(redis_url)
    monitor = Monitor(client=client, keys=keys, cfg=AlertConfig(), started_ms=T0)
    port = free_port()
    assert not isinstance(serve_metrics("127.0.0.1", port, redis_url, keys, monitor, 8), str)
    base = f"http://127.0.0.1:{port}"
    start = (int(time.time()) // 3600 - 2) * HOUR  # within the days kept
    iso = datetime.fromtimestamp(start / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status, made = call(f"{base}/annotations", {"text": "incident: login queue", "kind": "incident",
                                                 "start": iso, "end": start + 30 * 60_000})
    assert status == 201 and isinstance(made, dict)
    assert (made["start_ms"], made["end_ms"], made["region"]) == (start, start + 30 * 60_000, None)
    stored = read_annotations(client, keys, start, start + 1)
    assert [(a.text, a.kind) for a in stored] == [("incident: login queue", "incident")]
    status, error = call(f"{base}/annotations", {"text": "x", "kind": "party"})
    assert status == 400 and "kind 'party' must be one of" in str(error)
    status, listed = call(f"{base}/annotations?since=1d")
    assert status == 200 and [a["text"] for a in listed] == ["incident: login queue"]  # type: ignore[union-attr]
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as resp:  # /metrics is still there
        assert b"# HELP" in resp.read()


TOKEN = "s3cret-token-of-thirty-two-chars-or-more"
NO_TOKEN = {"ANNOTATIONS_TOKEN": "", "ANNOTATIONS_TOKEN_FILE": ""}
"""Empty is unset: what the test runner's environment may hold is not inherited."""


def post(url: str, body: object, authorization: str | None = None) -> tuple[int, dict[str, str], str]:
    """Status, JSON body and ``WWW-Authenticate`` of a ``POST``."""
    headers = {"Content-Type": "application/json", **({"Authorization": authorization} if authorization else {})}
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read()), resp.headers.get("WWW-Authenticate", "")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), exc.headers.get("WWW-Authenticate", "")


def metrics_open(base: str) -> bool:
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as resp:  # no Authorization header
        return resp.status == 200 and b"# HELP" in resp.read()


@contextmanager
def monitor_on_all_interfaces(redis_url: str, tmp_path: Path, env: dict[str, str],
                              ready: str) -> Iterator[tuple[str, redis.Redis, KeySchema]]:
    """A real ``wm-monitor`` bound to 0.0.0.0, reached through 127.0.0.1 once it printed ``ready``."""
    keys, port = KeySchema(f"t-{uuid.uuid4().hex[:8]}"), free_port()
    proc = Proc.python("monitor", ["streaming.apps.monitor"], {
        "REDIS_URL": redis_url, "PIPELINE_NAMESPACE": keys.namespace, "METRICS_ADDRESS": "0.0.0.0",
        "METRICS_PORT": str(port), **env}, tmp_path)
    try:
        proc.wait_for(ready, 60)
        yield f"http://127.0.0.1:{port}", redis.Redis.from_url(redis_url), keys
    finally:
        proc.stop()


def test_beyond_loopback_a_post_needs_the_token_and_metrics_stay_open(redis_url: str, tmp_path: Path) -> None:
    with monitor_on_all_interfaces(redis_url, tmp_path, {**NO_TOKEN, "ANNOTATIONS_TOKEN": TOKEN},
                                   r"POST /annotations with the token") as (base, client, keys):
        url, note = f"{base}/annotations", {"text": "patch 1.4.2", "kind": "deploy"}
        status, error, challenge = post(url, note)
        assert (status, challenge) == (401, 'Bearer realm="annotations"') and "needs the monitor's token" in \
            error["error"]
        for wrong in ("Bearer not-the-token", f"Bearer {TOKEN}x", TOKEN, f"Basic {TOKEN}"):
            status, error, challenge = post(url, note, wrong)
            assert status == 401 and challenge.startswith("Bearer"), (wrong, status, error)
        assert read_annotations(client, keys, 0, 2**53) == []  # nothing refused was stored
        status, made, _ = post(url, note, f"Bearer {TOKEN}")
        assert status == 201 and made["text"] == "patch 1.4.2"
        assert [a.text for a in read_annotations(client, keys, 0, 2**53)] == ["patch 1.4.2"]
        with urllib.request.urlopen(f"{url}?since=1h", timeout=10) as resp:  # reads stay open, as the page's
            assert [a["text"] for a in json.loads(resp.read())] == ["patch 1.4.2"]
        assert metrics_open(base)


def test_beyond_loopback_without_a_token_posts_are_refused_and_the_monitor_says_so(redis_url: str,
                                                                                  tmp_path: Path) -> None:
    with monitor_on_all_interfaces(redis_url, tmp_path, NO_TOKEN, r"WARNING POST /annotations is refused: the "
                                   r"monitor listens beyond loopback .* \(it listens on 0\.0\.0\.0\)") as \
            (base, client, keys):
        for authorization in (None, f"Bearer {TOKEN}"):  # no token is the right one
            status, error, _ = post(f"{base}/annotations", {"text": "x"}, authorization)
            assert status == 401 and "set ANNOTATIONS_TOKEN" in error["error"], (status, error)
        assert read_annotations(client, keys, 0, 2**53) == []
        assert metrics_open(base)


def wm_annotate(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The command in a process of its own: what a person sees, exit status and all."""
    return subprocess.run([sys.executable, "-m", "streaming.apps.annotate", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT), **NO_TOKEN, **env})


def test_a_configured_token_is_asked_on_loopback_too_and_the_command_sends_it(redis_url: str,
                                                                              tmp_path: Path) -> None:
    keys = KeySchema(f"t-{uuid.uuid4().hex[:8]}")
    client = redis.Redis.from_url(redis_url)
    port = free_port()
    assert not isinstance(serve_metrics("127.0.0.1", port, redis_url, keys, Monitor(client, keys, AlertConfig(), T0),
                                        8, token=TOKEN), str)
    base = f"http://127.0.0.1:{port}"
    assert post(f"{base}/annotations", {"text": "x"})[0] == 401
    secret = tmp_path / "token"
    secret.write_text(f"{TOKEN}\n")  # as a Kubernetes secret is mounted: a file, maybe with a newline
    done = wm_annotate(["patch 1.4.2", "--kind", "deploy", "--for", "30m", "--url", base],
                       {"ANNOTATIONS_TOKEN_FILE": str(secret)})
    assert done.returncode == 0 and json.loads(done.stdout)["text"] == "patch 1.4.2", done.stderr
    for env, says in (({}, "set ANNOTATIONS_TOKEN (or ANNOTATIONS_TOKEN_FILE) to the monitor's token"),
                      ({"ANNOTATIONS_TOKEN": "not-it-but-just-as-long-as-the-real-one"}, "is not the monitor's token")):
        refused = wm_annotate(["hotfix", "--url", base], env)
        assert refused.returncode == 1 and "/annotations refused it (401): " in refused.stderr, refused.stderr
        assert says in refused.stderr and "Traceback" not in refused.stderr and refused.stdout == ""
    assert [a.text for a in read_annotations(client, keys, 0, 2**53)] == ["patch 1.4.2"]
    listed = wm_annotate(["--list", "--since", "1h"], {"ANNOTATIONS_URL": base})
    assert [a["text"] for a in json.loads(listed.stdout)] == ["patch 1.4.2"], listed.stderr
    assert metrics_open(base)


@pytest.mark.parametrize(("address", "loopback"), [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("0.0.0.0", False), ("", False), ("::", False), ("10.0.0.5", False), ("monitor.example", False)])
def test_loopback_is_127_0_0_0_8_and_localhost_only(address: str, loopback: bool) -> None:
    assert is_loopback(address) is loopback


def test_the_token_comes_from_the_environment_or_a_file_and_a_bad_one_stops_the_monitor(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text(f"  {TOKEN}\n")
    assert annotations_token({}) is None and annotations_token(NO_TOKEN) is None
    assert annotations_token({"ANNOTATIONS_TOKEN": TOKEN}) == TOKEN
    assert annotations_token({"ANNOTATIONS_TOKEN_FILE": str(secret)}) == TOKEN
    (tmp_path / "empty").write_text("\n")
    for env, says in (({"ANNOTATIONS_TOKEN": TOKEN, "ANNOTATIONS_TOKEN_FILE": str(secret)}, "are both set"),
                      ({"ANNOTATIONS_TOKEN_FILE": str(tmp_path / "absent")}, "cannot be read: No such file"),
                      ({"ANNOTATIONS_TOKEN_FILE": str(tmp_path / "empty")}, "is empty"),
                      ({"ANNOTATIONS_TOKEN": "two words"}, "printable ASCII without spaces"),
                      ({"ANNOTATIONS_TOKEN": "s3cret-token"}, "is 12 characters: at least 32 are needed"),
                      ({"ANNOTATIONS_TOKEN": "x" * 31}, "is 31 characters")):
        with pytest.raises(ConfigError, match=says):
            annotations_token(env)
    bad = {**os.environ, "PYTHONPATH": str(ROOT), **NO_TOKEN, "ANNOTATIONS_TOKEN_FILE": str(tmp_path / "absent")}
    done = subprocess.run([sys.executable, "-m", "streaming.apps.monitor", "--port", "0"], cwd=ROOT, env=bad,
                          capture_output=True, text=True, timeout=60)  # never open: it does not start
    assert done.returncode == 2 and "error: ANNOTATIONS_TOKEN_FILE=" in done.stderr, done.stderr
