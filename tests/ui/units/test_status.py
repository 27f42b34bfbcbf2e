"""The dashboard's records read back, its current window and its status line."""

from __future__ import annotations

from dataclasses import replace

import msgspec
import pytest

from dashboard.status import Level, assess, human_ms, stall, unreachable
from streaming.alerting.config import AlertConfig, Freshness, WatermarkFlat
from streaming.schema.records import LagRecord, RecordError
from streaming.store.views.snapshot import (
    BatchPoint,
    PipelineState,
    Snapshot,
    Totals,
    waiting_entries,
)
from tests.ui.units.snapshots import MIN, MOVING, NOW, STALLED, T, batch, slow, snap, state, window

# --------------------------------------------------------------------------- records


def test_records_parse_from_what_the_sink_and_listener_write() -> None:
    rec = {"batch": 3, "batch_ts_ms": 5, "watermark_ms": 1, "next_watermark_ms": 2, "min_event_us": 10,
           "start_id": "4-0", "end_id": "5-2",
           "max_event_us": 20, "running_max_event_us": 20, "input": 7, "parsed": 6, "quarantined": 1, "events": 5,
           "dropped": 1, "late": 2, "bad": {"malformed_json": 1},
           "servers": {"C": {"rows": 6, "events": 5, "dropped": 1, "late": 2, "min_event_us": 10, "max_event_us": 20,
                             "ingest_lag_ms": {"p50": 1.0, "p95": 2.0, "max": 3.0},
                             "processing_lag_ms": {"p50": 4.0, "p95": 5.0, "max": 6.0}}},
           "progress": {"durations_ms": {"triggerExecution": 1500}, "input_rows": 14, "input_rows_per_s": 10.0,
                        "processed_rows_per_s": None}}
    b = BatchPoint.from_record(rec)
    # Spark read 14 rows for the 7 entries (say two scans): its 10 rows/s are 5 entries/s
    assert (b.batch, b.input, b.dropped, b.late, b.duration_ms, b.input_per_s) == (3, 7, 1, 2, 1500, 5.0)
    assert b.processed_per_s is None
    assert b.servers["C"].ingest_lag_ms == LagRecord(1.0, 2.0, 3.0)
    assert b.servers["C"].processing_lag_ms == LagRecord(4.0, 5.0, 6.0)
    no_progress = BatchPoint.from_record({k: v for k, v in rec.items() if k != "progress"})
    assert no_progress.duration_ms is None
    with pytest.raises(RecordError, match="batch 3 is not a batch record: Expected `int`, got `str` - at `\\$.input`"):
        BatchPoint.from_record({**rec, "input": "seven"})  # a clear error where it is read, not three calls later


def test_totals_split_overall_per_server_and_per_reason() -> None:
    t = Totals.from_hash({"input": "9", "dropped": "2", "dropped|C": "2", "events|A": "4", "bad|bad_timestamp": "1",
                          "late|A": "1"})
    assert (t.input, t.dropped, t.events) == (9, 2, 0)
    assert t.servers["C"].dropped == 2 and t.servers["A"].events == 4 and t.servers["A"].late == 1
    assert t.bad == {"bad_timestamp": 1}


def test_state_is_none_before_the_first_commit() -> None:
    assert PipelineState.from_hash({}) is None
    s = PipelineState.from_hash({"last_batch": "0", "params": '{"window_ms": 60000, "slide_ms": 30000, '
                                 '"delay_ms": 5000}', "max_event_us": "", "trigger_ms": "2000"})
    assert s is not None and s.max_event_us is None and s.head_ms is None
    assert (s.window_ms, s.slide_ms, s.delay_ms, s.trigger_ms) == (60_000, 30_000, 5_000, 2_000)


# --------------------------------------------------------------------------- current windows


def test_current_window_is_the_one_holding_the_head_of_event_time() -> None:
    head = T + 6 * MIN + 30_000
    ws = (window(T + 5 * MIN, "A", 3, True), window(T + 6 * MIN, "A", 4, False), window(T + 5 * MIN, "B", 9, True))
    s = snap(state(max_event_us=head * 1000), windows=ws)
    current = s.current_windows()
    assert current["A"] is ws[1]
    assert current["B"] is None  # B has no events in the current window: shown as 0, not as its old window
    assert s.last_final_windows() == {"A": ws[0], "B": ws[2]}
    assert s.current_window_bounds() == (T + 6 * MIN, T + 7 * MIN)


def test_with_sliding_windows_the_current_one_is_the_fullest() -> None:
    head = T + 6 * MIN + 30_000
    # 2-minute windows every minute: [5,7) and [6,8) both hold 06:30; [5,7) covers the last full window length.
    ws = (window(T + 5 * MIN, "A", 8, False, size=2 * MIN), window(T + 6 * MIN, "A", 2, False, size=2 * MIN))
    s = snap(state(max_event_us=head * 1000, window_ms=2 * MIN, slide_ms=MIN), windows=ws, servers=("A",))
    assert s.current_windows()["A"] is ws[0]
    assert s.current_window_bounds() == (T + 5 * MIN, T + 7 * MIN)


# --------------------------------------------------------------------------- status line


@pytest.mark.parametrize(
    ("snapshot", "now", "level", "phrase"),
    [
        # nothing at all yet: say how to start
        (snap(), NOW, Level.INFO, "Start the pipeline"),
        # events but no batch: starting while the oldest has waited up to [job_quiet] first_batch (2 min), then down
        (snap(length=42, waiting=42, oldest_ms=NOW - 30_000), NOW, Level.INFO,
         "Starting: 42 events wait in `wm:events` (the oldest 30.0 s) and no batch has completed yet"),
        (snap(length=42, waiting=42, oldest_ms=NOW - 121_000), NOW, Level.ERROR, "Down: 42 events wait"),
        # fresh commit, watermark moving, fast batches: all good
        (snap(state(), MOVING), NOW + 800, Level.OK, "Live: batch #9 committed 800 ms ago"),
        # no commit for 60 s with entries waiting: the job is down
        (snap(state(), MOVING, waiting=500), NOW + 60_000, Level.ERROR, "Down: no batch has completed for 1 min"),
        # stopped on request 60 s ago, entries arrived since: stopped, not down
        (snap(state(stopped_ms=NOW), MOVING, waiting=500, oldest_ms=NOW), NOW + 60_000, Level.INFO,
         "Stopped: the job was stopped at 00:10:00 UTC (1 min ago) after batch #9; 500 entries waiting"),
        # no commit for 60 s and nothing waiting: idle, not broken
        (snap(state(), MOVING), NOW + 60_000, Level.INFO, "Idle: no new events for 1 min"),
        # 4.9 s is within 5 triggers (and the 10 s floor): still fine
        (snap(state(), MOVING, waiting=500), NOW + 4_900, Level.OK, "Live"),
        # entries waiting, quick batches: live, and how far behind in entries and time
        (snap(state(), MOVING, waiting=1, oldest_ms=NOW), NOW + 600, Level.OK, "1 entry waiting (the oldest 600 ms)"),
        (snap(state(), MOVING), NOW + 600, Level.OK, "up to date"),
        # quick (capped) batches but the oldest waiting entry is older than the trigger + 5 s (the freshness
        # alert's rule, ops/alerts.toml): behind; at the limit, only waiting
        (snap(state(), MOVING, waiting=250_000, oldest_ms=NOW - 12_000), NOW + 500, Level.WARNING,
         "Behind: behind by 250,000 entries / 12.5 s"),
        (snap(state(), MOVING, waiting=250_000, oldest_ms=NOW - 5_500), NOW + 500, Level.OK,
         "250,000 entries waiting (the oldest 6.0 s)"),
        (snap(state(), MOVING, waiting=250_000, oldest_ms=NOW - 5_499), NOW + 502, Level.WARNING,
         "Behind: behind by 250,000 entries / 6.0 s"),
        # Redis came back empty at batch 5, within the batches shown: the break is said
        (snap(state(lost_at_batch=5), MOVING), NOW + 500, Level.WARNING, "History lost at batch 5: Redis came back"),
        # long ago (before the range shown): live, with where the totals start
        (snap(state(lost_at_batch=5), MOVING[6:]), NOW + 500, Level.OK, "totals from batch 5 (Redis came back empty"),
        # the watermark unmoved for the WatermarkFlat alert's 1 min while events arrive: stalled, as the alert says
        (snap(state(), STALLED), NOW + 1_000, Level.WARNING, "Stalled: the watermark has not moved for 1 min while 590 "
                                                             "events arrived"),
        (snap(state(), STALLED), NOW + 999, Level.OK, "Live"),  # a millisecond short
        (snap(state(), MOVING[:7] + tuple(batch(i, T, T) for i in (7, 8, 9))), NOW + 500, Level.OK, "Live"),
        # most of the last batches slower than the trigger: said, but live until the oldest entry waits too long
        (snap(state(), slow(MOVING)), NOW + 500, Level.INFO,
         "Slow batches: 10 of the last 10 took longer than the 1.0 s trigger (slowest 1.5 s); not behind yet"),
        (snap(state(), slow(MOVING), waiting=90_000, oldest_ms=NOW - 2_500),
         NOW + 500, Level.INFO, "Slow batches: 10 of the last 10"),
        # ... and behind once it has: falling behind, with why
        (snap(state(), slow(MOVING), waiting=90_000, oldest_ms=NOW - 6_500),
         NOW + 500, Level.WARNING, "Falling behind: 10 of the last 10 batches took longer than the 1.0 s trigger "
                                   "(slowest 1.5 s); behind by 90,000 entries / 7.0 s"),
        # every server silent for over ServerSilent's 1 min while idle markers keep batches coming: stalled, with
        # the moment the numbers stand as of; one of two silent is not most
        (replace(snap(state(), MOVING), seen={"A": NOW - 100_000, "B": NOW - 100_000}), NOW + 800, Level.WARNING,
         "Stalled: 2 of 2 servers silent since 00:08:20 UTC (1 min 40 s ago), with players online (no event for "
         "1 min or more): the numbers stand as of then. Batch #9 committed 800 ms ago"),
        (replace(snap(state(), MOVING), seen={"A": NOW - 100_000, "B": NOW}), NOW + 800, Level.OK, "Live"),
        # the watermark 3 min 34 s behind now, far past the 30 s delay and the trigger: behind, never "up to date"
        (snap(state(next_watermark_ms=NOW - 214_000), MOVING), NOW, Level.WARNING,
         "Behind: the watermark is at 00:06:26 UTC, 3 min 34 s behind now, past the 30.0 s delay and the 1.0 s "
         "trigger"),
        (snap(state(next_watermark_ms=NOW - 36_000), MOVING), NOW, Level.OK, "Live"),
        # Redis at its maxmemory: it refuses writes, said first and plainly
        (replace(snap(state(), MOVING), redis_memory=(100 * 2**20, 100 * 2**20)), NOW + 500, Level.ERROR,
         "Redis is full: it uses 100 MB of its 100 MB maxmemory and refuses writes"),
        # under it, or no maxmemory, or INFO refused: nothing to say about memory
        (replace(snap(state(), MOVING), redis_memory=(99 * 2**20, 100 * 2**20)), NOW + 500, Level.OK, "Live"),
        (replace(snap(state(), MOVING), redis_memory=(9 * 2**30, 0)), NOW + 500, Level.OK, "Live"),
        (replace(snap(state(), MOVING), redis_memory=(None, 100)), NOW + 500, Level.OK, "Live"),
    ],
)
def test_status_line(snapshot: Snapshot, now: int, level: Level, phrase: str) -> None:
    statuses = assess(snapshot, now)
    assert statuses[0].level is level, statuses
    assert phrase in statuses[0].text, statuses[0].text


@pytest.mark.parametrize(("length", "trimmed", "committed", "waiting"), [
    (0, 0, 0, 0),  # nothing ever written
    (10, 0, 0, 10),  # nothing committed: the whole stream waits
    (10, 0, 10, 0),  # all committed, nothing trimmed yet
    (4, 6, 10, 0),  # all committed, 6 of them trimmed
    (7, 6, 10, 3),  # 3 more arrived after the last commit
    (3, 6, 10, 0),  # someone else deleted an entry: never below zero
])
def test_waiting_entries_from_length_trimmed_and_committed(length: int, trimmed: int, committed: int,
                                                           waiting: int) -> None:
    assert waiting_entries(length, trimmed, committed) == waiting


def test_a_watermark_unmoved_while_nothing_arrives_is_not_stalled() -> None:
    empty = tuple(msgspec.structs.replace(b, parsed=0, events=0) for b in STALLED)
    assert stall(snap(state(), empty), NOW + 1_000) is None
    assert all(s.level is not Level.WARNING for s in assess(snap(state(), empty), NOW + 1_000))


def test_the_status_line_judges_with_the_thresholds_the_monitor_published() -> None:
    """ops/alerts.toml's [watermark_flat] after and [freshness] above_trigger move the status line too."""
    strict = AlertConfig(watermark_flat=WatermarkFlat(after_ms=2_000), freshness=Freshness(above_trigger_ms=500))
    texts = [s.text for s in assess(replace(snap(state(), STALLED[-4:], waiting=9, oldest_ms=NOW - 1_000),
                                            thresholds=strict), NOW + 1_000)]
    assert texts[0].startswith("Stalled: the watermark has not moved for 4.0 s while 30 events arrived"), texts
    lenient = replace(snap(state(), STALLED, waiting=9, oldest_ms=NOW - 1_000),
                      thresholds=AlertConfig(watermark_flat=WatermarkFlat(after_ms=120_000)))
    assert [s.level for s in assess(lenient, NOW + 1_000)] == [Level.OK]


def test_unreachable_names_the_redacted_url_and_the_error() -> None:
    from dashboard.text import md

    s = unreachable("redis://:***@db:6379/0", ConnectionError("Connection refused"))
    assert s.level is Level.ERROR and md("redis://:***@db:6379/0") in s.text and "Connection refused" in s.text


@pytest.mark.parametrize(("ms", "text"), [(0, "0 ms"), (999, "999 ms"), (1_500, "1.5 s"), (60_000, "1 min"),
                                          (61_000, "1 min 1 s"), (3_600_000, "1 h 0 min"), (3 * 86_400_000, "3 days")])
def test_human_ms(ms: int, text: str) -> None:
    assert human_ms(ms) == text
