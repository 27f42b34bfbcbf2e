"""Replay the repository's event cases at a git revision and at this checkout: the documents must be equal.

    .venv/bin/python scripts/same_replays.py --base REV

A restructuring that changes no behaviour leaves every replay document as it was. The cases: the hand-made
event set of the tests, and event sets drawn from the generator's scenarios (written once, by this checkout,
then replayed by both trees), each under tumbling and sliding windows with the online players. Each tree runs
in a process of its own with only itself on PYTHONPATH, through its own replay command.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import orjson

from streaming.rules.simulate import generate
from watermark_client.timeutil import iso_from_us

ROOT = Path(__file__).resolve().parents[1]
PARAMS = (["--window", "10m", "--delay", "5m"], ["--window", "1m", "--slide", "30s", "--delay", "20s",
                                                 "--online-timeout", "30s"])
SCENARIOS = ("late-burst", "overseas-lag", "outage-and-backfill")


def write_cases(into: Path) -> list[Path]:
    """The hand-made case and one generated set per scenario (2,000 events in batches of 200)."""
    cases = [ROOT / "tests" / "data" / "handmade.jsonl"]
    for scenario in SCENARIOS:
        path = into / f"{scenario}.jsonl"
        events = generate(scenario, seed=11, start_us=1_767_225_600_000_000, rate=200, count=2_000)
        with path.open("wb") as fh:
            for i, (_, ev) in enumerate(events):
                fh.write(orjson.dumps({"batch": i // 200, "server": ev.server, "player_id": ev.player_id,
                                       "kind": ev.kind, "event_time": iso_from_us(ev.event_time_us)}) + b"\n")
        cases.append(path)
    return cases


def export(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "archive", "--format=tar", rev], cwd=ROOT, check=True, capture_output=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def replay(tree: Path, case: Path, params: list[str], out: Path) -> dict:
    old = (tree / "watermark" / "apps" / "replay.py").exists()  # a commit before the pipeline moved (issue 64)
    module = "watermark.apps.replay" if old else "streaming.apps.replay"
    client = tree / "clients" / "python"  # the client package, its own since issue 65: this tree's, not the venv's
    path = os.pathsep.join([str(tree), *([str(client)] if client.is_dir() else [])])
    env = {**os.environ, "PYTHONPATH": path, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("REDIS_URL", None)  # each run starts an embedded Redis of its own
    proc = subprocess.run([sys.executable, "-m", module, str(case), *params, "--out", str(out)], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"{tree.name}: replay of {case.name} {' '.join(params)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="the git revision to compare this checkout with")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="same-replays-") as tmp:
        work = Path(tmp)
        base = export(args.base, work / "base")
        cases = write_cases(work)
        differ = 0
        for case in cases:
            for params in PARAMS:
                a = replay(base, case, params, work / "a.json")
                b = replay(ROOT, case, params, work / "b.json")
                same = a == b
                differ += not same
                print(f"{'same   ' if same else 'DIFFERS'} {case.name:28} {' '.join(params):58} "
                      f"{len(a.get('windows', [])):5} windows {len(a.get('batches', [])):4} batches")
        print(f"{len(cases) * len(PARAMS) - differ} of {len(cases) * len(PARAMS)} documents identical at "
              f"{args.base} and this checkout")
        return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
