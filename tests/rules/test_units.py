"""Key schema, config, durations, event parsing, offset log and progress parsing (no Spark)."""

from __future__ import annotations

import pytest

from streaming.schema.config import Config, ConfigError, redact_url
from streaming.schema.keys import KeySchema, WindowKey, parse_total_field, total_field
from streaming.spark.checkpoint import parse_offset_log
from watermark_client.events import BadEntry, Event, parse_entry, parse_payload
from watermark_client.timeutil import format_duration_ms, iso_from_us, parse_duration_ms, parse_iso_us


@pytest.mark.parametrize(
    ("text", "ms"),
    [("30s", 30_000), ("10m", 600_000), ("1h", 3_600_000), ("500ms", 500), ("1h30m", 5_400_000), ("2d", 172_800_000)],
)
def test_durations_round_trip(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms
    assert parse_duration_ms(format_duration_ms(ms)) == ms


@pytest.mark.parametrize("bad", ["", "10", "m", "10 minutes", "-5m", "1.5h", "10x"])
def test_bad_durations_say_what_is_expected(bad: str) -> None:
    with pytest.raises(ValueError, match="expected a number and a unit"):
        parse_duration_ms(bad)


def test_iso_round_trip_and_utc() -> None:
    us = parse_iso_us("2026-01-01T00:00:00.123Z")
    assert iso_from_us(us) == "2026-01-01T00:00:00.123Z"
    assert parse_iso_us("2026-01-01T01:00:00+01:00") == parse_iso_us("2026-01-01T00:00:00Z")
    assert parse_iso_us("2026-01-01T00:00:00") == parse_iso_us("2026-01-01T00:00:00Z")  # naive = UTC
    assert iso_from_us(1_500) == "1970-01-01T00:00:00.001500Z"


def test_config_defaults_and_env() -> None:
    cfg = Config.from_env({})
    assert cfg.embedded_redis and cfg.redis_url == "redis://127.0.0.1:6379/0"
    assert (cfg.window_ms, cfg.slide_ms, cfg.delay_ms) == (60_000, 60_000, 30_000)
    cfg = Config.from_env({"REDIS_URL": "redis://h:1/2", "WINDOW": "10m", "WATERMARK_DELAY": "2m",
                           "PIPELINE_NAMESPACE": "game"})
    assert not cfg.embedded_redis
    assert (cfg.window_ms, cfg.slide_ms, cfg.delay_ms) == (600_000, 600_000, 120_000)
    assert cfg.checkpoint_dir == "data/checkpoints/game"
    assert cfg.max_events_per_batch == 200_000  # admission control is on unless asked otherwise
    assert Config.from_env({"MAX_EVENTS_PER_BATCH": "0"}).max_events_per_batch == 0  # 0: no cap


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"WINDOW": "10x"}, "WINDOW='10x' is not a duration"),
        ({"WINDOW": "1m", "SLIDE": "2m"}, r"SLIDE \(2m\) must not exceed WINDOW \(1m\)"),
        ({"WINDOW": "0s"}, "WINDOW must be positive"),
        ({"PIPELINE_NAMESPACE": "a b"}, "PIPELINE_NAMESPACE 'a b' must be"),
        ({"REDIS_URL": "http://x"}, "REDIS_URL 'http://x' must start with"),
        ({"MAX_EVENTS_PER_BATCH": "many"}, "MAX_EVENTS_PER_BATCH='many' is not an integer"),
        ({"SOURCE_PARTITIONS": "0"}, "SOURCE_PARTITIONS must be between 1 and 256"),
        ({"TRIGGER_INTERVAL": "0s"}, "TRIGGER_INTERVAL must be positive"),
        ({"MAX_EVENTS_PER_BATCH": "-1"}, r"MAX_EVENTS_PER_BATCH must be 0 \(no cap\) or positive"),
        ({"DRIVER_AGG_MAX_SPAN": "5s"}, "DRIVER_AGG_MAX_SPAN is no longer used: every batch is counted on the driver"),
        ({"LAB_TRIGGER": "5s"}, "LAB_TRIGGER is no longer used: the lab lanes and the online players"),
    ],
)
def test_config_errors_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Config.from_env(env)


def test_redact_url_hides_password() -> None:
    assert redact_url("redis://user:s3cret@host:6379/0") == "redis://user:***@host:6379/0"
    with pytest.raises(ConfigError) as info:
        Config(redis_url="http://user:s3cret@host/0")
    assert "s3cret" not in str(info.value) and "***" in str(info.value)


def test_progress_from_json() -> None:
    from streaming.spark.listener import Progress

    doc = {"batchId": 7, "timestamp": "2026-11-22T01:00:00.000Z", "numInputRows": 120,
           "inputRowsPerSecond": 60.0, "processedRowsPerSecond": "NaN",
           "durationMs": {"addBatch": 900, "triggerExecution": 1000}}
    p = Progress.from_json(doc)
    assert (p.batch, p.input_rows, p.input_rows_per_s, p.processed_rows_per_s) == (7, 120, 60.0, None)
    assert p.durations_ms["triggerExecution"] == 1000


def test_keys_are_namespaced_and_parse_back() -> None:
    k = KeySchema("live")
    wk = WindowKey(600_000, 1_200_000, "eu:west")  # a server name with a colon survives
    assert k.window(wk) == "live:win:600000:1200000:eu:west"
    assert k.parse_window(k.window(wk)) == wk
    assert k.parse_window(k.players(wk)) == wk
    assert WindowKey.parse(wk.member().encode()) == wk
    assert k.parse_batch(k.batch(42)) == 42
    assert k.events == "live:events" and k.state == "live:state"
    with pytest.raises(ValueError):
        k.parse_window("other:win:1:2:A")
    with pytest.raises(ValueError):
        k.parse_window(k.state)
    assert parse_total_field(total_field("dropped", "A")) == ("dropped", "A")
    assert parse_total_field(total_field("input")) == ("input", None)


def test_two_namespaces_share_no_key() -> None:
    a, b = KeySchema("a"), KeySchema("b")
    wk = WindowKey(0, 1, "A")
    keys_a = {a.events, a.dead, a.state, a.totals, a.windows, a.batches, a.commits, a.window(wk), a.batch(1)}
    keys_b = {b.events, b.dead, b.state, b.totals, b.windows, b.batches, b.commits, b.window(wk), b.batch(1)}
    assert not keys_a & keys_b


def test_event_round_trip() -> None:
    ev = Event("C", "C-p00001", parse_iso_us("2026-11-22T10:00:01.250Z"), "heartbeat", "C-1")
    fields = {k.encode(): v for k, v in ev.fields().items()}
    assert parse_entry(fields, "5-0") == ev


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"{not json", "malformed_json"),
        (b"[1, 2]", "not_an_object"),
        (b'{"player_id": "p", "event_time": "2026-01-01T00:00:00Z"}', "missing_field"),
        (b'{"server": 7, "player_id": "p", "event_time": "2026-01-01T00:00:00Z"}', "bad_type"),
        (b'{"server": "A", "player_id": true, "event_time": "2026-01-01T00:00:00Z"}', "bad_type"),
        (b'{"server": "A", "player_id": "p", "event_time": 1767225600000}', "bad_type"),
        (b'{"server": "A", "player_id": "p", "event_time": "yesterday"}', "bad_timestamp"),
        (b'{"server": "A", "player_id": "p", "event_time": "2026-01-01T00:00:00Z", "kind": "dance"}', "bad_value"),
    ],
)
def test_bad_payloads_are_classified_not_raised(payload: bytes, reason: str) -> None:
    out = parse_payload(payload, "1-0")
    assert isinstance(out, BadEntry)
    assert out.reason == reason
    assert out.raw == payload.decode()


def test_entry_without_payload_field_is_bad() -> None:
    out = parse_entry({b"x": b"1"}, "1-0")
    assert isinstance(out, BadEntry) and out.reason == "missing_payload"


def test_optional_fields_default() -> None:
    out = parse_payload(b'{"server": "A", "player_id": 17, "event_time": "2026-01-01T00:00:00Z"}', "9-3")
    assert isinstance(out, Event)
    assert (out.player_id, out.kind, out.event_id) == ("17", None, "9-3")


def test_parse_offset_log() -> None:
    text = 'v1\n{"batchWatermarkMs":1767225594000,"batchTimestampMs":1795311047037,"conf":{}}\n{"id": "17-2"}\n'
    entry = parse_offset_log(text, 4)
    assert (entry.watermark_ms, entry.batch_ts_ms) == (1767225594000, 1795311047037)
    assert entry.source_offsets == ({"id": "17-2"},)
    with pytest.raises(ValueError):
        parse_offset_log("garbage", 4)


def test_parse_entry_id_orders_like_redis() -> None:
    from watermark_client.events import parse_entry_id

    assert parse_entry_id(b"1700000000000-12") == (1_700_000_000_000, 12)
    assert parse_entry_id("5") == (5, 0)
    assert parse_entry_id("9-10") > parse_entry_id("9-9")  # numeric, not string, order


def test_with_retry_backs_off_then_gives_up_by_attempts_or_deadline() -> None:
    import redis

    from streaming.store.redis_conn import with_retry

    calls: list[int] = []

    def flaky_twice() -> str:
        calls.append(1)
        if len(calls) <= 2:
            raise redis.ConnectionError("down")
        return "ok"

    slept: list[float] = []
    assert with_retry(flaky_twice, "t", sleep=slept.append) == "ok" and slept == [0.1, 0.2]

    def down() -> str:
        raise redis.TimeoutError("down")

    slept.clear()
    with pytest.raises(redis.TimeoutError):
        with_retry(down, "t", attempts=4, give_up_after_s=None, sleep=slept.append)
    assert slept == [0.1, 0.2, 0.4]  # 4 calls, 3 waits

    now = [0.0]
    slept.clear()
    with pytest.raises(redis.TimeoutError):
        with_retry(down, "t", give_up_after_s=1.0, sleep=lambda s: (slept.append(s), now.__setitem__(0, now[0] + s)),
                   clock=lambda: now[0])
    assert slept == [0.1, 0.2, 0.4]  # the next wait (0.8 s) would pass the 1 s deadline


def test_with_retry_does_not_retry_other_errors() -> None:
    import redis

    from streaming.store.redis_conn import with_retry

    def wrong() -> None:
        raise redis.ResponseError("WRONGTYPE")

    with pytest.raises(redis.ResponseError):
        with_retry(wrong, "t", sleep=lambda _s: pytest.fail("must not wait"))


def test_an_error_whose_text_is_gone_still_logs_a_line() -> None:
    """A py4j error asks the JVM for its text; once the JVM is gone (SIGTERM to the process group) str() raises,
    and stopping the job must not fail on it."""
    from streaming.apps.job import first_line

    class GoneWithTheJVM(Exception):
        def __str__(self) -> str:
            raise ConnectionRefusedError(111, "Connection refused")

    assert first_line(GoneWithTheJVM()) == "GoneWithTheJVM (its text is gone with the JVM)"
    assert first_line(RuntimeError("first\nsecond")) == "first"
    assert first_line(RuntimeError()) == ""


def test_the_online_record_reads_back_and_a_bad_one_says_what_is_wrong() -> None:
    from streaming.schema.records import OnlineRecord, RecordError

    rec = OnlineRecord(batch=4, watermark_ms=9_000, in_force_ms=8_000, batch_ts_ms=10_000, counts={"A": 3},
                         online=2, offline=1, causes={"A": {"login": 2, "timeout": 1}})
    raw = rec.encode()
    assert raw.startswith(b'{"batch":4,"watermark_ms":9000,') and OnlineRecord.decode(raw, "h") == rec
    old = b'{"batch":4,"watermark_ms":9000,"batch_ts_ms":10000,"counts":{"A":3},"online":2,"offline":1}'
    assert OnlineRecord.decode(old, "h").in_force_ms == 0  # written before the field existed: still reads
    wrong = r"history is not a OnlineRecord: Expected `int`, got `str` - at `\$.online`"
    with pytest.raises(RecordError, match=wrong):
        OnlineRecord.decode(raw.replace(b'"online":2', b'"online":"two"'), "history")


# What a commit wrote before the state hashes were typed, field for field: it still reads back, and the record
# writes the very same strings again.
OLD_STATE = {b"last_batch": b"7", b"watermark_ms": b"1767225600000", b"next_watermark_ms": b"1767225620000",
             b"max_event_us": b"1767225630000000", b"max_event_us|A": b"1767225630000000",
             b"max_event_us|B": b"1767225610000000", b"server_watermarks": b'{"A": 1767225620000, "B": 1767225600000}',
             b"delay_ms": b"10000", b"committed_id": b"1767226600000-3", b"lost_at_batch": b"", b"stopped_ms": b"",
             b"sets_closed_below_ms": b"1767225600000",
             b"params": b'{"delay_ms": 10000, "mode": "per-server", "policy": "min", "slide_ms": 60000, '
                        b'"window_ms": 60000}', b"trigger_ms": b"500", b"updated_ms": b"1767226601000"}


def test_the_state_hash_reads_back_and_writes_the_same_fields() -> None:
    from streaming.schema.records import StateParams, StateRecord

    rec = StateRecord.from_hash(OLD_STATE, "wm:state")
    assert (rec.last_batch, rec.max_event_us, rec.lost_at_batch, rec.stopped_ms) == (7, 1767225630000000, None, None)
    assert rec.server_max_event_us == {"A": 1767225630000000, "B": 1767225610000000}
    assert rec.server_watermarks == {"A": 1767225620000, "B": 1767225600000}
    assert rec.params == StateParams(window_ms=60_000, slide_ms=60_000, delay_ms=10_000, mode="per-server")
    assert rec.to_hash() == {k.decode(): v.decode() for k, v in OLD_STATE.items()}
    global_one = StateRecord(last_batch=1, params=StateParams(window_ms=1, slide_ms=1, delay_ms=0)).to_hash()
    assert "server_watermarks" not in global_one  # a global pipeline has never written it
    assert StateRecord(stopped_ms=5).to_hash("stopped_ms") == {"stopped_ms": "5"}  # the job's stop, alone


def test_a_partial_state_read_keeps_the_defaults_and_a_bad_field_is_named() -> None:
    from streaming.schema.records import NONE_CLOSED_MS, OnlineStateRecord, RecordError, StateRecord

    part = StateRecord.from_hash({"last_batch": None, "max_event_us": b"5", "sets_closed_below_ms": None}, "h")
    assert (part.last_batch, part.max_event_us, part.sets_closed_below_ms, part.committed_id) == (
        None, 5, NONE_CLOSED_MS, "0-0")
    assert StateRecord.from_hash({}, "h") == StateRecord()
    with pytest.raises(RecordError, match=r"wm:state is not a StateRecord: Expected `int`, got `str` - at "
                                          r"`\$.watermark_ms`"):
        StateRecord.from_hash({**OLD_STATE, b"watermark_ms": b"soon"}, "wm:state")
    with pytest.raises(RecordError, match=r"wm:state is not a StateRecord: `params` is not JSON"):
        StateRecord.from_hash({**OLD_STATE, b"params": b"{window"}, "wm:state")
    with pytest.raises(RecordError, match=r"at `\$.server_max_event_us\[...\]`"):
        StateRecord.from_hash({**OLD_STATE, b"max_event_us|A": b"x"}, "wm:state")
    old = {b"last_batch": b"4", b"watermark_ms": b"9000", b"in_force_ms": b"8000", b"batch_ts_ms": b"10000",
           b"timeout_ms": b"30000", b"updated_ms": b"10001", b"max_event_us": b"", b"committed_id": b"10000-0",
           b"lost_at_batch": b"2", b"minute": b'{"minute_ms":0}', b"partial_until_ms": b""}
    rec = OnlineStateRecord.from_hash(old, "wm:online:state")
    assert (rec.last_batch, rec.lost_at_batch, rec.partial_until_ms, rec.minute) == (4, 2, None, '{"minute_ms":0}')
    # a hash from before per-server clocks reads with none, and writes the field back
    assert rec.clocks == {} and rec.to_hash() == {**{k.decode(): v.decode() for k, v in old.items()}, "clocks": "{}"}
    clocks = OnlineStateRecord.from_hash({**old, b"clocks": b'{"A":[5000,10000000,7,10000000,90000]}'}, "s").clocks
    assert (clocks["A"].watermark_ms, clocks["A"].clock_us, clocks["A"].heard_ms, clocks["A"].ahead_ms) == (
        5000, 10_000_000, 7, 90_000)
    with pytest.raises(RecordError, match=r"`clocks` is not JSON"):
        OnlineStateRecord.from_hash({**old, b"clocks": b"{A"}, "wm:online:state")
    with pytest.raises(RecordError, match=r"is not a OnlineStateRecord: .* at `\$.lost_at_batch`"):
        OnlineStateRecord.from_hash({**old, b"lost_at_batch": b"two"}, "wm:online:state")
