"""Which of Spark's Python workers reads each shard, batch after batch: whether a worker could keep a shard's state
between batches (docs/scaling.md, plan step 1).

    python -m bench.spikes.worker_locality [--shards 2] [--batches 200] [--master local[2]]

A streaming Python data source gives one partition per shard each batch; each partition reports the process that
read it. Printed: how often a shard's batch went to the worker that read its previous batch.
"""

from __future__ import annotations

import argparse
import collections
import os
from collections.abc import Iterator, Sequence

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from streaming.schema.config import Config
from streaming.spark.query import build_session

SHARDS_OPTION, BATCHES_OPTION = "shards", "batches"


class _Shard(InputPartition):
    def __init__(self, shard: int, batch: int) -> None:
        super().__init__(shard)
        self.shard, self.batch = shard, batch


class _Reader(DataSourceStreamReader):
    def __init__(self, shards: int, batches: int) -> None:
        self.shards, self.batches, self.n = shards, batches, 0

    def initialOffset(self) -> dict:
        return {"n": 0}

    def latestOffset(self) -> dict:
        self.n = min(self.n + 1, self.batches)  # a new batch every trigger, then none: the query idles
        return {"n": self.n}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return [_Shard(k, end["n"]) for k in range(self.shards)]

    def read(self, partition: _Shard) -> Iterator[tuple[int, int, int]]:
        yield (partition.batch, partition.shard, os.getpid())

    def commit(self, end: dict) -> None:
        """Nothing to trim."""


class _Source(DataSource):
    @classmethod
    def name(cls) -> str:
        return "worker_locality"

    def schema(self) -> str:
        return "batch long, shard int, pid int"

    def streamReader(self, schema: object) -> _Reader:
        return _Reader(int(self.options[SHARDS_OPTION]), int(self.options[BATCHES_OPTION]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--master", default="local[2]")
    args = p.parse_args(argv)
    spark = build_session(Config(spark_master=args.master), ui=False)
    spark.dataSource.register(_Source)
    rows: list[tuple[int, int, int]] = []
    query = (spark.readStream.format(_Source.name()).option(SHARDS_OPTION, str(args.shards))
             .option(BATCHES_OPTION, str(args.batches)).load().writeStream
             .trigger(processingTime="100 milliseconds")
             .foreachBatch(lambda df, _: rows.extend(tuple(r) for r in df.collect())).start())
    query.processAllAvailable()  # every batch read: stopped between batches, not under one
    query.stop()
    pid_of: dict[int, dict[int, int]] = collections.defaultdict(dict)
    for batch, shard, pid in rows:
        pid_of[shard][batch] = pid
    same = pairs = 0
    for by_batch in pid_of.values():
        batches = sorted(by_batch)
        pairs += len(batches) - 1
        same += sum(by_batch[a] == by_batch[b] for a, b in zip(batches, batches[1:], strict=False))
    workers = collections.Counter(pid for _, _, pid in rows)
    print(f"{args.shards} shards, {args.master}: a shard's batch read by the worker that read its previous batch "
          f"{same} times in {pairs}; batches per worker {sorted(workers.values())}")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
