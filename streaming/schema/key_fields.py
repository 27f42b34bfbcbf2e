"""The fields of the pipeline's hashes that carry a qualifier or a bound: ``{ns}:totals``' ``events|A`` and
``bad|R`` (:func:`total_field`), and the batch-duration histogram's ``le|{bound}`` (:func:`bucket_field`)."""

from __future__ import annotations

SEP = "|"

BATCH_SECONDS_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
"""Upper bounds of the batch-duration histogram's buckets (seconds); above the last: ``le|+Inf``."""


def bucket_field(seconds: float) -> str:
    """The ``{ns}:batch_seconds`` field a duration is counted in: the smallest bound at or above it."""
    bound = next((b for b in BATCH_SECONDS_BUCKETS if seconds <= b), None)
    return f"le{SEP}{bound:g}" if bound is not None else f"le{SEP}+Inf"


def parse_buckets(fields: dict[str, str]) -> tuple[list[tuple[str, int]], int, float]:
    """Inverse of the listener's writes: cumulative ``(le, count)`` pairs as Prometheus wants them, ending with
    ``+Inf``; the count and the sum."""
    out, running = [], 0
    for bound in (*(f"{b:g}" for b in BATCH_SECONDS_BUCKETS), "+Inf"):
        running += int(fields.get(f"le{SEP}{bound}", 0))
        out.append((bound, running))
    return out, int(fields.get("count", 0)), float(fields.get("sum", 0.0))


def total_field(metric: str, qualifier: str | None = None) -> str:
    """Field of ``{ns}:totals``: ``events`` overall, ``events|A`` for server A, ``bad|malformed_json``."""
    return metric if qualifier is None else f"{metric}{SEP}{qualifier}"


def parse_total_field(field: str | bytes) -> tuple[str, str | None]:
    """Inverse of :func:`total_field`."""
    text = field.decode() if isinstance(field, bytes) else field
    metric, _, qualifier = text.partition(SEP)
    return metric, (qualifier or None)
