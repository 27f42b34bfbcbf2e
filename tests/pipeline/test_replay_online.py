"""``wm-replay ... --online-timeout T``: the document's ``online`` list, one item per batch,
against an independent model of the online rule (tests/oracle.py ``online_oracle``) on cases made for it:
equal event times for one player, a logout and a return, a silence longer than the timeout, a late burst
from one server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from streaming.apps.replay import main
from tests.oracle import T0_MS, online_oracle, to_iso
from tests.paths import ROOT

pytestmark = pytest.mark.spark
DELAY, TIMEOUT = 5_000, 10_000

# (server, player, ms after T0, kind) per batch, in arrival order
CASE = [
    [("A", "p1", 0, "login"), ("A", "p2", 1_000, "login"), ("B", "p3", 2_000, "login")],
    # equal event times for one player: the heartbeat arrives before the logout, so p1 is offline
    [("A", "p1", 5_000, "heartbeat"), ("A", "p1", 5_000, "logout"), ("B", "p3", 6_000, "heartbeat")],
    # p1 returns after the logout
    [("A", "p1", 9_000, "login")],
    # the watermark moves to 15 s: p2, silent since 1 s, times out (1 + 10 s <= 15 s)
    [("B", "p3", 14_000, None), ("B", "p10", 20_000, "login")],
    # C's first events, far behind A and B (at or below their watermark, 15 s): C's own clock judges them
    [("C", "p4", 2_000, "login"), ("C", "p5", 3_000, "login"), ("C", "p6", 15_000, "heartbeat"),
     ("A", "p7", 30_000, "login")],
    # equal times the other way round: the logout first, then the login, so p9 is online
    [("C", "p4", 26_000, "heartbeat"), ("B", "p9", 27_000, "logout"), ("B", "p9", 27_000, "login"),
     ("A", "p8", 27_000, "login"), ("A", "p8", 27_000, "logout")],
]


def expected(batches: list[list[tuple]]) -> list[dict]:
    """The oracle's online sets after each batch as the document's items; the watermark its expiries used is
    the one after the batch: the largest event time so far minus the delay."""
    arrivals, arrival, newest = [], 0, 0
    for b in batches:  # wm-replay's arrival clock: the newest event time so far, 1 ms after the last at least
        newest = max([newest, *(T0_MS + ms for _, _, ms, _ in b)])
        arrival = max(arrival + 1, newest)
        arrivals.append(arrival)
    sets = online_oracle([[(s, p, T0_MS + ms, k, a) for s, p, ms, k in b] for b, a in zip(batches, arrivals,
                                                                                           strict=True)],
                         DELAY, TIMEOUT)
    out, top = [], None
    for label, (batch, online) in enumerate(zip(batches, sets, strict=True)):
        top = max([top or 0, *(T0_MS + ms for _, _, ms, _ in batch)])
        out.append({"batch": label, "watermark_ms": max(0, top - DELAY),
                    "online": {s: len(ps) for s, ps in sorted(online.items())}})
    return out


def replay_main(args: list[str], redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``wm-replay`` with these arguments, in this process on the tests' SparkSession (its command line in a
    process of its own: tests/pipeline/test_pipeline.py::test_replay_command_line)."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    assert main(args) == 0


def test_replay_reports_who_is_online_after_each_batch(spark: SparkSession, redis_url: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "events.jsonl"
    with path.open("w") as fh:
        for label, batch in enumerate(CASE):
            for s, p, ms, k in batch:
                fh.write(json.dumps({"server": s, "player_id": p, "event_time": to_iso(T0_MS + ms), "batch": label,
                                     **({"kind": k} if k else {})}) + "\n")
    out = tmp_path / "out.json"
    replay_main([str(path), "--window", "1m", "--delay", "5s", "--online-timeout", "10s", "--out", str(out)], redis_url,
                monkeypatch)
    got = json.loads(out.read_text())["online"]
    assert got == expected(CASE)
    # what the cases are there for, so a weak model cannot hide a wrong rule
    by_batch = {item["batch"]: item["online"] for item in got}
    assert by_batch[1] == {"A": 1, "B": 1}  # p1 offline by arrival order at equal times, p2 on
    assert by_batch[2] == {"A": 2, "B": 1}  # p1 back
    assert by_batch[3] == {"A": 1, "B": 2}  # p2 timed out
    # C, first heard with events 15-28 s behind the others, is judged by its own clock: its three players are
    # online (under one global watermark they were late); A's p1 expired, p7 and B's p10 on
    assert by_batch[4] == {"A": 1, "B": 1, "C": 3}
    assert by_batch[5] == {"A": 1, "B": 2, "C": 3}  # p9 on, p8 off; p4's heartbeat 11 s ahead of C's clock counts


def test_replay_refuses_a_bad_timeout(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"server": "A", "player_id": "p", "event_time": "2026-01-01T00:00:00Z", "batch": 0}\n')
    proc = subprocess.run([sys.executable, "-m", "streaming.apps.replay", str(path), "--window", "1m", "--delay", "5s",
                           "--online-timeout", "0s"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and "--online-timeout must be positive" in proc.stderr


def test_a_replay_takes_arrival_times_from_the_file_as_the_live_job_does(spark: SparkSession, redis_url: str,
                                                                        tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """One event 90 s ahead of its arrival (A's p1: its own clock runs fast). With the file's ``arrival`` times the
    replay judges A's clock as the live job does: one player's jump does not move it, and p2 stays online. Without
    them a batch arrives at the newest event time so far (docs/ingest.md), so the 90 s pass for every server."""
    lines = [(0, "p1", 0, "login", 0), (0, "p2", 0, "login", 0), (0, "p3", 0, "login", 0),
             (1, "p1", 90_000, "heartbeat", 5_000), (1, "p2", 5_000, "heartbeat", 5_000),
             (2, "p2", 10_000, "heartbeat", 10_000), (2, "p3", 10_000, "heartbeat", 10_000)]

    def run(with_arrival: bool) -> dict:
        path = tmp_path / f"events-{with_arrival}.jsonl"
        with path.open("w") as fh:
            for label, p, ms, k, arrival in lines:
                doc = {"server": "A", "player_id": p, "event_time": to_iso(T0_MS + ms), "kind": k, "batch": label}
                if with_arrival:  # half as ISO times, half as a recorded stream's entry IDs
                    doc["arrival"] = to_iso(T0_MS + arrival) if p == "p2" else f"{T0_MS + arrival}-0"
                fh.write(json.dumps(doc) + "\n")
        out = tmp_path / f"out-{with_arrival}.json"
        replay_main([str(path), "--window", "1m", "--delay", "5s", "--online-timeout", "30s", "--out", str(out)],
                    redis_url, monkeypatch)
        return {item["batch"]: item["online"] for item in json.loads(out.read_text())["online"]}

    assert run(True)[2] == {"A": 3}  # p1's fast clock judged as one player's; p2 and p3 on by A's own clock
    assert run(False)[2] == {"A": 1}  # arrival taken from event time: 90 s passed, p2 and p3 timed out


def test_an_arrival_that_is_neither_a_time_nor_an_entry_id_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"server": "A", "player_id": "p", "event_time": "2026-01-01T00:00:00Z", "batch": 0, '
                    '"arrival": "soon"}\n')
    proc = subprocess.run([sys.executable, "-m", "streaming.apps.replay", str(path), "--window", "1m", "--delay", "5s"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and "'arrival' must be an ISO-8601 time or a stream entry ID" in proc.stderr


def test_a_batchs_rows_go_down_the_layers_once(spark: SparkSession, redis_url: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 45, item 4: a real batch's rows (the flood guard refusing a name, two lanes, the online view), from its
    partitions' read to the records the followers share, come back to a module they left only where the packing
    module unpacks what it packed, the sum goes on after it, and the followers read the online view's events
    (scripts/batch_path.py; docs/architecture.md, "A batch's way through the code")."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("batch_path", ROOT / "scripts" / "batch_path.py")
    assert spec is not None and spec.loader is not None
    batch_path = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "batch_path", batch_path)  # its dataclasses look their module up
    spec.loader.exec_module(batch_path)
    monkeypatch.setenv("REDIS_URL", redis_url)
    found = batch_path.trace(2)
    modules = [stop["module"] for stop in found["path"]]
    assert modules[-1] == "streaming.spark.local_agg", modules  # the last place that sees rows
    # the packing module unpacks what it packed; the sum goes on after it; the online view's events come from the
    # aggregate on the followers' path
    assert [stop["module"] for stop in found["path"] if stop["return"]] == [
        "streaming.store.batch.arrow_pack", "streaming.spark.local_agg", "streaming.spark.local_agg"], modules
    # from a worker's partition to the driver; back up from the packing module's floor (the store's) and from the
    # judgement's (the rules')
    assert found["climbs"] == 3, modules
    assert any("refuse" in f for stop in found["path"] for f in stop["functions"]), "the guard refused nothing"
