"""Throughput of two versions of the pipeline, side by side in one run on one machine.

    python bench/compare.py --base <git rev> [--events 1000000] [--rounds 2]

Exports ``--base`` into a temporary directory and runs ``bench/run.py --only
throughput`` (this checkout's script) against the base code and against this
checkout's code, alternating ``base, head, base, head, ...`` so that a busy
spell on the machine hits both. Each run has its own embedded Redis, Spark
session and pre-loaded stream. Prints every run and the ratio of the medians:
the only before/after figure worth quoting on a noisy machine.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def export(rev: str, into: Path) -> Path:
    """The tree at ``rev``, as files (no worktree to clean up)."""
    archive = subprocess.run(["git", "archive", "--format=tar", rev], cwd=HERE, check=True, capture_output=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def run_once(code_root: Path, events: int, out: Path) -> dict:
    env = {**os.environ, "BENCH_CODE_ROOT": str(code_root), "PYTHONPATH": str(code_root)}
    proc = subprocess.run([sys.executable, str(HERE / "bench" / "run.py"), "--only", "throughput",
                           "--events", str(events), "--out", str(out)], cwd=code_root, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench run against {code_root} failed:\n{proc.stderr[-4000:]}")
    return json.loads(out.read_text())["throughput"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="git revision to compare this checkout against")
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        base = export(args.base, tmp / "base")
        rates: dict[str, list[float]] = {"base": [], "head": []}
        drains: list[float] = []
        for r in range(args.rounds):
            for label, root in (("base", base), ("head", HERE)):
                tp = run_once(root, args.events, tmp / f"{label}-{r}.json")
                rates[label].append(tp["pipeline_events_per_s"])
                drains.append(tp["drain_events_per_s"])
                print(f"round {r + 1} {label}: {tp['pipeline_events_per_s']:,.0f} events/s "
                      f"({tp['pipeline_s']:.1f} s); drain {tp['drain_events_per_s']:,.0f}/s; "
                      f"ratio to drain {tp['ratio']:.2f}", flush=True)
    b, h = statistics.median(rates["base"]), statistics.median(rates["head"])
    print(f"\nbase {args.base}: median {b:,.0f} events/s; head: median {h:,.0f} events/s; "
          f"head/base {h / b:.2f}x; drain median {statistics.median(drains):,.0f} events/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
