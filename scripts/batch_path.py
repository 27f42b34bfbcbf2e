"""A batch's way through the code: where its rows go, in order, from one real batch.

    .venv/bin/python scripts/batch_path.py [--batch 2] [--records] [--json]

Runs the repository's hand-made event set through ``wm-replay`` (the live job's source, query and sink, with the
online view, the two default lab lanes and the flood guard at one new name a minute, so that it refuses some) and
follows one batch: its partitions read again in this process as a Python worker reads them, then the sink's call
with its ``df``. Every call into a ``streaming`` module that is handed the batch's rows (the entries XRANGE read, the
DataFrame, an Arrow table, record batch or column) is a *stop*; consecutive stops in one module are one. Then:

- *places*: the modules the rows stop in;
- *climbs*: stops in a higher layer than the stop before (the floors of ``.importlinter``: apps, client, spark,
  store, alerting, rules, schema); the partitions' last stop to the sink's first is one, from a worker to the driver;
- *returns*: stops in a module the rows had already left.

Once :func:`streaming.spark.local_agg.read` has read the rows, the batch is records; ``--records`` follows those too
(each follower judges the batch under its own watermark and commits it, so the records come back to the same
modules once a follower). A straight way goes down the layers and comes back to a module it left at most about
twice (issue 45, item 4).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

ROOT = Path(__file__).resolve().parents[1]
FLOORS = ("apps", "client", "spark", "store", "alerting", "rules", "schema", "runtime")
RECORDS = ("BatchTable", "BatchSummary", "OnlineEvents", "OnlineBatch")
ROWS = ("DataFrame", "Table", "RecordBatch", "ChunkedArray", "StructArray", "StringArray", "LargeStringArray",
        "Int64Array", "Int32Array", "TimestampArray")


def rows(obj: object, records: bool = False) -> bool:
    """Whether ``obj`` holds the batch's rows: the entries XRANGE read, a Spark DataFrame, or Arrow's table,
    record batch or a column of them; with ``records``, also the records read from them (:data:`RECORDS`)."""
    if type(obj).__name__ in (ROWS + RECORDS if records else ROWS):
        return True
    return isinstance(obj, list) and bool(obj) and isinstance(obj[0], (tuple, list)) and isinstance(obj[0][0], bytes)


def floor(module: str) -> int:
    """The module's floor, 0 the highest (``.importlinter``'s order)."""
    parts = module.split(".")
    return FLOORS.index(parts[1]) if len(parts) > 1 and parts[1] in FLOORS else len(FLOORS)


@dataclass
class Trail:
    """The stops of one batch's rows, gathered by a profile function on one thread."""

    records: bool = False
    stops: list[tuple[str, str]] = field(default_factory=list)

    def profile(self, frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            module = frame.f_globals.get("__name__", "")
            if not module.startswith("streaming."):
                return
            code = frame.f_code
            n = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)
            values = [frame.f_locals.get(name) for name in code.co_varnames[:n]]
            values += [v for x in values if isinstance(x, (tuple, dict)) for v in
                       (x.values() if isinstance(x, dict) else x)]
            if any(rows(v, self.records) for v in values):
                self.stops.append((module, code.co_qualname))


def summarise(stops: list[tuple[str, str]]) -> dict:
    """Stops merged by module, and the path's places, climbs and returns."""
    merged: list[dict] = []
    for module, name in stops:
        if merged and merged[-1]["module"] == module:
            if name not in merged[-1]["functions"]:
                merged[-1]["functions"].append(name)
        else:
            merged.append({"module": module, "functions": [name]})
    seen: set[str] = set()
    climbs = returns = 0
    for i, stop in enumerate(merged):
        stop["climb"] = i > 0 and floor(stop["module"]) < floor(merged[i - 1]["module"])
        stop["return"] = stop["module"] in seen
        climbs += stop["climb"]
        returns += stop["return"]
        seen.add(stop["module"])
    return {"stops": len(merged), "places": len(seen), "climbs": climbs, "returns": returns, "path": merged}


def trace(batch: int, records: bool = False) -> dict:
    """Replay the hand-made case and follow batch ``batch`` from its partitions' read through the sink (Redis:
    ``REDIS_URL``, or an embedded one; a SparkSession already running is used)."""
    from streaming.apps import replay
    from streaming.spark.checkpoint import batch_range
    from streaming.spark.sink import RedisSink
    from streaming.spark.source import SourceOptions, ranges, read_partition

    trails: dict[str, Trail] = {}
    call = RedisSink.__call__

    def traced(self: RedisSink, df: DataFrame, batch_id: int) -> None:
        # The live job's flood guard, here at one new name a minute: it refuses some of the case's servers.
        self.params = replace(self.params, new_servers_per_minute=1)
        if batch_id != batch:
            return call(self, df, batch_id)
        trails["sink"] = follow(lambda: call(self, df, batch_id), records)
        # The same batch's partitions read again in this process, as a Python worker reads them (after the sink:
        # what they add to the windows' players is then already there, and the batch's numbers stay as they were).
        _, start_id, end_id = batch_range(self.checkpoint_dir, batch_id, df.sparkSession)
        opts = SourceOptions(self.source_options)
        trails["source"] = follow(lambda: [list(read_partition(opts, part))
                                           for part in ranges(start_id, end_id, opts.shards, batch_end=end_id)])
        return None

    lanes = os.environ.get("LAB_LANES")
    os.environ["LAB_LANES"] = "per-server-min,per-server-min-idle"
    RedisSink.__call__ = traced  # type: ignore[method-assign]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "doc.json"
            code = replay.main([str(ROOT / "tests" / "data" / "handmade.jsonl"), "--window", "1m", "--slide", "30s",
                                "--delay", "20s", "--online-timeout", "30s", "--out", str(out)])
    finally:
        RedisSink.__call__ = call  # type: ignore[method-assign]
        if lanes is None:
            os.environ.pop("LAB_LANES")
        else:
            os.environ["LAB_LANES"] = lanes
    if code != 0 or "source" not in trails:
        raise SystemExit(f"the replay did not run batch {batch} (exit {code})")
    return summarise(trails["source"].stops + trails["sink"].stops)


def follow(run: Callable[[], object], records: bool = False) -> Trail:
    """The stops of ``run()``'s rows on this thread."""
    trail = Trail(records)
    sys.setprofile(trail.profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return trail


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=2, help="the micro-batch to follow (default 2)")
    parser.add_argument("--records", action="store_true",
                        help="follow the records read from the rows too (each follower judges and commits its own)")
    parser.add_argument("--json", action="store_true", help="print the whole path as JSON")
    args = parser.parse_args()
    found = trace(args.batch, args.records)
    if args.json:
        print(json.dumps(found, indent=1))
        return 0
    for stop in found["path"]:
        mark = " (climb)" * stop["climb"] + " (return)" * stop["return"]
        print(f"{stop['module']}: {', '.join(stop['functions'])}{mark}")
    print(f"{found['stops']} stops in {found['places']} places, {found['climbs']} climbs, "
          f"{found['returns']} returns to a place already left")
    return 0


if __name__ == "__main__":
    sys.exit(main())
