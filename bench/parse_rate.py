"""The source's parse step, side by side in one run: the plain per-entry parser against the bulk Arrow path.

    python bench/parse_rate.py [--count 200000] [--repeat 3]

Both turn the same XRANGE replies (raw, as the source reads them) into the
same Arrow record batch (tests/rules/test_bad_input.py holds them to identical
rows); this measures one core.
"""

from __future__ import annotations

import argparse
import sys
import time

import pyarrow as pa  # noqa: E402

from streaming.rules.simulate import generate  # noqa: E402
from streaming.spark.rows import to_record_batch  # noqa: E402
from streaming.store.batch.arrow_pack import ARROW_SCHEMA, PARTIAL_TYPE, TS  # noqa: E402
from watermark_client.events import BadEntry, parse_entry


def baseline(entries: list[list]) -> pa.RecordBatch:
    """The source without a bulk path: parse_entry for every entry."""
    cols: dict[str, list] = {name: [] for name in ARROW_SCHEMA.names}
    for rid, flat in entries:
        eid = rid.decode()
        parsed = parse_entry(dict(zip(flat[::2], flat[1::2], strict=True)), eid)
        bad = isinstance(parsed, BadEntry)
        cols["entry_id"].append(eid)
        cols["ingest_time"].append(int(eid.split("-", 1)[0]) * 1000)
        for name, attr in (("event_id", "event_id"), ("server", "server"), ("player_id", "player_id"),
                           ("kind", "kind"), ("event_time", "event_time_us")):
            cols[name].append(None if bad else getattr(parsed, attr))
        for name, attr in (("error", "reason"), ("error_detail", "detail"), ("raw", "raw")):
            cols[name].append(getattr(parsed, attr) if bad else None)
    cols["partial"] = [None] * len(entries)  # only partitions read with preAggregate end with partial rows
    types = {"ingest_time": TS, "event_time": TS, "partial": PARTIAL_TYPE}
    return pa.RecordBatch.from_arrays([pa.array(cols[n], types.get(n, pa.string())) for n in ARROW_SCHEMA.names],
                                      schema=ARROW_SCHEMA)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=200_000)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    events = generate("overseas-lag", seed=1, start_us=1_795_000_000_000_000, rate=10_000, count=args.count)
    entries = [[f"{a // 1000 + 30_000}-{i}".encode(), [b"e", ev.payload()]] for i, (a, ev) in enumerate(events)]
    assert baseline(entries[:1000]).equals(to_record_batch(entries[:1000]))
    best: dict[str, float] = {}
    for _ in range(args.repeat):  # interleaved, so both see the same machine
        for name, fn in (("per-entry parser", baseline), ("bulk Arrow path", to_record_batch)):
            t = time.perf_counter()
            fn(entries)
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - t)
    for name, s in best.items():
        print(f"{name:18} {args.count / s:>10,.0f} entries/s (best of {args.repeat})")
    print(f"speed-up           {best['per-entry parser'] / best['bulk Arrow path']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
