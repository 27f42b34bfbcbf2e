"""The Node.js producer written from docs/wire-format.md
(clients/node), against a real redis-server through production's producer user: each event it writes is the one
the pipeline's own parser reads, on its fast path; none is doubled or lost when replies are lost on purpose, when
Redis is full or when the stream is at its bound. Its stand is ``node_stand``; the page's own numbers are
``test_wire_format_page``'s."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
import redis

from streaming.schema.config import Config
from tests.client.node_stand import (
    KEYS,
    NODE_DIR,
    NS,
    ROOT,
    T0_MS,
    LossyProxy,
    Stand,
    assert_exactly,
    entries,
    events,
    fast,
    finished,
    iso,
    run_send,
    wait_until,
)
from tests.client.test_wire_format_page import SPEC, between, code_points
from watermark_client import encode_event
from watermark_client.batch_channel import MARKER_TTL_S
from watermark_client.encode import FIELDS
from watermark_client.events import KINDS, NAME_LIMITS, Event, parse_entry, parse_payload
from watermark_client.stream import input_shard_key, producer_marker_key, shard_of


def test_node_writes_the_exact_events_on_the_fast_path_with_the_producers_rights(node: str, stand: Stand) -> None:
    names = [{"server": "サーバー-1", "player_id": "joueur-é", "event_time": iso(T0_MS)},
             {"server": "🎮" * NAME_LIMITS["server"], "player_id": "p 1", "event_time": iso(T0_MS), "kind": "logout"}]
    sent = events(1_500) + names
    stats = finished(run_send(node, stand.url, sent, BATCH_SIZE="200"))
    got = entries(stand.admin)
    assert_exactly(sent, got)
    assert fast([f[b"e"] for _, f in got]) == [all(str(v).isascii() for v in e.values()) for e in sent]
    assert stats["written"] == len(sent) and stats["resent"] == stats["recovered"] == 0
    (marker,) = list(stand.admin.scan_iter(f"{NS}:producer:*"))
    assert stand.admin.get(marker) == str(stats["batches"]).encode() and 0 < stand.admin.ttl(marker) <= MARKER_TTL_S
    if stand.url != stand.server.url:  # production's producer user: it may write the stream and nothing else
        with pytest.raises(redis.exceptions.NoPermissionError):
            redis.Redis.from_url(stand.url).xrange(KEYS.events)


def test_a_lost_reply_is_neither_written_twice_nor_lost(node: str, stand: Stand) -> None:
    """Batches of 100: the 3rd EXEC's reply is lost (the marker says 3: not sent again), the 6th EXEC never reaches
    Redis (the marker says 5: sent again), and the reply of that resend, the 7th EXEC, is lost too (the marker says
    6: done). 2,000 events, each once, in order."""
    proxy = LossyProxy((stand.server.bind, stand.server.port), {3: "reply", 6: "request", 7: "reply"})
    url = stand.url.replace(f":{stand.server.port}/", f":{proxy.port}/")
    sent = events(2_000)
    try:
        stats = finished(run_send(node, url, sent, BATCH_SIZE="100"))
    finally:
        proxy.close()
    assert proxy.cut == [(3, "reply"), (6, "request"), (7, "reply")]
    assert_exactly(sent, entries(stand.admin))
    assert (stats["recovered"], stats["resent"], stats["written"]) == (2, 1, 2_000)
    (marker,) = list(stand.admin.scan_iter(f"{NS}:producer:*"))
    assert stand.admin.get(marker) == str(stats["batches"]).encode()


def test_a_full_redis_holds_the_batch_and_sends_it_once_there_is_room(node: str, stand: Stand) -> None:
    stand.admin.config_set("maxmemory", "1")  # every write refused: OOM command not allowed when used memory
    sent = events(300)
    proc = run_send(node, stand.url, sent, BATCH_SIZE="100")
    wait_until(lambda: "errorstat_OOM" in stand.admin.info("errorstats"), what="Redis to refuse a batch")
    assert stand.admin.xlen(KEYS.events) == 0
    stand.admin.config_set("maxmemory", "0")
    stats = finished(proc)
    assert stats["refusedFull"] >= 1 and stats["written"] == 300
    assert_exactly(sent, entries(stand.admin))


def test_a_stream_at_its_bound_holds_the_producer_until_the_readers_catch_up(node: str, stand: Stand) -> None:
    old = events(5, start=10_000)
    for e in old:
        stand.admin.xadd(KEYS.events, {"e": encode_event(e)})
    sent = events(300)
    proc = run_send(node, stand.url, sent, BATCH_SIZE="100", STREAM_MAX_ENTRIES="5")
    wait_until(lambda: stand.admin.info("commandstats").get("cmdstat_xlen", {}).get("calls", 0) >= 2,
               what="the producer to look at the stream's length again")
    assert stand.admin.xlen(KEYS.events) == 5 and proc.poll() is None  # held: nothing written past the bound
    stand.admin.xtrim(KEYS.events, maxlen=0)  # the readers caught up and the job trimmed
    stats = finished(proc)
    assert stats["heldBack"] >= 1 and stats["written"] == 300
    assert_exactly(sent, entries(stand.admin))


def test_a_batch_redis_refuses_stops_the_producer_saying_why(node: str, stand: Stand) -> None:
    """An XADD that fails as EXEC runs it (the key is not a stream): the rest of the transaction ran, marker included,
    and sending again would not help: the producer stops with Redis' reason."""
    stand.admin.set(KEYS.events, "not a stream")
    proc = run_send(node, stand.url, events(10), STREAM_MAX_ENTRIES="0")  # (no bound: XLEN would fail first)
    assert proc.wait(timeout=60) == 1
    assert proc.stderr is not None and "WRONGTYPE" in proc.stderr.read()
    (marker,) = list(stand.admin.scan_iter(f"{NS}:producer:*"))
    assert stand.admin.get(marker) == b"1"


def test_node_checks_each_name_as_the_parser_does_and_routes_as_the_pipeline(node: str) -> None:
    """The same events through Node's ``encodeEvent`` and the pipeline's parser: accepted or refused alike (every
    forbidden character, every space, each limit in characters, lone surrogates, reserved servers); and Node's
    shards, keys and constants are Python's."""
    probes = {*code_points(between("invisible")), *code_points(between("spaces"))}
    probes |= {cp + d for cp in probes for d in (-1, 1) if 0 <= cp + d < 0x110000} - set(range(0xD800, 0xE000))
    values = [f"a{chr(cp)}a" for cp in sorted(probes)] + [f"{chr(cp)}a" for cp in sorted(probes)]
    values += ["*", "region|eu", "region", "\ud800", "ok\udc00", "p 1", "サーバー", "42"]
    values += [c * n for c in ("x", "é", "🎮") for limit in (64, 128) for n in (limit, limit + 1)]
    base = {"event_id": "e1", "server": "A", "player_id": "p", "kind": "login", "event_time": "2026-11-22T10:00:01Z"}
    cases = [{**base, field: v} for field in NAME_LIMITS for v in values]
    cases += [{**base, "player_id": 7}, {**base, "kind": "idle"}, {**base, "player_id": True},
              {**base, "event_time": "2026-02-30T00:00:00Z"}, {**base, "event_time": "2026-11-22T10:00:01.1234567Z"}]
    shards = [(s, n) for s in ("A", "eu-1", "サーバー", "🎮", "") for n in (1, 2, 4, 16, 17)]
    keys = [(k, i) for k in ("wm:events", "{wm}:events", "{wm}.lab:events", "x.y:events") for i in (0, 1, 5)]
    script = """
const p = require('./producer');
const input = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const verdict = e => { try { p.encodeEvent(e); return true; } catch (err) { return false; } };
console.log(JSON.stringify({
  accepted: input.cases.map(verdict),
  shards: input.shards.map(([s, n]) => p.shardOf(s, n)),
  keys: input.keys.map(([k, i]) => p.inputShardKey(k, i)),
  markers: input.keys.map(([k, i]) => p.markerKey(p.inputShardKey(k, i), 'id')),
  constants: [p.FIELDS, p.KINDS, p.NAME_LIMITS, p.MARKER_TTL_S, p.MAX_STREAM_ENTRIES],
}));
"""
    stdin = json.dumps({"cases": cases, "shards": shards, "keys": keys})  # (ASCII: lone surrogates as \\u escapes)
    done = subprocess.run([node, "-e", script], cwd=NODE_DIR, input=stdin, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    parser = [isinstance(parse_payload(json.dumps(c).encode(), "1-0"), Event) for c in cases]
    stricter = [i for i, c in enumerate(cases) if c.get("kind") == "idle" or len(c["event_time"]) > 27]
    differ = [(cases[i], out["accepted"][i]) for i in range(len(cases)) if out["accepted"][i] != parser[i]]
    assert [cases.index(c) for c, _ in differ] == stricter  # Node refuses idle markers and 7 fraction digits
    assert 100 < sum(parser) < len(cases) - 100  # both verdicts, many times
    assert out["shards"] == [shard_of(s, n) for s, n in shards]
    assert out["keys"] == [input_shard_key(k, i) for k, i in keys]
    assert out["markers"] == [producer_marker_key(input_shard_key(k, i), "id") for k, i in keys]
    assert out["constants"] == [list(FIELDS), list(KINDS), NAME_LIMITS, MARKER_TTL_S, Config.stream_max_entries]


def test_the_page_s_node_example_runs_as_written(node: str, stand: Stand) -> None:
    (code,) = re.findall(r"^```js\n(.*?)^```", SPEC.read_text(), re.S | re.M)
    done = subprocess.run([node, "-e", code], cwd=NODE_DIR, capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "REDIS_URL": stand.url})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2"
    got = [parse_entry(f, i) for i, f in entries(stand.admin)]
    assert [(e.event_id, e.kind, e.region) for e in got if isinstance(e, Event)] == [
        ("A-1", "login", None), (got[1].event_id, "heartbeat", "eu-west")]


def test_the_node_client_s_lock_file_pins_its_dependency() -> None:
    package = json.loads((NODE_DIR / "package.json").read_text())
    lock = json.loads((NODE_DIR / "package-lock.json").read_text())
    (version,) = package["dependencies"].values()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), "pin the exact version"
    assert lock["packages"]["node_modules/redis"]["version"] == version
    assert "clients/node/node_modules/" in (ROOT / ".gitignore").read_text().splitlines()
    assert package["engines"]["node"] == ">= 18.19"
