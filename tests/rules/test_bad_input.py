"""Bad input never costs data: every entry is accepted or quarantined with a reason, and the query keeps running.

The pure parser is fuzzed with hypothesis; then thousands of generated entries,
good and bad mixed, go through the real source, query and sink, and Redis must
account for every one of them.
"""

from __future__ import annotations

import json
import unicodedata
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streaming.rules.fleet import IdleDecision
from streaming.schema.config import Config, ConfigError
from streaming.schema.keys import KeySchema
from streaming.spark.rows import to_record_batch
from watermark_client.events import NO_RULES, BadEntry, Event, Rules, bad_name, parse_entry
from watermark_client.timeutil import iso_from_us

INGEST_MS = 1_795_000_000_000
SECRET = b"the job's secret, 32 bytes long."
RULES = Rules(max_future_skew_ms=60_000, servers=frozenset({"A", "B", "C"}), idle_key=SECRET)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
REASONS = {"missing_payload", "malformed_json", "not_an_object", "missing_field", "bad_type", "bad_timestamp",
           "bad_value", "bad_name", "future_timestamp", "unknown_server", "forged_idle_marker"}


def payload(**doc: object) -> dict[bytes, bytes]:
    return {b"e": orjson.dumps(doc)}


# --------------------------------------------------------------------------- the rules, case by case


@pytest.mark.parametrize(
    ("ahead_ms", "accepted"),
    [
        (0, True),  # event time equal to ingest time
        (-3_600_000, True),  # an hour behind: late, maybe, but not bad input
        (60_000, True),  # exactly the allowed skew
        (60_001, False),  # one millisecond more
        (365 * 86_400_000, False),  # a year ahead: would push the watermark a year forward
    ],
)
def test_future_skew_is_measured_against_ingest_time(ahead_ms: int, accepted: bool) -> None:
    fields = payload(server="A", player_id="p1", event_time=iso_from_us((INGEST_MS + ahead_ms) * 1000))
    out = parse_entry(fields, f"{INGEST_MS}-0", RULES)
    assert isinstance(out, Event) is accepted
    if not accepted:
        assert isinstance(out, BadEntry) and out.reason == "future_timestamp" and "ahead of its ingest" in out.detail


@pytest.mark.parametrize(
    ("field", "value", "accepted", "why"),
    [
        ("server", "x" * 64, True, None),  # the longest a pod name (a DNS label, 63) needs, and one more
        ("server", "x" * 65, False, "65 characters long, at most 64"),
        ("server", "x" * 100_000, False, "100,000 characters long"),
        ("server", "eu-1\n# heading", False, "U+000A at 4"),
        ("server", "eu\x00", False, "U+0000"),
        ("server", "eu\u202egnp.exe", False, "U+202E"),  # a bidirectional override: shows as another name
        ("server", "eu-[login here](http://x.test)", True, None),  # markup is text: the pages escape it
        ("server", "サーバー-1", True, None),  # any script is a name
        ("server", "*", False, "reserved name"),  # the online view's total
        ("server", "region|eu", False, "reserved name"),
        ("region", "x" * 65, False, "region is 65 characters"),
        ("region", "eu\tw", False, "U+0009"),
        ("player_id", "p" * 128, True, None),
        ("player_id", "p" * 129, False, "player_id is 129 characters"),
        ("player_id", "p\u200b1", False, "U+200B"),  # zero width: two players that look alike
        ("server", "eu\xad1", False, "U+00AD"),  # a soft hyphen: invisible
        ("server", "eu-1\U000e0041", False, "U+E0041"),  # an invisible tag character
        ("server", "eu-1 ", False, "begins or ends with a space"),  # shows as "eu-1"
        ("server", " eu-1", False, "begins or ends with a space"),
        ("server", " ", False, "begins or ends with a space"),  # shows as nothing
        ("server", "\u3000eu", False, "begins or ends with a space"),  # any space
        ("server", "eu 1", True, None),  # a space inside is seen
        ("server", "e", True, None),
        ("region", "eu ", False, "begins or ends with a space"),
        ("player_id", " p1", False, "begins or ends with a space"),
        ("event_id", "e1 ", False, "begins or ends with a space"),
        ("event_id", "e" * 129, False, "event_id is 129 characters"),
        ("event_id", "e\r", False, "U+000D"),
    ],
)
def test_names_too_long_or_with_control_characters_are_quarantined(field: str, value: str, accepted: bool,
                                                                     why: str | None) -> None:
    doc = {"server": "A", "player_id": "p1", "event_time": iso_from_us(INGEST_MS * 1000), field: value}
    out = parse_entry(payload(**doc), f"{INGEST_MS}-0")
    assert isinstance(out, Event) is accepted
    if not accepted:
        assert isinstance(out, BadEntry) and out.reason == "bad_name" and why in out.detail, out
    # the source's fast path agrees, row for row
    row = to_record_batch([(f"{INGEST_MS}-0".encode(), payload(**doc))]).to_pylist()[0]
    assert row["error"] == (None if accepted else "bad_name")


FORMAT_SINCE_UNICODE_15 = set(range(0x13439, 0x13440))
"""Egyptian hieroglyph format controls, unassigned in Unicode 14 (Python 3.11). Unicode 15.0 to 18.0 added no other
control, format or separator character (``unicodedata2`` 18.0.0 against Python 3.11's ``unicodedata``)."""


def test_the_invisible_characters_are_unicodes_control_format_and_separator_categories() -> None:
    """``bad_name``'s list of characters, written out for speed, against Unicode's own categories as this Python
    has them, and those Unicode 18 has since: every Python from 3.11 passes; one with a Unicode that adds such a
    character fails here until the list follows it."""
    listed = {cp for cp in range(0x110000) if "control or invisible" in (bad_name("server", f"a{chr(cp)}b") or "")}
    wanted = {cp for cp in range(0x110000) if unicodedata.category(chr(cp)) in ("Cc", "Cf", "Zl", "Zp")}
    assert listed == wanted | FORMAT_SINCE_UNICODE_15
    assert {unicodedata.category(chr(cp)) for cp in FORMAT_SINCE_UNICODE_15} <= {"Cn", "Cf"}  # unassigned, or format


def test_unknown_servers_are_quarantined_only_when_servers_are_listed() -> None:
    fields = payload(server="Z", player_id="p1", event_time=iso_from_us(INGEST_MS * 1000))
    out = parse_entry(fields, f"{INGEST_MS}-0", RULES)
    assert isinstance(out, BadEntry) and out.reason == "unknown_server" and "'Z'" in out.detail
    assert isinstance(parse_entry(fields, f"{INGEST_MS}-0", NO_RULES), Event)


def test_rules_travel_as_data_source_options() -> None:
    assert Rules.from_options(RULES.to_options()) == RULES
    assert Rules.from_options(NO_RULES.to_options()) == NO_RULES
    assert "secret" in next(k for k, v in RULES.to_options().items() if v == SECRET.hex()).lower()  # redacted
    with pytest.raises(ValueError, match="idleMarkerSecret must be hex"):
        Rules.from_options({"idleMarkerSecret": "not hex"})
    with pytest.raises(ValueError, match="at least 16 bytes"):
        Rules(idle_key=b"short")


AT_MS = INGEST_MS - 1_000
JOBS = IdleDecision("B", AT_MS, AT_MS - 12_500).marker(SECRET)


def _tampered(**changes: object) -> bytes:
    doc = orjson.loads(JOBS)
    doc.update(changes)
    return orjson.dumps(doc)


@pytest.mark.parametrize(("marker", "rules", "accepted"), [
    (JOBS, RULES, True),  # the job's own marker
    (JOBS, NO_RULES, True),  # no secret given: markers are taken as they are (tools, tests)
    (IdleDecision("B", AT_MS, AT_MS - 12_500).marker(b"another job's secret, 32 bytes."), RULES, False),
    (orjson.dumps({"server": "B", "player_id": "*", "kind": "idle", "event_time": iso_from_us(AT_MS * 1000)}),
     RULES, False),  # a producer's marker: no signature at all
    (_tampered(server="A"), RULES, False),  # someone else's server under the job's signature
    (_tampered(event_time=iso_from_us((AT_MS + 60_000) * 1000)), RULES, False),  # moved forward
    (_tampered(silent_ms=99_000), RULES, False),
    (_tampered(silent_ms="12500"), RULES, False),
    (_tampered(sig=None), RULES, False),
    (_tampered(sig="\u0080"), RULES, False),  # not ASCII: still a verdict, never an exception
])
def test_only_the_job_declares_a_server_idle(marker: bytes, rules: Rules, accepted: bool) -> None:
    entry_id = f"{INGEST_MS}-0"
    out = parse_entry({b"e": marker}, entry_id, rules)
    if accepted:
        assert isinstance(out, Event) and out.kind == "idle" and out.event_time_us == AT_MS * 1000
    else:
        assert isinstance(out, BadEntry) and out.reason == "forged_idle_marker", out
        assert "only the job declares a server idle" in out.detail
    row = to_record_batch([(entry_id.encode(), {b"e": marker})], rules).to_pylist()[0]  # the source agrees
    assert (row["error"] is None) == accepted and row["kind"] == ("idle" if accepted else None)


def test_an_idle_decision_says_why_and_reads_back() -> None:
    d = IdleDecision("B", 20_000, 7_500)
    assert d.silent_ms == 12_500 and d.reason() == "silent for 12.5 s: its last event arrived 12.5 s before"
    assert IdleDecision("C", 20_000, 10_000, heard=False).reason().startswith(
        "silent for 10.0 s: the job started and it has sent nothing since")
    fields = {k.encode(): v.encode() for k, v in d.record("123-0").items()}
    assert IdleDecision.from_record(fields) == d and fields[b"marker_id"] == b"123-0"
    with pytest.raises(ValueError, match="not an idle decision record"):
        IdleDecision.from_record({b"server": b"B"})


@pytest.mark.parametrize(
    ("env", "skew", "servers"),
    [
        ({}, 300_000, None),  # defaults: 5 minutes, any server
        ({"MAX_FUTURE_SKEW": "30s", "KNOWN_SERVERS": "A, B"}, 30_000, frozenset({"A", "B"})),
        ({"MAX_FUTURE_SKEW": "off"}, None, None),  # switched off
    ],
)
def test_config_reads_the_rules(env: dict[str, str], skew: int | None, servers: frozenset[str] | None) -> None:
    cfg = Config.from_env(env)
    assert (cfg.max_future_skew_ms, cfg.known_servers) == (skew, servers)


@pytest.mark.parametrize(("env", "message"), [
    ({"MAX_FUTURE_SKEW": "soon"}, "MAX_FUTURE_SKEW='soon' is not a duration"),
    ({"KNOWN_SERVERS": "A,,B"}, "KNOWN_SERVERS='A,,B' has an empty name"),
    ({"LATE_EVENTS_KEEP": "0"}, "LATE_EVENTS_KEEP must be at least 1"),
    ({"LATE_EVENTS_KEEP": "lots"}, "LATE_EVENTS_KEEP='lots' is not an integer"),
])
def test_config_errors_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Config.from_env(env)


# --------------------------------------------------------------------------- fuzzing the parser

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20))
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=6)
timestamps = st.one_of(
    st.integers(0, 4_000_000_000_000_000).map(iso_from_us),  # valid, from 1970 to 2096
    st.text(max_size=30),  # mostly not timestamps at all
    st.sampled_from(["2026-13-01T00:00:00Z", "2026-02-30T00:00:00Z", "9999-12-31T23:59:59.999999Z", "", "Z"]),
)
event_docs = st.fixed_dictionaries(
    {},
    optional={"server": st.one_of(st.sampled_from(["A", "B", "C", "Z", ""]), json_values),
              "player_id": st.one_of(st.text(min_size=1, max_size=8), st.integers(), json_values),
              "event_time": st.one_of(timestamps, json_values),
              "kind": st.one_of(st.sampled_from(["login", "heartbeat", "logout", "idle", "dance"]), json_values),
              "silent_ms": st.one_of(st.integers(0, 10_000), json_values),
              "sig": st.one_of(st.text(max_size=32), json_values),
              "event_id": st.one_of(st.text(max_size=8), json_values)},
)


def _render(parts: list[tuple[str, str] | None], ws: list[str]) -> bytes:
    """An event written by hand, as a server might: strings pasted in unescaped, whitespace anywhere."""
    body = f"{ws[0]},{ws[1]}".join(f'"{k}"{ws[2]}:{ws[3]}"{v}"' for k, v in (p for p in parts if p))
    return f"{ws[4]}{{{ws[5]}{body}{ws[6]}}}{ws[7]}".encode()


near_strings = st.text(alphabet=st.sampled_from('ab09-_ :"\\é\x00\x7f'), max_size=6)
near_timestamps = st.builds(
    lambda y, mo, d, h, mi, s, frac, tz: f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}{frac}{tz}",
    st.integers(0, 9999), st.integers(0, 13), st.integers(0, 32), st.integers(0, 24), st.integers(0, 60),
    st.integers(0, 61), st.sampled_from(["", ".1", ".12", ".123", ".1234", ".12345", ".123456", ".1234567", "."]),
    st.sampled_from(["Z", "Z", "Z", "", "+00:00", "+01:00", "z"]),
)
near_events = st.builds(  # the shape the source parses in bulk, and its near misses
    lambda eid, server, player, kind, ts, ws, region: _render(
        [eid and ("event_id", eid), ("server", server), ("player_id", player), kind and ("kind", kind),
         ("event_time", ts), region], ws),
    st.one_of(st.none(), st.just(""), near_strings, st.just("A-000000016")),
    st.one_of(st.sampled_from(["A", "B", "C", "Z", ""]), near_strings),
    st.one_of(st.just("A-p46182"), near_strings),
    st.one_of(st.none(), st.sampled_from(["login", "heartbeat", "logout", "idle", "dance", ""])),
    st.one_of(st.integers(1_794_000_000_000_000, 1_795_100_000_000_000).map(iso_from_us), near_timestamps),
    st.lists(st.sampled_from(["", "", "", " ", "\n", "\t", "\r", "\x0b", "\u00a0"]), min_size=8, max_size=8),
    st.one_of(st.none(), st.tuples(st.just("region"), st.one_of(st.just("eu-west"), st.just(""), near_strings))),
)
entries = st.one_of(
    near_events.map(lambda b: {b"e": b}),  # the bulk-parsed shape, valid or nearly
    event_docs.map(lambda d: {b"e": json.dumps(d).encode()}),  # well-formed JSON, fields right or wrong
    st.binary(max_size=60).map(lambda b: {b"e": b}),  # arbitrary bytes
    json_values.map(lambda v: {b"e": json.dumps(v).encode()}),  # JSON that is not an event object
    st.dictionaries(st.binary(min_size=1, max_size=4), st.binary(max_size=10), max_size=3),  # any fields at all
)


@settings(max_examples=2_000, deadline=None)
@given(fields=entries, seq=st.integers(0, 10))
def test_the_parser_never_raises_and_always_says_why(fields: dict[bytes, bytes], seq: int) -> None:
    out = parse_entry(fields, f"{INGEST_MS}-{seq}", RULES)
    if isinstance(out, BadEntry):
        assert out.reason in REASONS and out.detail
    else:
        assert out.server in RULES.servers and out.player_id
        assert out.event_time_us <= (INGEST_MS + 60_000) * 1000


def reference_row(fields: dict[bytes, bytes], entry_id: str, rules: Rules) -> dict[str, object]:
    """What the source must emit for one entry, by the plain parser (the source has an inline fast path)."""
    out = parse_entry(fields, entry_id, rules)
    if isinstance(out, BadEntry):
        return {"server": None, "player_id": None, "event_time": None, "kind": None, "event_id": None,
                "error": out.reason, "error_detail": out.detail, "raw": out.raw}
    return {"server": out.server, "player_id": out.player_id, "event_time": out.event_time_us, "kind": out.kind,
            "event_id": out.event_id, "error": None, "error_detail": None, "raw": None}


@settings(max_examples=300, deadline=None)
@given(batch=st.lists(entries, min_size=1, max_size=50), rules=st.sampled_from([RULES, NO_RULES]))
def test_every_entry_becomes_exactly_the_row_the_parser_says(batch: list[dict[bytes, bytes]], rules: Rules) -> None:
    ids = [f"{INGEST_MS}-{i}" for i in range(len(batch))]
    rows = to_record_batch([(i.encode(), f) for i, f in zip(ids, batch, strict=True)], rules).to_pylist()
    assert [r["entry_id"] for r in rows] == ids
    for row, fields, entry_id in zip(rows, batch, ids, strict=True):
        want = reference_row(fields, entry_id, rules)
        got = {k: row[k] for k in want}
        if got["event_time"] is not None:  # Arrow gives a datetime
            got["event_time"] = (row["event_time"] - EPOCH) // timedelta(microseconds=1)
        assert got == want


@pytest.mark.parametrize("fleet", [False, True])
def test_well_formed_events_take_the_fast_path_with_the_same_result(fleet: bool,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from streaming.rules.scenarios import fleet as make_fleet
    from streaming.rules.simulate import Simulator, generate
    from streaming.spark import rows

    start_us = (INGEST_MS - 60_000) * 1000
    if fleet:  # events carrying their region
        sim = Simulator(make_fleet(12, 3), seed=2, start_us=start_us, rate=100, count=2_000)
        events = list(sim)
        rules = Rules(max_future_skew_ms=RULES.max_future_skew_ms)
    else:
        events = generate("late-burst", seed=2, start_us=start_us, rate=100, count=2_000)
        rules = RULES
    batch = [{b"e": ev.payload()} for _, ev in events]

    def slow(*_: object) -> None:
        raise AssertionError("a well-formed event took the slow path")
    monkeypatch.setattr(rows, "_parse_slow", slow)
    test_every_entry_becomes_exactly_the_row_the_parser_says.hypothesis.inner_test(batch, rules)  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- through the real pipeline


@pytest.mark.spark
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(batch=st.lists(entries, min_size=150, max_size=300))  # about 2,500 entries in all, one micro-batch each
def test_the_query_accounts_for_every_entry(spark_query: dict, batch: list[dict[bytes, bytes]]) -> None:
    client: redis.Redis = spark_query["client"]
    keys: KeySchema = spark_query["keys"]
    before_totals = {k.decode(): int(v) for k, v in client.hgetall(keys.totals).items()}
    pipe = client.pipeline(transaction=False)
    for fields in batch:
        pipe.xadd(keys.events, fields or {b"x": b""})  # Redis refuses an entry with no fields at all
    ids = [i.decode() for i in pipe.execute()]
    spark_query["query"].processAllAvailable()
    assert spark_query["query"].isActive, "bad input must never stop the query"

    totals = {k.decode(): int(v) for k, v in client.hgetall(keys.totals).items()}
    delta = {k: totals.get(k, 0) - before_totals.get(k, 0) for k in totals}
    assert delta["input"] == len(batch)
    assert delta.get("parsed", 0) + delta.get("quarantined", 0) == len(batch)
    assert sum(v for k, v in delta.items() if k.startswith("bad|")) == delta.get("quarantined", 0)
    dead = client.xrange(keys.dead, ids[0], ids[-1])
    assert len(dead) == delta.get("quarantined", 0)  # every quarantined entry kept, under its own ID
    assert {d[1][b"reason"].decode() for d in dead} <= REASONS
    # the independent check: what the pure parser says of each entry, with the ingest time of its ID
    expected_bad = [i for i, f in zip(ids, batch, strict=True)
                    if isinstance(parse_entry(f or {b"x": b""}, i, RULES), BadEntry)]
    assert [d[0].decode() for d in dead] == expected_bad


@pytest.fixture(scope="module")
def spark_query(spark, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict:  # noqa: ANN001
    from streaming.spark.query import start_query

    ns = f"fuzz-{uuid.uuid4().hex[:8]}"
    cfg = Config(redis_url=redis_url, embedded_redis=False, namespace=ns, window_ms=60_000, slide_ms=60_000,
                 delay_ms=10_000, checkpoint_dir=str(Path(tmp_path_factory.mktemp("fuzz")) / ns),
                 spark_master="local[2]", max_future_skew_ms=RULES.max_future_skew_ms, known_servers=RULES.servers)
    query = start_query(spark, cfg, trigger_ms=0)
    client = redis.Redis.from_url(redis_url)
    yield {"query": query, "client": client, "keys": KeySchema(ns)}
    query.stop()
    client.close()
