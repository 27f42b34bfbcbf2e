"""A PySpark Python Data Source over a Redis Stream (``format("redis_stream")``).

Offsets are stream entry IDs (``{"id": "<ms>-<seq>"}``, exclusive start,
inclusive end), so after a restart Spark re-reads exactly the entries a batch
had. With ``shards`` > 1 the input is that many streams and an offset holds one
ID per shard (a :class:`~streaming.schema.shards.Position`, the IDs joined by
commas): a batch reads each shard's range, one partition or more per shard.

Each entry becomes one row; an entry that does not parse becomes a row with
``error`` set and ``event_time`` null instead of failing the query, and the sink
quarantines it.

With ``preAggregate=true`` (and ``windowMs``/``slideMs``) a partition does not
return its accepted events one row each: it folds them into its partial
aggregate (:mod:`streaming.spark.partial`) and ends with those rows (``partial``,
``server`` and ``event_time`` set, every other column null); quarantined entries and idle markers still come one row
each. The pipeline's sink only sums these across partitions; any other reader
leaves the option off and gets one row per entry.

Options: ``url``, ``stream`` (shard 0's key), ``shards`` (default 1), ``partitions`` (default 2; with shards,
at least one per shard that has entries),
``maxEventsPerBatch`` (0 = no cap), ``preAggregate`` (``true``/``false``,
default false) with ``windowMs`` and ``slideMs`` (every accepted event then also comes as a player row: the
online players' input), ``windowPlayers`` (with ``preAggregate``: the namespace whose windows' players a streaming
batch's partitions count, :mod:`streaming.spark.window_players`), ``playersTtlS`` and
``waitReplicas`` / ``waitTimeoutMs`` (a partition is done once that many replicas have its players), and for batch reads
``startId`` / ``endId`` (inclusive, default the whole stream).

The package, by what each part is for: :mod:`~streaming.spark.source.datasource` (the data source and its batch
reader), :mod:`~streaming.spark.source.stream_reader` (the streaming reader: a batch's end and partitions),
:mod:`~streaming.spark.source.ranges` (positions cut into partitions), :mod:`~streaming.spark.source.read` (a
partition's read, on a worker) and :mod:`~streaming.spark.source.options`.
"""

from streaming.spark.source.datasource import RedisStreamBatchReader, RedisStreamDataSource
from streaming.spark.source.options import SourceOptions
from streaming.spark.source.ranges import MAX_SEQ, StreamRange, format_id, ranges, split_range
from streaming.spark.source.read import READ_CHUNK, read_partition, read_range, stream_client, xrange_entries
from streaming.spark.source.stream_reader import COUNT_AFTER_LUA, RedisStreamReader

__all__ = ["COUNT_AFTER_LUA", "MAX_SEQ", "READ_CHUNK", "RedisStreamBatchReader", "RedisStreamDataSource",
           "RedisStreamReader", "SourceOptions", "StreamRange", "format_id", "ranges", "read_partition", "read_range",
           "split_range", "stream_client", "xrange_entries"]
