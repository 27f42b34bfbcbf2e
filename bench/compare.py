"""Throughput or freshness of two versions of the pipeline, side by side in one run on one machine.

    python bench/compare.py --base <git rev> [--events 1000000] [--rounds 2]
    python bench/compare.py --base <git rev> --measure freshness [--rate 50000] [--rounds 2]

Exports ``--base`` into a temporary directory and runs each tree's own ``bench/run.py --only
throughput`` (or ``--only freshness``: XADD -> window in Redis at one generator
rate, 1 s trigger) against its own code, alternating ``base, head, base, head, ...`` so that a busy
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


def run_once(code_root: Path, measure: str, args: list[str], out: Path) -> dict:
    """One run of the tree's own ``bench/run.py`` (the same measurement in every tree since the pipeline moved to
    ``streaming/``, whose imports it follows) with only that tree, and its client package, on the path."""
    client = code_root / "clients" / "python"
    path = os.pathsep.join([str(code_root), *([str(client)] if client.is_dir() else [])])
    env = {**os.environ, "BENCH_CODE_ROOT": str(code_root), "PYTHONPATH": path}
    proc = subprocess.run([sys.executable, str(code_root / "bench" / "run.py"), "--only", measure, *args,
                           "--out", str(out)], cwd=code_root, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench run against {code_root} failed:\n{proc.stderr[-4000:]}")
    result = json.loads(out.read_text())[measure]
    return result if measure == "throughput" else result[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="git revision to compare this checkout against")
    p.add_argument("--measure", choices=("throughput", "freshness"), default="throughput")
    p.add_argument("--events", type=int, default=1_000_000, help="throughput: events pre-loaded")
    p.add_argument("--rate", type=int, default=50_000, help="freshness: generator events/s (for 20 s)")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    extra = ["--events", str(args.events)] + ([] if args.measure == "throughput" else ["--rates", str(args.rate)])
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        base = export(args.base, tmp / "base")
        figures: dict[str, list[float]] = {"base": [], "head": []}
        drains: list[float] = []
        for r in range(args.rounds):
            for label, root in (("base", base), ("head", HERE)):
                res = run_once(root, args.measure, extra, tmp / f"{label}-{r}.json")
                if args.measure == "throughput":
                    figures[label].append(res["pipeline_events_per_s"])
                    drains.append(res["drain_events_per_s"])
                    print(f"round {r + 1} {label}: {res['pipeline_events_per_s']:,.0f} events/s "
                          f"({res['pipeline_s']:.1f} s); drain {res['drain_events_per_s']:,.0f}/s; "
                          f"ratio to drain {res['ratio']:.2f}", flush=True)
                else:
                    figures[label].append(res["p95_ms"])
                    print(f"round {r + 1} {label}: freshness at {res['rate']:,} events/s p50 {res['p50_ms']} ms, "
                          f"p95 {res['p95_ms']} ms, max {res['max_ms']} ms ({res['batches']} batches)", flush=True)
    b, h = statistics.median(figures["base"]), statistics.median(figures["head"])
    if args.measure == "throughput":
        print(f"\nbase {args.base}: median {b:,.0f} events/s; head: median {h:,.0f} events/s; "
              f"head/base {h / b:.2f}x; drain median {statistics.median(drains):,.0f} events/s")
    else:
        print(f"\nbase {args.base}: median p95 {b:,.0f} ms; head: median p95 {h:,.0f} ms; base/head {b / h:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
