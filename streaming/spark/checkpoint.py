"""Reading Spark's offset log: the watermark and processing time in force for a batch.

Spark writes ``offsets/<batchId>`` before running the batch (``v1``, a JSON
metadata line with ``batchWatermarkMs`` and ``batchTimestampMs``, then one
line per source offset), so the sink can classify a batch with exactly the
watermark Spark used, including when the batch is replayed after a crash.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit


@dataclass(frozen=True)
class OffsetEntry:
    batch_id: int
    watermark_ms: int
    batch_ts_ms: int
    source_offsets: tuple[dict | None, ...]


def parse_offset_log(text: str, batch_id: int) -> OffsetEntry:
    lines = text.splitlines()
    if len(lines) < 2 or not lines[0].startswith("v"):
        raise ValueError(f"offsets/{batch_id} is not a Spark offset log entry: {text[:80]!r}")
    meta = json.loads(lines[1])
    sources = tuple(None if ln.strip() in ("", "-") else json.loads(ln) for ln in lines[2:])
    return OffsetEntry(
        batch_id=batch_id,
        watermark_ms=int(meta.get("batchWatermarkMs", 0)),
        batch_ts_ms=int(meta.get("batchTimestampMs", 0)),
        source_offsets=sources,
    )


def read_offset_log(checkpoint_dir: str, batch_id: int, spark: object | None = None) -> OffsetEntry:
    """Local paths are read directly; other URIs (hdfs://, s3a://) through Spark's Hadoop FS."""
    scheme = urlsplit(checkpoint_dir).scheme
    if scheme in ("", "file"):
        path = Path(urlsplit(checkpoint_dir).path if scheme else checkpoint_dir) / "offsets" / str(batch_id)
        return parse_offset_log(path.read_text(), batch_id)
    if spark is None:
        raise ValueError(f"reading {checkpoint_dir} needs a SparkSession")
    from streaming.spark import pyspark_private  # pyspark imported only for a checkpoint on Hadoop's file systems

    jvm = pyspark_private.jvm(spark)  # type: ignore[arg-type]
    hpath = jvm.org.apache.hadoop.fs.Path(f"{checkpoint_dir.rstrip('/')}/offsets/{batch_id}")
    fs = hpath.getFileSystem(pyspark_private.hadoop_configuration(spark))  # type: ignore[arg-type]
    stream = fs.open(hpath)
    try:
        text = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()
    return parse_offset_log(text, batch_id)


def batch_range(checkpoint_dir: str, batch_id: int, spark: object | None = None) -> tuple[OffsetEntry, str, str]:
    """Batch ``batch_id``'s offset log entry and its entry ID range ``(start, end]`` (positions)."""
    entry = read_offset_log(checkpoint_dir, batch_id, spark)
    end_id = (entry.source_offsets[0] or {}).get("id", "0-0")
    start_id = "0-0"
    if batch_id > 0:
        prev = read_offset_log(checkpoint_dir, batch_id - 1, spark)
        start_id = (prev.source_offsets[0] or {}).get("id", "0-0")
    return entry, start_id, end_id


SECRET_FILE = "idle-marker.key"


def job_secret(checkpoint_dir: str, spark: object | None = None) -> bytes:
    """The job's secret for signing idle markers (``watermark_client.events.sign``), kept beside its checkpoint so a
    restart, and a batch read again after a crash, verifies the markers it wrote before; created on first use.
    Producers write the input stream, not the checkpoint, so they cannot sign a marker."""
    scheme = urlsplit(checkpoint_dir).scheme
    if scheme in ("", "file"):
        path = Path(urlsplit(checkpoint_dir).path if scheme else checkpoint_dir) / SECRET_FILE
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}")
            tmp.write_bytes(secrets.token_bytes(32))
            tmp.chmod(0o600)
            try:
                os.link(tmp, path)  # never replaces: of two starts at once, both read the first one's, whole
            except FileExistsError:
                pass
            finally:
                tmp.unlink()
        return path.read_bytes()
    if spark is None:
        raise ValueError(f"the idle-marker secret in {checkpoint_dir} needs a SparkSession")
    from streaming.spark import pyspark_private

    jvm = pyspark_private.jvm(spark)  # type: ignore[arg-type]
    hpath = jvm.org.apache.hadoop.fs.Path(f"{checkpoint_dir.rstrip('/')}/{SECRET_FILE}")
    fs = hpath.getFileSystem(pyspark_private.hadoop_configuration(spark))  # type: ignore[arg-type]
    if not fs.exists(hpath):
        out = fs.create(hpath, False)
        try:
            out.write(bytearray(secrets.token_bytes(32)))
        finally:
            out.close()
    stream = fs.open(hpath)
    try:
        return bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
    finally:
        stream.close()
