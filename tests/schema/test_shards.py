"""The shard rules as tables: which shard a server goes to, positions over shards, and a capped batch's share of
each shard (``streaming.schema.shards``)."""

from __future__ import annotations

import zlib

import pytest

from streaming.schema.shards import Position, shard_key, share
from watermark_client.stream import shard_of


def test_one_shard_is_the_layout_before_shards() -> None:
    assert shard_key("wm:events", 0) == "wm:events"
    assert shard_key("wm:events", 3) == "wm:events:3"
    assert str(Position.start(1)) == "0-0"
    assert Position.parse("1700-4", 1) == Position(("1700-4",))
    assert all(shard_of(s, 1) == 0 for s in ("a", "eu-1", ""))


def test_a_server_goes_to_the_crc32_of_its_name() -> None:
    # CRC-32's published check value, 0xCBF43926 for "123456789": what any standard implementation computes.
    assert shard_of("123456789", 7) == 0xCBF43926 % 7 == 5
    assert shard_of("s\u00e9rveur", 3) == zlib.crc32("s\u00e9rveur".encode()) % 3
    with pytest.raises(ValueError, match="shards must be >= 1"):
        shard_of("a", 0)


@pytest.mark.parametrize(("text", "shards", "ids"), [
    ("5-1,0-0,7-2", 3, ("5-1", "0-0", "7-2")),
    ("5-1", 3, ("5-1", "0-0", "0-0")),  # shards added: the new ones from their start
    ("", 2, ("0-0", "0-0")),
])
def test_positions_parse_and_print(text: str, shards: int, ids: tuple[str, ...]) -> None:
    pos = Position.parse(text, shards)
    assert pos.ids == ids
    assert Position.parse(str(pos), shards) == pos


def test_a_position_over_more_shards_than_configured_is_refused() -> None:
    with pytest.raises(ValueError, match="covers 3 shards and the input has 2"):
        Position.parse("1-0,2-0,3-0", 2)
    with pytest.raises(ValueError, match="'x' is no entry ID"):
        Position.parse("1-0,x", 2)


def test_newest() -> None:
    assert Position(("5-0", "9-2", "3-0")).newest_ms() == 9
    assert Position.start(3).newest_ms() == 0


@pytest.mark.parametrize(("read", "wanted", "covers"), [
    ("5-1", "5-1", True),
    ("5-0", "5-1", False),
    ("5-1,9-0", "5-1,9-0", True),
    ("6-0,8-9", "5-1,9-0", False),  # one shard behind is enough
    ("5-1", "5-1,0-0", True),  # a shard neither has read: nothing to wait for there
    ("5-1", "5-1,1-0", False),
    ("5-1,3-0", "5-1", True),
])
def test_a_position_covers_another_when_every_shard_is_read_as_far(read: str, wanted: str, covers: bool) -> None:
    assert Position.of(read).covers(Position.of(wanted)) is covers


@pytest.mark.parametrize(("backlogs", "cap", "shares"), [
    ((3, 4, 0), 10, (3, 4, 0)),  # everything fits
    ((100, 100), 10, (5, 5)),
    ((1000, 10, 0, 1), 100, (98, 1, 0, 1)),  # 98.9, 0.99, 0, 0.1: the backlog of one gets its entry
    ((90, 10), 10, (9, 1)),
    ((5, 5, 5), 2, (1, 1, 0)),  # a cap under the shards waiting: equal remainders, the lower shards
    ((10, 10, 10), 3, (1, 1, 1)),
    ((7, 0), 3, (3, 0)),
    ((0, 0), 5, (0, 0)),
    ((10, 10), 0, (0, 0)),
])
def test_a_capped_batch_shares_the_cap_by_backlog(backlogs: tuple[int, ...], cap: int,
                                                  shares: tuple[int, ...]) -> None:
    assert share(backlogs, cap) == shares


def test_shares_always_sum_to_the_cap_or_the_backlog_and_none_passes_its_backlog() -> None:
    cases = [(b, c) for b in [(1, 2, 3), (1000, 1, 1, 1), (0, 7, 13), (50, 50, 50, 51), (1,) * 9]
             for c in range(0, 40)]
    for backlogs, cap in cases:
        got = share(backlogs, cap)
        assert sum(got) == min(cap, sum(backlogs)), (backlogs, cap, got)
        assert all(0 <= g <= b for g, b in zip(got, backlogs, strict=True)), (backlogs, cap, got)
        if sum(backlogs) > cap >= sum(1 for b in backlogs if b):
            assert all(g >= 1 for g, b in zip(got, backlogs, strict=True) if b), (backlogs, cap, got)
