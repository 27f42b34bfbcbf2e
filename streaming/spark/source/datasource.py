"""The data source Spark registers (``format("redis_stream")``) and its batch reader (``spark.read``): Spark calls
them on the driver when a query or a read is planned, and the batch reader's ``read`` on a worker."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from streaming.schema.shards import Position
from streaming.spark.rows import SCHEMA
from streaming.spark.source.options import SourceOptions
from streaming.spark.source.ranges import split_range
from streaming.spark.source.read import read_partition
from streaming.spark.source.stream_reader import RedisStreamReader
from watermark_client.connection import open_client


class RedisStreamBatchReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.opts = SourceOptions(options)

    def partitions(self) -> Sequence[InputPartition]:
        """Each shard from ``startId`` to ``endId`` (inclusive; ``-`` and ``+`` as in XRANGE; with shards, positions),
        split from its first to its last entry there."""
        opts = self.opts
        lows = ("-",) * opts.shards if opts.start_id == "-" else Position.parse(opts.start_id, opts.shards).ids
        highs = ("+",) * opts.shards if opts.end_id == "+" else Position.parse(opts.end_id, opts.shards).ids
        each = max(1, opts.partitions // opts.shards)
        out: list[InputPartition] = []
        client = open_client(opts.url)
        try:
            for k, stream in enumerate(opts.streams):
                first = client.xrange(stream, lows[k], highs[k], count=1)
                last = client.xrevrange(stream, highs[k], lows[k], count=1)
                if first and last:
                    out += split_range(first[0][0].decode(), last[0][0].decode(), each, lo_inclusive=True, shard=k)
        finally:
            client.close()
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts, partition)


class RedisStreamDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "redis_stream"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RedisStreamReader(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        return RedisStreamBatchReader(self.options)
