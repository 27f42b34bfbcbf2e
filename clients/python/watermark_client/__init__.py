"""The public producer for game servers: :class:`Producer` writes events to the input stream, each exactly once
(docs/ingest.md, decision 0010); :class:`ShardedProducer` does it for an input of several streams (decision
0017). It sits on the adapters (``streaming.store``) and the schema; nothing the job runs imports it."""

from watermark_client.encode import encode_event
from watermark_client.producer import Producer, ProducerError, ProducerStats, ProducerTimeout
from watermark_client.sharded import ShardedProducer

__all__ = ["Producer", "ProducerError", "ProducerStats", "ProducerTimeout", "ShardedProducer", "encode_event"]
