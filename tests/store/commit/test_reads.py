"""Reading what the commits wrote: exact lag percentiles from the histograms, the pipeline's status in a
fixed number of commands, readers that decode only what they have not seen, the snapshot without windows."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
import redis

from streaming.rules.commit.batch import BatchSummary, WindowAgg
from streaming.schema.keys import KeySchema
from streaming.schema.records import LagRecord, ServerRecord
from streaming.store.commit import commit_batch
from tests.store.commit.batches import PARAMS, T0, summary


@pytest.mark.parametrize(
    ("values_us", "counts", "expected_ms"),
    [
        ([5_000], [1], LagRecord(5.0, 5.0, 5.0)),  # one event: every figure is its lag
        ([1_000, 3_000], [1, 1], LagRecord(2.0, 2.9, 3.0)),  # p50 halfway, p95 at 0.95 of the way
        ([1_000, 3_000], [3, 1], LagRecord(1.0, 3.0 - 0.15 * 2, 3.0)),  # ranks 0..3: p95 at 2.85, between 1 and 3 ms
        # negative lags (clock skew) sort first; p95 at 2.85
        ([-2_000, 0, 7_500], [1, 2, 1], LagRecord(0.0, 6.375, 7.5)),
        ([1, 2], [1, 1], LagRecord(0.0015, 0.00195, 0.002)),  # microseconds survive: no rounding to ms
    ],
)
def test_lag_from_histogram_is_the_exact_percentile(values_us: list[int], counts: list[int],
                                                    expected_ms: LagRecord) -> None:
    got = LagRecord.from_histogram(values_us, counts)
    assert (got.p50, got.p95, got.max) == pytest.approx((expected_ms.p50, expected_ms.p95, expected_ms.max))


def test_lag_from_histogram_equals_percentiles_of_the_expanded_values() -> None:
    values, counts = [-30, 0, 12, 13, 400, 9_000], [2, 1, 7, 1, 3, 1]
    flat = [v / 1000 for v, c in zip(values, counts, strict=True) for _ in range(c)]
    cuts = statistics.quantiles(flat, n=100, method="inclusive")
    got = LagRecord.from_histogram(values, counts)
    assert (got.p50, got.p95, got.max) == pytest.approx((cuts[49], cuts[94], max(flat)))


def test_many_histograms_end_to_end_give_each_one_its_own_exact_figures() -> None:
    """300 servers' lags a batch are read in one pass: each histogram's figures equal the quantiles of its own
    expanded values, and one value, one rank or an even split are edge cases of the interpolation."""
    rng = np.random.default_rng(7)
    hists = [([5], [1]), ([5], [3]), ([-4, 9], [1, 1]), ([1, 2, 3], [1, 1, 2])]
    for _ in range(40):
        k = int(rng.integers(1, 12))
        hists.append((sorted(rng.choice(np.arange(-5_000, 50_000), k, replace=False).tolist()),
                      rng.integers(1, 6, k).tolist()))
    starts = np.cumsum([0, *(len(v) for v, _ in hists[:-1])])
    got = LagRecord.from_histograms(np.array([x for v, _ in hists for x in v], np.int64),
                                    np.array([x for _, c in hists for x in c], np.int64), starts)
    for (values, counts), record in zip(hists, got, strict=True):
        flat = [v / 1000 for v, c in zip(values, counts, strict=True) for _ in range(c)]
        cuts = statistics.quantiles(flat, n=100, method="inclusive") if len(flat) > 1 else [flat[0]] * 99
        assert (record.p50, record.p95, record.max) == pytest.approx((cuts[49], cuts[94], max(flat)))


def test_an_empty_or_uneven_histogram_is_refused() -> None:
    with pytest.raises(ValueError, match="as many counts as values"):
        LagRecord.from_histogram([], [])
    with pytest.raises(ValueError, match="as many counts as values"):
        LagRecord.from_histogram([1, 2], [1])


def test_read_pipeline_says_what_the_snapshot_says_in_a_fixed_number_of_commands(r: redis.Redis,
                                                                                keys: KeySchema) -> None:
    from streaming.store.pipeline_status import read_pipeline
    from streaming.store.views.snapshot import read_snapshot

    def commands(read: object) -> int:
        before = r.info("stats")["total_commands_processed"]
        read()  # type: ignore[operator]
        return r.info("stats")["total_commands_processed"] - before

    assert read_pipeline(r, keys).state is None
    for i in range(3):
        r.xadd(keys.events, {"e": b"{}"}, id=f"{i + 1}-0")
    first = BatchSummary(0, 0, T0, "0-0", "1-0", [], {"A": ServerRecord(rows=1, max_event_us=T0 * 1000)}, [])
    assert commit_batch(r, keys, first, PARAMS)  # entry 1-0 committed, two wait
    small = commands(lambda: read_pipeline(r, keys))
    status = read_pipeline(r, keys)
    snap = read_snapshot(r, keys, range_ms=3_600_000, now_ms=T0)
    assert (status.state, status.totals, status.servers, status.stream) == (snap.state, snap.totals, snap.servers,
                                                                          snap.stream)
    assert status.stream.waiting == 2 and status.stream.oldest_waiting_ms == 2 and status.state.last_batch == 0
    for i in range(1, 40):  # more batches, windows and entries: the same commands
        w = [WindowAgg(T0 + k * 600_000, T0 + (k + 1) * 600_000, "A", events=1, players=1) for k in range(i)]
        r.xadd(keys.events, {"e": b"{}"}, id=f"{i + 3}-0")
        s = BatchSummary(i, 0, T0, f"{i}-0", f"{i + 1}-0", w, {"A": ServerRecord(rows=i, events=i)}, [])
        assert commit_batch(r, keys, s, PARAMS)
    assert commands(lambda: read_pipeline(r, keys)) == small


def test_a_reader_that_reads_again_decodes_only_the_batches_it_has_not_seen(r: redis.Redis, keys: KeySchema,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """``BatchPoints`` keeps the records it decoded: each read decodes the new ones only, ends equal to a fresh read,
    reads a record written again (its ``progress`` changed) again, and leaves out one that is gone."""
    from streaming.store.views import snapshot

    decoded: list[bytes] = []
    real = snapshot.batch_point
    monkeypatch.setattr(snapshot, "batch_point", lambda sink, progress: decoded.append(sink) or real(sink, progress))
    points = snapshot.BatchPoints()

    def read() -> snapshot.Snapshot:
        return snapshot.read_snapshot(r, keys, range_ms=3_600_000, now_ms=T0, points=points)

    for b in range(3):
        assert commit_batch(r, keys, summary(b, T0, T0 + 1000 * b), PARAMS)
    assert [p.batch for p in read().batches] == [0, 1, 2] and len(decoded) == 3
    assert commit_batch(r, keys, summary(3, T0, T0 + 3000), PARAMS)
    assert [p.batch for p in read().batches] == [0, 1, 2, 3] and len(decoded) == 4  # batch 3 only
    again = read()
    assert len(decoded) == 4
    fresh = snapshot.read_snapshot(r, keys, range_ms=3_600_000, now_ms=T0)
    assert again.batches == fresh.batches
    other = r.hget(keys.batch(3), "sink")
    r.hset(keys.batch(1), mapping={"sink": other, "progress": b'{"again": 1}'})  # a pipeline started afresh
    r.delete(keys.batch(2))
    assert [p.batch for p in read().batches] == [0, 3, 3]  # batch 1's record is now the one written again


def test_a_snapshot_without_windows_is_the_same_snapshot_but_its_windows(r: redis.Redis, keys: KeySchema) -> None:
    """Live ops reads the snapshot without windows but on its Windows tab: everything else it shows is the same."""
    from dataclasses import replace

    from streaming.store.views import snapshot

    for b in range(3):
        assert commit_batch(r, keys, summary(b, T0, T0 + 1000 * b), PARAMS)
    whole = snapshot.read_snapshot(r, keys, range_ms=3_600_000, now_ms=T0 + 5_000)
    bare = snapshot.read_snapshot(r, keys, range_ms=3_600_000, now_ms=T0 + 5_000, windows=False)
    assert whole.windows and not bare.windows  # a compare of something
    assert replace(bare, windows=whole.windows) == whole
