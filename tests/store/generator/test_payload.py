"""The payload fast path: byte for byte the payload the event would write."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.rules.simulate import Simulator, fast_payload, record_payload
from tests.store.generator import START
from watermark_client.events import KINDS, Event


def test_fast_payload_is_byte_identical_for_generated_events(burst: list[tuple[int, Event]]) -> None:
    sample = burst[::4]  # Event.payload() (orjson + strftime) is the slow part of this test
    assert [fast_payload(e) for _, e in sample] == [e.payload() for _, e in sample]
    records = list(Simulator("late-burst", seed=3, start_us=START, rate=1000, count=30_000).records())
    assert [(rec[0], Event(*rec[2:7])) for rec in records] == burst
    assert [record_payload(rec) for rec in records[::4]] == [e.payload() for _, e in sample]


@settings(max_examples=150, deadline=None)
@given(
    server=st.sampled_from(["A", "C", 'q"', "\\", "é"]) | st.text(min_size=1, max_size=4),
    player=st.text(min_size=1, max_size=8),
    time_us=st.integers(min_value=-10**15, max_value=4 * 10**15) | st.integers(0, 4 * 10**12).map(lambda ms: ms * 1000),
    kind=st.sampled_from([*KINDS, None, "weird"]),
    event_id=st.none() | st.text(max_size=6) | st.integers(0, 10**9).map(lambda n: f"A-{n:09d}"),
)
def test_fast_payload_matches_event_payload_for_any_event(server: str, player: str, time_us: int, kind: str | None,
                                                          event_id: str | None) -> None:
    ev = Event(server, player, time_us, kind, event_id)
    assert fast_payload(ev) == ev.payload()


def test_fast_payload_falls_back_on_characters_json_escapes() -> None:
    for text in ('quo"te', "back\\slash", "tab\t", "é", "\u2028", "nul\x00", "del\x7f"):
        ev = Event("A", text, START + 1_000, "login", f"A-{text}")
        assert fast_payload(ev) == ev.payload()
    assert fast_payload(Event("A", "p", START + 1, "login", "x")) == Event("A", "p", START + 1, "login", "x").payload()
    with_region = Event("A", "p", START + 1_000, "login", "x", region="eu")
    assert fast_payload(with_region) == with_region.payload() and b'"region":"eu"' in with_region.payload()
